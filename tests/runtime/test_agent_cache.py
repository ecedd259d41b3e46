"""gateway.runtime.agent_cache: LRU by count, idle TTL, pinned (running) agents, closing; and the runner's
use of it (eviction closes the agent's own client; the memory snapshot is frozen per session)."""

from __future__ import annotations

import asyncio

from agent.llm import ModelSettings
from gateway.runtime.agent_cache import AgentCache
from gateway.runtime.agent_factory import AgentFactory
from tests.fakes.gateway_harness import Clock, Gateway
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall


class Thing:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = 0

    async def close(self) -> None:
        self.closed += 1


async def test_lru_by_count_closes_evicted():
    clock = Clock(0)
    cache = AgentCache(max_agents=2, idle_ttl=100, clock=clock)
    a, b, c = Thing("a"), Thing("b"), Thing("c")
    await cache.put("a", a)
    clock.advance(1)
    await cache.put("b", b)
    clock.advance(1)
    assert cache.get("a") is a  # a is now the most recently used
    await cache.put("c", c)
    assert cache.session_ids() == ["a", "c"] and b.closed == 1 and cache.evictions == 1
    assert not a.closed and not c.closed


async def test_idle_ttl():
    clock = Clock(0)
    cache = AgentCache(max_agents=10, idle_ttl=60, clock=clock)
    a, b = Thing("a"), Thing("b")
    await cache.put("a", a)
    clock.advance(50)
    await cache.put("b", b)
    clock.advance(15)
    assert await cache.sweep() == 1
    assert cache.session_ids() == ["b"] and a.closed == 1


async def test_running_agent_is_never_evicted():
    clock = Clock(0)
    cache = AgentCache(max_agents=1, idle_ttl=10, clock=clock)
    a, b = Thing("a"), Thing("b")
    await cache.put("a", a)
    cache.acquire("a")
    await cache.put("b", b)  # over the bound, but a is running and b is about to be used
    assert sorted(cache.session_ids()) == ["a", "b"] and not a.closed and not b.closed
    assert cache.is_running("a") and not cache.is_running("b")
    await cache.put("c", Thing("c"))  # b is idle: it goes; a stays
    assert sorted(cache.session_ids()) == ["a", "c"] and b.closed == 1 and not a.closed
    clock.advance(100)
    assert await cache.sweep(keep="c") == 0 and "a" in cache  # TTL does not touch a running agent
    await cache.release("a", a)  # released counts as used now; over the bound, the idle LRU goes
    assert cache.session_ids() == ["a"]
    clock.advance(11)
    await cache.sweep()
    assert "a" not in cache and a.closed == 1


async def test_drop_exactly_one_and_drop_while_running():
    cache = AgentCache(max_agents=10, idle_ttl=1000)
    a, b = Thing("a"), Thing("b")
    await cache.put("a", a)
    await cache.put("b", b)
    cache.acquire("a")
    assert await cache.drop("a")
    assert "a" not in cache and "b" in cache
    assert not a.closed  # its turn is still running
    await cache.release("a", a)
    assert a.closed == 1 and not b.closed
    assert not await cache.drop("zzz")
    await cache.close_all()
    assert b.closed == 1 and len(cache) == 0


async def test_runner_evicts_and_closes_agent_clients(tmp_path):
    async with FakeOpenAI() as fake:
        settings = ModelSettings(base_url=fake.base_url, api_key="k", name="fake-model")
        factory = AgentFactory(settings, tmp_path / "home", share_client=False)
        gw = Gateway(
            tmp_path,
            fake=fake,
            agent_factory=factory,
            gateway={"agent_cache": {"max_agents": 2, "idle_ttl_minutes": 10}},
        )
        async with gw:
            agents = {}
            for chat in ("1", "2", "3"):
                await gw.say("hi", chat_id=chat, user_id=chat)
                sid = gw.session_id(chat, chat)
                agents[chat] = gw.runner.cache.get(sid)
            assert gw.runner.cache_size() == 2
            first = agents["1"]
            assert first.closed and first.agent.client.is_closed()
            assert not agents["3"].closed and not agents["3"].agent.client.is_closed()
            # idle TTL on the runner's clock
            gw.clock.advance(11 * 60)
            await gw.say("back", chat_id="1", user_id="1")
            assert gw.runner.cache_size() == 1 and agents["3"].closed
            assert factory.built == 4


async def test_turn_in_progress_keeps_its_agent(tmp_path):
    gw = Gateway(tmp_path, gateway={"agent_cache": {"max_agents": 1, "idle_ttl_minutes": 10}})
    async with gw:
        release = asyncio.Event()
        gw.fake.push(Reply(text="slow", wait=release))
        await gw.adapter.inject("slow one", chat_id="1", user_id="1")
        await gw.fake.wait_requests(1)
        slow = gw.runner.cache.get(gw.session_id("1", "1"))
        await gw.adapter.inject("quick", chat_id="2", user_id="2")
        await gw.adapter.wait_sent(1, chat_id="2")
        assert gw.runner.cache.get(gw.session_id("1", "1")) is slow and not slow.closed
        release.set()
        await gw.runner.drain()
        assert gw.adapter.texts("1") == ["slow"]
        assert gw.runner.cache_size() == 1


async def test_memory_snapshot_is_frozen_per_session(tmp_path):
    async with Gateway(tmp_path) as gw:
        home = gw.config.home
        home.mkdir(parents=True, exist_ok=True)
        (home / "USER.md").write_text("Name: Ana", encoding="utf-8")
        await gw.say("hi")
        (home / "USER.md").write_text("Name: Changed", encoding="utf-8")
        await gw.say("again")
        prompts = [r["messages"][0]["content"] for r in gw.fake.requests]
        assert "Name: Ana" in prompts[0] and prompts[0] == prompts[1]
        await gw.say("/new")
        await gw.say("fresh")
        assert "Name: Changed" in gw.fake.requests[-1]["messages"][0]["content"]


async def test_cached_conversation_matches_the_database(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("first")
        # a session created for this message has nothing to read back: no DB read of its history
        assert gw.runner.conversations.misses == 0 and gw.runner.conversations.hits == 1
        gw.fake.push(Reply(tool_calls=[ToolCall("memory", {"action": "read", "target": "memory"})]))
        gw.fake.push("after the tool")
        await gw.say("use a tool")
        sid = gw.session_id()
        key = gw.store.key_for(gw.adapter.source())
        warm = gw.runner.conversations.get(sid, key)
        assert warm == gw.db.get_messages_as_conversation(sid)
        assert [m["role"] for m in warm] == ["user", "assistant", "user", "assistant", "tool", "assistant"]
        # the next turn is served from it, and sees exactly what the DB holds
        await gw.say("third")
        sent = gw.fake.requests[-1]["messages"][1:]
        assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "tool", "assistant", "user"]
        # /undo rewrites history in the DB: the cached copy goes with the agent
        await gw.say("/undo")
        await gw.say("fourth")
        sent = gw.fake.requests[-1]["messages"][1:]
        assert [m.get("content") for m in sent][-1] == "fourth" and "third" not in [m.get("content") for m in sent]
        assert gw.runner.conversations.get(sid, key) == gw.db.get_messages_as_conversation(sid)
        # the warm copy outlives the agent's eviction (it is bounded by size, not count)
        await gw.runner.cache.drop(sid)
        assert gw.runner.conversations.get(sid, key) is not None


def test_conversation_cache_bounds_and_owners():
    from gateway.runtime.conversations import MESSAGE_OVERHEAD, ConversationCache

    cache = ConversationCache(max_bytes=3 * (MESSAGE_OVERHEAD + 10))
    cache.put("a", "chat-a", [{"role": "user", "content": "x" * 10}])
    cache.put("b", "chat-b", [{"role": "user", "content": "y" * 10}])
    cache.append("a", "chat-a", {"role": "assistant", "content": "z" * 10})
    assert cache.get("a", "chat-a") == [
        {"role": "user", "content": "x" * 10},
        {"role": "assistant", "content": "z" * 10},
    ]
    cache.append("b", "chat-b", {"role": "assistant", "content": "w" * 10})  # over the bound: LRU goes
    assert "a" not in cache and cache.get("b", "chat-b") is not None
    assert cache.bytes <= cache.max_bytes
    # another chat in the same session: the copy is not trusted
    cache.append("b", "chat-c", {"role": "user", "content": "from elsewhere"})
    assert "b" not in cache
    cache.put("c", "chat-c", [])
    assert cache.get("c", "chat-d") is None and "c" not in cache
