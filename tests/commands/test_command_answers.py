"""Chat commands say what they did (issue 15.6-15.12): found by a newcomer trying each one."""

from __future__ import annotations

from tests.fakes.gateway_harness import Gateway


async def test_undo_says_how_many_exchanges_it_undid(tmp_path):
    async with Gateway(tmp_path) as gw:
        for text in ("one", "two", "three"):
            await gw.say(text)
        reply = (await gw.say("/undo 5"))[0]
        assert reply.startswith("Undid the 3 exchanges there were (6 messages; you asked for 5).")
        assert (await gw.say("/undo"))[0] == "Nothing to undo in this conversation."
        await gw.say("four")
        assert (await gw.say("/undo 1"))[0].startswith("Undid the last exchange (2 messages)")
        await gw.say("five")
        reply = (await gw.say("/undo 5"))[0]
        assert reply.startswith("Undid the only exchange there was (2 messages; you asked for 5).")
        assert ") (" not in reply


async def test_search_after_compress_says_no_other_conversation(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("our nginx config drops websocket upgrades")
        await gw.say("and what about timeouts?")
        gw.fake.push("SUMMARY: nginx websocket upgrades, timeouts")
        assert "summarised" in (await gw.say("/compress"))[0]
        reply = (await gw.say("/search nginx"))[0]
        assert reply.startswith("No other conversation of yours mentions “nginx”")
        assert "this conversation" in reply  # and says where it is


async def test_unknown_command_suggests_the_close_one(tmp_path):
    async with Gateway(tmp_path) as gw:
        assert await gw.say("/serach nginx") == [
            "Unknown command /serach. Did you mean /search? Send /help for the list of commands."
        ]
        assert await gw.say("/frobnicate now") == ["Unknown command /frobnicate. Send /help for the list of commands."]
        assert gw.fake.requests == []


async def test_a_long_title_is_cut_and_says_so(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("hello")
        reply = (await gw.say("/title " + "a" * 300))[0]
        assert "cut to 100 characters" in reply
        assert gw.db.get_session(gw.session_id())["title"] == "a" * 100


async def test_a_numeric_title_is_refused(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("hello")
        reply = (await gw.say("/title 1"))[0]
        assert "number" in reply and "/resume 1" in reply
        assert gw.db.get_session(gw.session_id())["title"] is None
        reply = (await gw.say("/new 42"))[0]
        assert "number" in reply
        assert (await gw.say("/title 2024 budget"))[0].startswith("Titled this conversation “2024 budget”")


async def test_resume_by_part_of_a_title(tmp_path):
    async with Gateway(tmp_path) as gw:
        for title in ("deploy script", "网关部署", "deploy notes", "groceries"):
            await gw.say(f"/new {title}")
            await gw.say(f"about {title}")
        await gw.say("/new")
        reply = (await gw.say("/resume script"))[0]
        assert reply.startswith("Resumed “deploy script”")
        reply = (await gw.say("/resume 网关"))[0]
        assert reply.startswith("Resumed “网关部署”")
        reply = (await gw.say("/resume DEPLOY"))[0]  # two match: a numbered list to pick from
        assert "deploy script" in reply and "deploy notes" in reply and "groceries" not in reply
        assert "1." in reply and "2." in reply
        first = reply.split("1. ", 1)[1].split(" —", 1)[0]
        assert (await gw.say("/resume 1"))[0].startswith(f"Resumed “{first}”")
        assert (await gw.say("/resume zebra"))[0].startswith("No conversation of yours matches “zebra”")


async def test_compress_refuses_a_one_exchange_session(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("just one question")
        before = gw.session_id()
        reply = (await gw.say("/compress"))[0]
        assert "too short" in reply
        assert gw.session_id() == before and len(gw.fake.requests) == 1  # no summary was asked for


async def test_search_snippets_quote_the_original_text(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("部署网关，然后重启服务：nginx 和 redis！")
        await gw.say("/new")
        reply = (await gw.say("/search nginx"))[0]
        assert "部署网关，然后重启服务：«nginx» 和 redis！" in reply


async def test_a_compressed_conversation_is_not_listed_as_0_messages(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("/title nginx notes")
        await gw.say("our nginx config drops websocket upgrades")
        await gw.say("and what about timeouts?")
        gw.fake.push("SUMMARY: nginx websocket upgrades, timeouts")
        assert "summarised" in (await gw.say("/compress"))[0]
        listing = (await gw.say("/resume"))[0]
        [line] = [x for x in listing.splitlines() if x.startswith(("1. nginx notes —", "2. nginx notes —"))]
        assert "0 messages" not in line and "summarised into a continuation" in line, listing


async def test_search_marks_an_address_whole_and_keeps_the_match_in_the_snippet(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("/new mail")
        await gw.say("write to ops@example.com about it; the example in the com port docs is different")
        await gw.say("/new runbook")
        await gw.say(
            "This is the runbook for the quarterly maintenance window, written down so nobody forgets it. "
            "step one: drain the walrus queue and wait until the board says empty. "
            "step two: walrus restart, then check the logs"
        )
        await gw.say("/new elsewhere")
        found = (await gw.say("/search ops@example.com"))[0]
        assert "«ops@example.com»" in found and "«example»" not in found and "«com»" not in found, found
        found = (await gw.say("/search walrus"))[0]
        [line] = [x for x in found.splitlines() if "step one" in x and "↳" not in x]
        assert line.count("«") == line.count("»") and "«…" not in line, found  # a mark is never cut open
