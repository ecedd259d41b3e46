"""Telegram update -> the adapter contract (InboundMessage + SessionSource).

Only facts are reported: chat kind, ids, whether the bot was @-mentioned or replied to. Whether
to answer is the gateway's decision.

Message ids are reported as ``"{chat_id}:{message_id}"``: Telegram message ids are unique only
within one chat, so the chat id makes them a global de-duplication key (a redelivered update
carries the same pair; update_id would work too but is not stable across webhook/polling
switches).
"""

from __future__ import annotations

import logging
import re
from typing import Any, AsyncIterator, Awaitable, Callable

from telegram import MaybeInaccessibleMessage, Message, MessageEntity, Update

from gateway.source import Platform, SessionSource
from platforms.base import Attachment, AttachmentKind, InboundMessage

# file_id -> the file's bytes (getFile, then a download from the Bot API file URL)
FetchFile = Callable[[str], Awaitable[bytes]]

log = logging.getLogger(__name__)

_ADDRESSED_COMMAND = re.compile(r"^(/[A-Za-z0-9_]{1,64})@([A-Za-z0-9_]{3,64})\b")
_CHAT_TYPES = {"private": "dm", "group": "group", "supergroup": "group"}
_ENTITY_KINDS = (MessageEntity.MENTION, MessageEntity.TEXT_MENTION, MessageEntity.BOT_COMMAND)


def message_key(chat_id: int | str, message_id: int | str) -> str:
    return f"{chat_id}:{message_id}"


def press_key(query_id: str, pressed: MaybeInaccessibleMessage) -> str:
    """A button press's id: the callback query's (a redelivered update is the same press), then the
    pressed message's key, so a reply to the press goes under the question pressed."""
    return f"press:{query_id}:{message_key(pressed.chat.id, pressed.message_id)}"


def parse_message_key(key: str) -> tuple[str | None, int]:
    """Inverse of `message_key`; also accepts a bare Telegram message id, and a press's id (its
    number is the pressed message's: `press_key`)."""
    chat, _, mid = str(key).rpartition(":")
    return (chat or None), int(mid)


def update_to_inbound(
    update: Update,
    raw: dict[str, Any],
    bot_id: int | None,
    bot_username: str | None,
    fetch: FetchFile | None = None,
) -> InboundMessage | None:
    """Map one update to an InboundMessage, or None for updates that carry neither text nor a
    file (edits, channel posts, service messages, stickers...). With files, the caption is the text.
    A press on one of the bot's inline buttons is the presser's message of the button's data (the
    command it stands for: "/approve 3"), in the chat of the message that holds the button."""
    if update.callback_query is not None:
        return _button_press(update, raw)
    msg = update.message
    if msg is None:
        return None
    attachments = message_attachments(msg, fetch)
    text = msg.text if msg.text is not None else msg.caption
    if text is None and not attachments:
        return None
    text = text or ""
    chat = msg.chat
    if chat.type == "supergroup" and chat.is_forum:
        chat_type = "forum"
        # A message in a topic (a reply inside one included) is flagged is_topic_message and
        # carries the topic's id. In the General topic message_thread_id, when present, only
        # names a reply chain, like in an ordinary supergroup.
        thread_id = str(msg.message_thread_id) if msg.is_topic_message and msg.message_thread_id else None
    elif chat.type in _CHAT_TYPES:
        chat_type = _CHAT_TYPES[chat.type]
        # In ordinary supergroups message_thread_id names a reply chain, not a topic: ignored.
        thread_id = None
    else:
        return None  # channels are not conversations with the bot

    user = msg.from_user
    if user is not None:
        user_id, user_name = str(user.id), user.full_name or user.username
    elif msg.sender_chat is not None:  # anonymous admin / linked channel speaking in a group
        user_id, user_name = str(msg.sender_chat.id), msg.sender_chat.title
    else:
        user_id, user_name = None, None

    source = SessionSource(
        platform=Platform.TELEGRAM,
        chat_id=str(chat.id),
        chat_type=chat_type,
        user_id=user_id,
        user_name=user_name,
        thread_id=thread_id,
        chat_name=chat.title or chat.full_name,
        language=user.language_code if user is not None else None,  # the app's language: DESIGN §17
    )
    mentioned, text = _mentions(msg, text, bot_id, bot_username)
    reply = msg.reply_to_message
    reply_to_bot = False
    reply_id = None
    # Inside a forum topic every message "replies" to the topic-creation service message; that is
    # not a reply the person made.
    if reply is not None and reply.forum_topic_created is None:
        reply_id = message_key(chat.id, reply.message_id)
        reply_to_bot = bool(reply.from_user and bot_id is not None and reply.from_user.id == bot_id)
    return InboundMessage(
        source=source,
        text=text,
        message_id=message_key(chat.id, msg.message_id),
        mentioned=mentioned,
        reply_to_bot=reply_to_bot,
        reply_to_message_id=reply_id,
        timestamp=msg.date.timestamp() if msg.date else 0.0,
        raw=raw,
        attachments=attachments,
    )


def _button_press(update: Update, raw: dict[str, Any]) -> InboundMessage | None:
    query = update.callback_query
    held = query.message if query is not None else None
    if query is None or not query.data or held is None or held.chat.type not in _CHAT_TYPES:
        return None  # a button of an inline-mode message, or one older than 48 h: no chat to answer in
    chat = held.chat
    user = query.from_user
    forum = chat.type == "supergroup" and bool(chat.is_forum)
    thread = getattr(held, "message_thread_id", None) if forum else None
    source = SessionSource(
        platform=Platform.TELEGRAM,
        chat_id=str(chat.id),
        chat_type="forum" if forum else _CHAT_TYPES[chat.type],
        user_id=str(user.id),
        user_name=user.full_name or user.username,
        thread_id=str(thread) if thread else None,
        chat_name=chat.title or chat.full_name,
    )
    return InboundMessage(source=source, text=query.data, message_id=press_key(query.id, held), mentioned=True, raw=raw)


def message_attachments(msg: Message, fetch: FetchFile | None) -> list[Attachment]:
    """The files of a message: the largest photo size (Telegram sends several renditions; the Bot
    API serves at most 20 MB, and the gateway's cap applies on top), documents, voice notes,
    audio, videos and video notes."""
    found: list[tuple[AttachmentKind, Any, str | None, str | None]] = []
    if msg.photo:
        found.append(("image", max(msg.photo, key=lambda p: p.width * p.height), "image/jpeg", None))
    if msg.document is not None:
        mime = msg.document.mime_type
        kind: AttachmentKind = "image" if (mime or "").startswith("image/") else "file"
        found.append((kind, msg.document, mime, msg.document.file_name))
    if msg.voice is not None:
        found.append(("voice", msg.voice, msg.voice.mime_type or "audio/ogg", "voice.oga"))
    if msg.audio is not None:
        found.append(("audio", msg.audio, msg.audio.mime_type, msg.audio.file_name))
    if msg.video is not None:
        found.append(("video", msg.video, msg.video.mime_type, msg.video.file_name))
    if msg.video_note is not None:
        found.append(("video", msg.video_note, "video/mp4", "video_note.mp4"))
    return [
        Attachment(
            kind=kind,
            open=file_opener(fetch, item.file_id) if fetch is not None else None,
            mime_type=mime,
            size=item.file_size,
            file_name=name,
            platform_file_id=item.file_id,
        )
        for kind, item, mime, name in found
    ]


def file_opener(fetch: FetchFile, file_id: str) -> Callable[[], AsyncIterator[bytes]]:
    async def chunks() -> AsyncIterator[bytes]:
        yield await fetch(file_id)

    return chunks


def _mentions(msg: Message, text: str, bot_id: int | None, bot_username: str | None) -> tuple[bool, str]:
    """Return (mentioned, text) where a leading ``/cmd@thisbot`` is normalised to ``/cmd`` so the
    gateway's command parser sees the bare command."""
    handle = f"@{bot_username}".lower() if bot_username else None
    mentioned = False
    for entity, value in _entity_values(text, msg.entities if msg.text is not None else msg.caption_entities):
        if entity.type == MessageEntity.MENTION and handle and value.lower() == handle:
            mentioned = True
        elif entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == bot_id:
            mentioned = True
        elif entity.type == MessageEntity.BOT_COMMAND and handle and value.lower().endswith(handle):
            mentioned = True
    # Clients do not always send entities (e.g. forwarded text, some API senders): fall back to
    # the text itself, matching the handle only as a whole word.
    if not mentioned and handle:
        lowered = text.lower()
        start = lowered.find(handle)
        while start != -1 and not mentioned:
            end = start + len(handle)
            before_ok = start == 0 or not (lowered[start - 1].isalnum() or lowered[start - 1] == "_")
            after_ok = end == len(lowered) or not (lowered[end].isalnum() or lowered[end] == "_")
            mentioned = before_ok and after_ok
            start = lowered.find(handle, end)
    command = _ADDRESSED_COMMAND.match(text)
    if command and handle and "@" + command.group(2).lower() == handle:
        text = command.group(1) + text[command.end() :]
        mentioned = True
    return mentioned, text


def _entity_values(text: str, entities: tuple[MessageEntity, ...]) -> list[tuple[MessageEntity, str]]:
    """The mention and command entities with their text. Offsets count UTF-16 units; a lone
    surrogate (valid escaped JSON, so Telegram delivers it) is one unit too, which python-telegram-
    bot's `parse_entities` cannot encode (the update was dropped), so the units are read here with
    surrogates passed through and the values made valid."""
    units = text.encode("utf-16-le", "surrogatepass")
    return [
        (entity, units[2 * entity.offset : 2 * (entity.offset + entity.length)].decode("utf-16-le", "replace"))
        for entity in entities
        if entity.type in _ENTITY_KINDS
    ]
