"""agent.sse: the event-stream decoder gives the same events however the bytes are split."""

from __future__ import annotations

import pytest

from agent.sse import Event, SSEDecoder

BODY = (
    b": keep-alive\r\n\r\n"
    b'event: message\r\nid: 7\r\nretry: 10\r\ndata: {"a": 1}\r\n\r\n'
    b"data:first line\ndata: second line\n\n"
    b"data: caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd\r\r"
    b"event: empty\n\n"
    b"data: [DONE]\n\n"
    b"data: cut off, never ended"
)
EVENTS = [
    Event('{"a": 1}', "message"),
    Event("first line\nsecond line"),
    Event("café 你好"),
    Event("[DONE]"),
]


def decode(pieces: list[bytes]) -> list[Event]:
    decoder = SSEDecoder()
    return [event for piece in pieces for event in decoder.feed(piece)]


def test_one_read():
    assert decode([BODY]) == EVENTS


@pytest.mark.parametrize("size", [1, 2, 3, 5, 17])
def test_any_split_of_the_bytes_gives_the_same_events(size):
    assert decode([BODY[i : i + size] for i in range(0, len(BODY), size)]) == EVENTS


def test_crlf_split_between_reads_is_one_line_end():
    assert decode([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == [Event("a\nb")]


def test_events_come_out_with_the_read_that_ends_them():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: one\n\ndata: tw") == [Event("one")]
    assert decoder.feed(b"o\n") == []
    assert decoder.feed(b"\n") == [Event("two")]
