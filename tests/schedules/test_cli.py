"""`chinwag schedules` run as the operator runs it (a subprocess on the home's database)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

from gateway.db import SessionDB
from gateway.schedules.model import ChatRef, Schedule, new_id
from gateway.schedules.store import FaceScheduleStore
from gateway.schedules.times import Timing
from gateway.source import SessionSource

NOW = datetime.now(timezone.utc)


def chinwag(home, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--home", str(home), "schedules", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_list_json_cancel_and_run_now(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    db = SessionDB(home / "state.db")
    store = FaceScheduleStore(db)
    chat = ChatRef(SessionSource("telegram", "5", "dm", user_id="5"), "agent:main:telegram:dm:5")
    later = NOW + timedelta(hours=1)
    once = Schedule.new(new_id(), "telegram:5", chat, Timing("once", "UTC", NOW, at=later), "call Mia", later)
    every = Schedule.new(
        new_id(), "telegram:9", chat, Timing("every", "Asia/Shanghai", NOW, every_minutes=60), "water", later
    )
    assert store.create(once, 20) and store.create(every, 20)
    store.set_enabled(every.id, False, later)

    listed = chinwag(home, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert set(rows) == {once.id, every.id}  # everyone's
    assert rows[once.id]["prompt"] == "call Mia" and rows[once.id]["kind"] == "once"
    assert datetime.fromisoformat(rows[once.id]["next_run_at"]) == later
    assert rows[every.id]["enabled"] is False and rows[every.id]["chat"]["session_key"] == chat.session_key

    assert chinwag(home, "run-now", every.id).returncode == 0
    resumed = store.get(every.id)
    assert resumed is not None and resumed.enabled and resumed.next_run_at is not None
    assert resumed.next_run_at <= datetime.now(timezone.utc)

    assert chinwag(home, "cancel", once.id.upper()).returncode == 0 and store.get(once.id) is None
    missing = chinwag(home, "cancel", once.id)
    assert missing.returncode == 2 and "no scheduled job" in missing.stderr
    db.close()
