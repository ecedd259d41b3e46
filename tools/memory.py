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
never leaves half a file. On Postgres (`storage.backend: postgres`) the replicas share no disk, so the
two files are rows of the database's `notes` table instead (NoteTable; `chinwag memory export` writes
them out as files); every edit is a read-change-write under the row's lock there, as under a
per-file lock here, so concurrent edits never lose one another. The system prompt uses `read_snapshot`, taken once at session start:
edits made during a session show up in later sessions.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from agent.tools import Tool, ToolContext

if TYPE_CHECKING:
    from gateway.db import StorageFace

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


class NoteFiles:
    """The two files in the chinwag home (SQLite mode). Edits of one file take a per-file lock and
    write atomically."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.home = Path(home)

    def read(self, name: str) -> str:
        return read_text(self.home / name)

    def edit(self, name: str, change: Callable[[str], str | None]) -> None:
        path = self.home / name
        with _lock_for(path):
            text = read_text(path)
            updated = change(text)
            if updated is not None and updated != text:
                atomic_write(path, updated)


class NoteTable:
    """The two files as rows of the database's `notes` table (Postgres mode: the replicas share no
    disk). Reached through the StorageFace face; an edit holds the row locked from its read to its
    commit, so edits from two replicas both land (gateway/storage/postgres/notes.py)."""

    def __init__(self, db: Any) -> None:
        self.db = db

    def read(self, name: str) -> str:
        return str(self.db.read_notes(name))

    def edit(self, name: str, change: Callable[[str], str | None]) -> None:
        self.db.edit_notes(name, change)


NotePlace = NoteFiles | NoteTable


def note_place(home: str | os.PathLike[str] | None, db: StorageFace | None = None) -> NotePlace | None:
    """Where the notes live: the database's table when it keeps them (`notes_in_database`), else the
    files in `home` (None: neither is known)."""
    if db is not None and db.notes_in_database:
        return NoteTable(db)
    return NoteFiles(home) if home is not None else None


def _place(where: str | os.PathLike[str] | NotePlace) -> NotePlace:
    return where if isinstance(where, (NoteFiles, NoteTable)) else NoteFiles(where)


def read_snapshot(where: str | os.PathLike[str] | NotePlace) -> tuple[str, str]:
    """(MEMORY.md text, USER.md text), stripped; "" when a file is missing. Frozen at session start.
    `where`: the home directory (the files) or a NotePlace."""
    place = _place(where)
    return (
        join_entries(split_entries(place.read(FILES["memory"]))).strip(),
        join_entries(split_entries(place.read(FILES["user"]))).strip(),
    )


def copy_notes(source: NotePlace, target: NotePlace, *, replace: bool = False) -> dict[str, str]:
    """Copy MEMORY.md and USER.md from one place to the other (`chinwag memory export|import`,
    `sessions migrate`). Per file name, what happened: "copied", "same" (already equal), "empty"
    (nothing at the source), or "differs" (the target holds other text and `replace` is False: it
    is kept, so a copy never loses notes). Entries are cleaned as the tool cleans them; an entry the
    tool would refuse raises MemoryRefused naming the file, before anything is written."""
    texts: dict[str, str] = {}
    for name in FILES.values():
        entries = split_entries(source.read(name))
        try:
            texts[name] = join_entries([clean_entry(entry) for entry in entries])
        except MemoryRefused as exc:
            raise MemoryRefused(f"{name}: {exc}") from None
    outcome: dict[str, str] = {}
    for name, text in texts.items():
        if not text:
            outcome[name] = "empty"
            continue
        result = "copied"

        def change(current: str) -> str | None:
            nonlocal result
            if join_entries(split_entries(current)) == text:
                result = "same"
                return None
            if current.strip() and not replace:
                result = "differs"
                return None
            return text

        target.edit(name, change)
        outcome[name] = result
    return outcome


class MemoryStore:
    """Plain, synchronous edits of the two files (the tool runs them in a worker thread), wherever
    they live: `where` is the home directory (the files) or a NotePlace."""

    def __init__(self, where: str | os.PathLike[str] | NotePlace, limits: dict[str, int] | None = None) -> None:
        self.place = _place(where)
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}

    def name(self, target: str) -> str:
        if target not in FILES:
            raise MemoryRefused(f"target must be 'memory' or 'user', got {target!r}")
        return FILES[target]

    def entries(self, target: str) -> list[str]:
        return split_entries(self.place.read(self.name(target)))

    def usage(self, target: str) -> str:
        used = len(join_entries(self.entries(target)))
        return f"{used}/{self.limits[target]} chars used"

    def add(self, target: str, content: Any) -> str:
        entry = clean_entry(content)
        added = self._edit(target, lambda entries: None if entry in entries else entries + [entry])
        if not added:
            return f"already saved in {FILES[target]} ({self.usage(target)})"
        return f"added to {FILES[target]} ({self.usage(target)})"

    def replace(self, target: str, old: Any, content: Any) -> str:
        entry = clean_entry(content)

        def change(entries: list[str]) -> list[str]:
            index = self._find(target, entries, old)
            return entries[:index] + [entry] + entries[index + 1 :]

        self._edit(target, change)
        return f"replaced an entry in {FILES[target]} ({self.usage(target)})"

    def remove(self, target: str, old: Any) -> str:
        def change(entries: list[str]) -> list[str]:
            index = self._find(target, entries, old)
            return entries[:index] + entries[index + 1 :]

        self._edit(target, change)
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

    def _edit(self, target: str, change: Callable[[list[str]], list[str] | None]) -> bool:
        """Apply change(entries) to the file as it is now (under the place's lock): None leaves it
        alone (returns False). An edit that would pass the budget is refused."""
        name = self.name(target)
        limit, changed = self.limits[target], False

        def apply(text: str) -> str | None:
            nonlocal changed
            before = split_entries(text)
            after = change(before)
            if after is None:
                return None
            size = len(join_entries(after))
            # Shrinking edits always pass, so an over-budget file (edited by hand) can be cleaned up.
            if size > limit and size > len(join_entries(before)):
                used = len(join_entries(before))
                raise MemoryRefused(
                    f"memory full: {used}/{limit} chars used in {FILES[target]} (this edit needs {size}); "
                    "remove or shorten entries first"
                )
            changed = True
            return join_entries(after)

        self.place.edit(name, apply)
        return changed


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
    """The tool; `limits` overrides the per-file budgets ({"memory": chars, "user": chars}; the gateway
    passes `memory.*` of its config). The notes live in `ctx.db`'s table when it keeps them
    (Postgres), else in the files of `ctx.home`."""

    async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
        place = note_place(ctx.home, ctx.db)
        if place is None:
            return "error: memory is not available (no home directory)"
        store = MemoryStore(place, limits)
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
