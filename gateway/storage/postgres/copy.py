"""Copying every session from one storage face to another (`chinwag sessions migrate`): SQLite into
Postgres, or back.

It goes through the import/export format of DESIGN §10 (every row, hidden ones and their flags),
so the copy obeys the same checks as `sessions import` and needs no SQL of either backend; the
routing entries (chat -> current session) follow, so each chat continues its conversation on the
new backend. A batch of sessions is one transaction on the target. Each batch is verified as it
lands: every session copied holds, on the target, as many messages as on the source, and as many
in the conversation. A session skipped because the target has it already (resuming a copy) is
compared by its message count, so a session that grew on the source since the first copy is named,
never counted as verified. Message ids are the target's own (an import appends), as `sessions
import` does. Run it with the daemon stopped: what is written meanwhile is not copied.

The attachments' files follow (`copy_files`): into the database's copy, which replicas read since
they share no disk (gateway/storage/postgres/files.py), or from it into the home's media/. A file
a row keeps but neither side has is counted, not an error: the row says what was sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from gateway.errors import ImportRecordError
from gateway.storage.media import MediaStore

BATCH = 100  # sessions per target transaction


class CopyMismatch(RuntimeError):
    """The target does not hold what was copied (named per session)."""


@dataclass
class CopyReport:
    sessions: int = 0
    messages: int = 0
    skipped: list[str] = field(default_factory=list)  # already on the target (skip_existing)
    differing: list[tuple[str, int, int]] = field(default_factory=list)  # skipped: (id, source, target messages)
    keys: int = 0
    source_counts: tuple[int, int] = (0, 0)  # (sessions, messages) on the source
    target_counts: tuple[int, int] = (0, 0)  # ... on the target afterwards


def copy_sessions(
    source: Any, target: Any, *, skip_existing: bool = False, progress: Callable[[int, int], None] | None = None
) -> CopyReport:
    """Copy every session, its messages and the routing entries from `source` to `target` (two
    SessionDB faces). ImportRecordError (a session already there, without skip_existing) or
    TitleTaken stop it before the batch holding it is written; earlier batches stay copied and a
    second run with skip_existing completes the copy."""
    ids = source.session_ids()
    report = CopyReport(source_counts=(source.count_sessions(), source.count_messages()))
    for start in range(0, len(ids), BATCH):
        batch = ids[start : start + BATCH]
        records = [source.export_session(sid) for sid in batch]
        fresh = [r for r in records if target.get_session(r["session"]["id"]) is None]
        skipped = [r for r in records if r not in fresh]
        if not skip_existing and skipped:
            raise ImportRecordError(
                1, f"session {skipped[0]['session']['id']} already exists on the target (use --skip-existing)"
            )
        for record in skipped:
            sid = record["session"]["id"]
            report.skipped.append(sid)
            there = len(target.get_messages(sid, include_inactive=True))
            if there != len(record["messages"]):
                report.differing.append((sid, len(record["messages"]), there))
        target.import_records(fresh, skip_existing=skip_existing)
        for record in fresh:
            _verify(record, target)
            report.sessions += 1
            report.messages += len(record["messages"])
        if progress:
            progress(min(start + BATCH, len(ids)), len(ids))
    copied = set(ids)
    for entry in source.list_key_entries():
        if entry["session_id"] in copied and target.get_key_entry(entry["session_key"]) is None:
            target.set_key_entry(entry["session_key"], entry["session_id"], entry["origin"], entry["reason"])
            report.keys += 1
    report.target_counts = (target.count_sessions(), target.count_messages())
    return report


def _verify(record: dict[str, Any], target: Any) -> None:
    sid = record["session"]["id"]
    stored = target.get_messages(sid, include_inactive=True)
    if len(stored) != len(record["messages"]):
        raise CopyMismatch(
            f"session {sid}: {len(record['messages'])} messages on the source, {len(stored)} on the target"
        )
    in_conversation = sum(1 for m in record["messages"] if m.get("active", 1))
    if (target.get_session(sid) or {}).get("message_count") != in_conversation:
        raise CopyMismatch(f"session {sid}: the conversation's message count differs on the target")


@dataclass
class FilesReport:
    copied: int = 0
    bytes: int = 0
    already: int = 0  # on the target before
    missing: list[str] = field(default_factory=list)  # kept by a row, on neither side


def copy_files(hashes: Iterable[str], store: MediaStore, *, to_database: bool) -> FilesReport:
    """Copy the files `hashes` name between the home's media/ and the database's copy (`store` is
    the home's, with the database as its shared copy): into the database when `to_database`, else
    into the home. One file in memory at a time."""
    shared = store.shared
    if shared is None:
        raise ValueError("copy_files needs a store with the database's copy")
    report = FilesReport()
    for sha in sorted(set(hashes)):
        on_target = shared.has(sha) if to_database else store.path_for(sha).is_file()
        if on_target:
            report.already += 1
            continue
        try:
            if to_database:
                data = store.path_for(sha).read_bytes()
                shared.put(sha, data)
            else:
                data = store.read(sha)  # fetched into media/
        except FileNotFoundError:
            report.missing.append(sha)
            continue
        report.copied += 1
        report.bytes += len(data)
    return report
