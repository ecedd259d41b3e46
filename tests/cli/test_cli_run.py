"""`chinwag run` / `chinwag chat` as real subprocesses, and `chinwag doctor` against real endpoints."""

from __future__ import annotations

import asyncio
import io
import json
import os
import pty
import re
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from agent.llm import NOT_CONFIGURED_TEXT
from gateway.cli.doctor import run_doctor
from gateway.db import SessionDB
from tests.fakes.openai_server import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 30.0


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CHINWAG_"))}
    env.update(CHINWAG_HOME=str(tmp_path / "home"), HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


async def chinwag(args: list[str], env: dict[str, str], stdin: str | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        *args,
        cwd=ROOT,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate((stdin or "").encode()), TIMEOUT)
    return proc.returncode, out.decode(), err.decode()


async def read_until(stream: asyncio.StreamReader, pattern: str, sink: list[str]) -> re.Match:
    """Read lines into `sink` until one matches; fails if the stream ends first."""
    while True:
        line = (await stream.readline()).decode()
        assert line, "process ended early:\n" + "".join(sink)
        sink.append(line)
        match = re.search(pattern, line)
        if match:
            return match


async def start_run(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "run",
        cwd=ROOT,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_run_with_no_config_and_no_model(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    code, out, err = await chinwag(["run"], env, "hello there\n/help\n/search hello\n")
    assert code == 0, err
    assert "Traceback" not in err and "Traceback" not in out
    assert NOT_CONFIGURED_TEXT in out  # the chat turn says so clearly
    assert "/search <words>" in out  # /help answered
    assert "no model configured" in err  # and the log says it at start
    # embedded defaults: SQLite and mirrors under CHINWAG_HOME
    home = tmp_path / "home"
    assert (home / "state.db").is_file() and (home / "sessions").is_dir()
    db = SessionDB(home / "state.db")
    try:
        sessions = db.list_sessions_rich()
        assert len(sessions) == 1 and sessions[0]["source"] == "local"
        texts = [m["content"] for m in db.get_messages(sessions[0]["id"], include_inactive=True)]
        assert "hello there" in texts
    finally:
        db.close()


async def test_run_chats_with_a_model_and_recalls_across_runs(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        env = clean_env(
            tmp_path, OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-test-key-123456", CHINWAG_MODEL="fake-model"
        )
        fake.push("The capital of Mongolia is Ulaanbaatar.")
        code, out, err = await chinwag(["run", "--verbose"], env, "what is the capital of Mongolia?\n")
        assert code == 0, err
        assert "The capital of Mongolia is Ulaanbaatar." in out
        assert fake.requests[0]["model"] == "fake-model"
        assert fake.headers[0]["Authorization"] == "Bearer sk-test-key-123456"
        assert " DEBUG " in err  # even the SDKs' debug lines ...
        assert "sk-test-key-123456" not in err  # ... never carry the key
        # a new conversation in `chinwag chat` finds the earlier one
        code, out, err = await chinwag(["chat"], env, "/new\n/search Mongolia capital\n")
        assert code == 0, err
        assert "Traceback" not in err
        assert "Ulaanbaatar" in out  # the earlier conversation, found from a new one


async def test_run_serves_ops_http_and_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(
        "http: {port: 0}\nplatforms: {local: {enabled: true, user: tester}}\n", encoding="utf-8"
    )
    with SessionDB(home / "state.db") as db:  # a redelivery id from long ago: upkeep forgets it
        db.mark_event_seen("feishu", "ancient")
        db.write(lambda conn, events: conn.execute("UPDATE processed_events SET seen_at = 0"))
    async with FakeOpenAI() as fake:
        env = clean_env(tmp_path, OPENAI_BASE_URL=fake.base_url)
        proc = await start_run(env)
        try:
            err_lines: list[str] = []
            match = await asyncio.wait_for(
                read_until(proc.stderr, r"ops http on (http://127\.0\.0\.1:\d+)", err_lines), TIMEOUT
            )
            base = match.group(1)
            await asyncio.wait_for(read_until(proc.stderr, r"chinwag running: local", err_lines), TIMEOUT)
            async with aiohttp.ClientSession() as http:
                async with http.get(base + "/healthz") as resp:
                    assert resp.status == 200
                async with http.get(base + "/readyz") as resp:
                    assert resp.status == 200
                    body = await resp.json()
                    assert body["adapters"]["local"]["ready"] is True
                proc.stdin.write("remember the word pelican\n".encode())
                await proc.stdin.drain()
                out_lines: list[str] = []
                await asyncio.wait_for(read_until(proc.stdout, r"echo: remember the word pelican", out_lines), TIMEOUT)
                async with http.get(base + "/metrics") as resp:
                    text = await resp.text()
                assert 'chinwag_messages_in_total{platform="local"} 1' in text
                assert 'chinwag_adapter_ready{platform="local"} 1' in text
                assert "\nchinwag_mirror_backlog " in text
                assert re.search(r"\nchinwag_wal_bytes \d+\n", text)
                assert "\nchinwag_media_bytes 0\n" in text
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), TIMEOUT)
            rest = (await proc.stderr.read()).decode()
            assert code == 0, "".join(err_lines) + rest
            assert "SIGTERM received" in rest and "chinwag stopped" in rest
            assert "Traceback" not in rest
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    db = SessionDB(home / "state.db")
    try:
        (session,) = db.list_sessions_rich()
        roles = [(m["role"], m["content"]) for m in db.get_messages(session["id"])]
        assert ("user", "remember the word pelican") in roles
        assert ("assistant", "echo: remember the word pelican") in roles
        assert (home / "sessions" / f"{session['id']}.jsonl").read_text().count("pelican") == 2
        assert not db.is_event_seen("feishu", "ancient")  # the daemon's upkeep ran
    finally:
        db.close()


async def shutdown_during_a_turn(
    tmp_path: Path, timeout: float, release: bool, sig: signal.Signals = signal.SIGTERM
) -> tuple[int, str, str, Path]:
    """Start `chinwag run`, hold the model's reply, SIGTERM mid-turn; maybe release the reply."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(
        f"http: {{enabled: false}}\ngateway: {{shutdown_timeout_seconds: {timeout}}}\n"
        "platforms: {local: {user: tester}}\n",
        encoding="utf-8",
    )
    async with FakeOpenAI() as fake:
        fake.gate = asyncio.Event()
        proc = await start_run(clean_env(tmp_path, OPENAI_BASE_URL=fake.base_url))
        try:
            err_lines: list[str] = []
            await asyncio.wait_for(read_until(proc.stderr, r"chinwag running", err_lines), TIMEOUT)
            proc.stdin.write("a question that takes a while\n".encode())
            await proc.stdin.drain()
            await fake.wait_requests(1, timeout=TIMEOUT)
            proc.send_signal(sig)
            await asyncio.wait_for(read_until(proc.stderr, f"{sig.name} received", err_lines), TIMEOUT)
            if release:
                fake.gate.set()
            out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    return proc.returncode, out.decode(), "".join(err_lines) + err.decode(), home


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_lets_a_running_turn_finish(tmp_path: Path, sig: signal.Signals) -> None:
    code, out, err, home = await shutdown_during_a_turn(tmp_path, timeout=20, release=True, sig=sig)
    assert code == 0, err
    assert "echo: a question that takes a while" in out  # the reply still went out
    assert "Traceback" not in err
    db = SessionDB(home / "state.db")
    try:
        (session,) = db.list_sessions_rich()
        roles = [m["role"] for m in db.get_messages(session["id"])]
        assert roles == ["user", "assistant"]
    finally:
        db.close()


async def test_sigterm_checkpoints_a_turn_that_does_not_finish_in_time(tmp_path: Path) -> None:
    code, out, err, home = await shutdown_during_a_turn(tmp_path, timeout=0.3, release=False)
    assert code == 0, err
    assert "Traceback" not in err
    assert "chinwag stopped" in err
    db = SessionDB(home / "state.db")
    try:
        (session,) = db.list_sessions_rich()
        texts = [m["content"] for m in db.get_messages(session["id"], include_inactive=True)]
        assert "a question that takes a while" in texts  # what was said is kept
    finally:
        db.close()


async def test_run_refuses_a_bad_config_with_the_key_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("gateway:\n  busy_mode: fast\n", encoding="utf-8")
    code, out, err = await chinwag(["run"], clean_env(tmp_path), "")
    assert code == 2
    assert "gateway.busy_mode: must be one of queue, interrupt, steer (got 'fast')" in err
    assert "Traceback" not in err


async def test_run_logs_json_lines_without_secrets(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    async with FakeOpenAI() as fake:
        (home / "config.yaml").write_text(
            "logging: {format: json, level: DEBUG}\nhttp: {enabled: false}\n"
            f"model: {{base_url: '{fake.base_url}', api_key: '${{MY_KEY}}'}}\n",
            encoding="utf-8",
        )
        env = clean_env(tmp_path, MY_KEY="plainsecretvalue42")
        code, out, err = await chinwag(["run"], env, "hello\n")
    assert code == 0, err
    assert out.strip() == "echo: hello"
    entries = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert entries and all({"ts", "level", "logger", "msg"} <= set(e) for e in entries)
    assert any(e["msg"].startswith("chinwag running") for e in entries)
    assert any(e["level"] == "DEBUG" for e in entries)
    assert "plainsecretvalue42" not in err


async def test_run_refuses_a_damaged_database_in_a_sentence(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").write_bytes(b"not a database at all " * 200)
    code, out, err = await chinwag(["run", "--no-http"], clean_env(tmp_path), "hello\n")
    assert code == 1
    assert f"chinwag: cannot open the database {home / 'state.db'}" in err
    assert "Traceback" not in err
    assert (home / "state.db").read_bytes() == b"not a database at all " * 200  # left as it was


# ---------------------------------------------------------------- doctor


async def doctor(tmp_path: Path, config: str | None = None, **env: str) -> tuple[int, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    if config is not None:
        (home / "config.yaml").write_text(config, encoding="utf-8")
    out = io.StringIO()
    full_env = {"CHINWAG_HOME": str(home), **env}
    code = await asyncio.to_thread(run_doctor, None, None, timeout=3.0, out=out, env=full_env)
    return code, out.getvalue()


async def test_doctor_fresh_home_is_fine_but_says_no_model(tmp_path: Path) -> None:
    code, text = await doctor(tmp_path)
    assert code == 0, text
    assert "ok    config: no config file (embedded defaults); platforms: local" in text
    assert "model: not configured" in text
    assert "does not exist yet; it is created on first run" in text


async def test_doctor_checks_the_model_endpoint(tmp_path: Path) -> None:
    async with FakeOpenAI(models=("m1", "m2")) as fake:
        code, text = await doctor(tmp_path, OPENAI_BASE_URL=fake.base_url, CHINWAG_MODEL="m2")
        assert code == 0, text
        assert f"ok    model: {fake.base_url} reachable, 2 model(s)" in text
        code, text = await doctor(tmp_path, OPENAI_BASE_URL=fake.base_url, CHINWAG_MODEL="gpt-x")
        assert "does not list model 'gpt-x'" in text
    # the same port, now closed
    code, text = await doctor(tmp_path, OPENAI_BASE_URL=fake.base_url)
    assert code == 1
    assert f"FAIL  model: {fake.base_url} is not reachable: cannot connect" in text
    assert text.rstrip().endswith("1 problem(s) found.")


async def test_doctor_reports_config_errors_and_a_damaged_database(tmp_path: Path) -> None:
    code, text = await doctor(tmp_path, "gatway: {}\n")
    assert code == 1
    assert "FAIL  config: " in text and "gatway: unknown key; did you mean 'gateway'?" in text
    (tmp_path / "home" / "state.db").write_bytes(b"this is not sqlite" * 100)
    code, text = await doctor(tmp_path, "")
    assert code == 1
    assert "is not a readable SQLite database" in text


async def test_doctor_on_a_real_database(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = SessionDB(home / "state.db")
    db.create_session("20260101_000000_aaaaaaaa", "local", user_id="me")
    db.append_message("20260101_000000_aaaaaaaa", "user", "hi")
    db.close()
    code, text = await doctor(tmp_path)
    assert code == 0, text
    assert re.search(r"ok    database .*state\.db: integrity ok, schema v\d+, 1 sessions, 1 messages", text)
    (home / "sessions.json").write_text("{truncated", encoding="utf-8")
    code, text = await doctor(tmp_path)
    assert code == 0 and "sessions.json is unreadable" in text and "chinwag sessions repair" in text
    # a database from the future is refused
    conn = sqlite3.connect(home / "state.db")
    conn.execute("UPDATE schema_version SET version = 999")
    conn.commit()
    conn.close()
    code, text = await doctor(tmp_path)
    assert code == 1 and "has schema v999, newer than this chinwag" in text


async def test_doctor_checks_the_http_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, text = await doctor(tmp_path, f"http: {{port: {port}}}\n")
        assert code == 0, text
        assert f"warn  http: port {port} on 127.0.0.1 is in use" in text
    code, text = await doctor(tmp_path, f"http: {{port: {port}}}\n")
    assert f"ok    http: 127.0.0.1:{port} is free" in text


async def test_doctor_checks_platform_credentials(tmp_path: Path) -> None:
    calls: list[str] = []

    async def get_me(request: web.Request) -> web.Response:
        calls.append(request.path)
        if request.match_info["token"] == "123:good":
            return web.json_response({"ok": True, "result": {"username": "chinwag_bot"}})
        return web.json_response({"ok": False, "description": "Unauthorized"}, status=401)

    async def feishu_token(request: web.Request) -> web.Response:
        body = await request.json()
        if body == {"app_id": "cli_a", "app_secret": "right"}:
            return web.json_response({"code": 0, "tenant_access_token": "t-x", "expire": 7200})
        return web.json_response({"code": 10014, "msg": "app secret invalid"})

    async def discord_me(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") == "Bot good":
            return web.json_response({"id": "1", "username": "chinbot"})
        return web.json_response({"message": "401: Unauthorized"}, status=401)

    app = web.Application()
    app.router.add_get("/bot{token}/getMe", get_me)
    app.router.add_post("/open-apis/auth/v3/tenant_access_token/internal", feishu_token)
    app.router.add_get("/api/users/@me", discord_me)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    try:
        good = (
            f"platforms:\n"
            f"  telegram: {{token: '123:good', base_url: '{base}/bot', allowed_users: [1]}}\n"
            f"  feishu: {{app_id: cli_a, app_secret: right, domain: '{base}', allowed_users: [ou_1]}}\n"
            f"  discord: {{token: good, api_base: '{base}/api', allowed_users: ['2']}}\n"
        )
        code, text = await doctor(tmp_path, good)
        assert "ok    telegram: token accepted, bot @chinwag_bot" in text
        assert f"ok    feishu: app credentials accepted by {base}" in text
        assert "ok    discord: token accepted, bot chinbot" in text
        bad = good.replace("123:good", "123:bad").replace("right", "wrong").replace("token: good", "token: bad")
        code, text = await doctor(tmp_path, bad)
        assert code == 1
        assert "FAIL  telegram: the bot token was rejected (HTTP 401" in text
        assert "<token>/getMe" in text and "123:bad" not in text  # the token is never printed
        assert "FAIL  feishu: " in text and "code 10014: app secret invalid" in text
        assert "FAIL  discord: the bot token was rejected (HTTP 401)" in text
        assert text.rstrip().endswith("3 problem(s) found.")
    finally:
        await runner.cleanup()


# ---------------------------------------------------------------- assembly (in process)


async def test_app_mounts_adapter_webhooks_and_reports_readiness(tmp_path: Path) -> None:
    from gateway.config.load import parse_config
    from gateway.service.app import build_app

    config = parse_config(
        {
            "http": {"port": 0},
            "platforms": {
                "local": {"enabled": True, "user": "op"},
                "telegram": {
                    "token": "123:abc",
                    "mode": "webhook",
                    "secret_token": "s3cret_value",
                    "webhook_url": "https://bot.example/webhooks/telegram",
                    "allowed_users": [1],
                },
            },
        },
        env={},
        home_override=tmp_path / "home",
    )
    read_fd, write_fd = os.pipe()
    app = build_app(config, stdin=os.fdopen(read_fd, "r"), stdout=io.StringIO())
    try:
        assert app.adapter_names == ["local", "telegram"]
        await app.ops.start()  # the adapters are not started: Telegram is not ready
        async with aiohttp.ClientSession() as http:
            async with http.post(app.ops.url + "/webhooks/telegram", json={"update_id": 1}) as resp:
                assert resp.status == 403  # the real adapter's handler: no secret header
            async with http.post(
                app.ops.url + "/webhooks/telegram",
                json={"update_id": 1},
                headers={"X-Telegram-Bot-Api-Secret-Token": "s3cret_value"},
            ) as resp:
                assert resp.status == 503  # right secret, adapter not started yet
            async with http.get(app.ops.url + "/readyz") as resp:
                assert resp.status == 503
                body = await resp.json()
            assert set(body["adapters"]) == {"local", "telegram"}
            assert body["adapters"]["telegram"]["ready"] is False
    finally:
        os.close(write_fd)
        await app.ops.stop()
        app.close_storage()


async def test_sdks_are_imported_only_for_configured_platforms(tmp_path: Path) -> None:
    script = (
        "import sys, tempfile\n"
        "from gateway.config.load import parse_config\n"
        "from gateway.service.app import build_app\n"
        "c = parse_config({'http': {'enabled': False}}, env={}, home_override=tempfile.mkdtemp())\n"
        "app = build_app(c)\n"
        "print(sorted(m for m in ('telegram', 'discord', 'lark_oapi') if m in sys.modules))\n"
        "app.close_storage()\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        cwd=ROOT,
        env=clean_env(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "[]"


async def test_run_with_no_chat_platform_and_no_terminal_exits_2_with_a_sentence(tmp_path: Path) -> None:
    # `docker run -d chinwag` with no token: stdin is /dev/null, so the terminal has nobody to hear
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "run",
        cwd=ROOT,
        env=clean_env(tmp_path),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode == 2, err
    assert "nothing to talk to: no chat platform is configured and there is no terminal" in err.decode()
    assert "TELEGRAM_BOT_TOKEN" in err.decode() and "Traceback" not in err.decode()
    home = tmp_path / "home"
    assert not home.exists()  # refused before anything was created
    home.mkdir()
    (home / "config.yaml").write_text("platforms: {local: {enabled: false}}\n", encoding="utf-8")
    code, out_text, err_text = await chinwag(["run"], clean_env(tmp_path), "hello\n")
    assert code == 2 and "platforms.local.enabled is false" in err_text


@pytest.mark.parametrize(
    "locale, banner",
    [("zh_CN.UTF-8", "chinwag：回车发送"), ("C.UTF-8", "chinwag: Enter sends")],
)
def test_the_terminal_banner_speaks_the_terminals_locale(tmp_path: Path, locale: str, banner: str) -> None:
    """`chinwag chat` on a terminal (a pty) greets in the language of LANG, as it will answer."""
    env = {k: v for k, v in clean_env(tmp_path, LANG=locale).items() if k not in ("LC_ALL", "LC_MESSAGES")}
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "chat"],
        stdin=follower,
        stdout=follower,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    os.close(follower)
    seen = b""
    try:
        deadline = time.monotonic() + TIMEOUT
        while b"\n" not in seen.partition(banner.encode())[2] and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                seen += os.read(leader, 4096)
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
        os.close(leader)
    assert banner in seen.decode(errors="replace"), seen
