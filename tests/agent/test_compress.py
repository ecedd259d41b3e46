"""agent.compress: token estimate and summary prompt; compression into a child session on a real
SessionDB (the summary from agent.compress, the move by SessionStore.compress in one transaction)."""

from __future__ import annotations

import openai
import pytest

from agent.compress import (
    SUMMARY_INSTRUCTIONS,
    estimate_tokens,
    needs_compression,
    render_transcript,
    summarise,
)
from agent.llm import ModelSettings, make_client
from agent.loop import Agent
from agent.tools import ToolContext, ToolRegistry
from gateway.db import SessionDB, UnknownSession
from gateway.sessions.store import SessionStore
from tests.fakes.openai_server import FakeOpenAI, Reply

KEY = "agent:main:telegram:dm:7"


@pytest.fixture
async def fake():
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
def db(tmp_path):
    database = SessionDB(tmp_path / "state.db")
    yield database
    database.close()


async def compress_session(db: SessionDB, session_id: str, client, settings: ModelSettings, backoff: float = 1.0):
    """Summarise with the model, then move into the child: what the turn runner does."""

    async def summary(conversation):
        return await summarise(client, settings, conversation, backoff=backoff)

    return await SessionStore(db).compress(session_id, summary, model=settings.name)


def settings_for(fake: FakeOpenAI, **kw) -> ModelSettings:
    return ModelSettings(base_url=fake.base_url, api_key="k", name="fake-model", **kw)


def seed(db: SessionDB, session_id: str = "20260101_000000_aaaaaaaa", title: str | None = "my project") -> str:
    db.create_session(
        session_id, "telegram", user_id="7", session_key=KEY, chat_id="7", chat_type="dm", user_name="Ana", title=title
    )
    db.append_message(session_id, "user", "deploy the billing service with kubectl rollout", user_id="7")
    db.append_message(
        session_id,
        "assistant",
        None,
        tool_calls=[
            {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": '{"cmd": "kubectl rollout"}'}}
        ],
    )
    db.append_message(
        session_id, "tool", "ok " + "x" * 2000 + " rollout complete", tool_call_id="c1", tool_name="shell"
    )
    db.append_message(session_id, "assistant", "Deployed; rollout complete.")
    db.set_key_entry(KEY, session_id, {"platform": "telegram"}, "new")
    return session_id


def test_estimate_tokens_latin_and_cjk():
    english = [{"role": "user", "content": "a" * 400}]
    chinese = [{"role": "user", "content": "部署" * 50}]  # 100 characters
    assert estimate_tokens(english) == 4 + 100
    assert estimate_tokens(chinese) == 4 + 100  # one per character, not 25
    with_calls = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "n", "arguments": "{}" * 100}}],
        }
    ]
    assert estimate_tokens(with_calls) > 50
    assert estimate_tokens([]) == 0


def test_needs_compression_threshold():
    messages = [{"role": "user", "content": "w" * 3200}]  # 804 tokens
    assert needs_compression(messages, 1000)
    assert not needs_compression(messages, 1000, threshold=0.9)
    assert not needs_compression(messages, 2000)


def test_transcript_cuts_tool_output_and_shows_calls():
    text = render_transcript(
        [
            {"role": "system", "content": "older summary"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "grep", "arguments": "{}"}}]},
            {"role": "tool", "name": "grep", "content": "A" * 300 + "MIDDLE" + "B" * 300},
        ]
    )
    assert "[EARLIER SUMMARY]\nolder summary" in text and "[ASSISTANT CALLS grep] {}" in text
    assert "A" * 250 in text and "B" * 250 in text and "MIDDLE" not in text and "characters cut" in text


async def test_summarise_prompt_and_result(fake):
    fake.push("  the summary  ")
    client = make_client(settings_for(fake))
    summary = await summarise(client, settings_for(fake), [{"role": "user", "content": "hello kubectl"}])
    await client.close()
    assert summary == "the summary"
    body = fake.requests[0]
    assert body["messages"][0]["content"] == SUMMARY_INSTRUCTIONS
    assert "[USER]\nhello kubectl" in body["messages"][1]["content"]
    assert body["temperature"] == 0.2 and "tools" not in body


async def test_summarise_fits_a_huge_transcript_into_the_window(fake):
    fake.push("short")
    settings = settings_for(fake, context_window=8000)
    client = make_client(settings)
    huge = [{"role": "user", "content": f"message {i} " + "z" * 1000} for i in range(200)]
    await summarise(client, settings, huge)
    await client.close()
    sent = fake.requests[0]["messages"][1]["content"]
    assert estimate_tokens([{"role": "user", "content": sent}]) < 8000
    assert "message 0 " in sent and "message 199 " in sent and "omitted" in sent


async def test_summarise_retries_transient_then_raises_or_rejects_empty(fake):
    settings = settings_for(fake)
    client = make_client(settings)
    fake.push(Reply(status=503, error="x"), "after retry")
    assert await summarise(client, settings, [{"role": "user", "content": "q"}], backoff=0.01) == "after retry"
    fake.push(Reply(text=""))
    with pytest.raises(ValueError, match="empty summary"):
        await summarise(client, settings, [{"role": "user", "content": "q"}])
    with pytest.raises(ValueError, match="empty"):
        await summarise(client, settings, [])
    await client.close()


async def test_compress_session_creates_child_and_compacts_parent(fake, db):
    old = seed(db)
    fake.push("Ana deployed billing with kubectl rollout; done.")
    settings = settings_for(fake)
    client = make_client(settings)
    child = await compress_session(db, old, client, settings)
    await client.close()

    assert child != old
    info = db.get_session(child)
    assert info["parent_session_id"] == old and info["title"] == "my project #2"
    assert (info["session_key"], info["user_id"], info["chat_type"], info["source"]) == (KEY, "7", "dm", "telegram")
    conversation = db.get_messages_as_conversation(child)
    assert len(conversation) == 1 and conversation[0]["role"] == "system"
    assert "Ana deployed billing with kubectl rollout; done." in conversation[0]["content"]
    assert old in conversation[0]["content"]

    assert db.get_messages_as_conversation(old) == []
    kept = db.get_messages(old, include_inactive=True)
    assert len(kept) == 4 and all(r["compacted"] == 1 and r["active"] == 0 for r in kept)
    assert db.get_session(old)["end_reason"] == "compressed"
    assert db.get_key_entry(KEY)["session_id"] == child
    hits = db.search_messages("billing kubectl")
    assert old in {h["session_id"] for h in hits}  # the compacted history is still found
    assert db.get_root(child) == old

    # the transcript the model saw had the tool output cut
    transcript = fake.requests[0]["messages"][1]["content"]
    assert "rollout complete" in transcript and "x" * 600 not in transcript

    # a second compression continues the lineage
    fake.push("second summary")
    client = make_client(settings)
    grandchild = await compress_session(db, child, client, settings)
    await client.close()
    assert db.get_session(grandchild)["title"] == "my project #3"
    assert db.get_session(grandchild)["parent_session_id"] == child
    assert "[EARLIER SUMMARY]" in fake.requests[1]["messages"][1]["content"]
    assert set(db.get_lineage(old)) == {old, child, grandchild}


async def test_child_session_continues_in_the_agent_loop(fake, db):
    old = seed(db)
    fake.push("SUMMARY: billing deployed")
    settings = settings_for(fake)
    client = make_client(settings)
    child = await compress_session(db, old, client, settings)
    agent = Agent(client, settings, ToolRegistry(), "BASE PROMPT", owns_client=True)

    async def persist(message):
        await db.aappend_message(child, message["role"], message.get("content"))

    result = await agent.run_turn(
        db.get_messages_as_conversation(child), "what did we deploy?", ToolContext(session_id=child), persist
    )
    await agent.close()
    assert result.error is None
    sent = fake.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]  # the summary joined the system prompt
    assert sent[0]["content"].startswith("BASE PROMPT") and "SUMMARY: billing deployed" in sent[0]["content"]


async def test_failed_summary_changes_nothing(fake, db):
    old = seed(db)
    fake.push(*[Reply(status=500, error="down")] * 3)  # three tries, all failing
    settings = settings_for(fake)
    client = make_client(settings)
    before = db.count_sessions()
    with pytest.raises(openai.InternalServerError):
        await compress_session(db, old, client, settings, backoff=0.01)
    await client.close()
    assert len(fake.requests) == 3 and db.count_sessions() == before
    assert len(db.get_messages_as_conversation(old)) == 4
    assert db.get_session(old)["ended_at"] is None and db.get_key_entry(KEY)["session_id"] == old


async def test_untitled_unknown_and_empty_sessions(fake, db):
    settings = settings_for(fake)
    client = make_client(settings)
    old = seed(db, title=None)
    fake.push("s")
    child = await compress_session(db, old, client, settings)
    assert db.get_session(child)["title"] is None
    with pytest.raises(UnknownSession):
        await compress_session(db, "20990101_000000_ffffffff", client, settings)
    db.create_session("20260101_000000_bbbbbbbb", "local")
    with pytest.raises(ValueError, match="no messages"):
        await compress_session(db, "20260101_000000_bbbbbbbb", client, settings)
    await client.close()
    assert len(fake.requests) == 1
