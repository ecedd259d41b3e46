"""The terminal's line editor: prompt_toolkit, rather than the tty's own line discipline.

A tty in canonical mode keeps at most 4,095 characters of a line (a 20 KB paste was stored cut,
silently), knows no cursor keys (Left/Up arrived as `^[[D`/`^[[A` in the message) and no history.
prompt_toolkit is a well-kept editor with all of it: bracketed paste of any length (newlines in a
paste stay in the message), Alt-Enter (Esc Enter) for a new line, Left/Right/Home/End, Up/Down
through the history saved under the home (owner-only, like every file there), and Ctrl-R search.

Keys with a meaning for the gateway are bound here and reported to the caller:
- Ctrl-C with text in the line clears the line (as a shell does); at an empty line it is
  `Interrupt` (the caller quits);
- Ctrl-D at an empty line is end of input (`None`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, TextIO

from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import create_input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import create_output


class Interrupt(Exception):
    """Ctrl-C at an empty line."""


def private_history(path: Path) -> History:
    """The history file, created owner-only: it holds what was typed (conversations)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)
    return FileHistory(str(path))


def _bindings() -> KeyBindings:
    keys = KeyBindings()

    @keys.add("escape", "enter")  # Alt-Enter: a new line in the message instead of sending it
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add("c-c")
    def _interrupt(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            event.app.exit(exception=Interrupt())

    return keys


class LineEditor:
    """Reads one message at a time from a terminal; `editing` is true while a prompt is shown."""

    def __init__(self, stdin: TextIO, stdout: TextIO, prompt: str, history: Path | None = None) -> None:
        self.prompt = prompt
        self.editing = False
        self.session: PromptSession[str] = PromptSession(
            history=private_history(history) if history is not None else InMemoryHistory(),
            key_bindings=_bindings(),
            input=create_input(stdin),
            output=create_output(stdout),
            multiline=False,
            mouse_support=False,
        )

    async def read(self) -> str | None:
        """The next message (may span lines); None at end of input. Raises `Interrupt`."""
        self.editing = True
        try:
            # The gateway's loop owns SIGINT (prompt_toolkit would remove its handler on return) and
            # its exception handler; in raw mode Ctrl-C is a key anyway.
            return await self.session.prompt_async(self.prompt, handle_sigint=False, set_exception_handler=False)
        except EOFError:
            return None
        finally:
            self.editing = False

    async def print_above(self, write: Callable[[], Any]) -> None:
        """Run `write` (which prints) without tearing the prompt being edited."""
        if self.editing:
            await run_in_terminal(write)
        else:
            write()
