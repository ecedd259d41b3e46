"""Keeping the stored window vectors up to date, off the hot path (gateway/storage/vectors.py holds
the tables, gateway/embeddings.py the embedders).

- `index_step`: read the next BATCH messages past the watermark, embed their windows in one call,
  store them and move the watermark in one write. The embedding call runs outside any
  transaction, so neither readers nor the writer wait on the model. A window still open waits
  until its session has said nothing for QUIET_SECONDS (or fills), so under steady traffic each
  window is embedded once, not with every message its session adds.
- `backfill`: steps until the backlog is empty, reporting progress (`chinwag sessions embed`).
- `BackgroundIndexer`: a thread woken after each commit (a commit listener), working in batches;
  a failing endpoint is retried with back-off (said one by one the first few times, then once),
  and recall stays lexical for what is not embedded. It also wakes when a waiting window is due.
  With `poll_seconds` it also looks every so often: on Postgres the replicas share one backlog and
  one of them embeds it (gateway/service/app.py), while the others' commits reach no listener here.
  It can be stopped and started again (a leadership lost and won back).
- `stats`: backlog, windows and bytes, for /metrics and `sessions stats`.

Throughput with the local model (issue 26: 20 messages/s of steady traffic on 2 cores, the daemon
busy). A window costs its tokens: ~1.4 CPU-ms a token on one core, a window of 4 LoCoMo turns ~131
tokens (p90 203), ~0.2 CPU-s; so 20 messages/s (5 windows/s) needs about one free core. What was in
the way, in the order it was fixed:
- an open window was embedded again with every message its session added (1 + 2 + 3 + 4 messages
  for a window of 4 under steady traffic, 2.5x the work): it now waits for its session to go quiet
  (QUIET_SECONDS). `python bench/recall.py --only none --drain 240` then: 2.9 -> 9.7 messages/s at
  load ~6, 7.1 -> 16.6 at load ~2.3.
- one engine thread always, so a free core stayed idle (two spinning threads were worse than one
  on busy cores); and calls of 8 windows, run as one batch whose activations outgrow the cache
  (254 against 211 CPU-ms a window). Now the threads follow the free cores, wait asleep, and a call
  is one window (gateway/embeddings.py LocalEmbedder).
`python bench/recall.py --only none --drain 240` now runs a second process burning a stated share
of the cores beside the indexer (the daemon busy: 0.25 core, its own work at 20 messages/s with
room; 1 core, the worst its neighbours leave). On a quiet machine (load 0.9-1.6), whole windows
(WINDOW_TOKENS 256 cuts none of these): 24.8 messages/s beside 0.25 core (2 threads on every
call) against 20.2 with one thread in calls of 8 (1.23x); 20.3 beside a whole core (1 thread,
the same as before). Cutting to 128 tokens feeds ~15 % fewer tokens but loses LoCoMo-Plus cues
(gateway/embeddings.py WINDOW_TOKENS). At load 2.5-4 (other jobs on the machine) both drain
9-17 messages/s and the ratio is noise. A store that falls behind catches up when it is quieter
(the backlog is in /metrics), and recall ranks what is not embedded yet by its words.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, NamedTuple

from gateway.storage import vectors
from gateway.storage.base import StorageFace

log = logging.getLogger(__name__)

BATCH = 128  # messages read per step
RETRY_SECONDS = (5.0, 30.0, 120.0)  # waits after failed steps (the last repeats)
# An open window waits this long after its session's newest message before it is embedded as it
# is: a person answers a reply within a minute or two, so most windows fill first and are embedded
# once; recall leaves the asker's own current session out, and finds the rest by words meanwhile.
QUIET_SECONDS = 120.0


def forget_other_models(db: StorageFace, model: str) -> int:
    """Drop windows embedded by another model (after a model change), in batches."""
    total = 0
    while True:
        n = db.write(vectors.forget_other_models_op(model))
        total += n
        if n == 0:
            return total


class Step(NamedTuple):
    advanced: int  # messages the watermark moved over, or 1 when windows were stored (0: nothing to do now)
    due: float | None  # when the first open window left waiting is quiet enough to embed


def index_step(
    db: StorageFace, embedder: Any, batch: int = BATCH, quiet_seconds: float = 0.0, now: float | None = None
) -> Step:
    """Embed the windows of the next `batch` messages. With `quiet_seconds`, an open window whose
    session spoke less than that before `now` waits for more messages (see the module docstring).
    Raises when the embedder fails (nothing is stored then)."""
    model = str(embedder.model)
    quiet_before = (time.time() if now is None else now) - quiet_seconds if quiet_seconds > 0 else None
    (windows, upto, waiting_since), before = db.read(
        lambda conn: (vectors.pending_windows(conn, model, batch, quiet_before), vectors.progress(conn, model))
    )
    due = None if waiting_since is None else waiting_since + quiet_seconds
    if not windows and upto == before:
        return Step(0, due)
    fit = getattr(embedder, "fit", None)  # an embedder with a token budget cuts the windows to it
    texts = ["\n".join(fit(w.lines)) if fit else w.text for w in windows]
    blobs = [vectors.quantise(v) for v in embedder.embed(texts, "passage")] if windows else []
    if len(blobs) != len(windows):
        raise ValueError(f"embedder returned {len(blobs)} vectors for {len(windows)} windows")
    if not db.write(vectors.store_op(model, windows, blobs, upto, before)):
        return Step(1, due)  # the watermark moved back meanwhile (an undo): read again
    return Step(max(1, upto - before), due)


def backfill(
    db: StorageFace, embedder: Any, progress: Callable[[int, int], None] | None = None, batch: int = BATCH
) -> int:
    """Embed everything not yet embedded for this model; `progress(done, total)` after each step.
    Returns the number of messages looked at."""
    model = str(embedder.model)
    forget_other_models(db, model)
    total = db.read(lambda conn: vectors.backlog(conn, model))
    done = 0
    while index_step(db, embedder, batch).advanced:
        left = db.read(lambda conn: vectors.backlog(conn, model))
        done = max(done, total - left)
        if progress is not None:
            progress(done, total)
    return done


def stats(db: StorageFace, model: str) -> dict[str, int]:
    def read(conn: Any) -> dict[str, int]:
        windows, size = vectors.stored(conn, model)
        return {"backlog": vectors.backlog(conn, model), "windows": windows, "vector_bytes": size}

    return db.read(read)


class BackgroundIndexer:
    """Embeds new messages after they are committed, on its own thread, in batches."""

    def __init__(
        self,
        db: StorageFace,
        embedder: Any,
        batch: int = BATCH,
        poll_seconds: float | None = None,
        retry_seconds: tuple[float, ...] = RETRY_SECONDS,
        quiet_seconds: float = QUIET_SECONDS,
    ) -> None:
        self.db, self.embedder, self.batch = db, embedder, batch
        self.quiet_seconds = quiet_seconds
        self.poll_seconds = poll_seconds  # None: woken by this process's commits only
        self.retry_seconds = retry_seconds
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listening = False
        self.failures = 0  # consecutive failed steps
        self.last_error: str | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        if not self._listening:
            self.db.add_commit_listener(lambda events: self._wake.set())
            self._listening = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="chinwag-embed", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        try:
            forget_other_models(self.db, str(self.embedder.model))
        except Exception as exc:  # a closed database at shutdown, a full disk: try again on the next wake
            log.warning("embedding index: could not drop old vectors: %s", exc)
        self._wake.set()
        due: float | None = None  # an open window waiting for its session to go quiet
        while not self._stop.is_set():
            self._wake.wait(self._timeout(due))
            self._wake.clear()
            while not self._stop.is_set():
                try:
                    step = index_step(self.db, self.embedder, self.batch, self.quiet_seconds)
                    due = step.due
                    if not step.advanced:
                        break
                    if self.failures > len(self.retry_seconds):
                        log.warning("embedding index: the embedder works again")
                    self.failures, self.last_error = 0, None
                except Exception as exc:  # endpoint down: back off, recall stays lexical for the rest
                    self.failures += 1
                    self.last_error = str(exc)
                    self._say_failed(exc)
                    if self._stop.wait(self.retry_seconds[min(self.failures, len(self.retry_seconds)) - 1]):
                        return

    def _timeout(self, due: float | None) -> float | None:
        """How long to sleep when no commit wakes us: until the poll, or until a waiting window is due."""
        if due is None:
            return self.poll_seconds
        wait = max(0.0, due - time.time()) + 0.01  # just past due: the window is quiet by then
        return wait if self.poll_seconds is None else min(wait, self.poll_seconds)

    def _say_failed(self, exc: Exception) -> None:
        """The first few failures one by one; then once that it keeps failing (an endpoint with no
        /embeddings answers 404 for good, and a line every two minutes would bury the log)."""
        waits = self.retry_seconds
        if self.failures <= len(waits):
            log.warning("embedding index: step failed (%s); retrying in %.0f s", exc, waits[self.failures - 1])
        elif self.failures == len(waits) + 1:
            log.warning(
                "embedding index: the embedder keeps failing (%s); recall ranks by words until it works, "
                "trying again every %.0f s (not logged again; `chinwag doctor` checks the endpoint)",
                exc,
                waits[-1],
            )
        else:
            log.debug("embedding index: still failing (%s)", exc)
