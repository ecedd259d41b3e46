"""Feishu event payload -> InboundMessage translation, and webhook request decoding (no network)."""

from __future__ import annotations

import json

import pytest

from platforms.feishu.cards import choice_card
from platforms.feishu.events import (
    MalformedEvent,
    message_from_event,
    press_from_event,
    pressed_card,
    render_content,
    resolve_mentions,
)
from platforms.feishu.webhook import WebhookKeys, WebhookRejected, decode_request
from tests.fakes.feishu_server import FakeFeishu

fake = FakeFeishu(app_id="cli_unit", app_secret="s")


def test_post_content_renders_text_links_mentions_and_code():
    content = {
        "title": "Report",
        "content": [
            [
                {"tag": "at", "user_id": "@_user_1", "user_name": "chinwag"},
                {"tag": "text", "text": " see "},
                {"tag": "a", "text": "the doc", "href": "https://example.com/d"},
            ],
            [{"tag": "code_block", "language": "PYTHON", "text": "print(1)"}],
            [{"tag": "img", "image_key": "img_1"}, {"tag": "emotion", "emoji_type": "SMILE"}],
        ],
    }
    event = fake.message_event(
        msg_type="post",
        content=content,
        chat_type="group",
        chat_id="oc_g",
        mentions=[("@_user_1", "ou_bot", "chinwag")],
    )
    msg = message_from_event(event, "ou_bot")
    assert msg is not None and msg.mentioned
    assert msg.text == "Report\nsee the doc (https://example.com/d)\n```python\nprint(1)\n```\n:SMILE:"
    [image] = msg.attachments  # the post's image travels as an attachment
    assert (image.kind, image.platform_file_id) == ("image", "img_1")
    # a post wrapped in a locale is read too
    assert render_content("post", {"en_us": {"title": "", "content": [[{"tag": "text", "text": "hi"}]]}}) == "hi"


def test_non_text_messages_become_placeholders_and_files_attachments():
    assert render_content("image", json.dumps({"image_key": "k"})) == ""  # the file is the message
    assert render_content("sticker", json.dumps({"file_key": "k"})) == "[sticker]"
    for msg_type, content, expected in (
        ("image", {"image_key": "img_k"}, ("image", "img_k", None)),
        ("file", {"file_key": "file_k", "file_name": "a.pdf"}, ("file", "file_k", "a.pdf")),
        ("audio", {"file_key": "file_a", "duration": 3000}, ("voice", "file_a", None)),
        ("media", {"file_key": "file_v", "image_key": "img_v", "file_name": "v.mp4"}, ("video", "file_v", "v.mp4")),
    ):
        msg = message_from_event(fake.message_event(msg_type=msg_type, content=content), "ou_bot")
        assert msg is not None and msg.text == ""
        [att] = msg.attachments
        assert (att.kind, att.platform_file_id, att.file_name) == expected
    assert render_content("hongbao", "{}") == "[hongbao message]"
    with pytest.raises(MalformedEvent):
        render_content("text", json.dumps({"no": "text"}))


def test_mention_keys_are_replaced_longest_first_and_bot_mention_detected_only_by_open_id():
    mentions = [
        {"key": "@_user_1", "id": {"open_id": "ou_a"}, "name": "Ann"},
        {"key": "@_user_12", "id": {"open_id": "ou_b"}, "name": "Ben"},
    ]
    text, mentioned = resolve_mentions("@_user_12 and @_user_1", mentions, "ou_bot")
    assert text == "@Ben and @Ann" and mentioned is False
    # same display name as the bot but another open_id: not a mention of the bot
    impostor = [{"key": "@_user_1", "id": {"open_id": "ou_x"}, "name": "chinwag"}]
    assert resolve_mentions("@_user_1 hi", impostor, "ou_bot") == ("@chinwag hi", False)
    # a bot mention in the middle stays readable
    bot = [{"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "chinwag"}]
    assert resolve_mentions("ask @_user_1 please", bot, "ou_bot") == ("ask @chinwag please", True)
    # unknown bot id (bot info unavailable): never claims a mention
    assert resolve_mentions("@_user_1 hi", bot, None)[1] is False
    assert resolve_mentions("@_all meeting", [], "ou_bot") == ("@all meeting", False)


def test_own_messages_and_other_events_are_not_passed_up():
    own = fake.message_event("echo", sender="ou_bot")
    assert message_from_event(own, "ou_bot") is None
    other = {"schema": "2.0", "header": {"event_type": "im.message.message_read_v1"}, "event": {}}
    assert message_from_event(other, "ou_bot") is None


def test_missing_union_id_and_bad_timestamp_are_tolerated():
    event = fake.message_event("hi", union_id=None)
    event["event"]["message"]["create_time"] = "soon"
    msg = message_from_event(event, "ou_bot")
    assert msg is not None and msg.source.user_id_alt is None and msg.source.person_id == "ou_alice"
    assert msg.timestamp > 0


def test_decode_request_rejects_before_delivering():
    keys = WebhookKeys(verification_token="tok", encrypt_key="key")
    event = fake.message_event("x", token="tok")
    body, headers = fake.webhook_request(event, "key")
    assert decode_request(body, headers, keys)["event"]["message"]["message_id"]
    tampered = body.replace(b'"encrypt": "', b'"encrypt": "A')
    with pytest.raises(WebhookRejected) as err:
        decode_request(tampered, headers, keys)
    assert err.value.status == 401
    with pytest.raises(WebhookRejected) as err:
        decode_request(body, {**headers, "X-Lark-Request-Nonce": "other"}, keys)
    assert err.value.status == 401
    with pytest.raises(WebhookRejected) as err:  # encrypted but we have no key
        decode_request(body, headers, WebhookKeys(verification_token="tok"))
    assert err.value.status == 400
    with pytest.raises(WebhookRejected) as err:
        decode_request(b"[1, 2]", {}, keys)
    assert err.value.status == 400


def test_a_press_on_a_question_card_is_the_pressers_command_where_the_card_is():
    card = choice_card("Run x?", [("Approve", "/approve 3")], {"chat_type": "group", "thread_id": "omt_1"})
    sent = {"message_id": "om_card", "content": card}
    fake.chat_of["om_card"] = "oc_g"
    event = fake.card_action_event(sent, "Approve", operator="ou_bob", union_id="on_bob")
    msg = press_from_event(event)
    assert msg is not None and msg.text == "/approve 3" and msg.mentioned
    source = msg.source
    assert (source.chat_id, source.chat_type, source.thread_id) == ("oc_g", "group", "omt_1")
    assert (source.user_id, source.person_id) == ("ou_bob", "on_bob")
    assert msg.message_id == f"press:{event['header']['event_id']}:om_card"
    assert pressed_card(msg.message_id) == "om_card" and pressed_card("om_other") == "om_other"
    event["event"]["action"]["value"] = {"other": "form data"}  # not one of the bot's command buttons
    assert press_from_event(event) is None
    del event["event"]["action"]["value"], event["event"]["operator"]
    event["event"]["action"]["value"] = {"command": "/deny 3"}
    with pytest.raises(MalformedEvent):
        press_from_event(event)
