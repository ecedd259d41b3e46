"""Every session move is one transaction through the store (gateway.sessions.store): a chat's
first message, /new, /resume and compression each commit the move once, and the key and the
sessions it joins or leaves change together."""

from __future__ import annotations

from tests.fakes.gateway_harness import Gateway


class Commits:
    """Counts the commits that changed something the mirrors follow (a session, a message, a key).
    A command's de-duplication mark is a commit too, but one with no such change."""

    def __init__(self, gw: Gateway) -> None:
        self.changing = 0
        gw.db.add_commit_listener(self._on_commit)

    def _on_commit(self, events: list) -> None:
        if events:
            self.changing += 1


def commits(gw: Gateway) -> int:
    gw.db.write(lambda conn, events: None)  # every earlier commit (and its listener call) is done
    return gw.commits.changing


async def test_new_resume_and_compress_each_commit_once(tmp_path):
    async with Gateway(tmp_path) as gw:
        gw.commits = Commits(gw)
        await gw.say("/new Trip")
        trip = gw.session_id()
        await gw.say("packing list for the trip")
        await gw.say("/new")
        fresh = gw.session_id()

        before = commits(gw)
        reply = (await gw.say("/resume Trip"))[0]
        assert reply.startswith(f"Resumed “Trip” ({trip})")
        assert commits(gw) - before == 1  # reopen, touch, move the key, end the one left: together
        assert gw.db.get_session(fresh)["end_reason"] == "resume"
        assert gw.db.get_session(trip)["ended_at"] is None

        await gw.say("and a tent")  # (one exchange is too short to compress: issue 15.11)
        before = commits(gw)
        gw.fake.push("the trip: a packing list")
        reply = (await gw.say("/compress"))[0]
        child = gw.session_id()
        assert child != trip and child in reply
        assert commits(gw) - before == 1  # child, summary, compaction, end, key move: one commit
        assert gw.db.get_session(trip)["end_reason"] == "compressed"
        assert gw.db.get_session(child)["parent_session_id"] == trip
        assert gw.db.get_messages_as_conversation(trip) == []

        before = commits(gw)
        await gw.say("/new")
        assert commits(gw) - before == 1


async def test_resume_counts_as_activity_in_the_same_commit(tmp_path):
    """Resuming touches the session (else an idle reset would end it on the next message)."""
    async with Gateway(tmp_path) as gw:
        gw.commits = Commits(gw)
        await gw.say("/new Old one")
        old = gw.session_id()
        await gw.say("something")
        await gw.say("/new")
        gw.clock.advance(3 * 86400)
        before = commits(gw)
        await gw.say(f"/resume {old}")
        assert commits(gw) - before == 1
        assert gw.db.get_session(old)["last_active_at"] >= gw.clock.now - 60
