"""The schedule row: typeable ids, the chat it answers in, its owner, the claim's reading of a due
job (`advance`) through a store driven by a virtual clock, pause/resume and the deletes (the same
cases on the memory store and the table of both backends: the `store` fixture); and the
`schedules` settings section."""

from __future__ import annotations

import dataclasses
import random
import threading
from datetime import datetime, timedelta, timezone

import pytest

from gateway.config.schema import fields_of
from gateway.schedules.clock import SystemWallClock, utc_now
from gateway.schedules.model import (
    ID_ALPHABET,
    ID_LENGTH,
    ChatRef,
    Schedule,
    ScheduleStore,
    new_id,
    normalize_id,
    owner_of,
)
from gateway.schedules.settings import ScheduleSettings, schedule_settings
from gateway.schedules.store import FaceScheduleStore
from gateway.schedules.times import Timing, next_run_after, parse_timing
from gateway.source import SessionSource
from gateway.storage.postgres.db import PostgresSessionDB
from tests.fakes.virtual_clock import VirtualClock
from tests.schedules.conftest import plain_entry

UTC = timezone.utc
START = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)  # a Wednesday
SOURCE = SessionSource("telegram", "-100200", "group", user_id="42", user_name="Ann")
CHAT = ChatRef(SOURCE, "agent:main:telegram:group:-100200:42")


def job(store: ScheduleStore, clock: VirtualClock, owner: str = "telegram:42", **timing: object) -> Schedule:
    now = utc_now(clock)
    args: dict = {"at": None, "cron": None, "every_minutes": None, "timezone_name": "Asia/Shanghai"}
    args.update(timing)
    checked = parse_timing(now=now, min_interval_minutes=5, **args)
    first = next_run_after(checked, now)
    assert first is not None
    row = Schedule.new(new_id(), owner, CHAT, checked, "summarise today", first)
    assert store.create(row, limit=20)
    return row


def tick(store: ScheduleStore, clock: VirtualClock, seconds: float, missed: str = "run_once", step: int = 1) -> list:
    """Move the clock on in `step`-second steps, claiming as the due-run loop does (each second; a
    long quiet stretch in steps short of LATE_AFTER)."""
    runs = []
    for _ in range(int(seconds) // step):
        clock.t += step
        runs += store.claim_due(utc_now(clock), limit=10, missed=missed)  # type: ignore[arg-type]
    return runs


# ---- ids --------------------------------------------------------------------------------------


def test_ids_are_short_and_typeable() -> None:
    assert len(ID_ALPHABET) == 32 and len(set(ID_ALPHABET)) == 32
    assert not set("0O1lI") & set(ID_ALPHABET)
    ids = {new_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(i) == ID_LENGTH and set(i) <= set(ID_ALPHABET) for i in ids)
    draws = iter("k7m2qx")
    assert new_id(lambda alphabet: next(draws)) == "k7m2qx"


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("k7m2qx", "k7m2qx"),
        (" K7M2QX ", "k7m2qx"),
        ("k7m2q", None),
        ("k7m2q0", None),
        ("k7m2ql", None),
        (None, None),
        (7, None),
    ],
)
def test_an_id_is_read_back_as_typed(typed: object, stored: str | None) -> None:
    assert normalize_id(typed) == stored


# ---- chat and owner ---------------------------------------------------------------------------


def test_the_chat_survives_a_round_trip_through_its_stored_form() -> None:
    thread = ChatRef(
        SessionSource("discord", "9", "thread", user_id="5", thread_id="77"), "agent:main:discord:thread:9:77"
    )
    for chat in (CHAT, thread):
        assert ChatRef.from_dict(chat.to_dict()) == chat


def test_the_owner_is_the_person_on_their_platform() -> None:
    assert owner_of(SOURCE) == "telegram:42"
    feishu = SessionSource("feishu", "oc_1", "group", user_id="ou_1", user_id_alt="on_9")
    assert owner_of(feishu) == "feishu:on_9"
    with pytest.raises(ValueError, match="needs a person"):
        owner_of(SessionSource("telegram", "-100", "channel"))


# ---- claims on a virtual clock ----------------------------------------------------------------


def test_a_one_off_runs_once_and_finishes(store: ScheduleStore) -> None:
    clock = VirtualClock(START.timestamp())
    row = job(store, clock, at="2026-12-02T16:00:10+08:00")  # 10 s ahead
    assert tick(store, clock, 9) == []
    [run] = tick(store, clock, 5)
    assert (run.due_at, run.late, run.schedule.runs) == (START + timedelta(seconds=10), False, 1)
    assert run.event_id == f"schedule:{row.id}:{int(run.due_at.timestamp())}"
    assert tick(store, clock, 3600, step=30) == []
    assert store.get(row.id).finished  # type: ignore[union-attr]
    assert store.list_for_owner("telegram:42") == [] and len(store.list_for_owner("telegram:42", True)) == 1


def test_weekdays_at_18_runs_once_a_weekday_for_a_week(store: ScheduleStore) -> None:
    clock = VirtualClock(START.timestamp())
    job(store, clock, cron="0 18 * * 1-5")
    runs = []
    for _ in range(7 * 24):  # a week, claimed hourly: each run is up to an hour late
        clock.t += 3600
        runs += store.claim_due(utc_now(clock), 10, "run_once")
    shanghai = [r.due_at.astimezone(timezone(timedelta(hours=8))).strftime("%a %H:%M") for r in runs]
    assert shanghai == ["Wed 18:00", "Thu 18:00", "Fri 18:00", "Mon 18:00", "Tue 18:00"]


@pytest.mark.parametrize(("missed", "expected"), [("run_once", [True]), ("skip", [])])
def test_a_long_outage_gives_at_most_one_late_run(store: ScheduleStore, missed: str, expected: list[bool]) -> None:
    clock = VirtualClock(START.timestamp())
    row = job(store, clock, every_minutes=10)
    clock.t += 5 * 3600 + 180  # down for five hours: thirty runs missed
    after_outage = store.claim_due(utc_now(clock), 10, missed)  # type: ignore[arg-type]
    assert [run.late for run in after_outage] == expected
    stored = store.get(row.id)
    assert stored is not None and stored.next_run_at == START + timedelta(hours=5, minutes=10)
    assert stored.runs == len(expected)
    [on_time] = tick(store, clock, 7 * 60, step=30)  # then on time again
    assert not on_time.late and on_time.due_at == START + timedelta(hours=5, minutes=10)


def test_a_paused_job_does_not_run_and_resumes_from_now(store: ScheduleStore) -> None:
    clock = VirtualClock(START.timestamp())
    row = job(store, clock, every_minutes=10)
    store.set_enabled(row.id, False, row.next_run_at)
    assert tick(store, clock, 3600, step=30) == []
    resumed = store.set_enabled(row.id, True, next_run_after(row.timing, utc_now(clock)))
    assert resumed is not None and resumed.next_run_at == START + timedelta(minutes=70)
    [run] = tick(store, clock, 600, step=30)
    assert not run.late  # the paused hour is not a missed run


def test_a_claim_takes_at_most_its_limit_oldest_first(store: ScheduleStore) -> None:
    clock = VirtualClock(START.timestamp())
    rows = [job(store, clock, every_minutes=5 + i) for i in range(3)]
    clock.t += 3600
    first = store.claim_due(utc_now(clock), 2, "run_once")
    assert [r.schedule.id for r in first] == [rows[0].id, rows[1].id]
    assert [r.schedule.id for r in store.claim_due(utc_now(clock), 2, "run_once")] == [rows[2].id]


def test_deletes_by_owner_and_by_chat_and_cancel(store: ScheduleStore) -> None:
    clock = VirtualClock(START.timestamp())
    mine, theirs = job(store, clock, every_minutes=30), job(store, clock, owner="telegram:7", every_minutes=30)
    assert store.delete_for_owner("telegram:42") == 1 and store.get(mine.id) is None
    assert store.delete_for_chat(CHAT.session_key) == 1 and store.list_all() == []
    again = job(store, clock, every_minutes=30)
    assert store.cancel(again.id) and not store.cancel(again.id) and theirs.id != again.id


def test_the_owners_limit_is_checked_by_the_insert(store: ScheduleStore) -> None:
    clock = VirtualClock(START.timestamp())
    first = job(store, clock, every_minutes=30)
    timing = Timing("every", "UTC", START, every_minutes=30)
    extra = Schedule.new(new_id(random.Random(1).choice), "telegram:42", CHAT, timing, "x", START)
    assert not store.create(extra, limit=1)
    assert store.create(extra, limit=2) and first.id != extra.id


def test_the_system_clock_reads_utc_now() -> None:
    before = datetime.now(UTC)
    assert before - timedelta(seconds=5) < utc_now(SystemWallClock()) < before + timedelta(seconds=5)


# ---- settings ---------------------------------------------------------------------------------


def test_settings_defaults_and_config() -> None:
    assert schedule_settings(None) == ScheduleSettings("run_once", 20, 5)
    assert schedule_settings({"missed": "skip", "max_per_person": "3"}) == ScheduleSettings("skip", 3, 5)
    with pytest.raises(ValueError, match="schedules.missed must be one of run_once, skip"):
        schedule_settings({"missed": "twice"})


def test_the_config_schema_derives_from_the_settings() -> None:
    schema = fields_of(ScheduleSettings)
    assert schema["missed"].choices == ("run_once", "skip") and schema["missed"].default == "run_once"
    assert (schema["max_per_person"].default, schema["max_per_person"].minimum) == (20, 1)
    assert (schema["min_interval_minutes"].default, schema["min_interval_minutes"].minimum) == (5, 1)


def test_two_replicas_claiming_at_once_start_each_run_once(pg_dsn) -> None:
    """Postgres: two replicas' stores claim the same due rows concurrently, second after second;
    FOR UPDATE SKIP LOCKED and the inbox key give each run to exactly one."""
    import threading

    dbs = [PostgresSessionDB(pg_dsn) for _ in range(2)]
    try:
        stores = [FaceScheduleStore(db, plain_entry) for db in dbs]
        clock = VirtualClock(START.timestamp())
        jobs = [job(stores[0], clock, every_minutes=5) for _ in range(8)]
        claimed: list[list] = [[], []]
        for second in range(1, 5 * 60 * 3 + 8, 7):  # past 15 minutes: three runs of each job
            now = utc_now(VirtualClock(START.timestamp() + second))
            gate = threading.Barrier(2)

            def claim(i: int, now: datetime = now, gate: threading.Barrier = gate) -> None:
                gate.wait()
                claimed[i].extend(stores[i].claim_due(now, 10, "run_once"))

            threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        keys = [run.event_id for runs in claimed for run in runs]
        assert len(keys) == len(set(keys)) == 3 * len(jobs)
        inbox_rows = dbs[0].read(lambda conn: conn.execute("SELECT COUNT(*) FROM inbox").fetchone()[0])
        assert inbox_rows == 3 * len(jobs)
    finally:
        for db in dbs:
            db.close()


@pytest.mark.both_backends
def test_deleting_a_session_deletes_the_jobs_of_its_chat(db, make_session) -> None:
    store = FaceScheduleStore(db)
    clock = VirtualClock(START.timestamp())
    sid = make_session(session_key=CHAT.session_key)
    elsewhere = dataclasses.replace(
        job(store, clock, every_minutes=30), id=new_id(), chat=ChatRef(SOURCE, "agent:main:telegram:dm:42")
    )
    assert store.create(elsewhere, 20)
    here = job(store, clock, every_minutes=30)
    assert db.delete_session(sid)
    assert store.get(here.id) is None and store.get(elsewhere.id) is not None
