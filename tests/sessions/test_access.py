"""gateway.sessions.access rules, and the runner applying them (refusal in DMs, silence in groups)."""

from __future__ import annotations

import pytest

from gateway.sessions.access import AccessConfigError, AccessControl, PlatformAccess, may_see_session
from gateway.source import SessionSource
from tests.fakes.gateway_harness import Gateway


def src(chat_type="dm", user="1", chat="1", platform="telegram", alt=None):
    return SessionSource(platform=platform, chat_id=chat, chat_type=chat_type, user_id=user, user_id_alt=alt)


def control(**section) -> AccessControl:
    return AccessControl.from_config({"telegram": section})


def test_default_deny_when_nothing_configured():
    ac = AccessControl.from_config({})
    assert not ac.check(src()).allowed
    assert not ac.check(src("group", chat="-1"), mentioned=True).allowed
    local = SessionSource(platform="local", chat_id="term", chat_type="dm", user_id="me")
    decision = ac.check(local)
    assert decision.allowed and decision.is_admin


def test_allowlist_and_wildcard_and_alt_id():
    ac = control(allowed_users=["1", 2])
    assert ac.check(src(user="1")).allowed
    assert ac.check(src(user="2")).allowed
    assert not ac.check(src(user="3")).allowed
    assert control(allowed_users=["ou_union"]).check(src(user="x", alt="ou_union")).allowed
    assert control(allowed_users=["*"]).check(src(user="anyone")).allowed
    assert control(admins=["9"]).check(src(user="9")).is_admin
    assert (
        not AccessControl.from_config({"telegram": {"allowed_users": ["*"]}}).check(src(platform="discord")).allowed
    )  # per platform


@pytest.mark.parametrize(
    "policy,chat,user,allowed",
    [
        ("open", "-1", "1", True),
        ("open", "-1", "3", False),  # still needs allowed_users
        ("allowlist", "-1", "1", True),
        ("allowlist", "-2", "1", False),
        ("allowlist", "-2", "9", True),  # admins are not bound by the list
        ("blacklist", "-2", "1", False),
        ("blacklist", "-1", "1", True),
        ("admin_only", "-1", "1", False),
        ("admin_only", "-1", "9", True),
        ("disabled", "-1", "9", False),
    ],
)
def test_group_policies(policy, chat, user, allowed):
    ac = control(allowed_users=["1"], admins=["9"], group_policy=policy, group_allowlist=["-1"], group_blacklist=["-2"])
    assert ac.check(src("group", user=user, chat=chat), mentioned=True).allowed is allowed


def test_require_mention_in_groups():
    ac = control(allowed_users=["*"])
    group = src("group", chat="-1")
    decision = ac.check(group)
    assert not decision.allowed and not decision.addressed
    assert ac.check(group, mentioned=True).allowed
    assert ac.check(group, reply_to_bot=True).allowed
    assert ac.check(group, is_command=True).allowed
    assert ac.check(src("thread", chat="-1")).addressed is False
    assert control(allowed_users=["*"], require_mention=False).check(group).allowed
    assert ac.check(src("dm")).allowed  # DMs need no mention


def test_bad_config_names_the_key():
    with pytest.raises(AccessConfigError, match="platforms.telegram.group_policy"):
        control(group_policy="sometimes")
    with pytest.raises(AccessConfigError, match="platforms.telegram.allowed_users"):
        control(allowed_users={"a": 1})
    with pytest.raises(AccessConfigError, match="require_mention"):
        control(require_mention="maybe")


def test_single_owner():
    assert AccessControl.from_config({}).single_owner()
    assert control(allowed_users=["1"], admins=["1"]).single_owner()
    assert not control(allowed_users=["1", "2"]).single_owner()
    assert not control(allowed_users=["*"]).single_owner()


def test_may_see_session():
    me = src(user="1")
    mine = {"id": "s", "user_id": "1"}
    theirs = {"id": "t", "user_id": "2"}
    assert may_see_session(mine, [], me, is_admin=False, single_owner=False)
    assert not may_see_session(theirs, ["2"], me, is_admin=False, single_owner=False)
    assert may_see_session(theirs, ["2", "1"], me, is_admin=False, single_owner=False)  # took part
    assert may_see_session(theirs, [], me, is_admin=True, single_owner=False)
    assert may_see_session(theirs, [], me, is_admin=False, single_owner=True)
    assert not may_see_session(theirs, [], src(user=None), is_admin=False, single_owner=False)
    assert PlatformAccess().group_policy == "open"


async def test_runner_refuses_strangers_in_dm_once_and_ignores_groups(tmp_path):
    platforms = {"telegram": {"token": "t", "allowed_users": ["1"]}}
    async with Gateway(tmp_path, platforms=platforms) as gw:
        refused = await gw.say("hello", chat_id="7", user_id="7")
        assert len(refused) == 1 and "private" in refused[0] and "7" in refused[0]
        assert await gw.say("hello again", chat_id="7", user_id="7") == []  # not repeated
        assert await gw.say("hi all", chat_id="-3", user_id="7", chat_type="group", mentioned=True) == []
        assert gw.fake.requests == [] and gw.db.count_sessions() == 0
        # the allowed person in a group: only when addressed
        assert await gw.say("chatting", chat_id="-3", user_id="1", chat_type="group") == []
        assert await gw.say("hey bot", chat_id="-3", user_id="1", chat_type="group", mentioned=True) == [
            "echo: hey bot"
        ]
        assert await gw.say("and you?", chat_id="-3", user_id="1", chat_type="group", reply_to_bot=True) == [
            "echo: and you?"
        ]
        assert gw.db.count_sessions() == 1
