"""Feishu/Lark event payloads -> `InboundMessage`: plain functions, no I/O.

Both transports (long connection and webhook) end in a decoded v2 event dict
(``{"schema": "2.0", "header": {...}, "event": {...}}``); this module turns an
``im.message.receive_v1`` event, and a ``card.action.trigger`` callback (a press on a button of a
card the bot sent with `send_choice`), into the adapter contract and nothing else.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, AsyncIterator, Awaitable, Callable

from gateway.source import Platform, SessionSource
from platforms.base import Attachment, AttachmentKind, InboundMessage

# (message_id, file_key, resource type "image" | "file") -> the bytes, through the message
# resource API (the only way a bot may read a file someone sent it)
FetchResource = Callable[[str, str, str], Awaitable[bytes]]

MESSAGE_EVENT = "im.message.receive_v1"
CARD_ACTION_EVENT = "card.action.trigger"
PRESS_PREFIX = "press:"

# Chat types Feishu reports for a message; "p2p" is a direct chat, everything else is a group
# (older payloads and topic groups use "topic_group"/"topic").
_DM_TYPES = {"p2p"}
_TOPIC_TYPES = {"topic_group", "topic"}

# Messages that carry a file: its kind, and the resource type the download names.
_FILE_MESSAGES: dict[str, tuple[AttachmentKind, str]] = {
    "image": ("image", "image"),
    "file": ("file", "file"),
    "audio": ("voice", "file"),  # Feishu audio messages are recorded voice (opus)
    "media": ("video", "file"),
}
# Other non-text messages become a short bracketed note so the agent knows something was sent.
_PLACEHOLDERS = {
    "sticker": "[sticker]",
    "interactive": "[card]",
    "merge_forward": "[forwarded messages]",
    "share_chat": "[shared chat]",
    "share_user": "[shared contact]",
    "location": "[location]",
}


class MalformedEvent(ValueError):
    """An event that cannot be turned into a message (logged and skipped by the adapter)."""


def _mapping(value: Any) -> dict[str, Any]:
    """An optional object of the event (absent or the wrong type: empty)."""
    return value if isinstance(value, dict) else {}


def event_type(payload: dict[str, Any]) -> str | None:
    header = payload.get("header")
    if isinstance(header, dict):
        value = header.get("event_type")
        return value if isinstance(value, str) else None
    return None


def message_from_event(
    payload: dict[str, Any],
    bot_open_id: str | None,
    sent_by_bot: Callable[[str], bool] = lambda _mid: False,
    fetch: FetchResource | None = None,
) -> InboundMessage | None:
    """Turn a v2 ``im.message.receive_v1`` payload into an `InboundMessage`.

    Returns None for events that are not user messages to pass up (other event types, the bot's
    own messages). Raises `MalformedEvent` when a message event lacks what a message needs.
    `sent_by_bot(message_id)` tells whether a replied-to message is one the bot sent.
    """
    if event_type(payload) != MESSAGE_EVENT:
        return None
    event = payload.get("event")
    if not isinstance(event, dict):
        raise MalformedEvent("event body missing")
    message = _dict(event.get("message"), "event.message")
    sender = _mapping(event.get("sender"))
    sender_ids = _mapping(sender.get("sender_id"))

    message_id = _str(message.get("message_id"), "message.message_id")
    chat_id = _str(message.get("chat_id"), "message.chat_id")
    open_id = sender_ids.get("open_id") or None
    if bot_open_id and open_id == bot_open_id:
        return None  # our own message echoed back: never answer ourselves

    raw_chat_type = str(message.get("chat_type") or "")
    chat_type = "dm" if raw_chat_type in _DM_TYPES else "group"
    # A message in a thread (or a topic of a topic group) gets its own session: the thread id
    # is part of the session key. Plain replies in a normal group keep the chat's session.
    thread_id = message.get("thread_id") or None
    if not thread_id and raw_chat_type in _TOPIC_TYPES:
        thread_id = message.get("root_id") or None

    mentions = [m for m in (message.get("mentions") or []) if isinstance(m, dict)]
    msg_type = str(message.get("message_type") or message.get("msg_type") or "text")
    content = _content(message.get("content"))
    text = render_content(msg_type, content)
    text, mentioned = resolve_mentions(text, mentions, bot_open_id)
    attachments = [
        Attachment(kind, resource_opener(fetch, message_id, key, rtype) if fetch else None, mime, None, name, key)
        for kind, key, rtype, mime, name in file_resources(msg_type, content)
    ]

    parent_id = message.get("parent_id") or None
    source = SessionSource(
        platform=Platform.FEISHU,
        chat_id=chat_id,
        chat_type=chat_type,
        user_id=open_id,
        thread_id=thread_id,
        user_id_alt=sender_ids.get("union_id") or None,
        extra={"sender_type": sender.get("sender_type"), "tenant_key": sender.get("tenant_key")},
    )
    header = _mapping(payload.get("header"))
    return InboundMessage(
        source=source,
        text=text,
        message_id=message_id,
        mentioned=mentioned,
        reply_to_bot=bool(parent_id and sent_by_bot(parent_id)),
        reply_to_message_id=parent_id,
        timestamp=_timestamp(message.get("create_time")),
        raw={"event_id": header.get("event_id"), "message_type": msg_type, "payload": payload},
        attachments=attachments,
    )


def press_from_event(payload: dict[str, Any]) -> InboundMessage | None:
    """A press on a button of the bot's question card (platforms.feishu.cards.choice_card) as the
    presser's message of the button's command ("/approve 3"), in the chat of the card. The callback
    names the chat but neither its type nor its thread: the button's value carries them. None for a
    press on anything else (a value without a command)."""
    if event_type(payload) != CARD_ACTION_EVENT:
        return None
    event = _dict(payload.get("event"), "event body")
    value = _mapping(_mapping(event.get("action")).get("value"))
    command = value.get("command")
    if not isinstance(command, str) or not command.startswith("/"):
        return None
    context = _dict(event.get("context"), "event.context")
    operator = _dict(event.get("operator"), "event.operator")
    chat_type = value.get("chat_type")
    thread_id = value.get("thread_id")
    source = SessionSource(
        platform=Platform.FEISHU,
        chat_id=_str(context.get("open_chat_id"), "context.open_chat_id"),
        chat_type=chat_type if chat_type in ("dm", "group") else "group",
        user_id=_str(operator.get("open_id"), "operator.open_id"),
        thread_id=thread_id if isinstance(thread_id, str) and thread_id else None,
        user_id_alt=operator.get("union_id") or None,
    )
    header = _mapping(payload.get("header"))
    card = _str(context.get("open_message_id"), "context.open_message_id")
    press = f"{PRESS_PREFIX}{_str(header.get('event_id'), 'header.event_id')}:{card}"
    return InboundMessage(source=source, text=command, message_id=press, mentioned=True, raw={"payload": payload})


def pressed_card(message_id: str) -> str:
    """The message a reply to `message_id` goes under: for a press, the card it pressed (its id
    ends the press's id, so this holds after a restart too); else the message itself."""
    return message_id.rpartition(":")[2] if message_id.startswith(PRESS_PREFIX) else message_id


def file_resources(
    msg_type: str, content: dict[str, Any]
) -> list[tuple[AttachmentKind, str, str, str | None, str | None]]:
    """(kind, file_key, resource type, mime type, file name) of each file a message carries:
    image/file/audio/media messages, and the images and videos inside a post."""
    found: list[tuple[AttachmentKind, str, str, str | None, str | None]] = []
    if msg_type in _FILE_MESSAGES:
        kind, rtype = _FILE_MESSAGES[msg_type]
        key = content.get("image_key") if msg_type == "image" else content.get("file_key")
        if isinstance(key, str) and key:
            mime = {"image": None, "voice": "audio/opus", "video": "video/mp4"}.get(kind)
            found.append((kind, key, rtype, mime, content.get("file_name") or None))
    elif msg_type == "post":
        for el in _post_elements(content):
            if el.get("tag") == "img" and isinstance(el.get("image_key"), str):
                found.append(("image", el["image_key"], "image", None, None))
            elif el.get("tag") == "media" and isinstance(el.get("file_key"), str):
                found.append(("video", el["file_key"], "file", "video/mp4", el.get("file_name") or None))
    return found


def resource_type(kind: str) -> str:
    """The message resource API's `type` for a file of this kind."""
    return "image" if kind == "image" else "file"


def resource_opener(fetch: FetchResource, message_id: str, key: str, rtype: str) -> Callable[[], AsyncIterator[bytes]]:
    async def chunks() -> AsyncIterator[bytes]:
        yield await fetch(message_id, key, rtype)

    return chunks


def _content(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        try:
            content = json.loads(content) if content else {}
        except json.JSONDecodeError:
            raise MalformedEvent("message content is not JSON") from None
    if not isinstance(content, dict):
        raise MalformedEvent("message content is not an object")
    return content


def render_content(msg_type: str, content: Any) -> str:
    """The readable text of a message's ``content`` (a JSON string in Feishu events). A file
    message has no text of its own: its file travels as an attachment."""
    content = _content(content)
    if msg_type == "text":
        text = content.get("text")
        if not isinstance(text, str):
            raise MalformedEvent("text message without text")
        return text
    if msg_type == "post":
        return _render_post(content)
    if msg_type in _FILE_MESSAGES:
        return ""
    return _PLACEHOLDERS.get(msg_type, f"[{msg_type} message]")


def _post_body(content: dict[str, Any]) -> dict[str, Any]:
    # Received posts are {"title", "content": [[elements]]}; some payloads wrap that in a locale.
    if "content" not in content:
        for value in content.values():
            if isinstance(value, dict) and "content" in value:
                return value
    return content


def _post_elements(content: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        el
        for paragraph in _post_body(content).get("content") or []
        if isinstance(paragraph, list)
        for el in paragraph
        if isinstance(el, dict)
    ]


def _render_post(content: dict[str, Any]) -> str:
    content = _post_body(content)
    lines: list[str] = []
    title = content.get("title")
    if isinstance(title, str) and title:
        lines.append(title)
    for paragraph in content.get("content") or []:
        if not isinstance(paragraph, list):
            continue
        parts: list[str] = []
        for el in paragraph:
            if not isinstance(el, dict):
                continue
            tag = el.get("tag")
            if tag in ("text", "md"):
                parts.append(str(el.get("text", "")))
            elif tag == "a":
                label, href = el.get("text") or "", el.get("href") or ""
                parts.append(f"{label} ({href})" if label and href and label != href else label or href)
            elif tag == "at":
                # user_id holds the mention key ("@_user_1") that resolve_mentions maps to a name
                parts.append(str(el.get("user_id") or "@" + str(el.get("user_name") or "someone")))
            elif tag == "code_block":
                lang = el.get("language") or ""
                parts.append(f"```{lang.lower()}\n{el.get('text', '')}\n```")
            # img and media elements travel as attachments
            elif tag == "emotion":
                parts.append(f":{el.get('emoji_type', '')}:")
        lines.append("".join(parts))
    return "\n".join(lines).strip()


def resolve_mentions(text: str, mentions: list[dict[str, Any]], bot_open_id: str | None) -> tuple[str, bool]:
    """Replace ``@_user_N`` placeholders with ``@Name``; tell whether the bot was mentioned.

    A mention of the bot at the start of the text (or of a line) is addressing, not content, so
    it is removed: "@bot /new" must read as the command "/new".
    """
    mentioned = False
    # keys never match a longer key's prefix ("@_user_1" in "@_user_12"): see the lookaheads
    for m in sorted(mentions, key=lambda m: len(str(m.get("key", ""))), reverse=True):
        key = m.get("key")
        if not isinstance(key, str) or not key:
            continue
        ids = _mapping(m.get("id"))
        is_bot = bool(bot_open_id) and ids.get("open_id") == bot_open_id
        mentioned = mentioned or is_bot
        name = "@" + str(m.get("name") or "someone")
        if is_bot:
            # addressing: the bot's mention opening the text (or a line of a post) is dropped
            text = re.sub(r"(^|\n)[ \t]*" + re.escape(key) + r"(?![0-9])[ \t]*", r"\1", text)
        text = re.sub(re.escape(key) + r"(?![0-9])", lambda _m: name, text)
    text = text.replace("@_all", "@all")
    return text.strip(), mentioned


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedEvent(f"{what} missing")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise MalformedEvent(f"{what} missing")
    return value


def _timestamp(value: Any) -> float:
    try:
        return int(value) / 1000.0  # Feishu sends milliseconds as a string
    except (TypeError, ValueError):
        return time.time()
