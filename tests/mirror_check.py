"""Independent check that the file mirrors say what the DB says (used by mirror and crash tests).

Parses the files as JSON instead of comparing with the mirror code's own serialiser, so a bug in
that serialiser cannot hide itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from gateway.db import SessionDB

FIELDS = (
    "id",
    "session_id",
    "role",
    "content",
    "tool_name",
    "tool_call_id",
    "timestamp",
    "user_id",
    "active",
    "compacted",
)


def mirror_problems(home: Path, db: SessionDB) -> list[str]:
    problems: list[str] = []
    sessions_dir = home / "sessions"
    ids = db.read(lambda c: [r[0] for r in c.execute("SELECT id FROM sessions")])
    for sid in ids:
        rows = db.get_messages(sid, include_inactive=True)
        path = sessions_dir / f"{sid}.jsonl"
        if not rows:
            if path.exists() and path.read_bytes():
                problems.append(f"{sid}: transcript present for a session without messages")
            continue
        if not path.exists():
            problems.append(f"{sid}: transcript missing")
            continue
        raw = path.read_text(encoding="utf-8")
        if not raw.endswith("\n"):
            problems.append(f"{sid}: last line not terminated")
        try:
            lines = [json.loads(line) for line in raw.splitlines()]
        except ValueError as exc:
            problems.append(f"{sid}: unparseable line ({exc})")
            continue
        want = [{k: r[k] for k in FIELDS if r[k] is not None} for r in rows]
        have = [{k: m[k] for k in FIELDS if m.get(k) is not None} for m in lines]
        if want != have:
            problems.append(f"{sid}: {len(have)} lines in file vs {len(want)} rows in DB, or content differs")
    known = set(ids)
    for path in sessions_dir.glob("*.jsonl"):
        if path.stem not in known:
            problems.append(f"{path.name}: transcript of a session not in the DB")
    leftovers = [p.name for p in sessions_dir.iterdir() if p.name.startswith(".")]
    if leftovers:
        problems.append(f"temp files left: {leftovers}")
    index = home / "sessions.json"
    entries = {e["session_key"]: e for e in db.list_key_entries()}
    try:
        data = json.loads(index.read_text(encoding="utf-8")) if index.exists() else None
    except ValueError as exc:
        problems.append(f"sessions.json unparseable ({exc})")
        return problems
    if data is None:
        if entries:
            problems.append("sessions.json missing")
        return problems
    if set(data) != set(entries):
        problems.append(f"sessions.json keys {sorted(data)} != DB keys {sorted(entries)}")
    for key, entry in entries.items():
        got = data.get(key) or {}
        for field in ("session_id", "origin", "reason", "updated_at"):
            if got.get(field) != entry[field]:
                problems.append(f"sessions.json {key}.{field}: {got.get(field)!r} != {entry[field]!r}")
    return problems
