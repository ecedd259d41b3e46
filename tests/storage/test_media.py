"""gateway.storage.media: content-addressed files (once per content, atomic, owner-only), the cap
before and while reading, the sweep's grace period, and the attachments rows in a real database."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path
from typing import AsyncIterator

import pytest

from gateway.storage import media
from gateway.storage.media import AttachmentRow, MediaStore, MediaTooLarge

pytestmark = pytest.mark.both_backends


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_a_file_is_stored_once_under_its_hash_owner_only(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")
    first = await store.save_stream(chunks(b"abc", b"def"))
    again = await store.save_stream(chunks(b"abcdef"))
    sha = hashlib.sha256(b"abcdef").hexdigest()
    assert first.sha256 == again.sha256 == sha and first.size == 6
    path = tmp_path / "media" / sha[:2] / sha
    assert path.read_bytes() == b"abcdef"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in (tmp_path / "media").iterdir()] == [sha[:2]]  # no temporary file left


async def test_the_cap_is_checked_before_and_while_reading(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media", max_bytes=10)
    reads = []

    async def counted() -> AsyncIterator[bytes]:
        for part in (b"12345", b"67890", b"X", b"never read"):
            reads.append(part)
            yield part

    with pytest.raises(MediaTooLarge, match="limit is 10 bytes"):
        await store.save_stream(chunks(b"x"), declared_size=11)  # declared too big: nothing read
    with pytest.raises(MediaTooLarge):
        await store.save_stream(counted(), declared_size=None)  # under-declared: stopped while reading
    assert reads == [b"12345", b"67890", b"X"]
    assert list(store.files()) == [] and os.listdir(tmp_path / "media") == []  # nothing kept


async def test_a_failing_download_leaves_nothing(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")

    async def broken() -> AsyncIterator[bytes]:
        yield b"part"
        raise ConnectionError("peer went away")

    with pytest.raises(ConnectionError):
        await store.save_stream(broken())
    assert os.listdir(tmp_path / "media") == []


def test_sweep_keeps_referenced_and_young_files(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")
    kept, orphan, young = (store.save_bytes(b) for b in (b"kept", b"orphan", b"young"))
    old = time.time() - media.SWEEP_GRACE - 10
    for f in (kept, orphan):
        os.utime(store.path_for(f.sha256), (old, old))
    assert store.sweep({kept.sha256}) == 1
    assert store.exists(kept.sha256) and store.exists(young.sha256) and not store.exists(orphan.sha256)


def test_path_for_refuses_anything_but_a_digest(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")
    for bad in ("../../etc/passwd", "a" * 63, "G" * 64, ""):
        with pytest.raises(ValueError):
            store.path_for(bad)


def test_rows_references_and_dropping_oldest_of_ended_sessions(db, tmp_path: Path) -> None:
    # `db`: SQLite (tests/conftest.py); Postgres in tests/storage/postgres/test_shared_suites.py
    db.create_session("s_old", "telegram", user_id="1")
    db.create_session("s_live", "telegram", user_id="1")
    m_old = db.append_message("s_old", "user", "[image: a.jpg]")
    m_live = db.append_message("s_live", "user", "[image: b.jpg]")

    def add(conn, events, mid, rows):
        return media.insert_attachments(conn, mid, rows)

    shared = "a" * 64
    db.write(lambda c, e: add(c, e, m_old, [AttachmentRow("image", "image/jpeg", 100, "b" * 64, "a.jpg")]))
    db.write(lambda c, e: add(c, e, m_old, [AttachmentRow("file", None, 50, shared, "x.bin")]))
    db.write(lambda c, e: add(c, e, m_live, [AttachmentRow("file", None, 50, shared, "x.bin", "fid")]))
    with pytest.raises(ValueError, match="unknown attachment kind"):
        db.write(lambda c, e: add(c, e, m_live, [AttachmentRow("sticker", None, 1, None, None)]))
    rows = db.read(lambda c: media.attachments_of(c, [m_old, m_live]))
    assert [r["file_name"] for r in rows[m_old]] == ["a.jpg", "x.bin"]
    assert rows[m_live][0]["platform_file_id"] == "fid"
    assert db.read(media.stored_bytes) == 150  # the shared file counts once
    db.end_session("s_old")
    freed = db.write(lambda c, e: media.drop_oldest_of_ended_sessions(c, over_bytes=1))
    assert freed == ["b" * 64]  # the oldest, and not referenced elsewhere
    freed = db.write(lambda c, e: media.drop_oldest_of_ended_sessions(c, over_bytes=10**9))
    assert freed == []  # the shared file is still used by the live session
    assert db.read(media.referenced_hashes) == {shared}
    assert db.read(lambda c: media.attachments_of(c, [m_old]))[m_old][0]["dropped"] is True


def test_deleting_a_session_removes_its_attachment_rows_and_frees_the_file(db, tmp_path: Path) -> None:
    # `db`: SQLite (tests/conftest.py); Postgres in tests/storage/postgres/test_shared_suites.py
    store = MediaStore(tmp_path / "media")
    kept = store.save_bytes(b"photo")
    db.create_session("s1", "telegram", user_id="1")
    mid = db.append_message("s1", "user", "[image: p.jpg]")
    db.write(lambda c, e: media.insert_attachments(c, mid, [AttachmentRow("image", None, 5, kept.sha256, "p.jpg")]))
    assert db.delete_session("s1") is True  # the rows go with the messages (no foreign-key error)
    assert db.read(media.referenced_hashes) == set()
    old = time.time() - media.SWEEP_GRACE - 1
    os.utime(store.path_for(kept.sha256), (old, old))
    assert store.sweep(db.read(media.referenced_hashes)) == 1 and not store.exists(kept.sha256)
