"""The tool-call journal (gateway.storage.tool_calls) on both backends through the storage face:
a call is recorded started, then done with its result; a rerun's different call at a position
replaces the row; rows are found by (inbox entry, position)."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.both_backends


async def test_a_call_is_started_then_done_and_found_by_entry_and_position(db):
    entry = await db.ainbox_add("telegram", "u1", "key:a", "{}", time.time())
    assert db.tool_call(entry, 0) is None
    await db.atool_call_start(entry, 0, "call_1", "orders", "cancel_order", '{"id": 42}')
    row = db.tool_call(entry, 0)
    assert (row["state"], row["server"], row["tool"], row["arguments"]) == (
        "started",
        "orders",
        "cancel_order",
        '{"id": 42}',
    )
    assert row["result"] is None
    await db.atool_call_finish(entry, 0, "cancelled", "ok", "approved")
    row = db.tool_call(entry, 0)
    assert (row["state"], row["result"], row["outcome"], row["approval"]) == ("done", "cancelled", "ok", "approved")

    await db.atool_call_start(entry, 1, "call_2", "files", "read", "{}")
    await db.atool_call_start(entry, 1, "call_9", "files", "list", "{}")  # a rerun's other call: replaces
    assert [(r["position"], r["call_id"], r["tool"], r["state"]) for r in db.tool_calls_of(entry)] == [
        (0, "call_1", "cancel_order", "done"),
        (1, "call_9", "list", "started"),
    ]


async def test_a_done_entrys_journal_is_pruned_with_it_and_only_then(db):
    from gateway.storage import inbox

    old = time.time() - 3 * 24 * 3600
    done_old, open_old, done_new = [await db.ainbox_add("telegram", f"p{i}", "key:a", "{}", old) for i in range(3)]
    db.write(lambda conn, ev: inbox.finish(conn, [done_old], now=old))
    await db.ainbox_finish([done_new])  # done just now: inside the redelivery horizon
    for entry in (done_old, open_old, done_new):
        for position in (0, 1):
            await db.atool_call_start(entry, position, f"c{position}", "orders", "cancel_order", "{}")
    cutoff = time.time() - inbox.DONE_TTL_SECONDS
    assert db.write(lambda conn, ev: inbox.prune(conn, cutoff)) == 1
    assert db.tool_calls_of(done_old) == []
    assert [len(db.tool_calls_of(e)) for e in (open_old, done_new)] == [2, 2]  # an open turn may still rerun
