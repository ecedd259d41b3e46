"""Media end to end: a photo and a voice note sent on Telegram (the real python-telegram-bot against
the fake Bot API) reach the model through the real gateway -- the photo as an image part, the voice
note as its transcript -- are kept under home/media with their rows, and are found by search."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from gateway.recall import find_sessions
from gateway.storage import media
from tests.fakes.gateway_harness import make_config
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.platform_stack import running
from tests.fakes.telegram_server import FakeTelegram
from tests.platforms.test_telegram_e2e import ANN, Stack

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


class MediaStack(Stack):
    def __init__(self, tmp: Path, telegram: FakeTelegram, llm: FakeOpenAI, **media_section: Any) -> None:
        super().__init__(tmp, telegram, llm, base_file_url=telegram.base_file_url)
        self.config = make_config(  # the same stack, with a vision model, transcription and a cap
            tmp / "home",
            llm,
            {"telegram": self.config.adapter_config("telegram")},
            model_options={"vision": True},
            http={"port": 0},
            transcription={"model": "whisper-x"},
            media=media_section or {"max_bytes": 1000},
        )


def photo_message(tg: FakeTelegram, data: bytes, caption: str) -> dict:
    msg = tg.make_message(tg.private_chat(ANN), ANN, "")
    msg.pop("text")
    msg["photo"] = [tg.add_file(data, width=1, height=1)]
    msg["caption"] = caption
    return msg


async def test_a_photo_reaches_a_vision_model_and_is_kept_and_searchable(tmp_path: Path) -> None:
    tg = await FakeTelegram().start()
    async with running(tg, lambda llm: MediaStack(tmp_path, tg, llm)) as stack:
        tg.push_update({"message": photo_message(tg, PNG, "what is on the zebra poster?")})
        [reply] = await stack.wait_replies(42, 1)
        request = stack.llm.requests[-1]
        user = request["messages"][-1]
        assert user["role"] == "user" and isinstance(user["content"], list)
        assert user["content"][1]["image_url"]["url"] == "data:image/jpeg;base64," + base64.b64encode(PNG).decode()
        assert reply["text"].startswith("echo: what is on the zebra poster?")
        db = stack.db
        assert db is not None
        [session] = stack.sessions()
        [stored] = [m for m in db.get_messages(session["id"]) if m["role"] == "user"]
        assert stored["content"].startswith("what is on the zebra poster?\n[image: image (image/jpeg, ")
        rows = db.read(lambda conn: media.attachments_of(conn, [stored["id"]]))[stored["id"]]
        assert rows[0]["kind"] == "image" and rows[0]["bytes"] == len(PNG)
        kept = tmp_path / "home" / "media" / rows[0]["sha256"][:2] / rows[0]["sha256"]
        assert kept.read_bytes() == PNG
        assert [hit.session_id for hit in find_sessions(db, "zebra poster")] == [session["id"]]


async def test_a_voice_note_is_answered_from_its_transcript(tmp_path: Path) -> None:
    tg = await FakeTelegram().start()
    async with running(tg, lambda llm: MediaStack(tmp_path, tg, llm)) as stack:
        stack.llm.transcript = "please restart the nginx proxy"
        msg = tg.make_message(tg.private_chat(ANN), ANN, "")
        msg.pop("text")
        msg["voice"] = tg.add_file(b"OggS fake voice", duration=2, mime_type="audio/ogg")
        tg.push_update({"message": msg})
        [reply] = await stack.wait_replies(42, 1)
        assert "transcript: please restart the nginx proxy" in reply["text"]
        assert stack.llm.transcriptions[0]["data"] == b"OggS fake voice"
        assert stack.db is not None and find_sessions(stack.db, "nginx proxy")


async def test_a_file_over_the_cap_is_refused_clearly_and_the_caption_answered(tmp_path: Path) -> None:
    tg = await FakeTelegram().start()
    async with running(tg, lambda llm: MediaStack(tmp_path, tg, llm, max_bytes=10)) as stack:
        tg.push_update({"message": photo_message(tg, PNG, "too big?")})
        notice, answer = await stack.wait_replies(42, 2)
        assert "was not kept: the file is too big" in notice["text"]
        assert answer["text"].startswith("echo: too big?")
        assert not (tmp_path / "home" / "media").exists() or not any((tmp_path / "home" / "media").rglob("*"))
