"""The local terminal: each line on stdin is a message, each reply is printed to stdout.

It is a direct chat (`chat_type="dm"`) of the OS user with the agent, so sessions, commands and
recall work exactly as on any other platform. Works with piped stdin (tests, scripts): lines are
read by a daemon thread (a regular file or a TTY cannot be watched by the event loop portably,
and a blocked read must never hold up shutdown), and `input_closed` is set once every line has
been handed to the gateway after end of input.
"""

from __future__ import annotations

import asyncio
import getpass
import itertools
import logging
import re
import sys
import threading
import time
from typing import IO, Any

from gateway.source import Platform, SessionSource
from platforms.base import InboundMessage, MessageHandler, PlatformAdapter, cancel_and_wait

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_\-.@+=]")


def local_user_name(configured: str | None = None) -> str:
    """The configured name, else the OS user; made safe for a session key."""
    name = (configured or "").strip()
    if not name:
        try:
            name = getpass.getuser()
        except Exception:  # no passwd entry (some containers)
            name = "local"
    return _UNSAFE.sub("_", name)[:64] or "local"


class LocalAdapter(PlatformAdapter):
    platform = Platform.LOCAL
    max_message_length = 1_000_000  # a terminal has no limit worth splitting at
    answers_in_order = True  # one person typing, or a piped script: every line answered, in order
    operator_is_admin = True  # the terminal is the machine's owner

    def __init__(
        self,
        config: dict[str, Any] | None = None,
        *,
        input: IO[str] | None = None,
        output: IO[str] | None = None,
    ) -> None:
        super().__init__()
        config = config or {}
        self.user = local_user_name(config.get("user"))
        self.input = input if input is not None else sys.stdin
        self.output = output if output is not None else sys.stdout
        self.interactive = _isatty(self.input) and _isatty(self.output)
        self.prompt = str(config.get("prompt") or "> ") if self.interactive else ""
        self.source = SessionSource(
            platform=Platform.LOCAL,
            chat_id=self.user,
            chat_type="dm",
            user_id=self.user,
            user_name=self.user,
            chat_name="terminal",
        )
        self.input_closed = asyncio.Event()
        self._queue: asyncio.Queue[str | None] | None = None
        self._pump: asyncio.Task | None = None
        self._ids = itertools.count(1)
        self._session_tag = f"{time.time_ns():x}"  # message ids stay unique across runs (dedup is persisted)
        self._write_lock = threading.Lock()

    async def start(self, on_message: MessageHandler) -> None:
        loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        queue = self._queue

        def reader() -> None:
            try:
                for line in iter(self.input.readline, ""):
                    loop.call_soon_threadsafe(queue.put_nowait, line)
            except (OSError, ValueError) as exc:  # closed stream
                log.debug("local input ended: %s", exc)
            except RuntimeError:  # the event loop closed under us (shutdown while input flows)
                return
            finally:
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, None)
                except RuntimeError:  # loop already closed at shutdown
                    pass

        threading.Thread(target=reader, name="chinwag-stdin", daemon=True).start()
        self._pump = asyncio.create_task(self._deliver(on_message))
        self.set_ready(True, "terminal")
        self.mark_alive()
        self._show_prompt()

    async def _deliver(self, on_message: MessageHandler) -> None:
        assert self._queue is not None
        while True:
            line = await self._queue.get()
            if line is None:
                break
            text = line.rstrip("\r\n")
            if not text.strip():
                self._show_prompt()
                continue
            self.mark_alive()
            message_id = f"{self._session_tag}-{next(self._ids)}"
            try:
                await on_message(InboundMessage(source=self.source, text=text, message_id=message_id))
            except Exception:  # the gateway reports its own errors; the terminal must keep reading
                log.exception("local: handling a line failed")
        self.input_closed.set()

    async def stop(self) -> None:
        await cancel_and_wait(self._pump)
        self._pump = None
        self.set_ready(False, "stopped")

    async def send(self, source: SessionSource, text: str, reply_to: str | None = None) -> list[str]:
        with self._write_lock:
            self.output.write(text.rstrip("\n") + "\n")
            if self.interactive:
                self.output.write("\n")
            self.output.flush()
        self._show_prompt()
        return [f"out-{self._session_tag}-{next(self._ids)}"]

    def _show_prompt(self) -> None:
        if self.prompt and not self.input_closed.is_set():
            with self._write_lock:
                self.output.write(self.prompt)
                self.output.flush()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
