"""`/attach PATH [caption]`: how the terminal sends a file.

A chat platform hands the gateway a file the person uploaded; the terminal has no upload button,
so the local adapter reads this line itself and turns it into the same `Attachment` any platform
gives (the gateway never sees `/attach`). The path is checked when the line is read -- missing,
a directory, unreadable -- so a typo gets a sentence back at once and nothing goes to the gateway.

The bytes are read in chunks of `CHUNK_BYTES` off the event loop when the gateway asks for them
(`Attachment.open`), so a large file is never held whole and the cap (media.max_bytes) stops the
read part way, as it does for a platform download. The absolute path is the attachment's
`platform_file_id`, so a message taken up after a restart reads the file again (`reopen_path`).

The kind follows the MIME type `mimetypes` guesses from the name: image/*, audio/* (voice for the
Ogg/Opus names voice notes use), video/*, anything else a file (text files are then read for the
model by the gateway's intake).
"""

from __future__ import annotations

import asyncio
import io
import mimetypes
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Callable

from platforms.base import Attachment, AttachmentKind

ATTACH_COMMAND = "/attach"
ATTACH_USAGE = "/attach PATH [caption]"
CHUNK_BYTES = 1 << 20  # 1 MiB: few thread hops for a large file, little memory per read
VOICE_SUFFIXES = (".ogg", ".oga", ".opus")


@dataclass
class AttachLine:
    """What an `/attach` line became: the caption and the file, or a refusal to show the person."""

    caption: str = ""
    attachment: Attachment | None = None
    refusal: str | None = None


def is_attach_line(text: str) -> bool:
    head = text.lstrip()
    return head.split(None, 1)[0] == ATTACH_COMMAND if head else False


def parse_attach_line(text: str, cwd: Path | None = None) -> AttachLine:
    """Read `/attach PATH [caption]`. A path with spaces is quoted (`/attach "my notes.txt" see this`)."""
    rest = text.lstrip()[len(ATTACH_COMMAND) :].strip()
    if not rest:
        return AttachLine(refusal=f"Usage: {ATTACH_USAGE} -- sends the file at PATH with an optional caption.")
    raw, caption = _split_path(rest)
    if raw is None:
        return AttachLine(refusal=f"Could not read the path in “{rest}”: a quote is not closed. Usage: {ATTACH_USAGE}")
    path = Path(os.path.expanduser(raw))
    if not path.is_absolute():
        path = (cwd or Path.cwd()) / path
    refusal = _unusable(path, raw)
    if refusal is not None:
        return AttachLine(refusal=refusal)
    path = path.resolve()
    mime, _ = mimetypes.guess_type(path.name)
    attachment = Attachment(
        kind=kind_of(path.name, mime),
        open=path_opener(path),
        mime_type=mime,
        size=path.stat().st_size,
        file_name=path.name,
        platform_file_id=str(path),
    )
    return AttachLine(caption=caption, attachment=attachment)


def kind_of(name: str, mime: str | None) -> AttachmentKind:
    major = (mime or "").split("/", 1)[0]
    if major == "image":
        return "image"
    if name.lower().endswith(VOICE_SUFFIXES) and major in ("audio", ""):  # .opus is unknown to some tables
        return "voice"
    if major == "audio":
        return "audio"
    if major == "video":
        return "video"
    return "file"


def path_opener(path: Path) -> Callable[[], AsyncIterator[bytes]]:
    async def chunks() -> AsyncIterator[bytes]:
        handle = await asyncio.to_thread(open, path, "rb")
        try:
            while chunk := await asyncio.to_thread(handle.read, CHUNK_BYTES):
                yield chunk
        finally:
            handle.close()

    return chunks


def reopen_path(attachment: Attachment) -> Callable[[], AsyncIterator[bytes]] | None:
    """After a restart: read the file again if it is still there (else the gateway says it could not)."""
    path = Path(attachment.platform_file_id or "")
    return path_opener(path) if attachment.platform_file_id and path.is_file() else None


def _split_path(rest: str) -> tuple[str | None, str]:
    if rest[0] in "\"'":
        stream = io.StringIO(rest)
        lexer = shlex.shlex(stream, posix=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        try:
            path = lexer.get_token()
        except ValueError:  # no closing quotation
            return None, ""
        return path, (stream.read() if path is not None else "").strip()
    path, *caption = rest.split(None, 1)
    return path, caption[0].strip() if caption else ""


def _unusable(path: Path, shown: str) -> str | None:
    if not path.exists():
        return f"Nothing was sent: there is no file at {shown}."
    if path.is_dir():
        return f"Nothing was sent: {shown} is a directory; attach one file."
    if not path.is_file():
        return f"Nothing was sent: {shown} is not a regular file."
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        return f"Nothing was sent: {shown} cannot be read ({exc.strerror or exc})."
    return None
