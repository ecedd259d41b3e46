"""The operations HTTP server: health, readiness per adapter, Prometheus metrics, and webhooks.

- `GET /healthz`  — 200 while the process and its event loop are alive.
- `GET /readyz`   — 200 when every configured adapter is ready and the database answers, else 503;
  the JSON body lists each adapter and says why the database is not ready. The database check is a
  read of the schema version with a 2 s bound (on Postgres through the pool, so a replica whose
  server is gone or unreachable leaves the load balancer's rotation instead of taking webhooks it
  cannot store), and 503 too while commits fail (a full disk reads fine: gateway.storage.health).
  Each MCP server's state is listed too (`mcp`), not required for ready: a down tool server
  degrades answers, not the gateway.
- `GET /metrics`  — Prometheus text format (gateway.service.metrics).
- `POST /webhooks/<platform>` — the handlers adapters expose via `webhook_handlers()`.
- `/console/`, `/api/v1/` — the web console and its JSON API (gateway.console), when given a DB.

A connection with no request under way for `http.idle_timeout_seconds` is closed (idle keep-alive
and slow clients alike); a body over 4 MB gets 413.

Binds to loopback by default (http.host); webhooks reach it through the operator's reverse proxy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Mapping

from aiohttp import web

from gateway.console import mount_console
from gateway.console.auth import is_loopback
from gateway.db import StorageFace
from gateway.service.metrics import Metrics
from gateway.storage.media import MediaStore
from platforms.base import AdapterHealth, WebhookHandler

log = logging.getLogger(__name__)

Readiness = Callable[[], Mapping[str, AdapterHealth]]


DB_CHECK_SECONDS = 2.0
IDLE_TIMEOUT_SECONDS = 60.0  # http.idle_timeout_seconds


def readiness_report(
    health: Mapping[str, AdapterHealth], now: float | None = None, database: dict[str, Any] | None = None
) -> tuple[bool, dict[str, Any]]:
    """(all ready?, JSON body) for a readiness snapshot. No adapter at all is not ready; nor is a
    `database` check (from `check_database`) that failed."""
    now = time.monotonic() if now is None else now
    adapters: dict[str, Any] = {}
    for name, h in sorted(health.items()):
        entry: dict[str, Any] = {"ready": bool(h.ready), "detail": h.detail}
        if h.last_event_at is not None:  # monotonic, so only the age means anything outside
            entry["seconds_since_last_event"] = round(max(0.0, now - h.last_event_at), 3)
        adapters[name] = entry
    ready = bool(adapters) and all(a["ready"] for a in adapters.values())
    body: dict[str, Any] = {"ready": ready, "adapters": adapters}
    if not adapters:
        body["detail"] = "no adapter is running"
    if database is not None:
        body["database"] = database
        if not database["ready"]:
            ready = body["ready"] = False
            body["detail"] = f"database: {database['detail']}"
    return ready, body


async def check_database(db: StorageFace, timeout: float = DB_CHECK_SECONDS) -> dict[str, Any]:
    """Whether the storage face answers a read of its schema version within `timeout` seconds."""
    backend = db.backend
    try:
        version = await asyncio.wait_for(asyncio.to_thread(db.ping, timeout), timeout + 1.0)
    except (asyncio.TimeoutError, TimeoutError):
        return {"ready": False, "backend": backend, "detail": f"no answer within {timeout:g}s"}
    except Exception as exc:  # what the driver says, on one line (never a DSN password: psycopg omits it)
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return {"ready": False, "backend": backend, "detail": f"unreachable: {reason[:300]}"}
    return {"ready": True, "backend": backend, "schema_version": version}


def _tool_server(state: Any) -> dict[str, Any]:
    out = {"state": state.state, "transport": state.transport, "tools": state.tools, "restarts": state.restarts}
    if state.error:
        out["error"] = state.error
    return out


class OpsServer:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8765,
        *,
        metrics: Metrics | None = None,
        readiness: Readiness | None = None,
        webhooks: Mapping[str, WebhookHandler] | None = None,
        db: StorageFace | None = None,
        storage_report: Callable[[], dict[str, Any] | None] | None = None,
        console_token: str | None = None,
        media: MediaStore | None = None,
        tool_servers: Callable[[], Mapping[str, Any]] | None = None,
        idle_timeout: float = IDLE_TIMEOUT_SECONDS,
    ) -> None:
        self.host = host
        self.requested_port = port
        self.port: int | None = None  # the bound port (differs from requested when that is 0)
        self.metrics = metrics or Metrics()
        self.readiness: Readiness = readiness or (dict)
        self.webhooks = dict(webhooks or {})
        self.db = db  # the console is served when there is a DB to show
        # why storage is not ready beyond a read (commits failing, or not open yet): /readyz 503
        self.storage_report = storage_report
        self.idle_timeout = idle_timeout
        self.console_token = console_token
        self.media = media  # the attachments' files the console serves
        self.tool_servers = tool_servers  # name -> state of each MCP server (tools.mcp.ServerState)
        self.started_at = time.monotonic()
        self._runner: web.AppRunner | None = None

    def build(self) -> web.Application:
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        for path, handler in sorted(self.webhooks.items()):
            if not path.startswith("/webhooks/"):
                raise ValueError(f"webhook path {path!r} must start with /webhooks/")
            app.router.add_post(path, handler)
        if self.db is not None:
            mount_console(
                app,
                self.db,
                bind_host=self.host,
                token=self.console_token,
                metrics=self.metrics,
                adapters=lambda: readiness_report(dict(self.readiness()))[1],
                media=self.media,
            )
            app.router.add_get("/", self._home)
        return app

    async def start(self) -> None:
        # a console search is a GET: a 10 KB query, percent-encoded, is far past aiohttp's 8 KB line
        # keepalive_timeout runs from the connection's start too (aiohttp >= 3.10): a connection that
        # never sends a request is closed as well, so idle sockets cannot use up the file limit.
        self._runner = web.AppRunner(
            self.build(), access_log=None, max_line_size=65536, keepalive_timeout=self.idle_timeout
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.requested_port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise OSError(
                f"cannot listen on {self.host}:{self.requested_port} ({exc.strerror or exc}); "
                f"set http.port to a free port (0 picks one) or http.enabled: false"
            ) from None
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.requested_port
        log.info(
            "ops http on http://%s:%s (healthz, readyz, metrics%s%s)",
            self.host,
            self.port,
            ", " + ", ".join(sorted(self.webhooks)) if self.webhooks else "",
            self._console_line(),
        )

    def _console_line(self) -> str:
        """Where the console is, for the start line; off loopback without a token it refuses
        every request, so say that instead of advertising an address that answers 403."""
        if self.db is None:
            return ""
        if not self.console_token and not is_loopback(self.host):
            return f"; the console is off on {self.host} until http.console_token is set"
        return f"; console at http://{self.host}:{self.port}/console/"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- handlers ------------------------------------------------------------------------------
    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "uptime_seconds": round(time.monotonic() - self.started_at, 3)})

    async def _home(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/console/")

    async def _readyz(self, request: web.Request) -> web.Response:
        try:
            health = dict(self.readiness())
        except Exception as exc:  # report, never 500 with a traceback
            log.exception("readiness check failed")
            return web.json_response({"ready": False, "detail": f"readiness check failed: {exc}"}, status=503)
        database = await check_database(self.db) if self.db is not None else None
        failing = self.storage_report() if self.storage_report is not None else None
        if failing is not None:  # it reads and cannot commit (a full disk), or it is not open yet
            database = {**(database or {}), **failing}
        ready, body = readiness_report(health, database=database)
        if self.tool_servers is not None:
            body["mcp"] = {name: _tool_server(state) for name, state in self.tool_servers().items()}
        return web.json_response(body, status=200 if ready else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.render().encode("utf-8"),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )
