"""gateway.sessions.store: key -> session, single-flight, locks, reset policy with notice, busy exemption."""

from __future__ import annotations

import asyncio
import gc
from datetime import datetime, timezone

import pytest

from gateway.db import SessionDB, TitleTaken, UnknownSession
from gateway.sessions.reset import ResetPolicies, ResetPolicy
from gateway.sessions.store import ResetNotice, SessionStore
from gateway.source import SessionSource

pytestmark = pytest.mark.both_backends

T0 = 1_790_000_000.0  # a fixed "now" (2026-09-21 UTC)


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, minutes: float) -> None:
        self.now += minutes * 60


@pytest.fixture
def clock() -> Clock:
    return Clock()


def idle(minutes: float = 30) -> ResetPolicies:
    return ResetPolicies(ResetPolicy(mode="idle", idle_minutes=minutes))


def dm(user: str = "42") -> SessionSource:
    return SessionSource(platform="telegram", chat_id=user, chat_type="dm", user_id=user, user_name="Lin")


@pytest.mark.sqlite_only("reopens a SQLite file by path")
async def test_first_message_creates_a_session_with_its_source(db, clock):
    store = SessionStore(db, idle(), clock=clock)
    source = SessionSource(
        platform="feishu",
        chat_id="oc_1",
        chat_type="group",
        user_id="ou_9",
        user_id_alt="on_7",
        chat_name="Ops",
        user_name="Mei",
    )
    first = await store.get_or_create(source, model="m1")
    assert first.created and first.reset is None
    sid = first.entry.session_id
    row = db.get_session(sid)
    assert row["source"] == "feishu" and row["user_id"] == "on_7"  # the person's stable id
    assert row["session_key"] == "agent:main:feishu:group:oc_1:on_7" == first.entry.session_key
    assert (row["chat_id"], row["chat_type"], row["chat_name"], row["user_name"], row["model"]) == (
        "oc_1",
        "group",
        "Ops",
        "Mei",
        "m1",
    )
    assert row["started_at"] == T0
    assert first.entry.origin == source and first.entry.reason == "created"
    again = await store.get_or_create(source)
    assert not again.created and again.entry.session_id == sid
    # persisted: a new store on a reopened DB sees the same entry
    path = db.path
    db.close()
    with SessionDB(path) as reopened:
        entry = SessionStore(reopened, idle(), clock=clock).get(first.entry.session_key)
        assert entry is not None and entry.session_id == sid and entry.origin == source


async def test_group_members_get_their_own_sessions(db, clock):
    store = SessionStore(db, idle(), clock=clock)
    a = await store.get_or_create(SessionSource(platform="discord", chat_id="9", chat_type="group", user_id="1"))
    b = await store.get_or_create(SessionSource(platform="discord", chat_id="9", chat_type="group", user_id="2"))
    assert a.entry.session_id != b.entry.session_id
    shared = SessionStore(db, idle(), clock=clock, group_sessions_per_user=False)
    assert shared.key_for(SessionSource(platform="discord", chat_id="9", chat_type="group", user_id="1")) == (
        "agent:main:discord:group:9"
    )


async def test_concurrent_first_messages_create_one_session(db, clock):
    store = SessionStore(db, idle(), clock=clock)
    results = await asyncio.gather(*(store.get_or_create(dm()) for _ in range(20)))
    assert db.count_sessions() == 1
    assert {r.entry.session_id for r in results} == {results[0].entry.session_id}
    assert sum(r.created for r in results) == 1
    # different keys are not serialised into one
    others = await asyncio.gather(*(store.get_or_create(dm(str(i))) for i in range(100, 110)))
    assert len({r.entry.session_id for r in others}) == 10 and db.count_sessions() == 11


async def test_concurrent_lookups_after_idle_reset_once_and_notice_once(db, clock):
    store = SessionStore(db, idle(30), clock=clock)
    old = (await store.get_or_create(dm())).entry.session_id
    clock.advance(31)
    results = await asyncio.gather(*(store.get_or_create(dm()) for _ in range(5)))
    assert db.count_sessions() == 2
    assert [r.reset is not None for r in results].count(True) == 1
    assert all(r.entry.session_id != old for r in results)


async def test_failed_leader_does_not_poison_the_key(db, clock):
    store = SessionStore(db, idle(), clock=clock)
    bad = SessionSource(platform="telegram", chat_id="x", chat_type="group", user_id=None)
    with pytest.raises(ValueError):  # no user id in a per-user group: refused, nothing created
        await store.get_or_create(bad)
    assert db.count_sessions() == 0 and store._inflight == {}


async def test_one_lock_per_key_and_no_leak(db, clock):
    store = SessionStore(db, idle(), clock=clock)
    key = store.key_for(dm())
    lock = store.lock(key)
    assert store.lock(key) is lock and store.lock("other") is not lock
    order = []

    async def turn(name: str) -> None:
        async with store.lock(key):
            order.append(f"{name} start")
            await asyncio.sleep(0)
            order.append(f"{name} end")

    await asyncio.gather(turn("a"), turn("b"))
    assert order == ["a start", "a end", "b start", "b end"]
    del lock
    for i in range(1000):
        async with store.lock(f"k{i}"):
            pass
    gc.collect()
    assert store.live_locks == 0


async def test_idle_reset_uses_last_activity_from_the_db_and_tells_why(db, clock):
    store = SessionStore(db, idle(30), clock=clock)
    first = await store.get_or_create(dm())
    sid = first.entry.session_id
    db.set_title(sid, "trip planning")
    clock.advance(20)
    await db.aappend_message(sid, "user", "still here", timestamp=clock())
    clock.advance(20)  # 40 min since start, 20 since the last message: not idle
    same = await store.get_or_create(dm())
    assert same.entry.session_id == sid and same.reset is None
    clock.advance(11)  # 31 min since the last message
    rolled = await store.get_or_create(dm())
    assert rolled.created and rolled.entry.session_id != sid
    assert rolled.reset == ResetNotice("idle", sid, "trip planning", T0 + 20 * 60)
    assert "/resume trip planning" in rolled.reset.text()
    old = db.get_session(sid)
    assert old["end_reason"] == "idle" and old["ended_at"] is not None
    assert store.get(rolled.entry.session_key).session_id == rolled.entry.session_id
    assert store.get(rolled.entry.session_key).reason == "idle"
    assert db.get_session(rolled.entry.session_id)["ended_at"] is None


async def test_daily_reset_notice(db, clock):
    policies = ResetPolicies(ResetPolicy(mode="daily", daily_hour=4, timezone="UTC"))
    clock.now = datetime(2026, 9, 22, 3, 20, tzinfo=timezone.utc).timestamp()
    store = SessionStore(db, policies, clock=clock)
    sid = (await store.get_or_create(dm())).entry.session_id
    clock.advance(39)
    assert (await store.get_or_create(dm())).reset is None
    clock.advance(2)  # 04:01
    rolled = await store.get_or_create(dm())
    assert rolled.reset is not None and rolled.reset.reason == "daily"
    assert rolled.reset.previous_session_id == sid and db.get_session(sid)["end_reason"] == "daily"


async def test_busy_session_is_not_reset(db, clock):
    busy: set[str] = set()
    store = SessionStore(db, idle(30), clock=clock, is_busy=lambda s: s in busy)
    sid = (await store.get_or_create(dm())).entry.session_id
    busy.add(sid)
    clock.advance(120)
    kept = await store.get_or_create(dm())
    assert kept.entry.session_id == sid and kept.reset is None and not kept.created
    assert db.get_session(sid)["ended_at"] is None
    busy.clear()
    rolled = await store.get_or_create(dm())
    assert rolled.reset is not None and rolled.entry.session_id != sid


async def test_policy_override_by_chat_type(db, clock):
    policies = ResetPolicies.from_config({"mode": "idle", "idle_minutes": 30, "by_chat_type": {"dm": {"mode": "none"}}})
    store = SessionStore(db, policies, clock=clock)
    group = SessionSource(platform="telegram", chat_id="-5", chat_type="group", user_id="42")
    sid_dm = (await store.get_or_create(dm())).entry.session_id
    sid_group = (await store.get_or_create(group)).entry.session_id
    clock.advance(600)
    assert (await store.get_or_create(dm())).entry.session_id == sid_dm
    assert (await store.get_or_create(group)).entry.session_id != sid_group


async def test_reset_switch_suspend(db, clock):
    store = SessionStore(db, idle(), clock=clock)
    first = (await store.get_or_create(dm())).entry.session_id
    db.set_title(first, "taken")
    with pytest.raises(TitleTaken):  # a clash changes nothing
        await store.reset(dm(), title="taken")
    assert store.get(store.key_for(dm())).session_id == first and db.count_sessions() == 1

    fresh = await store.reset(dm(), title="fresh start")
    assert fresh.session_id != first and fresh.reason == "new"
    assert db.get_session(fresh.session_id)["title"] == "fresh start"
    assert db.get_session(first)["end_reason"] == "new"

    back = await store.switch(dm(), first)
    assert back.session_id == first and back.reason == "resume"
    assert db.get_session(first)["ended_at"] is None  # reopened
    assert db.get_session(fresh.session_id)["end_reason"] == "resume"
    with pytest.raises(UnknownSession):
        await store.switch(dm(), "20200101_000000_deadbeef")
    assert store.get(store.key_for(dm())).session_id == first

    await store.suspend(dm())
    assert store.get(store.key_for(dm())) is None
    assert db.get_session(first)["end_reason"] == "suspended"
    after = await store.get_or_create(dm())
    assert after.created and after.reset is None and after.entry.session_id not in (first, fresh.session_id)
    assert [e.session_id for e in store.entries()] == [after.entry.session_id]


async def test_session_ended_elsewhere_starts_fresh_quietly(db, clock):
    store = SessionStore(db, idle(), clock=clock)
    sid = (await store.get_or_create(dm())).entry.session_id
    db.end_session(sid, "compressed")
    nxt = await store.get_or_create(dm())
    assert nxt.created and nxt.reset is None and nxt.entry.session_id != sid
    db.delete_session(nxt.entry.session_id)  # deleting also drops the key entry
    again = await store.get_or_create(dm())
    assert again.created and again.entry.session_id != nxt.entry.session_id
