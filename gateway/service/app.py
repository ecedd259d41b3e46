"""Assembly, the one composition root: everything `chinwag run` / `chinwag chat` need, built from a
Config, and its life cycle. Tests (tests/fakes/gateway_harness.py) and bench/ build through it too,
passing their own adapters, model transport or agent factory, so what they run is what ships.

    home dir -> StorageFace -> Mirrors (reconciled with the DB) -> SessionStore (reset policies)
    -> adapters (each SDK imported only when its platform is configured)
    -> the runtime (access, agent factory and cache, conversations, the inbox and outbox, TurnRunner) -> GatewayRunner
    -> ops HTTP server (health, readiness, metrics, webhooks) -> upkeep (gateway.service.maintenance)
    -> with `embeddings` configured: the embedder recall uses, and the background indexer of window vectors

Shutdown (SIGINT/SIGTERM, or end of input when the terminal is the only adapter): stop intake,
let running turns finish or checkpoint (runner.stop), stop the upkeep and the HTTP server, flush
the mirrors, close the DB — in that order, so nothing is written to a closed store.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib
import logging
import math
import os
import signal
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable

import httpx2

from agent.transcribe import Transcriber, TranscriptionSettings
from gateway import telemetry
from gateway.config.load import Config
from gateway.db import SchemaTooNew, StorageFace, StorageUnavailable, StorageUnreachable, open_db
from gateway.embeddings import EmbeddingSettings, EmbeddingUnavailable, make_embedder
from gateway.recall import semantic
from gateway.recall.index import BackgroundIndexer
from gateway.recall.index import stats as index_stats
from gateway.runtime.agent_cache import AgentCache
from gateway.runtime.agent_factory import AgentFactory, model_settings
from gateway.runtime.approvals import Approvals
from gateway.runtime.delivery import Inbox, Outbox
from gateway.runtime.leases import ChatLeases, SharedLeases
from gateway.runtime.mcp_calls import McpCalls
from gateway.runtime.media import MediaIntake, vision_enabled
from gateway.runtime.outbound import Outbound
from gateway.runtime.reply_feed import streaming_enabled, tool_status_enabled
from gateway.runtime.runner import GatewayRunner, adapter_health
from gateway.runtime.turn import AgentFactory as AgentFactoryProtocol
from gateway.runtime.turn import TurnRunner
from gateway.schedules.clock import SystemWallClock, WallClock
from gateway.schedules.store import FaceScheduleStore
from gateway.service.http import OpsServer
from gateway.service.maintenance import Maintenance
from gateway.service.metrics import Metrics, Sampled
from gateway.sessions.access import AccessControl
from gateway.sessions.mirrors import Mirrors
from gateway.sessions.reset import ResetPolicies
from gateway.sessions.store import SessionStore
from gateway.storage.health import StorageHealth
from gateway.storage.home import Home
from gateway.storage.media import MediaStore
from platforms.base import PlatformAdapter
from tools.mcp import McpConfigError, McpTools, mcp_settings_from
from tools.memory import note_place
from tools.schedule import make_schedule_tool

log = logging.getLogger(__name__)

_GC_TUNED = False
GC_YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """Once per process: move what exists at start (imported modules, the SDKs' classes, config)
    out of the cyclic collector's way, and collect the young generation less often.

    Each message allocates a few thousand short-lived objects (tasks, futures, dicts); with the
    default thresholds the collector ran so often, over a heap dominated by the SDKs' import-time
    objects, that it took about half the event loop's time in bench/gateway.py. Reference counting
    still frees nearly everything at once; only cycles wait a little longer."""
    global _GC_TUNED
    if _GC_TUNED:
        return
    _GC_TUNED = True
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, gen1, gen2)


# platform -> (module, class). Imported lazily: an unconfigured platform's SDK is never loaded.
ADAPTERS: dict[str, tuple[str, str]] = {
    "local": ("platforms.local", "LocalAdapter"),
    "telegram": ("platforms.telegram.adapter", "TelegramAdapter"),
    "feishu": ("platforms.feishu.adapter", "FeishuAdapter"),
    "discord": ("platforms.discord.adapter", "DiscordAdapter"),
}


class AppError(RuntimeError):
    """The gateway cannot start; the message says why in a sentence."""


def create_adapter(
    config: Config, name: str, *, stdin: IO[str] | None = None, stdout: IO[str] | None = None
) -> PlatformAdapter:
    module_name, class_name = ADAPTERS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppError(f"platform {name} is configured but its adapter cannot be loaded: {exc}") from exc
    cls = getattr(module, class_name)
    settings = config.adapter_config(name)
    try:
        if name == "local":
            return cls(settings, input=stdin, output=stdout, history=config.home / "terminal_history")
        return cls(settings)
    except (ValueError, TypeError) as exc:
        raise AppError(f"platforms.{name}: {exc}") from exc


@dataclass
class App:
    config: Config
    home: Home
    db: StorageFace
    mirrors: Mirrors | None
    store: SessionStore
    adapters: list[PlatformAdapter]
    runner: GatewayRunner
    metrics: Metrics
    ops: OpsServer | None = None
    maintenance: Maintenance | None = None
    # Lines meant for the person at the console (the CLI prints them), not for the log.
    announce: Callable[[str], None] | None = None
    indexer: BackgroundIndexer | None = None  # window vectors for recall, when `embeddings` is configured
    mcp: McpTools | None = None  # the agent's tools from MCP servers (DESIGN §15)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _closed: bool = False
    _previous_embedder: Any = None

    @property
    def adapter_names(self) -> list[str]:
        return [a.platform.value for a in self.adapters]

    def request_stop(self) -> None:
        self._stop.set()

    async def start(self) -> None:
        """HTTP first (so probes answer during a slow platform connect), then the adapters."""
        if self.ops is not None:
            try:
                await self.ops.start()
            except OSError as exc:
                if self.ops.webhooks:
                    raise AppError(f"{exc}; webhooks need it") from None
                log.warning("%s; running without the ops HTTP server", exc)
                if self.announce is not None:  # the person at the terminal sees no log
                    self.announce(f"chinwag: {exc}; running without the ops HTTP server")
                self.runner.ops_down = str(exc)
                self.ops = None
        if self.ops is not None:
            if self.ops.requested_port == 0 and self.announce is not None:  # picked now: say where
                self.announce(f"chinwag: ops http on {self.ops.url} (/healthz, /readyz, /metrics)")
        tune_gc()  # a process-wide choice: made here, where the process is assembled
        if self.mcp is not None:
            await self.mcp.start()  # returns at once: each server connects in its own task
        await self.runner.start()
        storage = self.config.storage
        self.maintenance = Maintenance(
            self.db,
            storage.retention_days,
            storage.maintenance_hours * 3600,
            media=media_store(self.config, self.db),
            media_total_bytes=self.config.media.max_total_bytes,
        )
        self.maintenance.start()
        if self.indexer is not None:
            self._previous_embedder = semantic.use(self.indexer.embedder)  # recall everywhere in this process
            embed_while_leading(self.runner.leases, self.indexer)
        log.info("chinwag running: %s; data in %s", ", ".join(self.adapter_names), self.home.root)

    async def stop(self, timeout: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self.runner.stop(timeout)
        finally:
            # the last spans and a last metrics export, while the gauges can still read the database
            await asyncio.to_thread(telemetry.stop)
            if self.maintenance is not None:
                await self.maintenance.stop()
            if self.mcp is not None:
                await self.mcp.close()
            if self.ops is not None:
                await self.ops.stop()
            if self.indexer is not None:
                semantic.use(self._previous_embedder)
                await asyncio.to_thread(self.indexer.stop)
            await asyncio.to_thread(self.close_storage)
        log.info("chinwag stopped")

    def close_storage(self) -> None:
        try:
            self.metrics.close()  # its sampled gauges read the database
            if self.mirrors is not None:
                self.mirrors.close()  # writes what the mirrors still owe: transcript lines, sessions.json
        finally:
            self.db.close()

    async def run_forever(self, *, install_signals: bool = True, stop_timeout: float | None = None) -> int:
        """Run until SIGINT/SIGTERM, or until the terminal's input ends when it is the only adapter."""
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if install_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):  # not the main thread / platform
                    pass
        try:
            await self.start()
            waiters = [asyncio.create_task(self._stop.wait())]
            local = self._local_only()
            if local is not None:
                waiters.append(asyncio.create_task(local.input_closed.wait()))
            done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            if local is not None and local.input_closed.is_set() and not self._stop.is_set():
                log.info("end of input; finishing")
                drain = asyncio.create_task(self.runner.drain())
                stop = asyncio.create_task(self._stop.wait())  # a signal still cuts this short
                await asyncio.wait([drain, stop], return_when=asyncio.FIRST_COMPLETED)
                for waiter in (drain, stop):
                    waiter.cancel()
        finally:
            # From here a second signal has its default effect (Ctrl-C raises, SIGTERM ends the
            # process): the way out when a graceful stop takes too long.
            for sig in installed:
                loop.remove_signal_handler(sig)
            await self.stop(self.config.gateway.shutdown_timeout_seconds if stop_timeout is None else stop_timeout)
        return 0

    def _on_signal(self, sig: int) -> None:
        if sig == signal.SIGINT and any(adapter.interrupt() for adapter in self.adapters):
            log.info("SIGINT taken by the terminal: the reply being written is stopped")
            return
        log.info(
            "%s received: shutting down gracefully (running turns get up to %gs; signal again to stop at once)",
            signal.Signals(sig).name,
            self.config.gateway.shutdown_timeout_seconds,
        )
        self._stop.set()

    def _local_only(self) -> Any:
        if len(self.adapters) == 1 and self.adapters[0].platform.value == "local":
            return self.adapters[0]
        return None


def build_runner(
    config: Config,
    db: StorageFace,
    store: SessionStore,
    adapters: list[PlatformAdapter],
    *,
    clock: Callable[[], float] = time.time,
    metrics: Metrics | None = None,
    agent_factory: AgentFactoryProtocol | None = None,
    http_client: httpx2.AsyncClient | None = None,
    leases: ChatLeases | None = None,
    cache: AgentCache | None = None,
    ops_url: Callable[[], str | None] = lambda: None,
    mcp: McpTools | None = None,
    health: StorageHealth | None = None,
    wall_clock: WallClock | None = None,
) -> GatewayRunner:
    """The runtime over an open DB and store: access rules, the agent factory and cache, the
    conversation cache, de-duplication, the turn runner, and the runner that holds them.
    `http_client` goes to the model clients (the openai SDK's transport seam; bench/ uses it).
    `leases`: who runs which chat (gateway.runtime.leases; None: this process runs them all).
    `cache`: the agent cache whose running turns the store must not reset under (build_agent_cache);
    `ops_url`: the ops HTTP server's address once it listens (/status shows it); `mcp`: the MCP
    servers' tools, offered to the agents the factory builds (journaled through `db`); `health`:
    whether storage commits (gateway.storage.health), shared with /readyz; `wall_clock`: when
    scheduled runs are due (None: the host's clock; tests move a virtual one)."""
    model = model_settings(config.model)
    streaming = {a.platform.value: streaming_enabled(config, a.platform.value) for a in adapters}
    outbound = Outbound(adapters, metrics, streaming=streaming)
    approvals = Approvals(mcp.settings.approval_timeout_seconds, outbound.adapter) if mcp else None
    source = McpCalls(mcp, db, metrics, approvals) if mcp is not None else None
    wall_clock = wall_clock or SystemWallClock()
    factory = agent_factory or AgentFactory(
        model,
        config.home,
        max_iterations=config.model.max_iterations,
        clock=clock,
        auxiliary=model_settings(config.auxiliary),
        http_client=http_client,
        notes=note_place(config.home, db),
        memory=config.memory,
        recall=config.recall,
        observe=metrics.observe if metrics is not None else None,  # the agent's searches: search_seconds
        tool_source=source,
        schedule=make_schedule_tool(
            FaceScheduleStore(db), config.schedules, wall_clock, config.session.reset.get("timezone")
        ),
    )
    cache = cache or build_agent_cache(config, clock)
    access = AccessControl.from_config(config.platforms, [a.platform.value for a in adapters if a.operator_is_admin])
    # Replicas stream too (outbound, above): drafts only while the lease is known held, the final
    # text after the fenced commit (gateway.runtime.leases).
    health = health or StorageHealth(db)
    delivery = config.gateway.delivery
    outbox = Outbox(
        db,
        outbound.adapters,
        metrics,
        leases,
        health=health,
        send_attempts=delivery.send_attempts,
        parked_retry_seconds=delivery.parked_retry_seconds,
    )
    turns = TurnRunner(
        cache=cache,
        factory=factory,
        db=db,
        store=store,
        outbound=outbound,
        outbox=outbox,
        clock=clock,
        model_settings=model,
        access=access,
        config=config,
        media=build_media_intake(config, db),
        tool_status=tool_status_enabled(config),
        metrics=metrics,
    )
    inbox = Inbox(db, leases, health)
    return GatewayRunner(
        config,
        db,
        store,
        outbound,
        turns,
        access,
        inbox,
        outbox,
        clock=clock,
        metrics=metrics,
        ops_url=ops_url,
        approvals=approvals,
        mcp=mcp,
        wall_clock=wall_clock,
    )


def build_agent_cache(config: Config, clock: Callable[[], float] = time.time) -> AgentCache:
    """The cache of warm agents, sized by gateway.agent_cache."""
    limits = config.gateway.agent_cache
    ttl = limits.idle_ttl_minutes * 60 if limits.idle_ttl_minutes > 0 else math.inf
    return AgentCache(limits.max_agents, ttl, clock=clock)


def build_mcp(config: Config) -> McpTools:
    """The MCP servers' tools (`mcp` read and checked by tools.mcp.settings: a wrong key stops the
    start, named); nothing is started here (App.start does)."""
    try:
        settings = mcp_settings_from(config.mcp)
    except McpConfigError as exc:
        where = f"{config.path}: " if config.path else ""
        raise AppError(f"{where}{exc}") from None
    return McpTools(settings, vision=vision_enabled(config.model.vision, config.model.name))


def media_store(config: Config, db: StorageFace) -> MediaStore:
    """The attachments' files: home/media/ (each capped at media.max_bytes), and the database's copy
    where replicas share no disk (gateway/storage/postgres/files.py)."""
    return MediaStore(config.home / "media", config.media.max_bytes, shared=db.shared_files())


def build_media_intake(config: Config, db: StorageFace) -> MediaIntake:
    """Attachments: files kept in `media_store`, voice through transcription.* when it names a
    model, images to the model when model.vision allows."""
    t = config.transcription
    transcriber = Transcriber(TranscriptionSettings(t.base_url, t.api_key, t.model)) if t.enabled else None
    return MediaIntake(
        media_store(config, db),
        transcriber=transcriber,
        vision=vision_enabled(config.model.vision, config.model.name),
    )


def build_store(
    config: Config,
    db: StorageFace,
    policies: ResetPolicies | None = None,
    clock: Callable[[], float] = time.time,
    is_busy: Callable[[str], bool] = lambda session_id: False,
) -> SessionStore:
    """A SessionStore with the config's session options; `policies` default to the config's.
    `is_busy`: a session with a turn running, which the store does not reset under the turn."""
    return SessionStore(
        db,
        policies if policies is not None else config.session.reset_policies(),
        group_sessions_per_user=config.session.group_sessions_per_user,
        thread_sessions_per_user=config.session.thread_sessions_per_user,
        clock=clock,
        is_busy=is_busy,
    )


def build_app(
    config: Config,
    *,
    adapters: list[PlatformAdapter] | None = None,
    agent_factory: AgentFactoryProtocol | None = None,
    local_only: bool = False,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
    clock: Callable[[], float] = time.time,
    http: bool | None = None,
    policies: ResetPolicies | None = None,
    mirrors: bool = True,
    db_path: Path | None = None,
    http_client: httpx2.AsyncClient | None = None,
    db: StorageFace | None = None,
    wall_clock: WallClock | None = None,
) -> App:
    """Wire the gateway for `config`: the one composition root (`chinwag run`, tests, bench/).

    `local_only`: just the terminal (`chinwag chat`). `adapters` replace the configured platforms
    (tests and bench bring their own), `agent_factory` the model side. `policies` override the
    config's reset policies; `mirrors=False` leaves out the JSONL/sessions.json files (bench measures
    their share); `db_path` opens another database than the home's; `http_client` carries the
    model calls (the openai SDK's own transport seam); `db`: the database already open (`open_storage`);
    `wall_clock` says when scheduled runs are due."""
    try:
        home = Home(config.home).ensure()
    except OSError as exc:
        raise AppError(f"cannot create the data directory {config.home}: {exc.strerror or exc}") from None
    if adapters is None:
        names = ["local"] if local_only else config.configured_platforms()
        if not names:
            raise AppError("nothing to serve: no chat platform is configured and platforms.local.enabled is false")
        adapters = [create_adapter(config, name, stdin=stdin, stdout=stdout) for name in names]
    embedder = build_embedder(config)  # before the database: a missing extra is a clear error, nothing opened
    path = db_path or home.db_path
    on_postgres = config.storage.backend == "postgres"
    with contextlib.ExitStack() as opened:  # what is open so far is closed if a later step fails
        if db is None:
            try:
                db = _open_db(config, path)
            except StorageUnreachable as exc:
                raise AppError(str(exc)) from None
        opened.callback(db.close)
        # on Postgres no disk is shared by the replicas: no transcript files or sessions.json (DESIGN §14)
        files = Mirrors(home, db) if mirrors and not on_postgres else None
        if files is not None:
            opened.callback(files.close)
            files.reconcile()  # the DB wins; Mirrors logs what it fixed
        cache = build_agent_cache(config, clock)
        mcp = build_mcp(config)
        # A session with a turn running is "busy": the store does not reset it under the turn.
        store = build_store(config, db, policies, clock, is_busy=cache.is_running)
        metrics = Metrics()
        otlp = telemetry.endpoint(config.telemetry.otlp_endpoint, os.environ)
        if otlp:  # (off: the SDK is never imported)
            try:
                telemetry.start(otlp, metrics)
            except ImportError as exc:
                raise AppError(
                    f"telemetry to {otlp} needs the otel extra ({exc}): pip install 'chinwag[otel]'"
                ) from None
            opened.callback(telemetry.stop)
        health = StorageHealth(db)
        use_http = config.http.enabled if http is None else http
        ops = _build_ops(config, adapters, metrics, db, mcp, health) if use_http else None
        runner = build_runner(
            config,
            db,
            store,
            adapters,
            clock=clock,
            metrics=metrics,
            agent_factory=agent_factory,
            http_client=http_client,
            # N replicas share the database: the registry replaces the home lock (DESIGN §14)
            leases=SharedLeases(db, config.storage.postgres_dsn) if on_postgres else None,
            cache=cache,
            ops_url=functools.partial(_listening_url, ops),
            mcp=mcp,
            health=health,
            wall_clock=wall_clock,
        )
        opened.pop_all()
    # Replicas share one backlog: the leading one polls, since the others' commits wake nothing here.
    poll = EMBED_POLL_SECONDS if on_postgres else None
    indexer = BackgroundIndexer(db, embedder, poll_seconds=poll) if embedder is not None else None
    _gauges(metrics, runner, db, files, indexer)
    return App(config, home, db, files, store, adapters, runner, metrics, ops, indexer=indexer, mcp=mcp)


def _gauges(
    metrics: Metrics, runner: GatewayRunner, db: StorageFace, files: Mirrors | None, indexer: BackgroundIndexer | None
) -> None:
    """The gauges read from the parts build_app assembled (the runner sets its own)."""
    metrics.set_gauge_fn("adapter_ready", lambda: {n: int(h.ready) for n, h in runner.readiness().items()})
    if files is not None:
        metrics.set_gauge_fn("mirror_backlog", files.backlog)
    metrics.set_gauge_fn("wal_bytes", db.wal_bytes)
    metrics.set_gauge_fn("media_bytes", Sampled(db.media_bytes, every=30.0))
    if indexer is not None:
        model = str(indexer.embedder.model)
        metrics.set_gauge_fn("embedding_backlog", Sampled(lambda: index_stats(db, model)["backlog"], every=10.0))
        metrics.set_gauge_fn("embedding_failures", lambda: float(indexer.failures))


STORAGE_WAIT_FIRST_SECONDS = 1.0  # a replica started while Postgres is unreachable retries after 1 s,
STORAGE_WAIT_CAP_SECONDS = 30.0  # doubling up to 30 s


async def open_storage(config: Config) -> StorageFace:
    """The home's database, opened before the rest is built. While the Postgres server cannot be
    reached (down, restarting) a replica waits and tries again with backoff instead of exiting:
    each try is logged with the DSN (password hidden), and the ops server answers meanwhile, /readyz
    503 saying why. Anything else that stops it opening is an AppError at once."""
    delay, reason = STORAGE_WAIT_FIRST_SECONDS, ""
    waiting: OpsServer | None = None
    try:
        while True:
            try:
                return await asyncio.to_thread(_open_db, config, Home(config.home).db_path)
            except StorageUnreachable as exc:
                reason = str(exc)
            log.warning("%s; waiting for it, next try in %.0fs", reason, delay)
            if waiting is None and config.http.enabled:
                waiting = OpsServer(
                    config.http.host,
                    config.http.port,
                    storage_report=lambda: {"ready": False, "detail": f"waiting for the database: {reason}"},
                )
                try:
                    await waiting.start()
                except OSError as exc:
                    log.warning("%s; waiting without the ops HTTP server", exc)
            await asyncio.sleep(delay)
            delay = min(STORAGE_WAIT_CAP_SECONDS, delay * 2)
    finally:
        if waiting is not None:
            await waiting.stop()


def _open_db(config: Config, path: Path) -> StorageFace:
    try:
        return open_db(
            config.storage.backend, path, config.storage.postgres_dsn, synchronous=config.storage.synchronous
        )
    except StorageUnreachable:
        raise  # (open_storage waits for it)
    except StorageUnavailable as exc:
        raise AppError(str(exc)) from None
    except (SchemaTooNew, sqlite3.DatabaseError, OSError) as exc:
        raise AppError(
            f"cannot open the database {path}: {exc} (`chinwag doctor` checks it; restore a backup or set another home)"
        ) from None


def _build_ops(
    config: Config,
    adapters: list[PlatformAdapter],
    metrics: Metrics,
    db: StorageFace,
    mcp: McpTools,
    health: StorageHealth,
) -> OpsServer:
    """The ops HTTP server: probes, metrics, the console and the adapters' webhooks."""
    webhooks: dict[str, Any] = {}
    for adapter in adapters:
        for route, handler in adapter.webhook_handlers().items():
            if route in webhooks:
                raise AppError(f"two adapters want the webhook path {route}")
            webhooks[route] = handler
    return OpsServer(
        config.http.host,
        config.http.port,
        metrics=metrics,
        readiness=functools.partial(adapter_health, adapters),
        webhooks=webhooks,
        db=db,
        storage_report=health.report,
        media=media_store(config, db),
        console_token=config.http.console_token or None,
        tool_servers=mcp.states if mcp.settings.servers else None,
        idle_timeout=config.http.idle_timeout_seconds,
    )


def _listening_url(ops: OpsServer | None) -> str | None:
    """The ops server's address once it listens; None before, or when it could not."""
    return ops.url if ops is not None and ops.port is not None else None


EMBED_POLL_SECONDS = 2.0  # how often the leading replica's indexer looks for the others' messages


def embed_while_leading(leases: ChatLeases, indexer: BackgroundIndexer) -> None:
    """Start the indexer; on Postgres only on the replica that leads "embedding". Replicas share
    one backlog: each embedding it would spend the model's time on a batch only one of them may
    store (gateway/storage/vectors.py); the leader polls (its `poll_seconds`, set where it is built)."""
    if not leases.shared:
        indexer.start()
        return

    async def on_change(leading: bool) -> None:
        if leading:
            indexer.start()
        else:
            await asyncio.to_thread(indexer.stop)

    leases.lead("embedding", on_change)


def build_embedder(config: Config) -> Any:
    """The embedder `embeddings.*` names, or None when embeddings are off (the default: recall is
    lexical). App.start makes it the one recall uses and starts the background indexer with it."""
    if not config.embeddings.enabled:
        return None
    try:
        return make_embedder(EmbeddingSettings.from_config(config))
    except EmbeddingUnavailable as exc:
        raise AppError(str(exc)) from None
