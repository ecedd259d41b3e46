"""`chinwag chat` / `chinwag run` in a real pseudo-terminal (pexpect), as a person types into it.

The fake model serves on this test's event loop, so every blocking pexpect call runs in a thread
(`Terminal.expect`). prompt_toolkit's cursor-position request is turned off (PROMPT_TOOLKIT_NO_CPR):
a pty driven by a script never answers it.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
import sys
from pathlib import Path

import pexpect

from gateway.db import SessionDB
from tests.cli.test_cli_run import ROOT, clean_env
from tests.fakes.openai_server import FakeOpenAI, Reply

TIMEOUT = 30
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
CTRL_C, CTRL_D, CTRL_R = "\x03", "\x04", "\x12"
LEFT, UP = "\x1b[D", "\x1b[A"


class Terminal:
    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        env = {**env, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1", "COLUMNS": "200", "LINES": "50"}
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "gateway.cli", *args],
            cwd=str(ROOT),
            env=env,
            encoding="utf-8",
            codec_errors="replace",
            timeout=TIMEOUT,
            dimensions=(50, 200),
            maxread=65536,
        )
        self.seen = ""  # everything read so far, for failure messages

    async def expect(self, pattern: str | type) -> str:
        try:
            await asyncio.to_thread(self.child.expect, pattern)
        except (pexpect.TIMEOUT, pexpect.EOF) as exc:
            raise AssertionError(
                f"did not see {pattern!r}; the terminal showed:\n{self.seen}{self.child.before}"
            ) from exc
        text = (self.child.before or "") + (self.child.after if isinstance(self.child.after, str) else "")
        self.seen += text
        return text

    async def prompt(self) -> None:
        # A fresh prompt: the editor turns bracketed paste on, then draws ">" (not the "> text"
        # it redraws while a line is edited).
        await self.expect(r"\x1b\[\?2004h[^>]*>")

    def send(self, text: str) -> None:
        self.child.send(text)

    async def finish(self) -> int:
        await self.expect(pexpect.EOF)
        await asyncio.to_thread(self.child.wait)
        self.child.close()
        return self.child.exitstatus if self.child.exitstatus is not None else -(self.child.signalstatus or 0)

    def kill(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


def user_texts(home: Path) -> list[str]:
    db = SessionDB(home / "state.db")
    try:
        return [
            m["content"]
            for s in db.list_sessions_rich()
            for m in db.get_messages(s["id"], include_inactive=True)
            if m["role"] == "user"
        ]
    finally:
        db.close()


def model_env(tmp_path: Path, fake: FakeOpenAI) -> dict[str, str]:
    return clean_env(tmp_path, OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-terminal-test-1234")


async def test_a_20kb_bracketed_paste_is_one_whole_message(tmp_path: Path) -> None:
    lines = [f"line {i:04d}: " + "the quick brown fox jumps over the lazy dog " * 2 for i in range(230)]
    pasted = "\n".join(lines)
    assert len(pasted) > 20_000
    async with FakeOpenAI() as fake:
        fake.push("got your paste")
        term = Terminal(["chat"], model_env(tmp_path, fake))
        try:
            await term.prompt()
            term.send(PASTE_START + pasted + PASTE_END)
            term.send("\r")
            await term.expect("got your paste")
            await term.prompt()
            term.send(CTRL_D)
            assert await term.finish() == 0
        finally:
            term.kill()
    assert user_texts(tmp_path / "home") == [pasted]  # every character, newlines kept, one message
    assert len(fake.requests) == 1


async def test_arrows_edit_history_recalls_and_ctrl_r_searches_across_runs(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        env = model_env(tmp_path, fake)
        term = Terminal(["chat"], env)
        try:
            await term.prompt()
            term.send("hello wrld" + LEFT * 3 + "o\r")  # fix the typo in place
            await term.expect("echo: hello world")
            await term.prompt()
            term.send("second question\r")
            await term.expect("echo: second question")
            await term.prompt()
            term.send(UP + UP + "\r")  # two back: the first line again
            await term.expect("echo: hello world")
            await term.prompt()
            term.send(CTRL_D)
            assert await term.finish() == 0
        finally:
            term.kill()
        history = tmp_path / "home" / "terminal_history"
        assert history.is_file() and stat.S_IMODE(history.stat().st_mode) == 0o600
        term = Terminal(["chat"], env)  # a new run remembers, and Ctrl-R finds an older line
        try:
            await term.prompt()
            term.send(CTRL_R + "second")
            await term.expect("second")
            term.send("\r")
            await asyncio.sleep(0.3)
            term.send("\r")
            await term.expect("echo: second question")
            await term.prompt()
            term.send(CTRL_D)
            assert await term.finish() == 0
        finally:
            term.kill()
    assert user_texts(tmp_path / "home") == ["hello world", "second question", "hello world", "second question"]


async def test_ctrl_c_during_a_slow_reply_stops_it_and_ctrl_c_at_the_prompt_quits(tmp_path: Path) -> None:
    held = asyncio.Event()  # the first reply never comes on its own
    async with FakeOpenAI() as fake:
        fake.push(Reply(text="a very long answer " * 50, wait=held))
        term = Terminal(["chat"], model_env(tmp_path, fake))
        try:
            await term.prompt()
            term.send("a question that takes a while\r")
            await fake.wait_requests(1, timeout=TIMEOUT)
            await asyncio.sleep(0.2)
            term.send(CTRL_C)
            shown = await term.expect(r"Stopped\.")
            assert "a very long answer" not in shown
            await term.prompt()
            term.send("and now?\r")  # the gateway is still there, and answers
            await term.expect("echo: and now\\?")
            await term.prompt()
            term.send("half typed")
            await term.expect("half typed")
            term.send(CTRL_C)  # clears the line, like a shell
            await term.expect(r"\x1b\[K")  # (the line is erased in place)
            term.send(CTRL_C)  # an empty prompt: quit
            code = await term.finish()
            assert code == 0, term.seen
            assert "Traceback" not in term.seen
        finally:
            held.set()
            term.kill()
    assert user_texts(tmp_path / "home") == ["a question that takes a while", "and now?"]


async def test_log_lines_go_to_a_file_in_the_terminal_and_to_stderr_with_v(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        env = model_env(tmp_path, fake)
        fake.push(Reply(status=400, error="the model fell over"))  # (a 400 is not retried)
        term = Terminal(["chat"], env)
        try:
            await term.prompt()
            term.send("hello\r")
            await term.prompt()
            term.send(CTRL_D)
            assert await term.finish() == 0
        finally:
            term.kill()
        assert "Sorry" in term.seen  # the friendly apology is shown ...
        assert "WARNING" not in term.seen and "ERROR" not in term.seen  # ... and no log line beside it
        log_file = tmp_path / "home" / "logs" / "chinwag.log"
        logged = log_file.read_text(encoding="utf-8")
        assert "chinwag running" in logged and "WARNING" in logged
        assert "sk-terminal-test-1234" not in logged
        assert stat.S_IMODE(log_file.stat().st_mode) == 0o600
        fake.push(Reply(status=400, error="the model fell over"))
        term = Terminal(["chat", "-v"], env)
        try:
            await term.prompt()
            term.send("hello again\r")
            await term.expect("WARNING")
            await term.prompt()
            term.send(CTRL_D)
            assert await term.finish() == 0
        finally:
            term.kill()


async def test_the_picked_ops_port_is_shown_at_start_and_in_status(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("http: {port: 0}\n", encoding="utf-8")
    term = Terminal(["run"], clean_env(tmp_path))
    try:
        shown = await term.expect(r"http://127\.0\.0\.1:(\d+)")
        port = re.search(r"http://127\.0\.0\.1:(\d+)", shown).group(1)
        await term.prompt()
        term.send("/status\r")
        await term.expect(rf"Ops: http://127\.0\.0\.1:{port} \(/healthz, /readyz, /metrics, console at /console/\)")
        await term.prompt()
        term.send(CTRL_D)
        assert await term.finish() == 0
    finally:
        term.kill()
    assert term.seen.count(f"127.0.0.1:{port}") == 2  # once at start, once in /status


def test_piped_stdin_still_reads_every_line(tmp_path: Path) -> None:
    # (the pipe path is unchanged: covered in full by test_cli_run; this guards the mode choice)
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "chat"],
        input="one\ntwo\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=clean_env(tmp_path),
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("no model") >= 1 or done.stdout.count("\n") >= 2
    assert user_texts(tmp_path / "home") == ["one", "two"]
    assert not os.path.exists(tmp_path / "home" / "terminal_history")  # piped lines are not history


async def test_a_taken_ops_port_is_said_on_screen_and_in_status(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.yaml").write_text(f"http: {{port: {port}}}\n", encoding="utf-8")
        term = Terminal(["run"], clean_env(tmp_path))
        try:
            await term.expect(rf"cannot listen on 127\.0\.0\.1:{port}")
            await term.prompt()
            term.send("/status\r")
            await term.expect(r"Ops: not running \(cannot listen")
            await term.prompt()
            term.send(CTRL_D)
            assert await term.finish() == 0
        finally:
            term.kill()
