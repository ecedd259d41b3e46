"""Speech to text through any OpenAI-compatible `/audio/transcriptions` endpoint.

Voice notes are how many people talk to a bot on their phone; the transcript becomes the message
text, so it is answered, stored and found by search like anything typed. The endpoint is the
`transcription.*` settings (falling back to the model's endpoint, where most users already run a
Whisper-compatible server); with neither, voice is named but not transcribed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import openai

log = logging.getLogger(__name__)

DEFAULT_MODEL = "whisper-1"
TIMEOUT_SECONDS = 120.0


class TranscriptionFailed(RuntimeError):
    """The endpoint refused or failed; the message says why in a sentence."""


@dataclass(frozen=True)
class TranscriptionSettings:
    base_url: str
    api_key: str = ""
    model: str = DEFAULT_MODEL


class Transcriber:
    def __init__(self, settings: TranscriptionSettings) -> None:
        self.settings = settings
        self._client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key or "none",
            timeout=TIMEOUT_SECONDS,
            max_retries=2,
        )

    async def transcribe(self, data: bytes, file_name: str, mime_type: str | None) -> str:
        try:
            result = await self._client.audio.transcriptions.create(
                model=self.settings.model,
                file=(file_name, data, mime_type or "application/octet-stream"),
            )
        except openai.APIStatusError as exc:
            raise TranscriptionFailed(f"the transcription endpoint answered HTTP {exc.status_code}") from None
        except openai.APIError as exc:
            raise TranscriptionFailed(f"the transcription endpoint failed: {type(exc).__name__}") from None
        text = getattr(result, "text", None)
        if text is None and isinstance(result, str):
            text = result
        return (text or "").strip()

    async def close(self) -> None:
        await self._client.close()
