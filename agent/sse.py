"""Server-sent events from the raw bytes of a streamed model reply.

A chat-completions stream is an `text/event-stream` body: lines ending in LF, CRLF or CR; `data:`
lines (several in one event are joined with newlines), an optional `event:` name, `:` comments,
and a blank line ending each event (the WHATWG event-stream rules). `SSEDecoder.feed` takes the
bytes of one network read and returns the events that read completed, so the caller handles a
read's events together (agent.llm hands their text to the reply in one piece per read).

Why not the `openai` SDK's own stream iterator: it builds a pydantic `ChatCompletionChunk` for every
event, ~64 us each, which made a streamed answer of 4-character chunks cost 0.6x the throughput of
an unstreamed one (bench/streaming.py); splitting lines here and one `json.loads` per event costs a
few microseconds. The request itself still goes through the SDK (agent.llm).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    data: str
    name: str | None = None  # the `event:` field, when the server sent one


class SSEDecoder:
    """Incremental: bytes in (any split), complete events out. An event not ended by a blank line
    when the body ends is dropped, as the event-stream rules say (the stream was cut)."""

    def __init__(self) -> None:
        self._rest = b""  # the start of a line not yet ended
        self._skip_lf = False  # the last read ended in CR: a LF opening the next one is its CRLF
        self._data: list[str] = []
        self._name: str | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        if not chunk:
            return []
        self._skip_lf = chunk[-1:] == b"\r"
        data = self._rest + chunk if self._rest else chunk
        lines = data.splitlines()  # bytes split on LF, CRLF and CR only
        self._rest = b"" if data[-1:] in (b"\n", b"\r") else lines.pop()
        events: list[Event] = []
        for raw in lines:
            event = self._line(raw.decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> Event | None:
        if not line:
            if not self._data:
                self._name = None  # an event with no data is not dispatched
                return None
            event = Event("\n".join(self._data), self._name)
            self._data, self._name = [], None
            return event
        if line[0] == ":":
            return None  # a comment (servers send them as keep-alives)
        field, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._name = value
        return None  # `id`, `retry` and unknown fields mean nothing to a one-shot reply
