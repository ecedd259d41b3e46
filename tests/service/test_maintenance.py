"""gateway.service.maintenance: the daemon's upkeep: old redelivery ids forgotten, retention applied (never
to a conversation a chat is in), on a schedule that stops cleanly."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.config.load import parse_config
from gateway.config.schema import ConfigError
from gateway.db import SessionDB
from gateway.service.maintenance import Maintenance, run_maintenance
from gateway.storage.retention import EVENT_TTL_SECONDS
from tests.fakes.loopback import wait_until

DAY = 86400.0


def idle_session(db: SessionDB, sid: str, days_idle: float) -> None:
    then = time.time() - days_idle * DAY
    db.create_session(sid, "telegram", started_at=then)
    db.append_message(sid, "user", f"written {days_idle} days ago", timestamp=then)


def seen_at(db: SessionDB, event_id: str, age_seconds: float) -> None:
    db.write(
        lambda conn, events: conn.execute(
            "INSERT INTO processed_events (platform, event_id, seen_at) VALUES ('feishu', ?, ?)",
            (event_id, time.time() - age_seconds),
        )
    )


def test_old_redelivery_ids_are_forgotten_and_conversations_kept_by_default(db):
    idle_session(db, "old", 400)
    seen_at(db, "ancient", EVENT_TTL_SECONDS + 60)
    seen_at(db, "recent", 60)
    report = run_maintenance(db, retention_days=0)
    assert (report.events_forgotten, report.sessions_deleted) == (1, 0)
    assert db.is_event_seen("feishu", "recent") and not db.is_event_seen("feishu", "ancient")
    assert db.get_session("old") is not None  # retention is off unless set


def test_forgetting_is_done_in_batches(db, monkeypatch):
    import gateway.storage.retention as retention

    monkeypatch.setattr(retention, "FORGET_BATCH", 3)
    for i in range(10):
        seen_at(db, f"old-{i}", EVENT_TTL_SECONDS + 60)
    seen_at(db, "recent", 60)
    commits = db.commit_stats[0]
    assert db.forget_seen_events() == 10
    assert db.commit_stats[0] - commits == 4  # 3 + 3 + 3 + 1: chats can write between them
    assert db.is_event_seen("feishu", "recent")


def test_retention_deletes_idle_conversations_but_never_a_current_one(db):
    idle_session(db, "stale", 100)
    idle_session(db, "current", 100)  # idle just as long, but a chat is still in it
    idle_session(db, "fresh", 2)
    db.set_key_entry("agent:main:telegram:dm:1", "current")
    report = run_maintenance(db, retention_days=30)
    assert report.sessions_deleted == 1
    assert db.get_session("stale") is None
    assert db.get_session("current") is not None and db.get_session("fresh") is not None
    assert db.search_messages("written") and all(m["session_id"] != "stale" for m in db.search_messages("written"))


async def test_the_schedule_runs_at_once_repeats_and_stops_cleanly(db):
    seen_at(db, "ancient", EVENT_TTL_SECONDS + 60)
    upkeep = Maintenance(db, retention_days=0, interval_seconds=0.02)
    upkeep.start()

    await wait_until(lambda: upkeep.rounds >= 3)
    assert not db.is_event_seen("feishu", "ancient")
    await upkeep.stop()
    done = upkeep.rounds
    await asyncio.sleep(0.1)
    assert upkeep.rounds == done  # nothing runs after stop


def test_a_prune_stops_between_batches_when_asked(db, monkeypatch):
    import gateway.storage.retention as retention

    monkeypatch.setattr(retention, "PRUNE_BATCH", 2)
    for i in range(6):
        idle_session(db, f"s{i}", 100)
    asked = []

    def stop() -> bool:  # a shutdown arrives after the first batch
        asked.append(True)
        return len(asked) > 1

    assert run_maintenance(db, retention_days=30, stop=stop).sessions_deleted == 2
    assert run_maintenance(db, retention_days=30).sessions_deleted == 4  # the rest, next time


def test_storage_settings_are_validated():
    config = parse_config({}, env={})
    assert (config.storage.retention_days, config.storage.maintenance_hours) == (0, 6)
    assert parse_config({"storage": {"retention_days": 90}}, env={}).storage.retention_days == 90
    with pytest.raises(ConfigError, match="storage.retention_days"):
        parse_config({"storage": {"retention_days": -1}}, env={})


def test_upkeep_keeps_media_under_its_cap_oldest_ended_first_and_sweeps_orphans(db, tmp_path) -> None:
    import os

    from gateway.service.maintenance import run_maintenance
    from gateway.storage import media as media_rows
    from gateway.storage.media import SWEEP_GRACE, AttachmentRow, MediaStore

    store = MediaStore(tmp_path / "media")
    old_file, live_file, orphan = (store.save_bytes(data) for data in (b"o" * 600, b"l" * 600, b"x" * 10))
    for sid, stored in (("s_old", old_file), ("s_live", live_file)):
        db.create_session(sid, "telegram", user_id="1")
        mid = db.append_message(
            sid, "user", "[image]", attachments=[AttachmentRow("image", None, stored.size, stored.sha256, "p")]
        )
        assert db.read(lambda conn, m=mid: media_rows.attachments_of(conn, [m]))[mid]
    db.end_session("s_old")
    past = __import__("time").time() - SWEEP_GRACE - 5
    for stored in (old_file, live_file, orphan):
        os.utime(store.path_for(stored.sha256), (past, past))
    report = run_maintenance(db, 0, media=store, media_total_bytes=1000)
    assert report.media_files_removed == 2  # the ended session's file (over the cap) and the orphan
    assert store.exists(live_file.sha256) and not store.exists(old_file.sha256) and not store.exists(orphan.sha256)
    assert db.media_bytes() == 600


async def test_upkeep_prunes_done_inbox_entries_and_sent_replies_past_the_horizon(db):
    import time

    from gateway.service.maintenance import run_maintenance
    from gateway.storage import inbox, outbox

    old = time.time() - 3 * 24 * 3600
    done_old = await db.ainbox_add("telegram", "a", "k", "{}", old)
    open_old = await db.ainbox_add("telegram", "b", "k", "{}", old)
    done_new = await db.ainbox_add("telegram", "c", "k", "{}", time.time())
    db.write(lambda conn, ev: inbox.finish(conn, [done_old], now=old))
    await db.ainbox_finish([done_new])
    sent = db.write(lambda conn, ev: outbox.add(conn, platform="t", chat_key="k", target="{}", text="x", now=old))
    db.write(lambda conn, ev: outbox.record_parts(conn, sent, 1, ["m"], True, now=old))
    unsent = db.write(lambda conn, ev: outbox.add(conn, platform="t", chat_key="k", target="{}", text="y", now=old))
    report = run_maintenance(db, retention_days=0)
    assert (report.inbox_pruned, report.outbox_pruned) == (1, 1)
    left = db.read(lambda conn: [r[0] for r in conn.execute("SELECT id FROM inbox ORDER BY id")])
    assert left == [open_old, done_new]  # never an open entry, never a fresh one
    assert [r["id"] for r in db.outbox_unsent()] == [unsent]
