"""`Agent.close` closes only a client the agent owns: agents borrow the gateway's shared client
(gateway.runtime.agent_factory), and closing it would break every other agent's next call."""

from __future__ import annotations

from agent.llm import ModelSettings, make_client
from agent.loop import Agent
from agent.tools import ToolRegistry


async def test_closing_an_agent_leaves_a_borrowed_client_open():
    settings = ModelSettings(base_url="http://127.0.0.1:9/v1", api_key="k")
    shared = make_client(settings)
    first = Agent(shared, settings, ToolRegistry(), "prompt")
    Agent(shared, settings, ToolRegistry(), "prompt")
    await first.close()
    assert not shared.is_closed()  # the second agent still uses it
    await shared.close()


async def test_an_agent_closes_the_client_it_owns():
    settings = ModelSettings(base_url="http://127.0.0.1:9/v1", api_key="k")
    own = make_client(settings)
    agent = Agent(own, settings, ToolRegistry(), "prompt", owns_client=True)
    await agent.close()
    assert own.is_closed()
