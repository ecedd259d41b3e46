"""`/attach PATH [caption]` parsing: the path (quoted when it has spaces), the kind from the guessed
MIME type, clear refusals, and bytes read in chunks that the media cap stops part way."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.storage.media import MediaStore, MediaTooLarge
from platforms import local_attach
from platforms.local_attach import is_attach_line, parse_attach_line, reopen_path


def test_only_the_attach_word_is_the_command() -> None:
    assert is_attach_line("/attach x") and is_attach_line("  /attach") and is_attach_line("/attach\tx")
    assert not is_attach_line("/attachment x") and not is_attach_line("please /attach x") and not is_attach_line("")


@pytest.mark.parametrize(
    ("name", "kind", "mime"),
    [
        ("cat.png", "image", "image/png"),
        ("cat.JPG", "image", "image/jpeg"),
        ("memo.ogg", "voice", "audio/ogg"),
        ("memo.opus", "voice", None),
        ("song.mp3", "audio", "audio/mpeg"),
        ("clip.mp4", "video", "video/mp4"),
        ("notes.txt", "file", "text/plain"),
        ("blob.bin", "file", "application/octet-stream"),
        ("README", "file", None),
    ],
)
def test_kind_follows_the_guessed_mime_type(tmp_path: Path, name: str, kind: str, mime: str | None) -> None:
    (tmp_path / name).write_bytes(b"x")
    line = parse_attach_line(f"/attach {name}", cwd=tmp_path)
    assert line.refusal is None and line.attachment is not None
    assert line.attachment.kind == kind
    if mime is not None:
        assert line.attachment.mime_type == mime
    assert line.attachment.file_name == name and line.attachment.size == 1
    assert line.attachment.platform_file_id == str((tmp_path / name).resolve())


def test_caption_and_quoted_paths(tmp_path: Path) -> None:
    (tmp_path / "two words.txt").write_text("hi")
    line = parse_attach_line("/attach 'two words.txt'   what is this?", cwd=tmp_path)
    assert line.caption == "what is this?" and line.attachment is not None
    assert line.attachment.file_name == "two words.txt"
    assert parse_attach_line('/attach "two words.txt"', cwd=tmp_path).caption == ""
    assert "quote is not closed" in (parse_attach_line('/attach "two words.txt', cwd=tmp_path).refusal or "")


def test_refusals_name_the_problem(tmp_path: Path) -> None:
    assert "Usage: /attach PATH [caption]" in (parse_attach_line("/attach   ").refusal or "")
    assert (
        parse_attach_line("/attach gone.txt", cwd=tmp_path).refusal == "Nothing was sent: there is no file at gone.txt."
    )
    assert "is a directory" in (parse_attach_line(f"/attach {tmp_path}").refusal or "")


async def test_bytes_come_in_chunks_and_the_cap_stops_the_read(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(local_attach, "CHUNK_BYTES", 1000)
    data = bytes(range(256)) * 20  # 5120 bytes: six chunks
    (tmp_path / "data.bin").write_bytes(data)
    line = parse_attach_line("/attach data.bin", cwd=tmp_path)
    assert line.attachment is not None and line.attachment.open is not None
    chunks = [chunk async for chunk in line.attachment.open()]
    assert [len(c) for c in chunks] == [1000] * 5 + [120] and b"".join(chunks) == data
    stored = await MediaStore(tmp_path / "media", 10_000).save_stream(line.attachment.open())
    assert stored.size == len(data)
    with pytest.raises(MediaTooLarge):  # declared nothing: the read itself is cut at the cap
        await MediaStore(tmp_path / "small", 2500).save_stream(line.attachment.open())
    again = reopen_path(line.attachment)  # a restart reads the file again while it is there
    assert again is not None and b"".join([c async for c in again()]) == data
    (tmp_path / "data.bin").unlink()
    assert reopen_path(line.attachment) is None
