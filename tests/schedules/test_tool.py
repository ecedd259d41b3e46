"""The agent's `schedule` tool through the tool registry, as the agent loop calls it: create (each
kind), list and cancel against a real in-memory ScheduleStore on a virtual clock; its exact argument
shape; the limits; answers in the person's time zone."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest

from agent.tools import ToolContext, ToolRegistry
from gateway.schedules.settings import ScheduleSettings
from gateway.source import SessionSource
from tests.fakes.virtual_clock import VirtualClock
from tests.schedules.memory_store import MemoryScheduleStore
from tools.schedule import make_schedule_tool

START = datetime(2026, 12, 2, 8, 0, tzinfo=timezone.utc)  # 16:00 in Shanghai
ANN = SessionSource("telegram", "-100200", "group", user_id="42")
BOB = SessionSource("telegram", "-100200", "group", user_id="43")
ID = re.compile(r"scheduled ([2-9a-z]{6}):")


def context(
    source: SessionSource | None = ANN, key: str | None = "agent:main:telegram:group:-100200:42"
) -> ToolContext:
    return ToolContext(session_id="s1", source=source, session_key=key)


@pytest.fixture
def store() -> MemoryScheduleStore:
    return MemoryScheduleStore()


@pytest.fixture
def registry(store: MemoryScheduleStore) -> ToolRegistry:
    tool = make_schedule_tool(
        store, ScheduleSettings(max_per_person=3), VirtualClock(START.timestamp()), "Asia/Shanghai"
    )
    return ToolRegistry([tool])


async def call(registry: ToolRegistry, args: dict, ctx: ToolContext | None = None) -> str:
    # the model sends its arguments as JSON text
    return await registry.call("schedule", json.dumps(args), ctx or context())


def create(prompt: str = "remind me to stretch", **timing: object) -> dict:
    return {
        "action": "create",
        "prompt": prompt,
        "at": None,
        "cron": None,
        "every_minutes": None,
        "timezone": None,
        **timing,
    }


def test_the_function_spec_has_exactly_the_agreed_shape(registry: ToolRegistry) -> None:
    [spec] = registry.schemas()
    assert spec["type"] == "function" and spec["function"]["name"] == "schedule"
    parameters = spec["function"]["parameters"]
    assert set(parameters["properties"]) == {"action", "prompt", "at", "cron", "every_minutes", "timezone", "id"}
    assert parameters["properties"]["action"]["enum"] == ["create", "list", "cancel"]
    assert parameters["required"] == ["action"]
    for nullable in ("at", "cron", "every_minutes", "timezone"):
        assert "null" in parameters["properties"][nullable]["type"]
    json.dumps(spec)  # what the OpenAI client sends


async def test_create_a_one_off_answers_with_its_id_and_local_time(
    registry: ToolRegistry, store: MemoryScheduleStore
) -> None:
    answer = await call(registry, create("remind me to call the dentist", at="2026-12-03T01:00:00Z"))
    assert answer.endswith("next run Thu 2026-12-03 09:00 CST (Asia/Shanghai)"), answer
    match = ID.match(answer)
    assert match is not None
    row = store.get(match.group(1))
    assert row is not None
    assert (row.kind, row.owner, row.prompt, row.timezone) == (
        "once",
        "telegram:42",
        "remind me to call the dentist",
        "Asia/Shanghai",
    )
    assert row.chat.session_key == "agent:main:telegram:group:-100200:42" and row.chat.source == ANN


async def test_create_recurring_jobs_in_a_named_zone(registry: ToolRegistry, store: MemoryScheduleStore) -> None:
    weekdays = await call(registry, create("summarise this group", cron="0 18 * * 1-5", timezone="Europe/Berlin"))
    assert "cron 0 18 * * 1-5 (Europe/Berlin); next run Wed 2026-12-02 18:00 CET (Europe/Berlin)" in weekdays
    every = await call(registry, create(every_minutes=30))
    assert "every 30 min; next run Wed 2026-12-02 16:30 CST (Asia/Shanghai)" in every
    assert sorted(row.kind for row in store.list_all()) == ["cron", "every"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (create(at="2026-12-03T09:00:00"), "no UTC offset"),
        (create(at="2026-12-01T09:00:00+08:00"), "in the past"),
        (create(cron="*/1 * * * *"), "the minimum is 5"),
        (create(every_minutes=2), "at least 5"),
        (create(cron="0 9 * * *", timezone="Asia/Shangai"), "did you mean Asia/Shanghai"),
        (create(at="2026-12-03T09:00:00+08:00", every_minutes=60), "exactly one of at, cron or every_minutes"),
        (create(), "got none"),
        (create("   ", every_minutes=30), "prompt must be a non-empty string"),
        (create("x" * 2001, every_minutes=30), "prompt too long"),
        ({"action": "delete", "id": "k7m2qx"}, "action must be create, list or cancel"),
    ],
)
async def test_a_bad_request_gets_a_reason_and_stores_nothing(
    registry: ToolRegistry, store: MemoryScheduleStore, args: dict, message: str
) -> None:
    answer = await call(registry, args)
    assert answer.startswith("error: ") and message in answer, answer
    assert store.rows == {}


async def test_list_shows_only_the_persons_jobs(registry: ToolRegistry) -> None:
    assert await call(registry, {"action": "list"}) == "no scheduled jobs"
    await call(registry, create("water the plants", cron="0 8 * * *"))
    await call(registry, create("bob's job", every_minutes=60), context(BOB, "agent:main:telegram:group:-100200:43"))
    listed = await call(registry, {"action": "list"})
    assert listed.count("\n") == 0 and "water the plants" in listed
    assert "next run Thu 2026-12-03 08:00 CST (Asia/Shanghai)" in listed


async def test_cancel_by_id_as_typed_and_only_ones_own(registry: ToolRegistry, store: MemoryScheduleStore) -> None:
    match = ID.match(await call(registry, create(every_minutes=60)))
    assert match is not None
    job_id = match.group(1)
    bob = context(BOB, "agent:main:telegram:group:-100200:43")
    assert (await call(registry, {"action": "cancel", "id": job_id}, bob)).startswith(
        "error: you have no scheduled job"
    )
    assert (await call(registry, {"action": "cancel", "id": "zzzzzz"})).startswith("error: you have no scheduled job")
    assert (await call(registry, {"action": "cancel", "id": job_id.upper()})).startswith(f"cancelled {job_id}:")
    assert store.rows == {}


async def test_a_person_may_have_max_per_person_jobs(registry: ToolRegistry, store: MemoryScheduleStore) -> None:
    for minutes in (10, 20, 30):
        assert (await call(registry, create(every_minutes=minutes))).startswith("scheduled ")
    refused = await call(registry, create(every_minutes=40))
    assert refused.startswith("error: you already have 3 scheduled jobs")
    bob = context(BOB, "agent:main:telegram:group:-100200:43")
    assert (await call(registry, create(every_minutes=40), bob)).startswith("scheduled ")  # per person
    assert len(store.rows) == 4


async def test_without_a_person_or_a_chat_there_is_nothing_to_schedule(registry: ToolRegistry) -> None:
    for ctx in (context(source=None), context(key=None), context(SessionSource("telegram", "-100", "channel"))):
        assert (await call(registry, {"action": "list"}, ctx)).startswith("error: scheduling needs a person")


async def test_the_hosts_zone_is_the_last_default(store: MemoryScheduleStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    registry = ToolRegistry([make_schedule_tool(store, clock=VirtualClock(START.timestamp()))])
    answer = await call(registry, create(every_minutes=60))
    assert answer.endswith("next run Wed 2026-12-02 04:00 EST (America/New_York)"), answer
