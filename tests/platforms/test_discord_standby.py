"""Discord on Postgres replicas (gateway.runtime.leases): only the replica leading the bot holds
the gateway connection; the others are logged in for REST, so a chat taken over by any replica
can still be answered. The real adapter against the fake Discord."""

from __future__ import annotations

from gateway.source import SessionSource
from platforms.base import InboundMessage
from platforms.discord.adapter import DiscordAdapter
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.loopback import wait_until

GUILD, DM_CHANNEL, ANN_ID = 500, 700, 42


async def test_a_standby_replica_sends_over_rest_and_holds_the_gateway_only_while_it_leads() -> None:
    discord = FakeDiscord(heartbeat_interval_ms=500)
    discord.add_guild(GUILD, "Team")
    discord.add_dm(DM_CHANNEL, discord.user(ANN_ID, "ann"))
    await discord.start()
    adapter = DiscordAdapter(discord.settings())
    got: list[InboundMessage] = []

    async def on_message(msg: InboundMessage) -> None:
        got.append(msg)

    try:
        assert adapter.leader_key() is not None
        adapter.await_leadership()
        await adapter.start(on_message)
        dm = SessionSource(platform="discord", chat_id=str(DM_CHANNEL), chat_type="dm", user_id=str(ANN_ID))
        await adapter.send(dm, "from a standby replica")
        assert [m["content"] for m in discord.sent] == ["from a standby replica"]
        assert not discord.identifies and adapter.health().ready  # no gateway, and ready for /readyz

        await adapter.lead(True)
        await discord.wait_for(lambda: discord.live and discord.identifies, 10)
        await wait_until(lambda: adapter.health().ready, 10)
        await discord.user_says(DM_CHANNEL, discord.user(ANN_ID, "ann"), "hello leader")
        await wait_until(lambda: [m.text for m in got] == ["hello leader"], 10)

        await adapter.lead(False)  # another replica leads now: the gateway goes, sending stays
        await discord.wait_for(lambda: not discord.live, 10)
        await adapter.send(dm, "standby again")
        assert [m["content"] for m in discord.sent][-1] == "standby again"
    finally:
        await adapter.stop()
        await discord.stop()
