"""The local terminal: each line on stdin is a message, each reply is printed to stdout.

It is a direct chat (`chat_type="dm"`) of the OS user with the agent, so sessions, commands and
recall work exactly as on any other platform. Works with piped stdin (tests, scripts): lines are
read by a daemon thread (a regular file or a TTY cannot be watched by the event loop portably,
and a blocked read must never hold up shutdown), and `input_closed` is set once every line has
been handed to the gateway after end of input.

A streamed reply is printed as it is written, piece by piece; a tool's status line shows on its own
line (on a terminal it is erased again when the text resumes). Trailing whitespace waits until text
follows it, so the final text and a stop note always continue what is on screen (the answer is
printed once, also through a pipe).

On a terminal (stdin and stdout both ttys) lines come from a line editor instead
(platforms.local_editor): pastes of any length, multi-line messages, history, Ctrl-R. The prompt
comes back only once the gateway has answered everything typed (`chat_idle`), so a reply never
tears a line being edited. Ctrl-C while a reply is on its way reaches the gateway as a signal
(the editor is not reading then) and is handed to `interrupt`, which stops the reply as `/stop`
does; at an empty prompt Ctrl-C raises SIGINT as it would without the editor, so the process
shuts down the usual graceful way, and Ctrl-D ends the input.

`/attach PATH [caption]` sends a file (platforms.local_attach): the adapter reads that line itself,
in both modes, and either hands the gateway a message with the file attached or answers a bad
path itself without sending anything.
"""

from __future__ import annotations

import asyncio
import getpass
import itertools
import logging
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, AsyncIterator, Callable, Mapping, TextIO, cast

from gateway.language import AUTO, N_, gettext, resolve
from gateway.source import Platform, SessionSource
from platforms.base import Attachment, InboundMessage, MessageHandler, PlatformAdapter, ReplyStream
from platforms.helpers import cancel_and_wait
from platforms.local_attach import is_attach_line, parse_attach_line, reopen_path

log = logging.getLogger(__name__)

# The gateway raises when a line could not be stored (the handler returns once it is durable).
NOT_SAVED_TEXT = N_("Not saved — the database is unavailable; send it again.")
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-.@+=]")


def locale_hint(environ: Mapping[str, str]) -> str | None:
    """The terminal's language hint: the locale its messages follow (POSIX order: LC_ALL, then
    LC_MESSAGES, then LANG), e.g. `zh_CN.UTF-8`; `C` and `POSIX` name no language."""
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = environ.get(name)
        if value:
            return value
    return None


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
        history: Path | str | None = None,
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
            language=locale_hint(os.environ),
        )
        # said when the database cannot take a line, so it cannot say the person's /language either:
        # the terminal's locale, else platforms.local.language
        self._not_saved_text = gettext(
            resolve(None, self.source.language, config.get("language"), AUTO), NOT_SAVED_TEXT
        )
        self.input_closed = asyncio.Event()
        self._queue: asyncio.Queue[str | None] | None = None
        self._pump: asyncio.Task | None = None
        self._ids = itertools.count(1)
        self._session_tag = f"{time.time_ns():x}"  # message ids stay unique across runs (dedup is persisted)
        self._write_lock = threading.Lock()
        self.history_path = Path(history) if history is not None else None  # the editor's, on a terminal
        self._editor: Any = None  # platforms.local_editor.LineEditor, on a terminal
        self._handler: MessageHandler | None = None
        self._answered = asyncio.Event()  # the gateway answered everything typed so far
        self._waiting = False  # a typed message is being answered
        self._stop_sent = False  # Ctrl-C already asked to stop this answer
        self._tasks: set[asyncio.Future[None]] = set()

    async def start(self, on_message: MessageHandler) -> None:
        self._handler = on_message
        if self.interactive:
            from platforms.local_editor import LineEditor  # only a terminal needs the editor

            # a terminal's streams are text files, the TextIO the editor wants
            stdin, stdout = cast(TextIO, self.input), cast(TextIO, self.output)
            self._editor = LineEditor(stdin, stdout, self.prompt, self.history_path)
            self._pump = asyncio.create_task(self._converse(on_message))
            self.set_ready(True, "terminal")
            self.mark_alive()
            return
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
            message = await self._typed(text)
            if message is None:
                continue
            try:
                await on_message(message)
            except Exception:  # not stored (the database is down or full); the terminal must keep reading
                log.exception("local: handling a line failed")
                self._write(self._not_saved_text + "\n")
        self.input_closed.set()

    async def _converse(self, on_message: MessageHandler) -> None:
        """The terminal: one message from the editor, then wait for its answer, then the next."""
        from platforms.local_editor import Interrupt

        editor = self._editor
        while True:
            try:
                text = await editor.read()
            except Interrupt:  # Ctrl-C at an empty prompt: what Ctrl-C means without the editor
                self._write("\n")
                signal.raise_signal(signal.SIGINT)
                return
            if text is None:  # Ctrl-D at an empty prompt
                break
            if not text.strip():
                continue
            self.mark_alive()
            message = await self._typed(text)
            if message is None:
                continue
            self._answered.clear()
            self._waiting, self._stop_sent = True, False
            try:
                await on_message(message)
            except Exception:  # not stored (the database is down or full); the terminal must keep reading
                log.exception("local: handling a line failed")
                self._write(self._not_saved_text + "\n")
                self._answered.set()
            try:
                await self._answered.wait()
            finally:
                self._waiting = False
        self.input_closed.set()

    def _message(self, text: str, attachments: list[Attachment] | None = None) -> InboundMessage:
        message_id = f"{self._session_tag}-{next(self._ids)}"
        return InboundMessage(source=self.source, text=text, message_id=message_id, attachments=attachments or [])

    async def _typed(self, text: str) -> InboundMessage | None:
        """The message for a typed line; None when the terminal answered it itself (a bad /attach)."""
        if not is_attach_line(text):
            return self._message(text)
        line = await asyncio.to_thread(parse_attach_line, text)
        if line.refusal is not None or line.attachment is None:
            await self.send(self.source, line.refusal or "Nothing was sent.")
            return None
        return self._message(line.caption, [line.attachment])

    def reopen(self, msg: InboundMessage, attachment: Attachment) -> Callable[[], AsyncIterator[bytes]] | None:
        return reopen_path(attachment)

    def chat_idle(self, source: SessionSource) -> None:
        self._answered.set()

    def interrupt(self) -> bool:
        """Ctrl-C while a typed message is being answered: stop that answer, as `/stop` does (its
        reply says so). A second Ctrl-C before the stop lands is left to the gateway (shut down)."""
        if not self._waiting or self._stop_sent or self._handler is None:
            return False
        self._stop_sent = True
        self._write("\n")
        task: asyncio.Future[None] = asyncio.ensure_future(self._handler(self._message("/stop")))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def stop(self) -> None:
        editing = self._editor is not None and self._editor.editing
        await cancel_and_wait(self._pump)
        self._pump = None
        if editing:  # the shell's prompt starts on a line of its own
            self._write("\n")
        self.set_ready(False, "stopped")

    async def send(
        self, source: SessionSource, text: str, reply_to: str | None = None, key: str | None = None
    ) -> list[str]:
        def write() -> None:
            with self._write_lock:
                self.output.write(text.rstrip("\n") + "\n")
                if self.interactive:
                    self.output.write("\n")
                self.output.flush()

        if self._editor is not None:
            await self._editor.print_above(write)
        else:
            write()
        self._show_prompt()
        return [f"out-{self._session_tag}-{next(self._ids)}"]

    def begin_reply(self, source: SessionSource, reply_to: str | None = None) -> ReplyStream:
        return TerminalReply(self)

    def _write(self, text: str) -> None:
        with self._write_lock:
            self.output.write(text)
            self.output.flush()

    def _show_prompt(self) -> None:
        if self._editor is not None:
            return  # the editor draws its own prompt
        if self.prompt and not self.input_closed.is_set():
            with self._write_lock:
                self.output.write(self.prompt)
                self.output.flush()


class TerminalReply(ReplyStream):
    """Prints the new part of the text at each update; the final text completes the line."""

    def __init__(self, adapter: LocalAdapter) -> None:
        super().__init__()
        self.adapter = adapter
        self.printed = ""  # the reply text printed so far (status lines not included)
        self.status_open = False  # a status line is on screen (a terminal erases it)
        self.done = False

    def _clear_status(self) -> None:
        if self.status_open and self.adapter.interactive:
            self.adapter._write("\r\x1b[2K")
        self.status_open = False

    def _show(self, text: str) -> None:
        # Trailing whitespace is held back until text follows it: the final text (or a stop note)
        # may drop or replace it, and what is on screen must stay a prefix of what comes next, or
        # the whole answer would be printed again.
        text = text.rstrip()
        self._clear_status()
        if text.startswith(self.printed):
            self.adapter._write(text[len(self.printed) :])
            self.printed = text
        elif not self.printed.startswith(text):  # a new model step rewrote the text: start it on a fresh line
            self.adapter._write("\n" + text)
            self.printed = text
        if text:
            self.first_shown.set()

    async def update(self, text: str) -> None:
        if not self.done and self.may_show():
            self._show(text)

    async def status(self, line: str | None) -> None:
        if self.done or not line:
            self._clear_status()
            return
        self._clear_status()
        lead = "\n" if self.printed and not self.printed.endswith("\n") else ""
        if self.adapter.interactive:
            self.adapter._write(f"{lead}\x1b[2m{line}\x1b[0m")
            self.printed += lead
        else:
            self.adapter._write(f"{lead}[{line}]\n")
            self.printed += lead + "\n" if lead else ""
        self.status_open = True
        self.first_shown.set()

    async def finish(self, text: str) -> list[str]:
        if self.done:
            return []
        self.done = True
        if text:
            self._show(text)
        else:
            self._clear_status()
        self.adapter._write("\n\n" if self.adapter.interactive else "\n")
        self.adapter._show_prompt()
        return [f"out-{self.adapter._session_tag}-{next(self.adapter._ids)}"]

    async def fail(self, note: str | None = None) -> list[str]:
        if self.done:
            return []
        if not self.printed and not note:
            self.done = True
            self._clear_status()
            return []
        return await self.finish(self.printed.rstrip() + (f"\n\n{note}" if note else ""))


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
