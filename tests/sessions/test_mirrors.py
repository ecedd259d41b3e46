"""gateway.sessions.mirrors: per-session JSONL appended after commit, coalesced atomic sessions.json, repair."""

from __future__ import annotations

import json
import os

import pytest

from gateway.db import SessionDB, new_session_id
from gateway.sessions.mirrors import Mirrors
from gateway.sessions.reset import ResetPolicies
from gateway.sessions.store import SessionStore
from gateway.source import SessionSource
from tests.fakes.loopback import wait_until_blocking
from tests.mirror_check import mirror_problems


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


@pytest.fixture
def db(home):
    database = SessionDB(home / "state.db")
    yield database
    database.close()


@pytest.fixture
def mirrors(home, db):
    m = Mirrors(home, db, index_interval=0.05)
    yield m
    m.close()


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_each_message_is_appended_with_its_id_and_flags(home, db, mirrors):
    sid = new_session_id()
    db.create_session(sid, "telegram")
    ids = [
        db.append_message(sid, "user", "你好 world"),
        db.append_message(sid, "assistant", None, tool_calls=[{"id": "c1", "function": {"name": "ls"}}]),
    ]
    ids.append(db.append_message(sid, "tool", "out", tool_call_id="c1", tool_name="ls"))
    mirrors.drain()  # the mirrors' thread writes the files after the commit
    got = lines(home / "sessions" / f"{sid}.jsonl")
    assert [m["id"] for m in got] == ids
    assert got[0]["content"] == "你好 world" and got[0]["active"] == 1 and got[0]["compacted"] == 0
    assert got[1]["tool_calls"] == [{"id": "c1", "function": {"name": "ls"}}]
    assert got[2]["tool_name"] == "ls"
    assert "你好" in (home / "sessions" / f"{sid}.jsonl").read_text(encoding="utf-8")  # readable, not \u-escaped
    assert mirrors.transcript_rewrites == 0


async def test_appends_never_rewrite_sessions_json_or_the_transcript(home, db, mirrors):
    store = SessionStore(db, ResetPolicies())
    source = SessionSource(platform="telegram", chat_id="7", chat_type="dm", user_id="7")
    sid = (await store.get_or_create(source)).entry.session_id
    index = home / "sessions.json"
    wait_until_blocking(lambda: mirrors.index_writes == 1 and index.exists())
    before = (os.stat(index).st_ino, os.stat(index).st_mtime_ns, mirrors.index_writes)
    transcript = home / "sessions" / f"{sid}.jsonl"
    for i in range(100):  # the runner's per-message path: lookup, then persist
        assert (await store.get_or_create(source)).entry.session_id == sid
        await db.aappend_message(sid, "user", f"message {i}")
        if i == 0:
            mirrors.drain()
            inode = os.stat(transcript).st_ino
    mirrors.close()  # joins the flusher: any write a change had scheduled has happened now
    assert (os.stat(index).st_ino, os.stat(index).st_mtime_ns, mirrors.index_writes) == before
    assert os.stat(transcript).st_ino == inode and mirrors.transcript_rewrites == 0
    assert len(lines(transcript)) == 100 and mirrors.lines_appended == 100


def test_key_changes_are_coalesced_and_written_atomically(home, db):
    m = Mirrors(home, db, index_interval=30)
    sid = new_session_id()
    db.create_session(sid, "local")
    for i in range(50):
        db.set_key_entry(f"agent:main:local:dm:u{i}", sid, {"platform": "local"}, "created")
    assert m.index_writes <= 2  # a leading write, then everything else waits for the interval
    m.close()  # flushes what is pending
    assert 1 <= m.index_writes <= 2
    data = json.loads((home / "sessions.json").read_text())
    assert len(data) == 50 and data["agent:main:local:dm:u3"]["session_id"] == sid
    assert not [p for p in home.iterdir() if p.name.startswith(".")]  # no temp files left
    assert mirror_problems(home, db) == []


def test_sessions_json_is_patched_from_commits_and_matches_a_full_rebuild(home, db, mirrors):
    sids = [new_session_id() for _ in range(3)]
    for sid in sids:
        db.create_session(sid, "telegram")
    for i in range(20):
        db.set_key_entry(f"agent:main:telegram:dm:{i}", sids[i % 3], {"platform": "telegram", "n": i}, "created")
    mirrors.flush()
    loads_before = mirrors.index_loads
    db.set_key_entry("agent:main:telegram:dm:4", sids[2], None, "resume")  # moved; origin kept
    db.delete_key_entry("agent:main:telegram:dm:5")
    db.delete_session(sids[0])  # drops its keys (0, 3, 6, ...) with it
    db.set_key_entry("agent:main:telegram:dm:new", sids[1], {"platform": "telegram"}, "created")
    mirrors.flush()
    assert mirrors.index_loads == loads_before  # patched from the commit events, not re-read
    data = json.loads((home / "sessions.json").read_text())
    assert data["agent:main:telegram:dm:4"]["session_id"] == sids[2]
    assert data["agent:main:telegram:dm:4"]["origin"] == {"platform": "telegram", "n": 4}
    assert "agent:main:telegram:dm:5" not in data and "agent:main:telegram:dm:3" not in data
    assert "agent:main:telegram:dm:new" in data
    assert mirror_problems(home, db) == []  # byte for byte what a rebuild from the DB writes


def test_a_sessions_json_replaced_by_another_process_is_reloaded_not_overwritten(home, db, mirrors):
    sid = new_session_id()
    db.create_session(sid, "telegram")
    db.set_key_entry("agent:main:telegram:dm:1", sid)
    db.set_key_entry("agent:main:telegram:dm:2", sid)
    mirrors.flush()
    # Another process (a CLI command) drops a key through its own DB handle and mirrors: this
    # process sees no commit event for it.
    other_db = SessionDB(home / "state.db")
    other = Mirrors(home, other_db, index_interval=0.05)
    other_db.delete_key_entry("agent:main:telegram:dm:1")
    other.close()
    other_db.close()
    db.set_key_entry("agent:main:telegram:dm:3", sid)
    mirrors.flush()
    data = json.loads((home / "sessions.json").read_text())
    assert sorted(data) == ["agent:main:telegram:dm:2", "agent:main:telegram:dm:3"]


def test_flag_changes_rewrite_that_file_and_later_appends_land_in_it(home, db, mirrors):
    sid, other = new_session_id(), new_session_id()
    db.create_session(sid, "telegram")
    db.create_session(other, "telegram")
    db.append_message(other, "user", "untouched")
    for i in range(3):
        db.append_message(sid, "user", f"q{i}")
        db.append_message(sid, "assistant", f"a{i}")
    mirrors.drain()
    path = home / "sessions" / f"{sid}.jsonl"
    inode, other_inode = os.stat(path).st_ino, os.stat(home / "sessions" / f"{other}.jsonl").st_ino
    assert db.rewind(sid, 1) == 2  # /undo
    mirrors.drain()
    assert os.stat(path).st_ino != inode  # replaced, not edited in place
    assert [m["active"] for m in lines(path)] == [1, 1, 1, 1, 0, 0]
    first_q = lines(path)[0]["id"]
    db.supersede_after(sid, first_q)  # /retry
    mirrors.drain()
    assert [(m["active"], m["compacted"]) for m in lines(path)][1:4] == [(0, 1)] * 3
    new_id = db.append_message(sid, "user", "after the rewrite")
    mirrors.drain()
    assert lines(path)[-1]["id"] == new_id  # not written to the replaced file's old descriptor
    assert os.stat(home / "sessions" / f"{other}.jsonl").st_ino == other_inode
    assert mirrors.transcript_rewrites == 2
    assert mirror_problems(home, db) == []


def test_deleting_a_session_removes_its_file_and_key(home, db, mirrors):
    sid = new_session_id()
    db.create_session(sid, "telegram")
    db.append_message(sid, "user", "bye")
    db.set_key_entry("agent:main:telegram:dm:1", sid)
    mirrors.flush()
    assert (home / "sessions" / f"{sid}.jsonl").exists()
    db.delete_session(sid)
    mirrors.drain()
    assert not (home / "sessions" / f"{sid}.jsonl").exists()
    mirrors.flush()
    assert json.loads((home / "sessions.json").read_text()) == {}


def test_a_stalled_mirror_keeps_a_bounded_backlog_and_loses_nothing(home, db):
    m = Mirrors(home, db, index_interval=0.01, max_backlog=3)
    sids = [new_session_id() for _ in range(3)]
    for sid in sids:
        db.create_session(sid, "telegram")
    db.append_message(sids[2], "user", "written before the stall")
    db.set_key_entry("agent:main:telegram:dm:0", sids[2], {"platform": "telegram"}, "created")
    m.flush()
    assert list(json.loads((home / "sessions.json").read_text())) == ["agent:main:telegram:dm:0"]
    with m._lock:  # the mirrors' thread is stuck (a slow or full disk): commits go on
        for i in range(20):
            db.append_message(sids[i % 2], "user", f"while stalled {i}")
        db.set_key_entry("agent:main:telegram:dm:1", sids[0], {"platform": "telegram"}, "created")
        db.delete_session(sids[2])  # and with it the key dm:0
        assert m.backlog() <= 3 and m.overflows > 0  # memory stays bounded
    m.flush()
    assert mirror_problems(home, db) == []  # the dropped commits were rewritten from the DB
    assert not (home / "sessions" / f"{sids[2]}.jsonl").exists()
    assert list(json.loads((home / "sessions.json").read_text())) == ["agent:main:telegram:dm:1"]
    m.close()


def test_open_files_are_bounded(home, db):
    m = Mirrors(home, db, max_open_files=4)
    sids = [new_session_id() for _ in range(20)]
    for sid in sids:
        db.create_session(sid, "discord")
    for round_ in range(3):
        for sid in sids:
            db.append_message(sid, "user", f"{sid} {round_}")
            assert m.open_files <= 4
    m.close()
    assert m.open_files == 0
    assert all(len(lines(home / "sessions" / f"{s}.jsonl")) == 3 for s in sids)
    assert mirror_problems(home, db) == []


def test_a_torn_tail_does_not_swallow_the_next_line(home, db):
    sid = new_session_id()
    db.create_session(sid, "telegram")
    m = Mirrors(home, db)
    db.append_message(sid, "user", "one")
    m.close()
    path = home / "sessions" / f"{sid}.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"id": 99, "ro')  # a crash mid-line
    m2 = Mirrors(home, db)  # a restart that did not repair first
    new_id = db.append_message(sid, "user", "two")
    m2.drain()
    assert json.loads(path.read_text().splitlines()[-1])["id"] == new_id
    m2.close()


def test_a_failing_mirror_does_not_fail_the_commit_and_catches_up(home, db, caplog):
    m = Mirrors(home, db)
    sid = new_session_id()
    db.create_session(sid, "telegram")
    os.rmdir(home / "sessions")
    (home / "sessions").write_text("not a directory")  # every transcript write fails
    mids = [db.append_message(sid, "user", f"kept {i}") for i in range(5)]
    assert [r["id"] for r in db.get_messages(sid)] == mids
    m.drain()
    assert len([r for r in caplog.records if "mirror write failed" in r.message]) == 1  # not one per message
    (home / "sessions").unlink()
    (home / "sessions").mkdir()  # the disk is usable again
    m.retry_interval = m._retry_at = 0
    db.append_message(sid, "user", "after")
    m.drain()
    assert len(lines(home / "sessions" / f"{sid}.jsonl")) == 6  # the failed lines were rewritten
    assert mirror_problems(home, db) == []
    m.close()


def test_repair_rebuilds_both_mirrors_from_the_db(home, db):
    m = Mirrors(home, db, attach=False)  # files are written by hand below, the DB is the truth
    sids = [new_session_id() for _ in range(5)]
    for n, sid in enumerate(sids):
        db.create_session(sid, "telegram")
        for i in range(4):
            db.append_message(sid, "user", f"s{n} m{i}")
    empty = new_session_id()
    db.create_session(empty, "local")
    db.set_key_entry("agent:main:telegram:dm:5", sids[0], {"platform": "telegram"}, "created")
    first = m.repair()
    assert (first.files_created, first.lines_added, first.index_rewritten) == (5, 20, True)
    assert mirror_problems(home, db) == []

    d = home / "sessions"
    (d / f"{sids[0]}.jsonl").unlink()  # missing file
    full = (d / f"{sids[1]}.jsonl").read_bytes()
    (d / f"{sids[1]}.jsonl").write_bytes(full[: len(full) - 30])  # torn last line
    lines2 = (d / f"{sids[2]}.jsonl").read_bytes().splitlines(keepends=True)
    (d / f"{sids[2]}.jsonl").write_bytes(b"".join(lines2[:2]))  # two lines missing
    with open(d / f"{sids[3]}.jsonl", "ab") as f:
        f.write(b"garbage\n")  # a garbled extra line
    (d / "20200101_000000_0badf00d.jsonl").write_text("{}\n")  # a deleted session's file
    (d / ".x.jsonl.tmp-1-abc").write_text("half")  # a rename that never happened
    (d / f"{empty}.jsonl").write_text("")  # an empty transcript of an empty session is fine
    (home / "sessions.json").write_text('{"stale": ')
    db.rewind(sids[4], 1)  # flags changed while nobody was mirroring

    calls = []
    report = m.repair(progress=lambda done, total: calls.append((done, total)))
    assert report.files_created == 1
    assert report.files_rewritten == 4  # torn, short, garbled, flags
    assert report.files_removed == 1  # the deleted session's
    assert report.temp_removed == 1
    assert report.lines_added == 4 + 1 + 2 + 1  # missing file, torn line, short file, flag change
    assert report.lines_removed == 1 + 1 + 1  # torn fragment, garbage, stale flag line
    assert report.index_rewritten and report.keys == 1
    assert calls[-1] == (6, 6)
    summary = report.summary()
    assert "1 missing transcript(s) created" in summary and "sessions.json rewritten" in summary
    assert mirror_problems(home, db) == []
    again = m.repair()
    assert again.clean and "nothing to fix" in again.summary()
    m.close()


def test_mirror_check_notices_a_difference(home, db, mirrors):
    sid = new_session_id()
    db.create_session(sid, "telegram")
    db.append_message(sid, "user", "original")
    mirrors.drain()
    path = home / "sessions" / f"{sid}.jsonl"
    path.write_text(path.read_text().replace("original", "edited"))
    assert mirror_problems(home, db) != []
