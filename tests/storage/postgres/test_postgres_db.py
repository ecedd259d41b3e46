"""What only the Postgres backend has to prove: its schema versioning, commits seen by another
connection (another replica), dedup and writes racing from two SessionDBs on one database, the
read snapshot being read-only, and its tokens (tsvector literal, FTS5 expression -> tsquery)."""

import asyncio
import threading

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.db import new_session_id
from gateway.errors import SchemaTooNew, TitleTaken
from gateway.recall import find_sessions
from gateway.storage import inbox
from gateway.storage.events import MessageAppended
from gateway.storage.media import AttachmentRow
from gateway.storage.postgres.db import PostgresSessionDB, redact_dsn
from gateway.storage.postgres.schema import SCHEMA_VERSION
from gateway.storage.postgres.tokens import phrase_query, tsquery_of_fts, words_vector


def test_schema_is_made_once_and_a_newer_one_is_refused(pg_dsn):
    with PostgresSessionDB(pg_dsn) as first, PostgresSessionDB(pg_dsn) as second:  # a second replica
        assert first.read(lambda c: c.execute("SELECT version FROM schema_version").fetchone()[0]) == SCHEMA_VERSION
        assert second.read(lambda c: c.execute("SELECT count(*) FROM schema_version").fetchone()[0]) == 1
    with psycopg.connect(pg_dsn, autocommit=True) as raw:
        raw.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 5,))
    with pytest.raises(SchemaTooNew, match="newer than this chinwag"):
        PostgresSessionDB(pg_dsn)


def test_replicas_starting_together_migrate_once(postgres_server):
    dsn = postgres_server.create_database()
    opened, failed = [], []

    def start():
        try:
            opened.append(PostgresSessionDB(dsn))
        except Exception as exc:  # pragma: no cover - the assertion below shows it
            failed.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed and len(opened) == 4
    for db in opened:
        db.close()


def test_an_append_is_committed_when_it_returns(db, pg_dsn):
    sid = new_session_id()
    db.create_session(sid, "local")
    mid = db.append_message(sid, "user", "hello")
    with psycopg.connect(pg_dsn) as other:  # an independent connection sees it at once
        assert other.execute("SELECT content FROM messages WHERE id = %s", (mid,)).fetchone() == ("hello",)


def test_an_op_failing_midway_leaves_nothing(db):
    def half_done(conn, events):
        conn.execute("INSERT INTO processed_events VALUES ('t', 'partial', 0)")
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        db.write(half_done)
    db.write(lambda conn, events: conn.execute("INSERT INTO processed_events VALUES ('t', 'whole', 0)"))
    rows = db.read(lambda c: [r[0] for r in c.execute("SELECT event_id FROM processed_events WHERE platform = 't'")])
    assert rows == ["whole"]


def test_a_title_clash_is_named_and_the_transaction_goes_on(db, make_session):
    holder = make_session(title="Trip")
    other = make_session()
    with pytest.raises(TitleTaken) as caught:
        db.set_title(other, "TRIP")
    assert caught.value.holder == holder
    assert db.set_title(other, "Trïp") == "Trïp"  # ASCII letters fold, as SQLite's NOCASE: ï is not i
    with pytest.raises(TitleTaken):
        db.create_session(new_session_id(), "local", title="trip")


def test_each_event_is_seen_once_across_replicas(pg_dsn):
    with PostgresSessionDB(pg_dsn) as a, PostgresSessionDB(pg_dsn) as b:
        results: list[bool] = []
        lock = threading.Lock()

        def mark(db, n):
            for i in range(n):
                first = db.mark_event_seen("telegram", str(i))
                with lock:
                    results.append(first)

        threads = [threading.Thread(target=mark, args=(db, 50)) for db in (a, b, a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results.count(True) == 50 and len(results) == 200
    with PostgresSessionDB(pg_dsn) as reopened:  # persisted
        assert reopened.is_event_seen("telegram", "7") and not reopened.mark_event_seen("telegram", "7")


def test_each_inbound_event_gets_one_inbox_entry_across_replicas(pg_dsn):
    """The inbox's dedup is `INSERT ... ON CONFLICT DO NOTHING RETURNING id`: two replicas racing
    on the same events get one entry id per event between them, and None for every other try."""

    async def add_all(db, n):
        return [await db.ainbox_add("feishu", f"om_{i}", "k", "{}", 1.0) for i in range(n)]

    async def race(a, b):
        return await asyncio.gather(add_all(a, 40), add_all(b, 40), add_all(a, 40))

    with PostgresSessionDB(pg_dsn) as a, PostgresSessionDB(pg_dsn) as b:
        results = asyncio.run(race(a, b))
        per_event = [[r[i] for r in results] for i in range(40)]
        assert all(sum(x is not None for x in tries) == 1 for tries in per_event)
        assert a.inbox_backlog() == 40 and [e["event_id"] for e in b.inbox_unfinished()][:2] == ["om_0", "om_1"]


def test_a_message_its_attachments_and_its_after_records_commit_together(db, postgres_server):
    sid = new_session_id()
    db.create_session(sid, "telegram", user_id="1")
    photo = AttachmentRow("image", "image/jpeg", 3, "c" * 64, "p.jpg", "file-1")

    def fails_after(conn, message_id):
        conn.execute("INSERT INTO processed_events VALUES ('t', 'with-the-message', 0)")
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        db.append_message(sid, "user", "[image: p.jpg]", attachments=[photo], after=fails_after)
    assert db.get_messages(sid) == [] and db.referenced_media() == set()  # nothing of it stayed
    assert not db.is_event_seen("t", "with-the-message")

    entry = asyncio.run(db.ainbox_add("telegram", "u1", "k", "{}", 1.0))
    mid = db.append_message(
        sid, "user", "[image: p.jpg]", attachments=[photo], after=lambda conn, m: inbox.start(conn, entry, m)
    )
    assert db.inbox_unfinished()[0]["user_message_id"] == mid
    assert db.message_session(mid) == sid and db.message_session(mid + 1000) is None
    (att,) = db.attachments_of([mid])[mid]
    assert (att["sha256"], att["platform_file_id"], att["dropped"]) == ("c" * 64, "file-1", False)
    assert db.session_attachment(sid, "c" * 64)["file_name"] == "p.jpg"
    assert db.media_bytes() == 3 and "wal_bytes" not in db.stats()  # no log of chinwag's own here

    record = db.export_session(sid)  # the attachment travels with its message
    assert [a["sha256"] for a in record["messages"][0]["attachments"]] == ["c" * 64]
    assert "words" not in record["messages"][0]
    with PostgresSessionDB(postgres_server.create_database()) as target:
        assert target.import_records([record], media_present=set()) == 1  # its file is not there
        (copied,) = target.export_session(sid)["messages"][0]["attachments"]
        assert copied["sha256"] == "c" * 64 and copied["dropped_at"] is not None
    db.end_session(sid)
    assert db.drop_oldest_media(1) == ["c" * 64] and db.referenced_media() == set()
    assert db.delete_session(sid) is True  # the attachment rows go first (the foreign key)


def test_concurrent_appends_all_commit_and_events_follow_commits(db):
    sid = new_session_id()
    db.create_session(sid, "local")
    heard: list[int] = []
    db.add_commit_listener(lambda events: heard.extend(e.message_id for e in events if isinstance(e, MessageAppended)))
    ids: list[int] = []

    def append(n):
        for i in range(n):
            ids.append(db.append_message(sid, "user", f"message {i}"))

    threads = [threading.Thread(target=append, args=(25,)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(heard) == sorted(ids) and len(set(ids)) == 150
    assert db.get_session(sid)["message_count"] == 150


def test_the_read_snapshot_is_read_only(db):
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        db.read(lambda conn: conn.execute("CREATE TEMP TABLE t (x int)"))
    assert db.count_sessions() == 0  # the pool's connection is usable again


def test_prefixes_are_answered_by_the_index(db, make_session):
    forms = make_session(messages=[("user", "she was painting"), ("user", "two paintings"), ("user", "painted it")])
    make_session(messages=[("user", "nothing to see here")])
    assert [h.session_id for h in find_sessions(db, "painted", see_all=True)][:1] == [forms]
    assert {h["session_id"] for h in db.search_messages("paint*")} == {forms}


def test_two_character_chinese_words_and_identifier_substrings(db, make_session):
    a = make_session(messages=[("user", "上次部署网关超时了")])
    b = make_session(messages=[("user", "see ERR_004211 in node-17.corp.example.net")])
    assert [h["session_id"] for h in db.search_messages("网关")] == [a]
    assert [h["session_id"] for h in db.search_messages("部署网关")] == [a]
    assert db.search_messages("关部") == []  # not adjacent in that order
    assert [(h["session_id"], h["match"]) for h in db.search_messages("rr_00421")] == [(b, "substring")]
    assert [h["session_id"] for h in db.search_messages("004211")] == [b]


def test_stats_and_a_redacted_dsn(db, make_session):
    make_session(messages=[("user", "hi")])
    stats = db.stats()
    assert (
        stats["messages"] == 1
        and stats["db_bytes"] > 0
        and set(stats["bytes_by_part"])
        == {
            "word_index",
            "substring_index",
            "tables",
        }
    )
    assert redact_dsn("host=h password=s3cret user=u") == "host=h password=[redacted] user=u"
    assert redact_dsn("postgresql://me:s3cret@h/db") == "postgresql://me:[redacted]@h/db"


def test_rebuild_recomputes_the_word_column(db, make_session):
    sid = make_session(messages=[("user", "kubernetes rollout")])
    db.write(lambda conn, events: conn.execute("UPDATE messages SET words = NULL, idents = NULL"))
    assert db.search_messages("kubernetes") == []
    assert db.rebuild_fts() == 1
    assert [h["session_id"] for h in db.search_messages("kubernetes")] == [sid]


def test_words_vector_holds_characters_pairs_and_folded_words():
    vector = words_vector("Café 部署网关 x")
    assert vector is not None
    assert "'cafe':1" in vector and "'部署':2" in vector and "'关':5" in vector and "'网关':4" in vector
    assert words_vector("") is None and words_vector("  ...  ") is None
    assert phrase_query(["部", "署"]) == "'部署'"
    assert phrase_query(["部", "署", "网"]) == "('部署' <1> '署网')"
    assert phrase_query(["docker", "部", "署"], prefix=False) == "('docker' <1> '部署')"
    assert phrase_query(["x" * 3000]) == ""


def test_tsquery_translation_of_the_shapes_recall_builds():
    assert tsquery_of_fts('"paint" OR "paint"*') == "('paint' | 'paint':*)"
    assert tsquery_of_fts('("a") AND ("b" OR "c")') == "('a' & ('b' | 'c'))"
    near = tsquery_of_fts('NEAR("a"* "b"*, 1)')
    assert near == "('a':* <1> 'b':* | 'b':* <1> 'a':* | 'a':* <2> 'b':* | 'b':* <2> 'a':*)"
    assert tsquery_of_fts('"it\'s"') == "('it' <1> 's')"
    for unsupported in ("", "plain words", '"a" NOT "b"', '"unclosed', "NEAR(", '"a" AND'):
        assert tsquery_of_fts(unsupported) is None


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=60))
def test_any_expression_translates_to_none_or_a_query_postgres_accepts(postgres_server, text):
    query = tsquery_of_fts(text)
    if query is None:
        return
    with psycopg.connect(postgres_server.dsn()) as conn:
        conn.execute("SELECT %s::tsquery", (query,))
