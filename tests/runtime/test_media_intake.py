"""gateway.runtime.media: what attachments become -- stored files, rows, searchable text, image
parts for a vision model, transcripts through the real openai client, and clear notices."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import AsyncIterator

from agent.transcribe import Transcriber, TranscriptionSettings
from gateway.runtime.media import MediaIntake, vision_enabled
from gateway.storage.media import MediaStore
from platforms.base import Attachment
from tests.fakes.openai_server import FakeOpenAI

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def opener(data: bytes):
    async def open_() -> AsyncIterator[bytes]:
        for i in range(0, len(data), 7):
            yield data[i : i + 7]

    return open_


async def test_an_image_goes_to_a_vision_model_and_is_named_in_the_text(tmp_path: Path) -> None:
    intake = MediaIntake(MediaStore(tmp_path), vision=True)
    got = await intake.receive("what is this?", [Attachment("image", opener(PNG), "image/png", len(PNG), "dot.png")])
    assert got.text.splitlines() == ["what is this?", f"[image: dot.png (image/png, {len(PNG)} bytes)]"]
    content = got.model_content()
    assert isinstance(content, list) and content[0] == {"type": "text", "text": got.text}
    assert content[1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert got.rows[0].sha256 and got.rows[0].size == len(PNG) and got.notices == []


async def test_without_vision_the_image_is_kept_and_described(tmp_path: Path) -> None:
    intake = MediaIntake(MediaStore(tmp_path), vision=False)
    got = await intake.receive("", [Attachment("image", opener(PNG), "image/png", None, None)])
    assert (
        got.model_content() == got.text == f"[image: image (image/png, {len(PNG)} bytes): this model cannot see images]"
    )
    assert MediaStore(tmp_path).exists(got.rows[0].sha256 or "")


async def test_a_voice_note_is_transcribed_by_the_endpoint(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        fake.transcript = "remind me about the nginx upgrade"
        transcriber = Transcriber(TranscriptionSettings(fake.base_url, "k", "whisper-x"))
        try:
            intake = MediaIntake(MediaStore(tmp_path), transcriber=transcriber)
            got = await intake.receive("", [Attachment("voice", opener(b"OggS...."), "audio/ogg", 8, "voice.oga")])
        finally:
            await transcriber.close()
    assert got.text == "[voice: voice.oga (audio/ogg, 8 bytes)] transcript: remind me about the nginx upgrade"
    assert fake.transcriptions[0]["data"] == b"OggS...." and fake.transcriptions[0]["model"] == "whisper-x"
    assert fake.transcriptions[0]["file_name"] == "voice.oga"


async def test_a_failed_transcription_keeps_the_message_and_says_so(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        fake.transcription_status = 500
        transcriber = Transcriber(TranscriptionSettings(fake.base_url))
        try:
            got = await MediaIntake(MediaStore(tmp_path), transcriber=transcriber).receive(
                "listen", [Attachment("voice", opener(b"abc"), "audio/ogg", 3, "v.oga")]
            )
        finally:
            await transcriber.close()
    assert got.text.endswith("(transcription failed)") and got.text.startswith("listen\n")
    assert "HTTP 500" in got.notices[0] and got.rows[0].sha256  # the audio itself is kept


async def test_a_text_file_is_given_as_text_and_a_binary_one_is_named(tmp_path: Path) -> None:
    intake = MediaIntake(MediaStore(tmp_path))
    got = await intake.receive(
        "see attached",
        [
            Attachment("file", opener(b"server {\n  listen 80;\n}\n"), "application/octet-stream", 24, "nginx.conf"),
            Attachment("file", opener(b"\x00\x01\x02binary"), "application/zip", 9, "a.zip"),
            Attachment("file", opener(b"\xff\xfe not utf8"), "text/plain", 11, "latin.txt"),
        ],
    )
    lines = got.text.splitlines()
    assert lines[1] == "[file: nginx.conf (application/octet-stream, 24 bytes)]" and lines[2] == "server {"
    assert "[file: a.zip (application/zip, 9 bytes)]" in lines
    assert "[file: latin.txt (text/plain, 11 bytes)]" in lines  # undecodable: named, not garbled


async def test_too_big_or_undownloadable_loses_nothing_else(tmp_path: Path) -> None:
    intake = MediaIntake(MediaStore(tmp_path, max_bytes=5))

    async def broken() -> AsyncIterator[bytes]:
        raise ConnectionError("gone")
        yield b""  # pragma: no cover

    got = await intake.receive(
        "two files",
        [
            Attachment("video", opener(b"0123456789"), "video/mp4", 10, "clip.mp4"),
            Attachment("file", broken, None, None, "report.pdf", "F1"),
            Attachment("file", None, None, None, "nolink.bin"),
            Attachment("file", opener(b"ok"), "text/plain", 2, "ok.txt"),
        ],
    )
    assert got.text.splitlines()[0] == "two files"
    assert "[video: clip.mp4 (video/mp4, 10 bytes): not kept, too big]" in got.text
    assert "[file: report.pdf (unknown type, size unknown): could not be downloaded]" in got.text
    assert "[file: ok.txt (text/plain, 2 bytes)]\nok" in got.text
    assert [r.sha256 is None for r in got.rows] == [True, True, True, False]
    assert got.rows[1].platform_file_id == "F1"
    assert "clip.mp4 was not kept: the file is too big (10 bytes; the limit is 5 bytes)." in got.notices


def test_vision_auto_follows_the_model_family() -> None:
    assert vision_enabled("auto", "gpt-4o-mini") and vision_enabled("auto", "Qwen2.5-VL-7B")
    assert not vision_enabled("auto", "deepseek-chat") and not vision_enabled("auto", "")
    assert vision_enabled(True, "x") and not vision_enabled("false", "gpt-4o")
