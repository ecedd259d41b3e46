"""The `memory` tool: the agent's durable notes (MEMORY.md) and what it knows about the person (USER.md).

File format (both files, in the chinwag home directory): plain text entries separated by a line
holding only "§". Example:

    Prefers answers in Chinese.
    §
    Works on the billing service; deploys with `make ship`.

Each file has a character budget (default 2,200 for MEMORY.md, 1,375 for USER.md; config
`memory.memory_chars` / `memory.user_chars`), counted on the file text, so the system prompt stays
small. When an edit would pass the budget the tool refuses and says how full the file is; the model
must remove or shorten entries first. Entries are cleaned (control and invisible direction
characters stripped) and capped in length. Writes are atomic (temp file, fsync, rename) so a crash
never leaves half a file. The system prompt uses `read_snapshot`, taken once at session start:
edits made during a session show up in later sessions.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

from agent.tools import Tool, ToolContext

SEPARATOR = "§"
FILES = {"memory": "MEMORY.md", "user": "USER.md"}
DEFAULT_LIMITS = {"memory": 2200, "user": 1375}
MAX_ENTRY_CHARS = 800

# C0/C1 controls except tab and newline; zero-width and bidirectional overrides (used to hide text).
_INVISIBLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_SEPARATOR_LINE = re.compile(r"^\s*§\s*$", re.MULTILINE)

_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


class MemoryRefused(ValueError):
    """A refused edit; the message is meant for the model."""


def _lock_for(path: Path) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(path.resolve(), threading.Lock())


def split_entries(text: str) -> list[str]:
    text = text.replace("\r\n", "\n")
    return [part.strip() for part in _SEPARATOR_LINE.split(text) if part.strip()]


def join_entries(entries: list[str]) -> str:
    return f"\n{SEPARATOR}\n".join(entries) + ("\n" if entries else "")


def clean_entry(text: Any) -> str:
    if not isinstance(text, str):
        raise MemoryRefused("content must be a string")
    text = _INVISIBLE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    # A lone "§" line inside an entry would split it in two on the next read.
    text = _SEPARATOR_LINE.sub("(§)", text).strip()
    if not text:
        raise MemoryRefused("content is empty")
    if len(text) > MAX_ENTRY_CHARS:
        raise MemoryRefused(f"entry too long ({len(text)} chars, max {MAX_ENTRY_CHARS}); make it shorter")
    return text


def read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def atomic_write(path: Path, text: str) -> None:
    """Write via a temp file in the same directory, fsync it, rename over, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_snapshot(home: str | os.PathLike[str]) -> tuple[str, str]:
    """(MEMORY.md text, USER.md text), stripped; "" when a file is missing. Frozen at session start."""
    home = Path(home)
    return (
        join_entries(split_entries(read_text(home / FILES["memory"]))).strip(),
        join_entries(split_entries(read_text(home / FILES["user"]))).strip(),
    )


class MemoryStore:
    """Plain, synchronous edits of the two files (the tool runs them in a worker thread)."""

    def __init__(self, home: str | os.PathLike[str], limits: dict[str, int] | None = None) -> None:
        self.home = Path(home)
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}

    def path(self, target: str) -> Path:
        if target not in FILES:
            raise MemoryRefused(f"target must be 'memory' or 'user', got {target!r}")
        return self.home / FILES[target]

    def entries(self, target: str) -> list[str]:
        return split_entries(read_text(self.path(target)))

    def usage(self, target: str) -> str:
        used = len(join_entries(self.entries(target)))
        return f"{used}/{self.limits[target]} chars used"

    def add(self, target: str, content: Any) -> str:
        entry = clean_entry(content)
        with _lock_for(self.path(target)):
            entries = self.entries(target)
            if entry in entries:
                return f"already saved in {FILES[target]} ({self.usage(target)})"
            self._save(target, entries, entries + [entry])
        return f"added to {FILES[target]} ({self.usage(target)})"

    def replace(self, target: str, old: Any, content: Any) -> str:
        entry = clean_entry(content)
        with _lock_for(self.path(target)):
            entries = self.entries(target)
            index = self._find(target, entries, old)
            updated = entries[:index] + [entry] + entries[index + 1 :]
            self._save(target, entries, updated)
        return f"replaced an entry in {FILES[target]} ({self.usage(target)})"

    def remove(self, target: str, old: Any) -> str:
        with _lock_for(self.path(target)):
            entries = self.entries(target)
            index = self._find(target, entries, old)
            self._save(target, entries, entries[:index] + entries[index + 1 :])
        return f"removed an entry from {FILES[target]} ({self.usage(target)})"

    def read(self, target: str) -> str:
        entries = self.entries(target)
        if not entries:
            return f"{FILES[target]} is empty (0/{self.limits[target]} chars used)"
        return f"{FILES[target]} ({self.usage(target)}):\n" + join_entries(entries)

    def _find(self, target: str, entries: list[str], old: Any) -> int:
        if not isinstance(old, str) or not old.strip():
            raise MemoryRefused("'old' must be a non-empty piece of the entry to change")
        needle = old.strip()
        hits = [i for i, e in enumerate(entries) if needle in e]
        if not hits:
            raise MemoryRefused(f"no entry in {FILES[target]} contains {needle[:80]!r}")
        if len({entries[i] for i in hits}) > 1:
            shown = "; ".join(repr(entries[i][:60]) for i in hits[:5])
            raise MemoryRefused(
                f"{len(hits)} entries contain {needle[:80]!r} ({shown}); quote more of the one you mean"
            )
        return hits[0]

    def _save(self, target: str, before: list[str], after: list[str]) -> None:
        limit = self.limits[target]
        size = len(join_entries(after))
        # Shrinking edits always pass, so an over-budget file (edited by hand) can be cleaned up.
        if size > limit and size > len(join_entries(before)):
            used = len(join_entries(before))
            raise MemoryRefused(
                f"memory full: {used}/{limit} chars used in {FILES[target]} (this edit needs {size}); "
                "remove or shorten entries first"
            )
        atomic_write(self.path(target), join_entries(after))


PARAMETERS = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["add", "replace", "remove", "read"]},
        "target": {
            "type": "string",
            "enum": ["memory", "user"],
            "description": "'memory' = your own notes (facts, conventions, lessons); 'user' = about the person",
        },
        "content": {"type": "string", "description": "add/replace: the full text of the entry"},
        "old": {"type": "string", "description": "replace/remove: a unique piece of the existing entry"},
    },
    "required": ["action", "target"],
}

DESCRIPTION = (
    "Save durable notes for future conversations. 'user' holds facts about the person (name, "
    "preferences, role); 'memory' holds your own notes (environment facts, conventions, lessons). "
    "Keep entries short and self-contained; do not save what only matters for this conversation. "
    "Edits take effect in the next session (the notes in your instructions are a snapshot). "
    "add: content. replace: old (a unique piece of an entry) and content (its new full text). "
    "remove: old. read: the current entries."
)


def limits_from_config(config: dict[str, Any] | None) -> dict[str, int]:
    """Budgets from config `memory.memory_chars` / `memory.user_chars` (defaults 2,200 / 1,375)."""
    section = (config or {}).get("memory") or {}
    limits = dict(DEFAULT_LIMITS)
    for target, key in (("memory", "memory_chars"), ("user", "user_chars")):
        value = section.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 100:
            raise ValueError(f"memory.{key} must be a whole number of characters >= 100, got {value!r}")
        limits[target] = value
    return limits


def make_memory_tool(limits: dict[str, int] | None = None) -> Tool:
    """The tool; `limits` overrides the per-file budgets ({"memory": chars, "user": chars}).

    The home directory comes from `ctx.home`; `ctx.extra["memory_limits"]` overrides `limits`.
    """

    async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
        if ctx.home is None:
            return "error: memory is not available (no home directory)"
        store = MemoryStore(ctx.home, {**(limits or {}), **(ctx.extra.get("memory_limits") or {})})
        action, target = args.get("action"), args.get("target", "memory")
        try:
            if action == "add":
                return await asyncio.to_thread(store.add, target, args.get("content"))
            if action == "replace":
                return await asyncio.to_thread(store.replace, target, args.get("old"), args.get("content"))
            if action == "remove":
                return await asyncio.to_thread(store.remove, target, args.get("old"))
            if action == "read":
                return await asyncio.to_thread(store.read, target)
            return f"error: action must be add, replace, remove or read, got {action!r}"
        except MemoryRefused as exc:
            return f"error: {exc}"

    return Tool(name="memory", description=DESCRIPTION, parameters=PARAMETERS, handler=handler)
