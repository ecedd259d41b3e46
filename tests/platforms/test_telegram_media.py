"""Telegram files end to end: the real python-telegram-bot against the fake Bot API, which serves
getFile and the file URL under `base_file_url` as a local Bot API server would."""

from __future__ import annotations

import asyncio

import pytest

from platforms.base import InboundMessage
from platforms.telegram.adapter import TelegramAdapter
from tests.fakes.telegram_server import FakeTelegram
from tests.platforms.test_telegram import ANN, cfg


@pytest.fixture
async def fake():
    server = await FakeTelegram().start()
    yield server
    await server.stop()


async def _receive(fake: FakeTelegram, body: dict) -> tuple[InboundMessage, list[bytes]]:
    """The inbound message, and each attachment's bytes read while the adapter runs."""
    inbox: asyncio.Queue[InboundMessage] = asyncio.Queue()
    adapter = TelegramAdapter(cfg(fake, base_file_url=fake.base_file_url))
    await adapter.start(inbox.put)
    try:
        fake.push_update({"message": body})
        inbound = await asyncio.wait_for(inbox.get(), 5)
        return inbound, [await _read(inbound, i) for i in range(len(inbound.attachments))]
    finally:
        await adapter.stop()


def _message(fake: FakeTelegram, **fields: object) -> dict:
    msg = fake.make_message(fake.private_chat(ANN), ANN, "")
    msg.pop("text")
    msg.update(fields)
    return msg


async def _read(inbound: InboundMessage, index: int = 0) -> bytes:
    opener = inbound.attachments[index].open
    assert opener is not None
    return b"".join([chunk async for chunk in opener()])


async def test_a_photo_with_a_caption_brings_its_largest_size(fake: FakeTelegram) -> None:
    small = fake.add_file(b"small", width=90, height=60)
    large = fake.add_file(b"the large rendition", width=1280, height=853)
    inbound, data = await _receive(fake, _message(fake, photo=[small, large], caption="our new logo"))
    assert inbound.text == "our new logo"
    [photo] = inbound.attachments
    assert (photo.kind, photo.mime_type, photo.size, photo.platform_file_id) == (
        "image",
        "image/jpeg",
        19,
        large["file_id"],
    )
    assert data == [b"the large rendition"]
    assert fake.downloads == [f"documents/{large['file_id']}"]  # through base_file_url, once


async def test_voice_audio_document_and_video_note_are_attachments(fake: FakeTelegram) -> None:
    voice = fake.add_file(b"OggS voice", duration=3, mime_type="audio/ogg")
    inbound, data = await _receive(fake, _message(fake, voice=voice))
    assert inbound.text == "" and inbound.attachments[0].kind == "voice"
    assert data == [b"OggS voice"]

    doc = fake.add_file(b"key: value\n", mime_type="application/x-yaml", file_name="config.yaml")
    inbound, data = await _receive(fake, _message(fake, document=doc, caption="why does this fail?"))
    assert inbound.text == "why does this fail?" and data == [b"key: value\n"]
    [att] = inbound.attachments
    assert (att.kind, att.file_name, att.mime_type) == ("file", "config.yaml", "application/x-yaml")

    note = fake.add_file(b"mp4", length=240, duration=2)
    inbound, _ = await _receive(fake, _message(fake, video_note=note))
    assert inbound.attachments[0].kind == "video"


async def test_a_message_with_neither_text_nor_file_is_still_skipped(fake: FakeTelegram) -> None:
    inbox: asyncio.Queue[InboundMessage] = asyncio.Queue()
    adapter = TelegramAdapter(cfg(fake))
    await adapter.start(inbox.put)
    try:
        fake.push_update(
            {
                "message": _message(
                    fake,
                    sticker={
                        "file_id": "S1",
                        "file_unique_id": "s",
                        "width": 1,
                        "height": 1,
                        "is_animated": False,
                        "is_video": False,
                        "type": "regular",
                    },
                )
            }
        )
        fake.push_message(fake.private_chat(ANN), ANN, "after the sticker")
        got = await asyncio.wait_for(inbox.get(), 5)
        assert got.text == "after the sticker" and got.attachments == []
    finally:
        await adapter.stop()
