"""The local terminal adapter over real pipes."""

from __future__ import annotations

import asyncio
import io
import os
import sqlite3

import pytest

from gateway.source import Platform, build_session_key
from platforms.base import InboundMessage
from platforms.local import NOT_SAVED_TEXT, LocalAdapter, local_user_name
from tests.fakes.loopback import wait_until


async def test_lines_become_dm_messages_in_order() -> None:
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "r", encoding="utf-8")
    out = io.StringIO()
    adapter = LocalAdapter({"user": "alice"}, input=reader, output=out)
    received: list[InboundMessage] = []

    async def on_message(msg: InboundMessage) -> None:
        received.append(msg)

    await adapter.start(on_message)
    assert adapter.health().ready
    os.write(write_fd, "hello there\n\n   \n/search 你好\r\n".encode())
    await wait_until(lambda: len(received) == 2)
    os.write(write_fd, b"last line without newline")
    os.close(write_fd)
    await asyncio.wait_for(adapter.input_closed.wait(), 5)
    assert [m.text for m in received] == ["hello there", "/search 你好", "last line without newline"]
    source = received[0].source
    assert source.platform is Platform.LOCAL and source.chat_type == "dm"
    assert source.user_id == "alice" and source.chat_id == "alice"
    assert build_session_key(source) == "agent:main:local:dm:alice"
    assert received[1].is_command
    assert len({m.message_id for m in received}) == 3
    assert out.getvalue() == ""  # piped: no prompt
    await adapter.stop()
    assert not adapter.health().ready
    reader.close()


async def test_send_prints_reply() -> None:
    out = io.StringIO()
    adapter = LocalAdapter({"user": "bob"}, input=io.StringIO(""), output=out)
    ids = await adapter.send(adapter.source, "line one\nline two\n")
    assert out.getvalue() == "line one\nline two\n"
    assert len(ids) == 1
    assert adapter.split("x" * 10_000) == ["x" * 10_000]  # no splitting in a terminal


async def test_handler_error_does_not_stop_reading() -> None:
    adapter = LocalAdapter({"user": "carol"}, input=io.StringIO("boom\nfine\n"), output=io.StringIO())
    seen: list[str] = []

    async def on_message(msg: InboundMessage) -> None:
        seen.append(msg.text)
        if msg.text == "boom":
            raise RuntimeError("handler failed")

    await adapter.start(on_message)
    await asyncio.wait_for(adapter.input_closed.wait(), 5)
    assert seen == ["boom", "fine"]
    await adapter.stop()


async def test_message_ids_differ_between_runs() -> None:
    ids: list[str] = []

    async def on_message(msg: InboundMessage) -> None:
        ids.append(msg.message_id)

    for _ in range(2):
        adapter = LocalAdapter({"user": "dan"}, input=io.StringIO("same text\n"), output=io.StringIO())
        await adapter.start(on_message)
        await asyncio.wait_for(adapter.input_closed.wait(), 5)
        await adapter.stop()
    assert len(ids) == 2 and ids[0] != ids[1]


def test_user_name_is_key_safe() -> None:
    assert local_user_name("Jane Doe:admin") == "Jane_Doe_admin"
    assert local_user_name("") == local_user_name(None) != ""


async def test_a_streamed_reply_is_printed_as_it_is_written_with_a_status_line() -> None:
    out = io.StringIO()
    adapter = LocalAdapter({"user": "alice"}, input=io.StringIO(""), output=out)
    stream = adapter.begin_reply(adapter.source)
    await stream.update("Hello")
    assert out.getvalue() == "Hello" and stream.first_shown.is_set()  # visible before the end
    await stream.update("Hello, wor")
    assert out.getvalue() == "Hello, wor"
    await stream.status("searching past conversations…")
    await stream.update("Found it")  # the next model step writes anew
    await stream.finish("Found it: the answer.")
    assert out.getvalue() == "Hello, wor\n[searching past conversations…]\n\nFound it: the answer.\n"


async def test_a_stopped_streamed_reply_keeps_its_text_and_the_note() -> None:
    out = io.StringIO()
    adapter = LocalAdapter({"user": "alice"}, input=io.StringIO(""), output=out)
    stream = adapter.begin_reply(adapter.source)
    await stream.update("Half an")
    await stream.fail("(stopped)")
    assert out.getvalue() == "Half an\n\n(stopped)\n"


async def test_an_answer_ending_in_blank_lines_is_printed_once() -> None:
    out = io.StringIO()
    adapter = LocalAdapter({"user": "alice"}, input=io.StringIO(""), output=out)
    stream = adapter.begin_reply(adapter.source)
    await stream.update("col a,col b\n1,2\n")
    await stream.update("col a,col b\n1,2\n\n")
    await stream.finish("col a,col b\n1,2\n\n")
    assert out.getvalue() == "col a,col b\n1,2\n"  # once, and one line end (a pipe reads it as is)


async def test_a_stopped_answer_whose_last_chunk_ends_in_a_space_is_not_reprinted() -> None:
    out = io.StringIO()
    adapter = LocalAdapter({"user": "alice"}, input=io.StringIO(""), output=out)
    stream = adapter.begin_reply(adapter.source)
    shown = " ".join(f"word{i}" for i in range(16)) + " "
    await stream.update(shown)
    await stream.fail("Stopped.")
    assert out.getvalue() == shown.rstrip() + "\n\nStopped.\n"


@pytest.mark.parametrize(
    "locale, notice",
    [("C.UTF-8", NOT_SAVED_TEXT), ("zh_CN.UTF-8", "没有保存：数据库暂时不可用，请再发一次。")],
)
async def test_a_line_that_could_not_be_stored_is_told_so_and_the_next_one_is_read(
    monkeypatch: pytest.MonkeyPatch, locale: str, notice: str
) -> None:
    # told in the terminal's language: with the database down, a /language choice cannot be read
    monkeypatch.setenv("LANG", locale)
    for name in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "r", encoding="utf-8")
    out = io.StringIO()
    adapter = LocalAdapter({"user": "alice"}, input=reader, output=out)
    received: list[str] = []

    async def on_message(msg: InboundMessage) -> None:  # the runner raises when the inbox commit fails
        if msg.text == "lost":
            raise sqlite3.OperationalError("database or disk is full")
        received.append(msg.text)

    await adapter.start(on_message)
    os.write(write_fd, b"lost\nkept\n")
    os.close(write_fd)
    await asyncio.wait_for(adapter.input_closed.wait(), 5)
    assert received == ["kept"]
    assert out.getvalue() == notice + "\n"
    await adapter.stop()
