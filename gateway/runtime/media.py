"""What a message's attachments become: files kept under `home/media/`, rows for `attachments`,
text that is stored and searched with the message, parts the model sees, and what to tell the person.

Everything a person sends must leave a trace a later search can find, so each attachment adds a
line to the message text: its kind, file name, type and size, and -- for voice and audio -- the
transcript, for a text file its text. Images go to the model as image parts only when the model
can see (`model.vision`); other models read the line and can say they cannot look. A file over
`media.max_bytes` is not kept (the cap is checked before and while downloading) and the person is
told; nothing else about the message is lost.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from agent.tools import Attachment as ToolFile
from agent.transcribe import Transcriber, TranscriptionFailed
from gateway.language import _
from gateway.storage.media import AttachmentRow, MediaStore, MediaTooLarge, StoredFile
from platforms.base import Attachment

log = logging.getLogger(__name__)

TEXT_FILE_CHARS = 50_000  # characters of a text file given to the model and kept searchable
IMAGE_MIMES = ("image/jpeg", "image/png", "image/gif", "image/webp")
TEXT_MIMES = ("application/json", "application/xml", "application/yaml", "application/x-yaml", "application/toml")
TEXT_SUFFIXES = re.compile(
    r"\.(txt|md|markdown|rst|csv|tsv|json|jsonl|ya?ml|toml|ini|cfg|conf|log|xml|html?|css|js|ts|py|go|rs|java|c|h|"
    r"cpp|hpp|sh|sql|diff|patch)$",
    re.I,
)
# Model families that take image input, for `model.vision: auto`.
VISION_MODELS = re.compile(r"gpt-4o|gpt-4\.1|gpt-5|o[34]\b|vision|-vl\b|vl-|llava|claude|gemini|pixtral|qwen.*vl", re.I)


def vision_enabled(setting: str | bool, model_name: str) -> bool:
    if isinstance(setting, bool):
        return setting
    if setting in ("true", "on", "yes"):
        return True
    if setting in ("false", "off", "no"):
        return False
    return bool(VISION_MODELS.search(model_name or ""))


def human_size(size: int | None) -> str:
    if size is None:
        return "size unknown"
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


@dataclass
class Received:
    text: str  # the message text to store: the caption, then one line (or block) per attachment
    rows: list[AttachmentRow] = field(default_factory=list)
    image_parts: list[dict[str, Any]] = field(default_factory=list)  # openai content parts
    notices: list[str] = field(default_factory=list)  # sentences for the person (too big, failed)

    def model_content(self) -> str | list[dict[str, Any]]:
        """The user message's content for the model: plain text, or text plus image parts."""
        if not self.image_parts:
            return self.text
        return [{"type": "text", "text": self.text}, *self.image_parts]


class MediaIntake:
    def __init__(self, store: MediaStore, *, transcriber: Transcriber | None = None, vision: bool = False) -> None:
        self.store = store
        self.transcriber = transcriber
        self.vision = vision

    async def receive(self, caption: str, attachments: list[Attachment]) -> Received:
        received = Received(text=caption)
        lines = [caption] if caption.strip() else []
        for attachment in attachments:
            line = await self._one(attachment, received)
            lines.append(line)
        received.text = "\n".join(lines)
        return received

    async def _one(self, att: Attachment, received: Received) -> str:
        name = att.file_name or att.kind
        described = f"{att.kind}: {name} ({att.mime_type or 'unknown type'}, {human_size(att.size)})"
        stored: StoredFile | None = None
        try:
            if att.open is None:
                raise LookupError("the platform gave no way to download it")
            stored = await self.store.save_stream(att.open(), att.size)
        except MediaTooLarge as exc:
            received.notices.append(_("{name} was not kept: {reason}.", name=name, reason=exc))
            received.rows.append(_row(att, None, att.size))
            return f"[{described}: not kept, too big]"
        except Exception as exc:  # a failed download must not lose the message
            log.warning("attachment %s could not be downloaded: %s", name, exc)
            received.notices.append(_("{name} could not be downloaded, so I only know its name.", name=name))
            received.rows.append(_row(att, None, att.size))
            return f"[{described}: could not be downloaded]"
        received.rows.append(_row(att, stored.sha256, stored.size))
        described = f"{att.kind}: {name} ({att.mime_type or 'unknown type'}, {human_size(stored.size)})"
        if att.kind == "image":
            mime = att.mime_type if att.mime_type in IMAGE_MIMES else "image/jpeg"
            if self.vision:
                data = base64.b64encode(self.store.read(stored.sha256)).decode("ascii")
                received.image_parts.append({"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}})
                return f"[{described}]"
            return f"[{described}: this model cannot see images]"
        if att.kind in ("voice", "audio"):
            return f"[{described}]" + await self._transcript(att, stored, received)
        if att.kind == "file" and _is_text(att):
            text = _decode(self.store.read(stored.sha256))
            if text is not None:
                cut = text[:TEXT_FILE_CHARS]
                more = (
                    "" if len(text) <= TEXT_FILE_CHARS else f"\n[... {len(text) - TEXT_FILE_CHARS:,} more characters]"
                )
                return f"[{described}]\n{cut}{more}"
        return f"[{described}]"

    async def keep(self, files: list[ToolFile]) -> list[AttachmentRow]:
        """Files a tool returned (an MCP server's images), stored under home/media/ so the console
        shows them with the tool's message; one over media.max_bytes is named only."""
        rows = []
        for file in files:
            kind = "image" if file.mime.startswith("image/") else "file"
            try:
                stored = await asyncio.to_thread(self.store.save_bytes, file.data)
            except MediaTooLarge:
                rows.append(AttachmentRow(kind, file.mime, len(file.data), None, None))
                continue
            rows.append(AttachmentRow(kind, file.mime, stored.size, stored.sha256, None))
        return rows

    async def _transcript(self, att: Attachment, stored: StoredFile, received: Received) -> str:
        if self.transcriber is None:
            return " (no transcription is configured)"
        try:
            text = await self.transcriber.transcribe(
                self.store.read(stored.sha256), att.file_name or f"{att.kind}.ogg", att.mime_type
            )
        except TranscriptionFailed as exc:
            received.notices.append(
                _("I could not transcribe {name}: {reason}.", name=att.file_name, reason=exc)
                if att.file_name
                else _("I could not transcribe the voice message: {reason}.", reason=exc)
            )
            return " (transcription failed)"
        return f" transcript: {text}" if text else " (no speech recognised)"


def _row(att: Attachment, sha256: str | None, size: int | None) -> AttachmentRow:
    return AttachmentRow(att.kind, att.mime_type, size, sha256, att.file_name, att.platform_file_id)


def _is_text(att: Attachment) -> bool:
    mime = (att.mime_type or "").split(";")[0].strip().lower()
    return mime.startswith("text/") or mime in TEXT_MIMES or bool(TEXT_SUFFIXES.search(att.file_name or ""))


def _decode(data: bytes) -> str | None:
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
