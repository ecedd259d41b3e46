"""What keeps the local model's cost down: the token budget a window is cut to (`fit_tokens`) and
the engine threads matched to the free cores (`FreeCores`, over a /proc/stat-format file written
here). The indexer cuts windows with an embedder's `fit`, over the fake /embeddings server."""

from __future__ import annotations

from gateway.embeddings import FreeCores, fit_tokens
from gateway.recall.index import index_step
from tests.recall.test_semantic import Endpoint, add, concept_embedding


def words(text: str) -> int:
    return len(text.split())


# --- the token budget ----------------------------------------------------------------------------


def test_a_window_within_its_budget_is_left_whole():
    lines = ["user: did you meet anyone?", "assistant: yes, at the cafe"]
    assert fit_tokens(lines, 20, words) == lines


def test_a_long_message_is_cut_to_its_head_and_the_short_ones_stay_whole():
    long = "assistant: " + " ".join(f"w{i}" for i in range(100))
    lines = ["user: did you meet anyone?", long, "user: and then?", "assistant: we had coffee"]
    cut = fit_tokens(lines, 24, words)
    assert cut[0] == lines[0] and cut[2:] == lines[2:]
    assert long.startswith(cut[1]) and sum(words(line) for line in cut) == 24  # the budget, all of it used


def test_two_long_messages_share_what_the_short_ones_leave():
    a, b = "user: " + "a " * 50, "assistant: " + "b " * 80
    cut = fit_tokens([a, "user: ok", b], 22, words)
    assert cut[1] == "user: ok" and [words(cut[0]), words(cut[2])] == [10, 10]


# --- engine threads --------------------------------------------------------------------------------


class Machine:
    """A /proc/stat file and a clock this test moves: `run(seconds, busy_cores)` (busy time spread
    over cpu0 and cpu1 as a scheduler would; cpu2 is another process's, never ours)."""

    TICK = 100  # USER_HZ on Linux

    def __init__(self, path) -> None:
        self.path, self.now = path, 0.0
        self.busy, self.idle = [0, 0, 0], [0, 0, 0]
        self.write()

    def write(self) -> None:
        # cpuN user nice system idle iowait irq softirq steal guest guest_nice
        lines = [f"cpu  {sum(self.busy)} 0 0 {sum(self.idle)} 0 0 0 0 0 0"]
        lines += [f"cpu{n} {self.busy[n]} 0 0 {self.idle[n]} 0 0 0 0 0 0" for n in range(3)]
        self.path.write_text("\n".join([*lines, "intr 0", "procs_running 1"]) + "\n")

    def run(self, seconds: float, busy_cores: float, cores: int = 2) -> None:
        self.now += seconds
        for n in range(cores):
            self.busy[n] += round(seconds * busy_cores / cores * self.TICK)
            self.idle[n] += round(seconds * (1 - busy_cores / cores) * self.TICK)
        self.busy[2] += round(seconds * self.TICK)  # a core this process may not use, always busy
        self.write()


def test_one_thread_until_the_cores_were_looked_at(tmp_path):
    machine = Machine(tmp_path / "stat")
    assert FreeCores([0, 1], str(machine.path), lambda: machine.now).threads() == 1


def test_a_second_thread_only_when_the_other_core_is_mostly_free(tmp_path):
    machine = Machine(tmp_path / "stat")
    cores = FreeCores([0, 1], str(machine.path), lambda: machine.now)
    cores.threads()
    machine.run(1.0, busy_cores=1.0)  # the engine's one thread, nothing else
    cores.used(1.0)
    assert cores.threads() == 2
    machine.run(1.0, busy_cores=2.0)  # the engine's two threads and another process sharing a core
    cores.used(1.4)
    assert cores.threads() == 1  # the other process used 0.6 of a core: a second thread would wait on it
    machine.run(1.0, busy_cores=2.0)  # the engine's one thread and a busy daemon
    cores.used(1.0)
    assert cores.threads() == 1
    machine.run(1.0, busy_cores=2.0)  # the engine on both cores, no one else
    cores.used(2.0)
    assert cores.threads() == 2


def test_without_a_readable_stat_one_thread(tmp_path):
    cores = FreeCores([0, 1], str(tmp_path / "missing"))
    assert cores.threads() == 1 and cores.threads() == 1


def test_one_core_means_one_thread(tmp_path):
    machine = Machine(tmp_path / "stat")
    cores = FreeCores([0], str(machine.path), lambda: machine.now)
    cores.threads()
    machine.run(1.0, busy_cores=0.0, cores=1)
    assert cores.threads() == 1


# --- the indexer cuts windows with the embedder's budget -------------------------------------------


class BudgetedEndpoint:
    """The endpoint embedder with a budget of 9 words a window, as LocalEmbedder has one in tokens."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.inner = endpoint.embedder()
        self.model = self.inner.model

    def fit(self, lines: list[str]) -> list[str]:
        return fit_tokens(lines, 9, words)

    def embed(self, texts, kind):
        return self.inner.embed(texts, kind)


def test_the_indexer_embeds_windows_cut_to_the_embedders_budget(db):
    served = Endpoint()
    served.fake.embed = lambda texts, model: [concept_embedding(t) for t in texts]
    try:
        add(db, "a", ["I met a wonderful woman at the cafe on the corner by the station", "lovely", "yes", "bye"])
        assert index_step(db, BudgetedEndpoint(served)).advanced
        sent = [text for r in served.fake.embedding_requests for text in r["input"]]
        assert sent == ["user: I met\nassistant: lovely\nuser: yes\nassistant: bye"]
    finally:
        served.close()
