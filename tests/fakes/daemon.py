"""A real `chinwag run` subprocess for crash tests, and the platforms' side of a webhook: what the
delivery crash tests (tests/runtime/test_delivery_crash*.py) share.

    daemon = Daemon(tmp_path, llm, lambda port: {"telegram": {...}})   # config knows the port first
    await daemon.start(); await daemon.kill(); await daemon.start(); await daemon.terminate()
    await post_until_acknowledged(http, daemon.url("/webhooks/telegram"), make_request, statuses)

A subprocess, not an in-process gateway: SIGKILL has to cut a real process at a random point (a
commit half done, a reply sent and not recorded) for the test to say anything about a crash.
`post_until_acknowledged` is what Telegram and Feishu do with an event: send it again until the
webhook answers 2xx (`make_request` is called per attempt, so a signed request is signed afresh).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any, Callable

import aiohttp

from tests.cli.test_cli_run import ROOT, clean_env
from tests.fakes.loopback import free_port
from tests.fakes.openai_server import FakeOpenAI

MakeRequest = Callable[[], tuple[bytes, dict[str, str]]]


_started: list[asyncio.subprocess.Process] = []  # every daemon started in this test process


def kill_leftovers() -> int:
    """SIGKILL every daemon a test started and left running, and say how many: a failing test
    never reaches its own stop, and its daemon would take CPU from the tests after it."""
    left = [proc for proc in _started if proc.returncode is None]
    for proc in left:
        try:
            os.kill(proc.pid, signal.SIGKILL)
            os.waitpid(proc.pid, 0)  # reaped here: the loop that started it is gone
        except (ProcessLookupError, ChildProcessError):  # it ended, or asyncio's watcher reaped it
            pass
    _started.clear()
    return len(left)


class Daemon:
    """`chinwag run` on one home, started and killed at will; `platforms(port)` is the config's
    platforms section (it may need the daemon's HTTP port, chosen before the config is written)."""

    def __init__(
        self,
        tmp: Path,
        llm: FakeOpenAI,
        platforms: Callable[[int], dict[str, Any]],
        storage: dict[str, Any] | None = None,
        mcp: dict[str, Any] | None = None,
        sections: dict[str, Any] | None = None,  # more of config.yaml (e.g. telemetry, logging)
        **gateway: object,
    ) -> None:
        self.port = free_port()
        self.home = tmp / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        config = {
            "http": {"port": self.port},
            "gateway": {"shutdown_timeout_seconds": 1, "busy_ack": False, "max_pending": 1000, **gateway},
            "platforms": {"local": {"enabled": False}, **platforms(self.port)},
        }
        if storage is not None:  # e.g. {"backend": "postgres", "postgres": {"dsn": ...}}: replicas
            config["storage"] = storage
        if mcp is not None:  # MCP servers for the agent (tests/tools/mcp)
            config["mcp"] = mcp
        config.update(sections or {})
        (self.home / "config.yaml").write_text(json.dumps(config), encoding="utf-8")
        self.env = clean_env(
            tmp, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k", CHINWAG_MODEL="fake-model", PYTHONFAULTHANDLER="1"
        )
        self.proc: asyncio.subprocess.Process | None = None
        self.kills = 0
        self.logs: list[Path] = []  # each run's stderr (its log), for a failing test to show

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def start(self) -> None:
        log = self.home.parent / f"daemon-{len(self.logs)}.log"
        self.logs.append(log)
        with log.open("wb") as stderr:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gateway.cli",
                "run",
                cwd=ROOT,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=stderr,
            )
        _started.append(self.proc)

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()
        self.kills += 1

    def signal(self, sig: signal.Signals) -> None:
        """SIGSTOP / SIGCONT: freeze the process and let it go on."""
        assert self.proc is not None
        self.proc.send_signal(sig)

    async def terminate(self) -> int:
        """SIGTERM and the exit status (0 for a clean stop; what it was if it had died already)."""
        assert self.proc is not None
        if self.proc.returncode is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), 30)


async def post_until_acknowledged(
    http: aiohttp.ClientSession, url: str, make_request: MakeRequest, statuses: list[int], pause: float = 0.05
) -> None:
    """What a platform does with an event: send it until the webhook answers 2xx. Every attempt's
    status goes to `statuses` (0: no answer at all, the daemon is down or was killed mid-request)."""
    while True:
        body, headers = make_request()
        try:
            async with http.post(url, data=body, headers=headers) as resp:
                statuses.append(resp.status)
                if 200 <= resp.status < 300:
                    return
        except aiohttp.ClientError:
            statuses.append(0)
        await asyncio.sleep(pause)


def settled(tmp: Path) -> bool:
    """Nothing left to answer or to send: every inbox entry done and every outbox row sent. Once
    so, a reply that was to go out twice has gone (a test may then count what arrived)."""
    conn = sqlite3.connect(tmp / "home" / "state.db")
    try:
        open_entries = conn.execute("SELECT count(*) FROM inbox WHERE done_at IS NULL").fetchone()[0]
        unsent = conn.execute("SELECT count(*) FROM outbox WHERE sent_at IS NULL").fetchone()[0]
    finally:
        conn.close()
    return open_entries == 0 and unsent == 0


def owed(tmp: Path, platform: str | None = None, *, open_only: bool = False) -> set[str]:
    """The answers the inbox owes ("echo: <text>", as the model fake answers): one per entry it
    committed (of `platform`), or only per entry not done yet (`open_only`: the next start's)."""
    conn = sqlite3.connect(tmp / "home" / "state.db")
    try:
        rows = conn.execute(
            "SELECT message FROM inbox WHERE (? IS NULL OR platform = ?) AND (? = 0 OR done_at IS NULL)",
            (platform, platform, int(open_only)),
        ).fetchall()
    finally:
        conn.close()
    return {"echo: " + json.loads(row[0])["text"] for row in rows}


def uncertain_sends(tmp: Path) -> int:
    """Sends the last run left uncertain: a reply part marked "sending" whose platform id was never
    recorded (what a restart sends again, and counts as `chinwag_uncertain_sends_total`)."""
    path = tmp / "home" / "state.db"
    if not path.exists():
        return 0  # killed before it made its database
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'outbox'").fetchone():
            return 0  # killed before it made its tables
        rows = conn.execute("SELECT sending, platform_ids FROM outbox WHERE sent_at IS NULL AND sending IS NOT NULL")
        return sum(1 for sending, ids in rows if sending >= len(json.loads(ids or "[]")))
    finally:
        conn.close()


async def metric(http: aiohttp.ClientSession, daemon: Daemon, name: str, platform: str) -> int | None:
    """A counter of the running daemon's /metrics (None while it does not answer)."""
    try:
        async with http.get(daemon.url("/metrics")) as resp:
            text = await resp.text()
    except aiohttp.ClientError:
        return None
    found = re.search(rf'^chinwag_{name}\{{platform="{platform}"\}} (\d+)', text, re.M)
    return int(found.group(1)) if found else None


def diagnose(tmp: Path, missing: set[str]) -> str:
    """Where some unanswered replies ("echo: <text>") are in the daemon's inbox and outbox."""
    conn = sqlite3.connect(tmp / "home" / "state.db")
    rows = []
    try:
        for text in sorted(missing)[:5]:
            needle = text.removeprefix("echo: ")
            inbox = conn.execute(
                "SELECT id, started_at IS NOT NULL, done_at IS NOT NULL, outcome FROM inbox WHERE message LIKE ?",
                (f"%{needle}%",),
            ).fetchall()
            outbox = conn.execute("SELECT id, parts_sent, sent_at FROM outbox WHERE text = ?", (text,)).fetchall()
            rows.append((text, inbox, outbox))
    finally:
        conn.close()
    return f"{len(missing)} missing; {rows}"
