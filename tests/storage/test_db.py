"""SessionDB: schema, durability, group commit, sessions, lineage, flags, retention, import."""

import asyncio
import sqlite3
import threading

import pytest

from gateway.db import SessionDB, TitleTaken, UnknownSession, new_session_id
from gateway.errors import ImportRecordError
from gateway.storage.events import KeyChanged, KeyDeleted, MessageAppended, SessionDeleted, SessionRewritten
from gateway.storage.schema import MIGRATIONS, SCHEMA_VERSION, SchemaTooNew, _statements
from tests.fakes.loopback import wait_until_blocking

pytestmark = pytest.mark.both_backends


def test_session_id_format():
    sid = new_session_id(0)
    assert sid.startswith("19700101_000000_") and len(sid) == 24


def test_old_schema_upgrades_and_newer_is_refused(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for stmt in _statements(MIGRATIONS[0]):
        conn.execute(stmt)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (1)")
    conn.execute("INSERT INTO sessions (id, source, started_at, last_active_at) VALUES ('s1', 'local', 1, 1)")
    conn.commit()
    conn.close()
    with SessionDB(path) as db:
        assert db.get_session("s1")["source"] == "local"
        assert db.mark_event_seen("telegram", "1")  # a v2 table exists now
        assert db.read(lambda c: c.execute("SELECT version FROM schema_version").fetchone()[0]) == SCHEMA_VERSION
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 5,))
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNew, match="newer than this chinwag"):
        SessionDB(path)


@pytest.mark.sqlite_only("reads the SQLite file with sqlite3 (Postgres: test_postgres_db.py)")
def test_append_is_committed_when_it_returns(db, tmp_path):
    sid = new_session_id()
    db.create_session(sid, "local")
    mid = db.append_message(sid, "user", "hello")
    other = sqlite3.connect(tmp_path / "state.db")  # an independent reader sees it at once
    assert other.execute("SELECT content FROM messages WHERE id = ?", (mid,)).fetchone() == ("hello",)
    other.close()


@pytest.mark.sqlite_only("SQLite's group commit; Postgres commits each write itself")
def test_concurrent_appends_share_commits(db):
    sids = [new_session_id() for _ in range(50)]
    for sid in sids:
        db.create_session(sid, "local")
    before = db.commit_stats
    barrier = threading.Barrier(50)

    def chat(sid):
        barrier.wait()
        for i in range(10):
            db.append_message(sid, "user", f"message {i}")

    threads = [threading.Thread(target=chat, args=(sid,)) for sid in sids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    commits, writes = (a - b for a, b in zip(db.commit_stats, before))
    assert writes == 500
    assert commits < writes  # group commit batched concurrent appends
    assert db.count_messages() == 500
    for sid in sids:  # per-chat order preserved
        assert [m["content"] for m in db.get_messages(sid)] == [f"message {i}" for i in range(10)]


async def test_async_appends_do_not_block_the_loop(db):
    sid = new_session_id()
    await db.acreate_session(sid, "local")
    ticks = 0
    done = asyncio.Event()

    async def ticker():
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    t = asyncio.create_task(ticker())
    ids = await asyncio.gather(*(db.aappend_message(sid, "user", f"m{i}") for i in range(200)))
    done.set()
    await t
    assert len(set(ids)) == 200 and ticks > 10


@pytest.mark.sqlite_only("the group-commit batch; on Postgres every write is alone")
def test_a_failing_write_fails_alone(db):
    sid = new_session_id()
    db.create_session(sid, "local")
    results = {}

    def good():
        results["good"] = db.append_message(sid, "user", "kept")

    def bad():
        try:
            db.append_message("nope", "user", "lost")
        except UnknownSession as exc:
            results["bad"] = exc

    threads = [threading.Thread(target=f) for f in (good, bad, good)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert isinstance(results["bad"], UnknownSession) and "nope" in str(results["bad"])
    assert [m["content"] for m in db.get_messages(sid)] == ["kept", "kept"]


def test_bad_input_gets_clear_errors(db):
    sid = new_session_id()
    db.create_session(sid, "local")
    with pytest.raises(ValueError, match="role"):
        db.append_message(sid, "wizard", "x")
    with pytest.raises(ValueError, match="limit"):
        db.append_message(sid, "user", "x" * 4_000_001)
    with pytest.raises(TypeError, match="unknown message field"):
        db.append_message(sid, "user", "x", colour="red")
    assert db.get_messages(sid) == []


@pytest.mark.sqlite_only("SQLite's max_page_count")
def test_full_disk_fails_the_write_and_loses_nothing(db):
    sid = new_session_id()
    db.create_session(sid, "local")
    db.append_message(sid, "user", "before")
    pages = db.read(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    db.write(lambda conn, ev: conn.execute(f"PRAGMA max_page_count = {pages + 1}"))
    with pytest.raises(sqlite3.OperationalError, match="full"):
        db.append_message(sid, "user", "y" * 200_000)
    db.write(lambda conn, ev: conn.execute("PRAGMA max_page_count = 1073741823"))
    db.append_message(sid, "user", "after")
    assert [m["content"] for m in db.get_messages(sid)] == ["before", "after"]
    assert db.read(lambda c: c.execute("PRAGMA integrity_check").fetchone()[0]) == "ok"


def test_sessions_upsert_end_reopen_tokens(db):
    db.create_session("s1", "telegram", user_id="u1", model="m1")
    db.create_session("s1", "telegram", model="m2")  # upsert keeps what it does not set
    s = db.get_session("s1")
    assert (s["user_id"], s["model"]) == ("u1", "m2")
    db.end_session("s1", "idle")
    assert db.get_session("s1")["end_reason"] == "idle"
    db.reopen_session("s1")
    assert db.get_session("s1")["ended_at"] is None
    db.add_tokens("s1", 10, 5)
    assert (db.get_session("s1")["input_tokens"], db.get_session("s1")["output_tokens"]) == (10, 5)
    with pytest.raises(UnknownSession):
        db.end_session("missing")


def test_titles_unique_and_sanitised(db):
    db.create_session("a", "local")
    db.create_session("b", "local")
    assert db.set_title("a", "  my\x00 project\n\t plan ") == "my project plan"
    with pytest.raises(TitleTaken):
        db.set_title("b", "my project plan")
    assert db.set_title("b", "x" * 500) == "x" * 100
    assert db.set_title("b", "   ") is None
    assert db.next_lineage_title("my project plan") == "my project plan #2"
    db.set_title("b", "my project plan #2")
    assert db.next_lineage_title("my project plan") == "my project plan #3"
    assert db.next_lineage_title("my project plan #2") == "my project plan #3"
    assert db.find_session("MY PROJECT PLAN")["id"] == "a"


def test_lineage_with_cycle_guard(db):
    for sid, parent in [("r", None), ("c1", "r"), ("c2", "c1"), ("c3", "r")]:
        db.create_session(sid, "local", parent_session_id=parent)
    assert db.get_root("c2") == "r"
    assert sorted(db.get_lineage("c2")) == ["c1", "c2", "c3", "r"]
    db.create_session("x", "local", parent_session_id="y")
    db.create_session("y", "local", parent_session_id="x")  # a cycle
    assert db.get_root("x") in {"x", "y"}
    assert sorted(db.get_lineage("x")) == ["x", "y"]


def test_list_sessions_rich(db):
    db.create_session("s1", "telegram", user_id="u1", title="first", started_at=100)
    db.append_message("s1", "user", "  hello   there  ", timestamp=200, user_id="u1")
    db.append_message("s1", "assistant", "hi", timestamp=201)
    db.create_session("s2", "discord", user_id="u2", started_at=150)
    db.append_message("s2", "user", "group talk", timestamp=300, user_id="u2")
    db.append_message("s2", "user", "joining in", timestamp=301, user_id="u1")
    rows = db.list_sessions_rich()
    assert [r["id"] for r in rows] == ["s2", "s1"]  # by last activity
    s1 = rows[1]
    assert (s1["title"], s1["message_count"], s1["preview"], s1["last_active_at"]) == ("first", 2, "hello there", 201)
    assert [r["id"] for r in db.list_sessions_rich(source="telegram")] == ["s1"]
    assert [r["id"] for r in db.list_sessions_rich(user_id="u1")] == ["s2", "s1"]  # took part in s2
    assert [r["id"] for r in db.list_sessions_rich(user_id="u2")] == ["s2"]
    assert [r["id"] for r in db.list_sessions_rich(titled_only=True)] == ["s1"]
    assert db.session_participants("s2") == {"u1", "u2"}


def test_conversation_undo_retry(db):
    db.create_session("s", "local")
    db.append_message("s", "user", "q1")
    call = [{"id": "c1", "type": "function", "function": {"name": "memory", "arguments": "{}"}}]
    db.append_message("s", "assistant", None, tool_calls=call)
    db.append_message("s", "tool", "ok", tool_call_id="c1", tool_name="memory")
    a1 = db.append_message("s", "assistant", "a1")
    q2 = db.append_message("s", "user", "q2 zebra")
    db.append_message("s", "assistant", "a2 giraffe")
    conv = db.get_messages_as_conversation("s")
    assert conv[1]["tool_calls"] == call and conv[2] == {
        "role": "tool",
        "content": "ok",
        "tool_call_id": "c1",
        "name": "memory",
    }
    assert db.rewind("s", 1) == 2
    assert [m["content"] for m in db.get_messages_as_conversation("s")][-1] == "a1"
    assert db.search_messages("zebra") == []  # undone: gone from search
    assert len(db.get_messages("s", include_inactive=True)) == 6
    assert db.get_session("s")["message_count"] == 4
    # retry: the replaced reply is hidden from the conversation but stays searchable
    q3 = db.append_message("s", "user", "q3")
    db.append_message("s", "assistant", "old reply elephant")
    assert db.supersede_after("s", q3) == 1
    assert db.get_messages_as_conversation("s")[-1]["content"] == "q3"
    assert [h["content"] if "content" in h else h["snippet"] for h in db.search_messages("elephant")]
    assert q2 and a1


def test_preview_is_what_the_session_still_says(db):
    """Issue 28 item 12: a session's preview (lists: sessions list, /resume, the console) is its first
    user message still in it; /undo of that message takes the preview with it."""
    db.create_session("s", "local")
    db.append_message("s", "user", "my  bank password is hunter2")
    db.append_message("s", "assistant", "noted")
    db.append_message("s", "user", "second thought")
    assert db.get_session("s")["preview"] == "my bank password is hunter2"
    db.rewind("s", 1)  # only the second exchange: the first message stays, and the preview
    assert db.get_session("s")["preview"] == "my bank password is hunter2"
    db.rewind("s", 1)
    assert db.get_session("s")["preview"] is None
    assert [r["preview"] for r in db.list_sessions_rich()] == [None]
    db.append_message("s", "user", "  what is the weather ")
    assert db.get_session("s")["preview"] == "what is the weather"
    q = db.append_message("s", "user", "ask again")
    db.append_message("s", "assistant", "retried away")
    db.supersede_after("s", q)  # /retry keeps the question (and the replaced answer stays findable)
    assert db.get_session("s")["preview"] == "what is the weather"
    record = db.export_session("s")
    record["session"]["id"] = "copy"
    db.import_records([record])  # the undone first message travels hidden, as it was
    assert db.get_session("copy")["preview"] == "what is the weather"


def test_delete_removes_index_rows_and_reparents(db):
    db.create_session("root", "local")
    db.create_session("mid", "local", parent_session_id="root")
    db.create_session("leaf", "local", parent_session_id="mid")
    db.append_message("mid", "user", "unique-token-xyz 部署 ERR_99123")
    db.set_key_entry("k", "mid")
    assert db.delete_session("mid")
    assert db.search_messages("unique-token-xyz") == [] and db.search_messages("部署") == []
    assert db.search_messages("99123") == []
    assert db.get_session("leaf")["parent_session_id"] == "root"
    assert db.get_key_entry("k") is None
    assert not db.delete_session("mid")
    # the contentless index stays consistent: new rows are found, the old rowids are not
    db.append_message("leaf", "user", "unique-token-xyz again")
    assert len(db.search_messages("unique-token-xyz")) == 1


def test_prune_optimize_vacuum_rebuild(db):
    db.create_session("old", "local", started_at=1000)
    db.append_message("old", "user", "ancient history", timestamp=1000)
    db.create_session("keep", "local", started_at=1000)
    db.create_session("new", "local")
    db.append_message("new", "user", "fresh news")
    assert db.prune(older_than_days=30, keep=["keep"]) == 1
    assert db.get_session("old") is None and db.get_session("keep")
    db.optimize()
    db.vacuum()
    assert db.rebuild_fts() == 1
    assert len(db.search_messages("fresh")) == 1 and db.search_messages("ancient") == []


def test_import_is_all_or_nothing(db):
    good = {
        "session": {"id": "i1", "source": "telegram", "title": "imported"},
        "messages": [
            {"role": "user", "content": "imported text"},
            {"role": "assistant", "content": "reply", "active": 0, "compacted": 1},
        ],
    }
    bad = {"session": {"id": "i2", "source": "local"}, "messages": [{"role": "alien", "content": "x"}]}
    with pytest.raises(ValueError, match="message 1"):
        db.import_records([good, bad])
    assert db.get_session("i1") is None
    assert db.import_records([good]) == 1
    assert db.get_session("i1")["message_count"] == 1
    assert db.search_messages("reply")  # compacted rows are searchable
    exported = db.export_session("i1")
    assert exported["session"]["title"] == "imported" and len(exported["messages"]) == 2
    with pytest.raises(ValueError, match="already exists"):
        db.import_records([good])
    assert db.import_records([good], skip_existing=True) == 0


def test_event_dedup_persists(tmp_path):
    with SessionDB(tmp_path / "d.db") as db:
        assert db.mark_event_seen("feishu", "om_1") is True
        assert db.mark_event_seen("feishu", "om_1") is False
        assert db.mark_event_seen("telegram", "om_1") is True
    with SessionDB(tmp_path / "d.db") as db:
        assert db.mark_event_seen("feishu", "om_1") is False


def test_key_entries_and_commit_events(db):
    events = []
    db.add_commit_listener(events.extend)
    db.create_session("s", "local")
    db.set_key_entry("agent:main:local:dm:me", "s", origin={"platform": "local"}, reason="new")
    entry = db.get_key_entry("agent:main:local:dm:me")
    assert entry["session_id"] == "s" and entry["origin"] == {"platform": "local"}
    mid = db.append_message("s", "user", "hi")
    kinds = [type(e) for e in events]  # a session row change has no event: no mirror shows it
    assert kinds == [KeyChanged, MessageAppended] and events[-1].message_id == mid
    assert events[0].entry == entry and events[-1].row["content"] == "hi"
    db.delete_key_entry("agent:main:local:dm:me")
    assert db.list_key_entries() == [] and events[-1] == KeyDeleted("agent:main:local:dm:me")


def test_a_key_and_its_session_in_one_read(db):
    key = "agent:main:local:dm:me"
    assert db.get_key_entry_and_session(key) == (None, None)
    db.create_session("s", "local", session_key=key, title="Plans")
    db.set_key_entry(key, "s", origin={"platform": "local"}, reason="created")
    entry, session = db.get_key_entry_and_session(key)
    assert entry == db.get_key_entry(key) and session == db.get_session("s")
    assert session["title"] == "Plans" and session["id"] == "s"
    # a key left pointing at a session that is gone (written by another version): no session
    db.write(
        lambda conn, events: conn.execute("UPDATE session_keys SET session_id = 'gone' WHERE session_key = ?", (key,))
    )
    entry, session = db.get_key_entry_and_session(key)
    assert entry["session_id"] == "gone" and session is None


def test_seen_events_are_found_by_platform_and_id(db):
    assert not db.is_event_seen("feishu", "om_1")
    db.mark_event_seen("feishu", "om_1")
    assert db.is_event_seen("feishu", "om_1") and not db.is_event_seen("telegram", "om_1")


def test_a_message_and_its_seen_mark_are_one_write(db):
    db.create_session("s", "feishu")
    db.append_message("s", "user", "hello", seen_event=("feishu", "om_2"))
    assert db.is_event_seen("feishu", "om_2")
    with pytest.raises(UnknownSession):  # the message cannot be stored: nor is the mark
        db.append_message("gone", "user", "lost?", seen_event=("feishu", "om_3"))
    assert not db.is_event_seen("feishu", "om_3")


def test_stats(db, make_session):
    make_session(messages=[("user", "hello world")])
    stats = db.stats()
    assert stats["sessions"] == 1 and stats["messages"] == 1 and stats["db_bytes"] > 0


def test_import_and_delete_tell_the_mirrors(db):
    events = []
    db.add_commit_listener(events.extend)
    record = {
        "session": {"id": "i1", "source": "local"},
        "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "active": 0}],
    }
    db.import_records([record])
    assert SessionRewritten("i1") in events  # hidden flags reach the transcript
    db.set_key_entry("k", "i1")
    events.clear()
    db.delete_session("i1")
    assert KeyDeleted("k") in events and SessionDeleted("i1") in events


async def test_reads_are_awaited_by_method_or_by_name(db):
    db.create_session("s", "local", title="read me")
    assert (await db.aread(db.get_session, "s"))["title"] == "read me"
    assert await db.aread(db.find_session, "READ ME") == db.get_session("s")


async def test_move_key_is_one_transaction(db):
    await db.amove_key("k", "s1", {"platform": "local"}, "created", create=("local", {"title": "taken"}))
    entry = await db.amove_key("k", "s2", None, "new", create=("local", {}), end_previous="s1")
    assert entry["session_id"] == "s2" and db.get_session("s1")["end_reason"] == "new"
    # a step that fails undoes the others: the key, the new session and the old one stay as they were
    with pytest.raises(TitleTaken):
        await db.amove_key("k", "s3", None, "new", create=("local", {"title": "taken"}), end_previous="s2")
    assert db.get_key_entry("k")["session_id"] == "s2"
    assert db.get_session("s3") is None and db.get_session("s2")["ended_at"] is None
    # resume: reopen an ended session and move the key back
    entry = await db.amove_key("k", "s1", None, "resume", reopen=True, end_previous="s2")
    assert entry["session_id"] == "s1" and db.get_session("s1")["ended_at"] is None
    assert db.get_session("s2")["end_reason"] == "resume"


@pytest.mark.sqlite_only("the group-commit batch (Postgres: test_postgres_db.py)")
def test_an_op_failing_midway_leaves_nothing_and_its_batch_commits(db):
    running, release = threading.Event(), threading.Event()

    def hold(conn, events):  # keeps the writer busy so the next writes queue into one batch
        running.set()
        release.wait(5)

    def insert(tag):
        return lambda conn, events: conn.execute("INSERT INTO processed_events VALUES ('t', ?, 0)", (tag,))

    def half_done(conn, events):
        insert("partial")(conn, events)
        raise ValueError("boom")

    outcome = {}

    def run(name, op):
        try:
            outcome[name] = db.write(op)
        except ValueError as exc:
            outcome[name] = exc

    first = threading.Thread(target=run, args=("hold", hold))
    first.start()
    running.wait(5)
    threads = [
        threading.Thread(target=run, args=(n, op))
        for n, op in (("a", insert("a")), ("bad", half_done), ("b", insert("b")))
    ]
    for t in threads:
        t.start()
    wait_until_blocking(lambda: db._writer._queue.qsize() >= 3)  # queued behind the held batch
    release.set()
    for t in [first, *threads]:
        t.join()
    assert isinstance(outcome["bad"], ValueError)
    rows = db.read(lambda c: [r[0] for r in c.execute("SELECT event_id FROM processed_events WHERE platform = 't'")])
    assert sorted(rows) == ["a", "b"]


def test_a_title_is_taken_in_any_letter_case(db):
    db.create_session("a", "local", title="Trip")
    db.create_session("b", "local")
    for attempt in (lambda: db.set_title("b", "tRIP"), lambda: db.create_session("c", "local", title="TRIP")):
        with pytest.raises(TitleTaken) as taken:
            attempt()
        assert taken.value.holder == "a" and taken.value.title.lower() == "trip"
    assert db.get_session("c") is None
    assert db.set_title("a", "TRIP") == "TRIP"  # its own title in another case is no clash
    assert db.next_lineage_title("trip") == "trip #2"


def test_import_checks_records_with_the_format_validator(db):
    with pytest.raises(ImportRecordError, match=r"record 1: session.id '../../etc/x' may only hold") as bad:
        db.import_records([{"session": {"id": "../../etc/x", "source": "local"}, "messages": []}])
    assert bad.value.record == 1 and isinstance(bad.value, ValueError) and db.count_sessions() == 0
    with pytest.raises(ImportRecordError, match="record 2: message 1: content must be str or null"):
        db.import_records(
            [
                {"session": {"id": "ok", "source": "local"}},
                {"session": {"id": "x", "source": "local"}, "messages": [{"role": "user", "content": 5}]},
            ]
        )
    assert db.count_sessions() == 0


def test_message_ids_are_never_reused_after_the_newest_are_deleted(tmp_path):
    """The indexer's mark, recall's vector progress, the transcripts and the outbox all name messages
    by id: an id once given must never name another message, even when the newest ones are gone."""
    path = tmp_path / "ids.db"
    with SessionDB(path) as db:
        db.create_session("keep", "local")
        db.create_session("gone", "local")
        db.append_message("keep", "user", "first")
        newest = max(db.append_message("gone", "user", f"quokka {i}") for i in range(3))
        assert db.search_messages("quokka")  # indexed: the mark is at `newest`
        assert db.delete_session("gone")
        after = db.append_message("keep", "user", "zanzibar after the delete")
        assert after > newest
        assert [h["id"] for h in db.search_messages("zanzibar")] == [after]
        assert db.delete_session("keep")
    with SessionDB(path) as db:  # an empty table, reopened
        db.create_session("next", "local")
        again = db.append_message("next", "user", "wombat in a fresh table")
        assert again > after
        assert [h["id"] for h in db.search_messages("wombat")] == [again]


def test_a_v8_database_is_rebuilt_without_autoincrement_keeping_ids_and_links(tmp_path):
    """v8 -> v9 rebuilds messages: every id kept (the full-text indexes and attachments use them),
    the triggers and the index made again, and the next id above any the old counter gave."""
    from gateway.storage.connect import connect
    from gateway.storage.media import AttachmentRow
    from gateway.storage.schema import migrate

    path = tmp_path / "v8.db"
    conn = connect(str(path))
    conn.execute("PRAGMA journal_mode = WAL")
    migrate(conn, target=8)
    conn.execute("INSERT INTO sessions (id, source, started_at, last_active_at) VALUES ('s', 'local', 1, 1)")
    for i in range(1, 6):
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s', 'user', ?, ?)", (f"quokka {i}", i)
        )
    conn.execute("INSERT INTO attachments (message_id, kind, created_at) VALUES (2, 'image', 1)")
    conn.execute("DELETE FROM messages WHERE id > 3")  # the counter stays at 5
    conn.execute("UPDATE sessions SET message_count = 3")
    assert "AUTOINCREMENT" in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
    conn.close()
    with SessionDB(path) as db:
        sql = db.read(lambda c: c.execute("SELECT sql FROM sqlite_master WHERE name = 'messages'").fetchone()[0])
        assert "AUTOINCREMENT" not in sql
        names = {r[0] for r in db.read(lambda c: c.execute("SELECT name FROM sqlite_master").fetchall())}
        assert {"idx_messages_session", "message_vectors_message_hidden", "message_vectors_message_gone"} <= names
        assert "messages_v9" not in names
        assert [m["id"] for m in db.get_messages("s")] == [1, 2, 3]
        assert [h["id"] for h in db.search_messages("quokka")] == [3, 2, 1]
        assert db.attachments_of([2])[2][0]["kind"] == "image"
        assert db.append_message("s", "user", "after the upgrade") == 6
        photo = AttachmentRow("image", "image/png", 3, None, "p.png")
        later = db.append_message("s", "user", "with a photo", attachments=[photo])
        assert later == 7 and db.attachments_of([later])[later][0]["file_name"] == "p.png"
        with pytest.raises(sqlite3.IntegrityError):  # foreign keys are on again after migrating
            db.write(
                lambda c, e: c.execute("INSERT INTO attachments (message_id, kind, created_at) VALUES (99, 'image', 1)")
            )


async def test_a_persons_language_is_kept_per_platform_identity(db):
    """/language's choice (DESIGN §17), through the face both backends share: set, changed, cleared."""
    assert db.person_language("feishu", "on_union") is None
    await db.aset_person_language("feishu", "on_union", "zh")
    await db.aset_person_language("telegram", "on_union", "en")  # another platform, another person
    assert db.person_language("feishu", "on_union") == "zh"
    await db.aset_person_language("feishu", "on_union", "en")
    assert db.person_language("feishu", "on_union") == "en"
    await db.aset_person_language("feishu", "on_union", None)  # /language auto
    assert db.person_language("feishu", "on_union") is None
    assert db.person_language("telegram", "on_union") == "en"
