"""tools.session_search against a real SQLite store and the fake OpenAI endpoint on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.llm import ModelSettings
from agent.tools import ToolContext, ToolRegistry
from gateway.db import SessionDB
from gateway.source import SessionSource
from tests.fakes.openai_server import FakeOpenAI, Reply
from tools.session_search import (
    BACKOFF,
    MAX_RECAP_TOKENS,
    MAX_SESSION_CHARS,
    SESSION_SEARCH_TOOL,
    SearchSettings,
    asession_search,
    cut_around,
    make_session_search_tool,
    render_messages,
    session_search,
)

FAST = (0.01, 0.02)  # back-off for tests that exercise retries


def ts(day: str) -> float:
    return datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp()


@pytest.fixture
def add(db):
    counter = {"n": 0}

    def make(messages, source="telegram", user_id="alice", **fields):
        counter["n"] += 1
        sid = fields.pop("sid", None) or f"2024030{counter['n'] % 10}_120000_{counter['n']:08x}"
        start = fields.pop("started_at", None) or ts("2024-03-01") + counter["n"] * 3600
        db.create_session(sid, source, user_id=user_id, started_at=start, **fields)
        for i, item in enumerate(messages):
            if isinstance(item, dict):
                item = dict(item)
                role, content = item.pop("role"), item.pop("content", None)
                db.append_message(sid, role, content, timestamp=start + i, **item)
            else:
                role = "user" if i % 2 == 0 else "assistant"
                db.append_message(sid, role, item, timestamp=start + i, user_id=user_id if role == "user" else None)
        return sid

    return make


def model_for(fake: FakeOpenAI) -> ModelSettings:
    return ModelSettings(base_url=fake.base_url, api_key="k", name="fake-model", timeout=10)


def parse(result: str) -> dict:
    return json.loads(result)


# --- recent mode ------------------------------------------------------------------------------


async def test_empty_query_lists_recent_sessions_without_a_model_call(db, add):
    first = add(["how do I rotate the nginx logs?", "use logrotate"], title="nginx logs")
    second = add(["plan the offsite", "sure"])
    add(["internal tool run"], source="tool")
    async with FakeOpenAI() as fake:
        out = parse(await asession_search("", db=db, model=model_for(fake), current_session_id=None))
        assert fake.requests == []
    assert out["mode"] == "recent"
    assert [r["session_id"] for r in out["results"]] == [second, first]
    row = out["results"][1]
    assert row["title"] == "nginx logs" and row["source"] == "telegram" and row["message_count"] == 2
    assert row["preview"] == "how do I rotate the nginx logs?"
    assert row["when"].startswith("2024-03-01") and row["last_active"].endswith("UTC")


async def test_recent_mode_leaves_out_the_current_lineage(db, add):
    old = add(["older chat"])
    root = add(["current chat began here"])
    child = add(["current chat continues"], parent_session_id=root)
    out = parse(await asession_search("", db=db, current_session_id=child))
    assert [r["session_id"] for r in out["results"]] == [old]


# --- query mode -------------------------------------------------------------------------------


async def test_query_gets_a_focused_recap_per_session(db, add):
    sid = add(
        [
            {"role": "user", "content": "the deploy to staging fails with 502", "user_id": "alice"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": '{"cmd": "curl -I"}'}}
                ],
            },
            {"role": "tool", "content": "HEAD-" + "x" * 2000 + "-TAIL", "tool_name": "shell", "tool_call_id": "c1"},
            {"role": "assistant", "content": "raised proxy_read_timeout to 120s; the 502 is gone"},
        ]
    )
    add(["unrelated chat about lunch", "ok"])
    async with FakeOpenAI() as fake:
        fake.push("The 502 on staging was fixed by raising proxy_read_timeout to 120s.")
        out = parse(await asession_search("staging 502", db=db, model=model_for(fake)))
        body = fake.requests[0]
    assert out["mode"] == "search" and out["query"] == "staging 502" and out["count"] == 1
    result = out["results"][0]
    assert result["session_id"] == sid and result["summary_kind"] == "recap"
    assert result["summary"].startswith("The 502 on staging was fixed")
    assert set(result) >= {"session_id", "when", "source", "title", "summary"}
    assert body["temperature"] == 0.1 and body["max_tokens"] == MAX_RECAP_TOKENS == 10_000
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert "past tense" in system and "commands" in system and "unresolved" in system
    assert "staging 502" in user
    assert "[ASSISTANT called: shell]" in user and "curl -I" not in user  # calls by name only
    assert "HEAD-" + "x" * 245 in user and "x" * 245 + "-TAIL" in user  # first and last 250 chars
    assert "x" * 600 not in user and "characters cut" in user


async def test_recaps_run_in_parallel(db, add):
    for i in range(5):
        add([f"postgres vacuum run {i}", "done"])
    async with FakeOpenAI() as fake:
        # every reply waits until all five recaps have asked: one after another, only one would
        # (bench/session_search.py prints how long the recaps take)
        fake.gate = asyncio.Event()
        search = asyncio.create_task(asession_search("postgres vacuum", limit=5, db=db, model=model_for(fake)))
        await fake.wait_requests(5)
        fake.gate.set()
        out = parse(await search)
    assert out["count"] == 5
    assert [r["summary_kind"] for r in out["results"]] == ["recap"] * 5


async def test_failed_tries_are_retried(db, add):
    add(["grafana alert storm", "muted the noisy rule"])
    async with FakeOpenAI() as fake:
        fake.push(Reply(status=500, error="boom"), Reply(status=429, error="slow down"), "Muted the noisy rule.")
        out = parse(await asession_search("grafana", db=db, model=model_for(fake), backoff=FAST))
        assert len(fake.requests) == 3
    assert out["results"][0]["summary_kind"] == "recap"
    assert out["results"][0]["summary"] == "Muted the noisy rule."
    assert BACKOFF == (1.0, 2.0)


async def test_three_failures_give_a_marked_preview(db, add):
    add(["grafana alert storm", "muted the noisy rule"])
    async with FakeOpenAI() as fake:
        fake.push(*[Reply(status=500, error="boom")] * 3)
        out = parse(await asession_search("grafana", db=db, model=model_for(fake), backoff=FAST))
        assert len(fake.requests) == 3
    result = out["results"][0]
    assert result["summary_kind"] == "preview"
    assert "no recap" in result["summary"] and "500" in result["summary"]
    assert "grafana alert storm" in result["summary"]


async def test_empty_replies_count_as_failures(db, add):
    add(["jenkins pipeline stuck"])
    async with FakeOpenAI() as fake:
        fake.push(Reply(text=""), Reply(text="Unstuck the pipeline."))
        out = parse(await asession_search("jenkins", db=db, model=model_for(fake), backoff=FAST))
    assert out["results"][0]["summary"] == "Unstuck the pipeline."


async def test_deadline_turns_slow_recaps_into_previews(db, add):
    add(["ceph osd down", "replaced the disk"])
    add(["ceph pool full", "added capacity"])
    async with FakeOpenAI() as fake:
        fake.gate = asyncio.Event()  # the model never answers
        out = parse(await asession_search("ceph", db=db, model=model_for(fake), deadline=0.3))
        await fake.wait_requests(2)  # both recaps were asked for, in parallel, before the deadline
    assert out["count"] == 2
    for result in out["results"]:
        assert result["summary_kind"] == "preview"
        assert "deadline" in result["summary"] and "ceph" in result["summary"]


async def test_no_model_configured_gives_previews(db, add):
    add(["vault token expired", "renewed it"])
    out = parse(await asession_search("vault", db=db, model=ModelSettings(base_url=None)))
    assert out["results"][0]["summary_kind"] == "preview"
    assert "no model configured" in out["results"][0]["summary"]
    out = parse(await asession_search("vault", db=db, model=None))
    assert out["results"][0]["summary_kind"] == "preview"


async def test_unreachable_model_gives_previews(db, add):
    add(["vault token expired", "renewed it"])
    settings = ModelSettings(base_url="http://127.0.0.1:9/v1", api_key="k", timeout=2)
    out = parse(await asession_search("vault", db=db, model=settings, backoff=FAST))
    assert out["results"][0]["summary_kind"] == "preview"
    assert "could not reach" in out["results"][0]["summary"]


async def test_long_session_is_cut_around_the_matches(db, add):
    filler = ["chit chat about the weather and the weekend " * 40] * 120  # ~200k characters
    messages = filler[:60] + ["the etcd quorum was lost after the zone outage"] + filler[60:]
    add(messages)
    async with FakeOpenAI() as fake:
        out = parse(await asession_search("etcd quorum", db=db, model=model_for(fake)))
        sent = fake.requests[0]["messages"][1]["content"]
    assert out["results"][0]["summary_kind"] == "recap"
    transcript = sent.split("TRANSCRIPT:\n", 1)[1]
    assert "etcd quorum was lost" in transcript
    assert len(transcript) <= MAX_SESSION_CHARS + 200
    assert transcript.startswith("…[earlier part") and transcript.endswith("cut]…")


async def test_preview_of_a_long_session_shows_the_match(db, add):
    filler = ["small talk about the garden and the neighbours " * 20] * 60
    add(filler[:40] + ["the zfs scrub found 3 checksum errors on disk sdb"] + filler[40:])
    out = parse(await asession_search("zfs scrub", db=db, model=None))
    summary = out["results"][0]["summary"]
    assert out["results"][0]["summary_kind"] == "preview"
    assert "zfs scrub found 3 checksum errors" in summary
    assert len(summary) < 2_000


def test_cut_around_picks_the_densest_cluster():
    text = "".join(f"{i:09d}\n" for i in range(50_000))  # 500k characters
    lonely, cluster = 10_000, [400_000 + k * 1000 for k in range(20)]
    cut = cut_around(text, [lonely, *cluster], max_chars=50_000)
    assert text[cluster[0] : cluster[0] + 10] in cut and text[cluster[-1] : cluster[-1] + 10] in cut
    assert text[lonely : lonely + 10] not in cut
    assert cut_around("short", [3]) == "short"
    head = cut_around(text, [], max_chars=1000)
    assert head.startswith(text[:100]) and head.endswith("cut]…")


def test_render_messages_marks_roles_and_offsets():
    rendered = render_messages(
        [
            {"id": 1, "role": "user", "content": "hello"},
            {
                "id": 2,
                "role": "assistant",
                "content": "",
                "tool_calls": json.dumps([{"function": {"name": "memory", "arguments": "{}"}}]),
            },
            {"id": 3, "role": "tool", "content": "ok", "tool_name": "memory"},
        ]
    )
    assert rendered.text == "[USER]: hello\n\n[ASSISTANT called: memory]\n\n[TOOL memory]: ok"
    assert rendered.text[rendered.offsets[3] :].startswith("[TOOL memory]")


async def test_child_hit_is_recapped_with_its_whole_lineage(db, add):
    root = add(["we started the kafka upgrade"])
    add(["after compression: kafka broker 3 refused the new protocol"], parent_session_id=root)
    async with FakeOpenAI() as fake:
        out = parse(await asession_search("kafka protocol", db=db, model=model_for(fake)))
        sent = fake.requests[0]["messages"][1]["content"]
    assert [r["session_id"] for r in out["results"]] == [root]
    assert "we started the kafka upgrade" in sent and "broker 3 refused" in sent


async def test_recap_leaves_out_hidden_children(db, add):
    root = add(["we started the kafka upgrade"])
    add(["internal tool log: kafka secret-ish details"], source="tool", parent_session_id=root)
    async with FakeOpenAI() as fake:
        out = parse(await asession_search("kafka upgrade", db=db, model=model_for(fake)))
        sent = fake.requests[0]["messages"][1]["content"]
    assert [r["session_id"] for r in out["results"]] == [root]
    assert "internal tool log" not in sent


async def test_current_lineage_hidden_source_and_limit(db, add):
    current_root = add(["sentry issue triage"])
    current = add(["sentry issue continues"], parent_session_id=current_root)
    add(["sentry internal"], source="tool")
    others = [add([f"sentry release {i}"]) for i in range(7)]
    out = parse(await asession_search("sentry", db=db, current_session_id=current, limit=99, recaps=False))
    found = [r["session_id"] for r in out["results"]]
    assert out["count"] == 5 and set(found) <= set(others)
    out = parse(await asession_search("sentry", db=db, current_session_id=current))
    assert out["count"] == 3  # the default limit


def test_sync_signature_without_a_running_loop(db, add):
    sid = add(["minio bucket policy"])
    out = parse(session_search("minio", None, 3, db, None))
    assert [r["session_id"] for r in out["results"]] == [sid]
    assert parse(session_search(query="minio"))["error"]


def _open_files_on(path) -> int:
    """File descriptors of this process open on the database file (one per SQLite connection)."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == os.path.realpath(path))


def test_sync_searches_leave_no_connection_behind(tmp_path):
    """Each synchronous call runs its own event loop, whose worker threads die with it; their read
    connections used to stay open until the database closed (200 calls: 201 connections)."""
    db = SessionDB(tmp_path / "state.db")
    try:
        db.create_session("s1", "telegram", user_id="alice")
        db.append_message("s1", "user", "minio bucket policy")
        session_search("minio", db=db, recaps=False, embedder=None)
        before = _open_files_on(db.path)
        for _ in range(50):
            session_search("minio", db=db, recaps=False, embedder=None)
        # the last calls' threads keep theirs until a new thread reads: a few, not one per call
        assert _open_files_on(db.path) <= before + 5
    finally:
        db.close()


async def test_sync_signature_inside_a_running_loop(db, add):
    sid = add(["minio bucket policy"])
    out = parse(session_search(query="minio", db=db))
    assert [r["session_id"] for r in out["results"]] == [sid]


# --- as a registered tool ---------------------------------------------------------------------


def ctx_for(db, user, session_id="none", **kw) -> ToolContext:
    source = SessionSource(platform="telegram", chat_id="c1", chat_type="dm", user_id=user)
    return ToolContext(session_id=session_id, source=source, db=db, **kw)


async def test_tool_applies_the_privacy_rule(db, add):
    mine = add(["alice: the budget spreadsheet"], user_id="alice")
    add(["bob: the budget spreadsheet"], user_id="bob")
    registry = ToolRegistry([SESSION_SEARCH_TOOL])
    schema = registry.schemas()[0]["function"]
    assert schema["name"] == "session_search" and "last time" in schema["description"]
    assert "we did this before" in schema["description"]
    out = parse(await registry.call("session_search", '{"query": "budget"}', ctx_for(db, "alice")))
    assert [r["session_id"] for r in out["results"]] == [mine]
    out = parse(await registry.call("session_search", {"query": "budget"}, ctx_for(db, "alice", is_admin=True)))
    assert out["count"] == 2
    out = parse(await registry.call("session_search", {"query": "budget"}, ctx_for(db, "alice", single_owner=True)))
    assert out["count"] == 2
    out = parse(await registry.call("session_search", {"query": "budget"}, ctx_for(db, "mallory")))
    assert out["count"] == 0
    anonymous = ToolContext(session_id="none", source=None, db=db)
    out = parse(await registry.call("session_search", {"query": "budget"}, anonymous))
    assert out["count"] == 0 and "who is asking" in out["error"]
    owner = ToolContext(session_id="none", source=None, db=db, single_owner=True)
    assert parse(await registry.call("session_search", {"query": "budget"}, owner))["count"] == 2


async def test_tool_uses_the_auxiliary_model_it_is_built_with(db, add):
    add(["alice: helm chart values"], user_id="alice")
    async with FakeOpenAI() as fake:
        fake.push("Helm values were changed.")
        tool = make_session_search_tool(SearchSettings(deadline=5, recap_model=model_for(fake)))
        out = parse(await tool.handler({"query": "helm"}, ctx_for(db, "alice")))
    assert out["results"][0]["summary"] == "Helm values were changed."


async def test_tool_excludes_the_calling_session(db, add):
    current = add(["alice: helm chart values"], user_id="alice")
    out = parse(await SESSION_SEARCH_TOOL.handler({"query": "helm"}, ctx_for(db, "alice", session_id=current)))
    assert out["count"] == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    query=st.one_of(
        st.text(max_size=200),
        st.sampled_from(['"', "NEAR(", "AND", "*", "a:b", "bob@example.com", "http://x.y/z?q=1", "(((", "x" * 10_000]),
        st.binary(max_size=100),
    )
)
def test_hostile_queries_through_the_tool(db, add, query):
    if not getattr(db, "_seeded", False):
        db._seeded = add(["consul service mesh", "envoy sidecar"])
    out = parse(session_search(query=query, db=db, recaps=False))
    assert "error" not in out and out["count"] <= 5
    assert out["count"] == len(out["results"])


def test_session_search_uses_the_semantic_stage_it_is_given(db):
    from gateway.recall.index import backfill
    from tests.recall.test_semantic import Endpoint, concept_embedding

    served = Endpoint()
    served.fake.embed = lambda texts, model: [concept_embedding(t) for t in texts]
    try:
        db.create_session("s_met", "telegram", user_id="tom", started_at=1.7e9)
        db.append_message("s_met", "user", "I met a wonderful woman at the cafe")
        embedder = served.embedder()
        backfill(db, embedder)
        words_only = json.loads(session_search("spouse", db=db, recaps=False, embedder=None))
        assert words_only["count"] == 0
        found = json.loads(session_search("spouse", db=db, recaps=False, embedder=embedder))
        assert [r["session_id"] for r in found["results"]] == ["s_met"]
    finally:
        served.close()
