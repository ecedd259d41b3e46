"""Sessions with attachments for the console's tests: a real PNG, files a browser must never run,
one too big to keep, one dropped by upkeep, and another session's file."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from gateway.db import SessionDB, new_session_id
from gateway.storage.media import AttachmentRow, MediaStore


def png(width: int = 4, height: int = 3) -> bytes:
    """A real PNG (red pixels), so a browser can decode it."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


PHOTO = png()
PAGE = b"<html><script>alert(document.cookie)</script></html>"
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
OTHER = b"another session's secret file"


def seed(db: SessionDB) -> dict[str, str]:
    """A session with a photo, an HTML page, an 'image' that is SVG, a file too big to keep, and one
    dropped by upkeep; a second session with a file of its own."""
    store = MediaStore(Path(db.path).parent / "media")
    photo, page, svg, other = (store.save_bytes(b) for b in (PHOTO, PAGE, SVG, OTHER))
    dropped = store.save_bytes(b"old voice")
    sid, elsewhere = new_session_id(), new_session_id()
    db.create_session(sid, "telegram", user_id="ann", title="with files")
    db.append_message(
        sid,
        "user",
        "here you go",
        user_id="ann",
        attachments=[
            AttachmentRow("image", "image/png", photo.size, photo.sha256, "beach.png"),
            AttachmentRow("file", "text/html", page.size, page.sha256, "page.html"),
            AttachmentRow("image", "image/svg+xml", svg.size, svg.sha256, "logo.svg"),
            AttachmentRow("video", "video/mp4", 99_000_000, None, "big.mp4"),
            AttachmentRow("voice", "audio/ogg", dropped.size, dropped.sha256, None),
        ],
    )
    db.write(
        lambda conn, events: conn.execute("UPDATE attachments SET dropped_at = 1.0 WHERE sha256 = ?", (dropped.sha256,))
    )
    db.create_session(elsewhere, "discord", user_id="eve")
    db.append_message(
        elsewhere, "user", "mine", attachments=[AttachmentRow("file", "text/plain", other.size, other.sha256, "s.txt")]
    )
    return {
        "sid": sid,
        "elsewhere": elsewhere,
        "photo": photo.sha256,
        "page": page.sha256,
        "svg": svg.sha256,
        "other": other.sha256,
        "dropped": dropped.sha256,
    }
