"""/resume and /search end to end, including the privacy rule."""

from __future__ import annotations

from gateway.db import new_session_id
from tests.fakes.gateway_harness import Gateway

ANA = {"chat_id": "1", "user_id": "1", "user_name": "Ana"}
BO_GROUP = {"chat_id": "-9", "user_id": "2", "chat_type": "group", "user_name": "Bo"}
ADMIN_GROUP = {"chat_id": "-9", "user_id": "999", "chat_type": "group"}
TEAM = {"telegram": {"token": "t", "allowed_users": ["*"], "admins": ["999"]}}


async def titled_sessions(gw: Gateway, *titles: str, who: dict = ANA) -> list[str]:
    ids = []
    for title in titles:
        await gw.say(f"/new {title}", **who)
        await gw.say(f"notes about {title.lower()}", **who)
        ids.append(gw.session_id(who["chat_id"], who["user_id"], who.get("chat_type", "dm")))
    return ids


async def test_resume_list_then_number_title_and_id(tmp_path):
    async with Gateway(tmp_path, platforms=TEAM) as gw:
        a1, a2, a3 = await titled_sessions(gw, "Alpha", "Beta", "Gamma")
        await gw.say("/new", **ANA)
        listing = (await gw.say("/resume", **ANA))[0]
        lines = listing.splitlines()
        assert lines[0] == "Your recent conversations:"
        assert lines[1].startswith("1. Gamma — 2 messages") and a3 in lines[1]
        assert lines[2].startswith("2. Beta") and lines[3].startswith("3. Alpha")
        reply = (await gw.say("/resume 2", **ANA))[0]
        assert reply.startswith(f"Resumed “Beta” ({a2}): 2 messages")
        assert gw.session_id("1", "1") == a2
        assert gw.db.get_session(a2)["ended_at"] is None
        await gw.say("back to beta", **ANA)
        sent = [m["content"] for m in gw.fake.requests[-1]["messages"][1:]]
        assert sent == ["notes about beta", "echo: notes about beta", "back to beta"]
        assert (await gw.say("/resume alpha", **ANA))[0].startswith(f"Resumed “Alpha” ({a1})")
        assert (await gw.say(f"/resume {a3}", **ANA))[0].startswith(f"Resumed “Gamma” ({a3})")
        assert await gw.say(f"/resume {a3}", **ANA) == [f"You are already in “Gamma” ({a3})."]
        assert (await gw.say("/resume 9", **ANA))[0].startswith("There is no number 9")
        assert (await gw.say("/resume nothing-like-this", **ANA))[0].startswith("No conversation of yours matches")


async def test_resume_list_is_empty_for_a_newcomer(tmp_path):
    async with Gateway(tmp_path, platforms=TEAM) as gw:
        await titled_sessions(gw, "Alpha")
        reply = (await gw.say("/resume", chat_id="5", user_id="5"))[0]
        assert reply.startswith("You have no titled conversations to resume yet")


async def test_group_member_cannot_resume_or_search_a_peers_private_session(tmp_path):
    async with Gateway(tmp_path, platforms=TEAM) as gw:
        [secret] = await titled_sessions(gw, "Ana secret")
        await gw.say("my bank pin is zebra", **ANA)
        not_found = "No conversation of yours matches"
        assert (await gw.say(f"/resume {secret}", **BO_GROUP))[0].startswith(not_found)
        assert (await gw.say(f"/resume {secret[:12]}", **BO_GROUP))[0].startswith(not_found)
        assert (await gw.say("/resume Ana secret", **BO_GROUP))[0].startswith(not_found)
        assert "Ana secret" not in (await gw.say("/resume", **BO_GROUP))[0]
        assert (await gw.say("/search zebra", **BO_GROUP))[0].startswith("No conversation of yours mentions")
        assert gw.session_id("-9", "2", "group") != secret
        # an admin may reach it
        found = (await gw.say("/search zebra", **ADMIN_GROUP))[0]
        assert secret in found and "Ana secret" in found
        assert (await gw.say(f"/resume {secret}", **ADMIN_GROUP))[0].startswith("Resumed “Ana secret”")
        # and Ana herself, from the group
        ana_group = {**BO_GROUP, "user_id": "1", "user_name": "Ana"}
        assert secret in (await gw.say("/search zebra", **ana_group))[0]


async def test_single_owner_reaches_every_session(tmp_path):
    owner = {"telegram": {"token": "t", "allowed_users": ["1"]}}
    async with Gateway(tmp_path, platforms=owner) as gw:
        assert gw.runner.single_owner
        other = new_session_id()
        gw.db.create_session(other, "discord", user_id="someone-else", title="Imported notes")
        gw.db.append_message(other, "user", "the walrus migration plan", user_id="someone-else")
        assert other in (await gw.say("/search walrus", **ANA))[0]
        assert (await gw.say("/resume Imported notes", **ANA))[0].startswith(f"Resumed “Imported notes” ({other})")

    async with Gateway(tmp_path / "team", platforms=TEAM) as gw:
        assert not gw.runner.single_owner
        other = new_session_id()
        gw.db.create_session(other, "discord", user_id="someone-else", title="Imported notes")
        gw.db.append_message(other, "user", "the walrus migration plan", user_id="someone-else")
        assert other not in (await gw.say("/search walrus", **ANA))[0]
        assert (await gw.say("/resume Imported notes", **ANA))[0].startswith("No conversation of yours")


async def test_search_lists_sessions_ready_for_resume(tmp_path):
    async with Gateway(tmp_path, platforms=TEAM) as gw:
        await gw.say("/new Deploy notes", **ANA)
        await gw.say("the nginx reload failed with error 502 on host web-3", **ANA)
        deploy = gw.session_id("1", "1")
        await gw.say("/new Cooking", **ANA)
        await gw.say("a recipe for bread", **ANA)
        text = (await gw.say("/search nginx 502", **ANA))[0]
        lines = text.splitlines()
        assert lines[0] == "Conversations matching “nginx 502”:"
        assert lines[1].startswith("• Deploy notes — ") and lines[1].endswith(f"/resume {deploy}")
        assert "nginx" in lines[2]
        assert lines[3] == "  ↳ echo: the nginx reload failed with error 502 on host web-3"  # the reply it got
        assert "Cooking" not in text
        # the current conversation is not offered back
        assert (await gw.say("/search bread", **ANA))[0].startswith("No conversation of yours mentions")
        recent = (await gw.say("/search", **ANA))[0]
        assert "Deploy notes" in recent and f"/resume {deploy}" in recent


async def test_resume_follows_a_compressed_chain_to_its_newest_part(tmp_path):
    async with Gateway(tmp_path, platforms=TEAM) as gw:
        await gw.say("hello", **ANA)
        root, child = new_session_id(), new_session_id()
        gw.db.create_session(root, "telegram", user_id="1", title="Trip")
        gw.db.append_message(root, "user", "plan the trip", user_id="1")
        gw.db.create_session(child, "telegram", user_id="1", title="Trip #2", parent_session_id=root)
        gw.db.append_message(child, "system", "summary of the trip so far")
        reply = (await gw.say("/resume Trip", **ANA))[0]
        assert reply.startswith(f"Resumed “Trip #2” ({child})")
        assert gw.session_id("1", "1") == child
