"""`/attach` is the terminal's (the local adapter reads it); typed on a chat platform it gets what to
do there, not "unknown command", and /help there does not offer it."""

from __future__ import annotations

from tests.fakes.gateway_harness import Gateway


async def test_attach_on_a_chat_platform_says_to_send_the_file(tmp_path):
    async with Gateway(tmp_path) as gw:
        assert gw.adapter.platform.value != "local"
        [answer] = await gw.say("/attach /etc/hosts look")
        assert answer == "/attach is for the terminal. Here, send the file itself (with a caption if you like)."
        assert "/attach" not in (await gw.say("/help"))[0]
        assert gw.fake.requests == []
