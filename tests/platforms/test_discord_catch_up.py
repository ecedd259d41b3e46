"""Discord's catch-up in process (the SIGKILL case is tests/runtime/test_discord_catch_up_crash.py):
what was sent while the gateway was stopped is read back on READY, oldest first, within the count
per channel, and a channel's later messages are read on the next connect; none older than
`catch_up_hours`; nothing is taken in twice."""

from __future__ import annotations

from tests.fakes.discord_server import FakeDiscord
from tests.fakes.loopback import wait_until
from tests.fakes.platform_stack import running
from tests.platforms.test_discord_e2e import ANN_ID, DM_CHANNEL, Stack


async def started_fake() -> FakeDiscord:
    discord = FakeDiscord(heartbeat_interval_ms=500)
    discord.add_dm(DM_CHANNEL, discord.user(ANN_ID, "ann"))
    return await discord.start()


def texts(stack: Stack) -> list[str]:
    return [m["content"] for m in stack.replies(DM_CHANNEL)]


async def missed_while_stopped(stack: Stack, n: int) -> list[str]:
    d = stack.discord
    await d.user_says(DM_CHANNEL, d.user(ANN_ID, "ann"), "hello")
    await stack.wait_replies(DM_CHANNEL, 1)
    await stack.stop()
    said = [f"missed {i}" for i in range(n)]
    for text in said:
        await d.user_says(DM_CHANNEL, d.user(ANN_ID, "ann"), text)
    await stack.start()
    return said


async def test_missed_messages_are_read_back_oldest_first_within_the_count(tmp_path):
    d = await started_fake()
    async with running(d, lambda llm: Stack(tmp_path, d, llm, catch_up_limit=3)) as stack:
        said = await missed_while_stopped(stack, 4)
        # the page of 3 after "hello" holds the bot's own reply to it, then two missed messages
        await wait_until(lambda: len(texts(stack)) == 3, 15)
        assert texts(stack)[1:] == ["echo: missed 0", "echo: missed 1"]
        assert d.history_reads[-1][1]["limit"] == "3"
        await stack.restart()  # the rest on the next connect, after the newest taken in
        await wait_until(lambda: len(texts(stack)) == 5, 15)
        assert texts(stack)[3:] == ["echo: missed 2", "echo: missed 3"]
        await stack.restart()  # read again from the newest: nothing new, nothing twice
        await wait_until(lambda: len(d.history_reads) == 3, 15)
        await stack.runner.drain()
        assert texts(stack) == ["echo: hello", *(f"echo: {t}" for t in said)]


async def test_nothing_older_than_catch_up_hours_is_read(tmp_path):
    d = await started_fake()
    async with running(d, lambda llm: Stack(tmp_path, d, llm, catch_up_hours=0)) as stack:
        await missed_while_stopped(stack, 2)
        await wait_until(lambda: d.history_reads, 15)  # read after "now": the missed ones are older
        await stack.runner.drain()
        assert texts(stack) == ["echo: hello"]
