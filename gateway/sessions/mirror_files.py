"""What the file mirrors write, and how (used by gateway.sessions.mirrors): the transcript line of a
message, the sessions.json line of a key and the whole file, atomic replacement, and the report of
a repair. Plain functions over bytes and paths; no threads, no DB."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

__all__ = [
    "MESSAGE_KEYS",
    "ENTRY_KEYS",
    "message_line",
    "index_line",
    "index_file",
    "atomic_write",
    "file_stamp",
    "fsync_dir",
    "is_temp_name",
    "RepairReport",
]


MESSAGE_KEYS = (
    "id",
    "session_id",
    "role",
    "content",
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "timestamp",
    "token_count",
    "finish_reason",
    "reasoning",
    "platform_message_id",
    "user_id",
    "active",
    "compacted",
)
ENTRY_KEYS = ("session_id", "origin", "created_at", "updated_at", "reason")


def _dumps(obj: object, **kwargs: Any) -> bytes:
    try:
        return json.dumps(obj, ensure_ascii=False, **kwargs).encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates in stored text: escape rather than fail
        return json.dumps(obj, ensure_ascii=True, **kwargs).encode("ascii")


def message_line(row: Mapping) -> bytes:
    """The transcript line of a message row (from a commit event or from the DB)."""
    obj: dict = {}
    for key in MESSAGE_KEYS:
        value = row.get(key)
        if value is None:
            continue
        if key == "tool_calls" and isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        elif key in ("active", "compacted"):
            value = int(value)
        obj[key] = value
    return _dumps(obj, separators=(",", ":")) + b"\n"


def index_line(entry: Mapping) -> bytes:
    """One key's line of sessions.json: `"session_key": {session_id, origin, …}`.

    Entries are encoded one by one rather than the whole file with `indent=`: json uses its C
    encoder only without indent, and the pure-Python one held the GIL for ~100 ms per 10,000 keys,
    slowing every chat while it ran."""
    value = {k: entry.get(k) for k in ENTRY_KEYS}
    return _dumps(entry["session_key"]) + b": " + _dumps(value, sort_keys=True, separators=(", ", ": "))


def index_file(lines: Mapping[str, bytes]) -> bytes:
    """sessions.json from {session_key: index_line}: one key per line, sorted by key."""
    if not lines:
        return b"{}\n"
    return b"{\n  " + b",\n  ".join(lines[key] for key in sorted(lines)) + b"\n}\n"


def atomic_write(path: Path, data: bytes, sync_dir: bool = True) -> None:
    """Replace `path` with `data`: temp file in the same directory, fsync, rename, fsync dir.

    Readers see the old content or the new, never a mix. `sync_dir=False` leaves the directory
    fsync (which makes the rename itself durable) to the caller, who may batch many renames.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(3)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """What identifies one version of a file we wrote (an atomic replace makes a new inode)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def is_temp_name(name: str) -> bool:
    return name.startswith(".") and ".tmp-" in name


@dataclass
class RepairReport:
    sessions_checked: int = 0
    files_created: int = 0
    files_rewritten: int = 0
    files_removed: int = 0
    temp_removed: int = 0
    lines_added: int = 0  # lines missing from a transcript, or wrong (flags changed, garbled)
    lines_removed: int = 0  # garbled, stale or duplicate lines dropped
    index_rewritten: bool = False
    keys: int = 0

    @property
    def lines_fixed(self) -> int:
        return self.lines_added + self.lines_removed

    @property
    def clean(self) -> bool:
        return not (
            self.files_created
            or self.files_rewritten
            or self.files_removed
            or self.temp_removed
            or self.index_rewritten
        )

    def to_dict(self) -> dict:
        return asdict(self) | {"lines_fixed": self.lines_fixed, "clean": self.clean}

    def summary(self) -> str:
        head = f"checked {self.sessions_checked} session(s) and {self.keys} key(s): "
        if self.clean:
            return head + "mirrors match the database, nothing to fix"
        parts = []
        if self.files_created:
            parts.append(f"{self.files_created} missing transcript(s) created")
        if self.files_rewritten:
            parts.append(f"{self.files_rewritten} transcript(s) rewritten")
        if self.lines_added or self.lines_removed:
            parts.append(f"{self.lines_added} line(s) added or corrected, {self.lines_removed} garbled/stale dropped")
        if self.files_removed:
            parts.append(f"{self.files_removed} transcript(s) of deleted or empty sessions removed")
        if self.temp_removed:
            parts.append(f"{self.temp_removed} leftover temp file(s) removed")
        if self.index_rewritten:
            parts.append("sessions.json rewritten")
        return head + "; ".join(parts)
