import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.source import InvalidSessionSource, Platform, SessionSource, build_session_key


def src(**kw):
    base = {"platform": "telegram", "chat_id": "100", "chat_type": "dm", "user_id": "7"}
    base.update(kw)
    return SessionSource(**base)


def test_dm_key_and_thread():
    assert build_session_key(src()) == "agent:main:telegram:dm:100"
    assert build_session_key(src(thread_id="55")) == "agent:main:telegram:dm:100:55"


def test_group_per_user_by_default_and_shared_when_disabled():
    a = src(chat_type="group", chat_id="-100200", user_id="1")
    b = src(chat_type="group", chat_id="-100200", user_id="2")
    assert build_session_key(a) == "agent:main:telegram:group:-100200:1"
    assert build_session_key(a) != build_session_key(b)
    assert build_session_key(a, group_sessions_per_user=False) == build_session_key(b, group_sessions_per_user=False)


def test_thread_shared_by_default_and_per_user_when_enabled():
    a = src(chat_type="forum", chat_id="-100200", thread_id="9", user_id="1")
    b = src(chat_type="forum", chat_id="-100200", thread_id="9", user_id="2")
    assert build_session_key(a) == build_session_key(b) == "agent:main:telegram:forum:-100200:9"
    assert build_session_key(a, thread_sessions_per_user=True).endswith(":9:1")
    d = SessionSource(platform=Platform.DISCORD, chat_id="555", chat_type="thread", user_id="1")
    assert build_session_key(d) == "agent:main:discord:thread:555"


def test_channel_key():
    s = SessionSource(platform="discord", chat_id="42", chat_type="channel", user_id="9")
    assert build_session_key(s) == "agent:main:discord:channel:42:9"


def test_feishu_union_id_preferred():
    s = SessionSource(platform="feishu", chat_id="oc_1", chat_type="group", user_id="ou_app1", user_id_alt="on_person")
    assert build_session_key(s).endswith(":on_person")
    assert s.person_id == "on_person"
    # the same person seen through another app (other open_id) keeps one key
    t = SessionSource(platform="feishu", chat_id="oc_1", chat_type="group", user_id="ou_app2", user_id_alt="on_person")
    assert build_session_key(s) == build_session_key(t)


def test_missing_user_in_group_is_rejected_not_merged():
    with pytest.raises(InvalidSessionSource, match="user_id"):
        build_session_key(src(chat_type="group", user_id=None))
    with pytest.raises(InvalidSessionSource, match="user_id"):
        build_session_key(src(chat_type="group", user_id=""))
    # but a shared group does not need one
    assert build_session_key(src(chat_type="group", user_id=None), group_sessions_per_user=False)


@pytest.mark.parametrize("bad", ["a:b", "a b", "x\n", "", "é" * 3, "a" * 201])
def test_unsafe_parts_rejected(bad):
    with pytest.raises(InvalidSessionSource):
        build_session_key(src(chat_id=bad or None))


def test_bad_platform_and_chat_type():
    with pytest.raises(InvalidSessionSource, match="platform"):
        src(platform="myspace")
    with pytest.raises(InvalidSessionSource, match="chat_type"):
        src(chat_type="room")


def test_dict_round_trip():
    s = src(chat_type="group", user_name="Ann", chat_name="Team", user_id_alt="u9")
    assert SessionSource.from_dict(s.to_dict()) == s


ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789_-.@", min_size=1, max_size=30)
anything = st.one_of(st.none(), st.text(max_size=30))


@given(
    chat_type=st.sampled_from(["dm", "group", "channel", "thread", "forum"]),
    chat_id=ids,
    user_a=ids,
    user_b=ids,
    thread=st.one_of(st.none(), ids),
    per_user=st.booleans(),
    thread_per_user=st.booleans(),
)
def test_key_properties(chat_type, chat_id, user_a, user_b, thread, per_user, thread_per_user):
    a = SessionSource(platform="discord", chat_id=chat_id, chat_type=chat_type, user_id=user_a, thread_id=thread)
    b = SessionSource(platform="discord", chat_id=chat_id, chat_type=chat_type, user_id=user_b, thread_id=thread)
    ka = build_session_key(a, per_user, thread_per_user)
    kb = build_session_key(b, per_user, thread_per_user)
    assert ka.startswith(f"agent:main:discord:{chat_type}:{chat_id}")
    in_thread = thread is not None or chat_type == "thread"
    separate = chat_type != "dm" and (thread_per_user if in_thread else per_user)
    if separate and user_a != user_b:
        assert ka != kb  # two people never share a per-user session
    if not separate:
        assert ka == kb
    # another chat never shares a key
    c = SessionSource(platform="discord", chat_id=chat_id + "x", chat_type=chat_type, user_id=user_a, thread_id=thread)
    assert build_session_key(c, per_user, thread_per_user) != ka


@given(chat_id=anything, user_id=anything, thread_id=anything)
def test_key_building_never_crashes_unexpectedly(chat_id, user_id, thread_id):
    try:
        s = SessionSource(platform="telegram", chat_id=chat_id, chat_type="group", user_id=user_id, thread_id=thread_id)
        key = build_session_key(s)
    except InvalidSessionSource:
        return
    assert key.count(":") >= 5 and "\n" not in key and " " not in key
