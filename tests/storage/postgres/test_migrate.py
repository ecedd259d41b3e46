"""`chinwag sessions migrate --to postgres` and back, as a real subprocess: every session, message
(hidden ones with their flags) and chat key arrives, the counts are printed and agree, a second
run without --skip-existing refuses in a sentence, and the way back gives the same records."""

import json
from pathlib import Path

import aiohttp

from gateway.db import SessionDB, new_session_id
from gateway.service.http import OpsServer
from gateway.storage.media import AttachmentRow, MediaStore
from gateway.storage.postgres.db import PostgresSessionDB
from tests.cli.test_cli_run import chinwag, clean_env


def fill(db: SessionDB) -> list[str]:
    ids = []
    for n in range(7):
        sid = new_session_id()
        db.create_session(sid, "telegram", user_id=f"u{n}", title=f"Trip {n}" if n % 2 else None)
        for i in range(5):
            db.append_message(sid, "user", f"question {i} about 部署 nginx.conf", user_id=f"u{n}")
            db.append_message(sid, "assistant", f"answer {i}")
        ids.append(sid)
    db.rewind(ids[0])  # hidden rows travel with their flags
    db.set_key_entry("agent:main:telegram:dm:42", ids[3], {"platform": "telegram", "chat_id": "42"}, "created")
    return ids


def records(db, ids):
    out = []
    for sid in ids:
        record = db.export_session(sid)
        for message in record["messages"]:
            message.pop("id")  # the target numbers its own rows
        out.append(record)
    return out


async def test_migrate_to_postgres_and_back(tmp_path: Path, pg_dsn: str, postgres_server) -> None:
    home = tmp_path / "home"
    with SessionDB(home / "state.db") as lite:
        ids = fill(lite)
        before = records(lite, ids)
    env = clean_env(tmp_path, CHINWAG_PG_DSN=pg_dsn)
    code, out, err = await chinwag(["sessions", "migrate", "--to", "postgres"], env)
    assert code == 0, err
    assert "copied 7 session(s), 70 message(s), 1 chat key(s) to postgres" in out
    assert "sqlite: 7 sessions, 70 messages" in out and "postgres: 7 sessions, 70 messages" in out
    with PostgresSessionDB(pg_dsn) as pg:
        assert records(pg, ids) == before
        assert pg.get_key_entry("agent:main:telegram:dm:42")["session_id"] == ids[3]
        assert [h["session_id"] for h in pg.search_messages("部署")][:1]  # indexed on arrival

    code, out, err = await chinwag(["sessions", "migrate", "--to", "postgres"], env)
    assert code == 2 and "already exists on the target (use --skip-existing)" in err and "Traceback" not in err
    code, out, err = await chinwag(["sessions", "migrate", "--to", "postgres", "--skip-existing"], env)
    assert code == 0 and "copied 0 session(s)" in out and "skipped 7 already there" in out

    back = tmp_path / "back"
    env_back = clean_env(tmp_path, CHINWAG_HOME=str(back))
    code, out, err = await chinwag(["sessions", "migrate", "--to", "sqlite", "--dsn", pg_dsn], env_back)
    assert code == 0, err
    with SessionDB(back / "state.db") as returned:
        assert records(returned, ids) == before


async def test_migrate_without_a_dsn_says_where_to_give_one(tmp_path: Path) -> None:
    code, out, err = await chinwag(["sessions", "migrate", "--to", "postgres"], clean_env(tmp_path))
    assert code == 2 and "no Postgres DSN: give --dsn, set CHINWAG_PG_DSN" in err


async def test_skip_existing_names_the_skipped_sessions_that_differ(
    tmp_path: Path, pg_dsn: str, postgres_server
) -> None:
    """Issue 28 item 15: a session that grew on the source after the first copy is skipped by
    --skip-existing; the report must not call everything verified while the totals differ."""
    home = tmp_path / "home"
    with SessionDB(home / "state.db") as lite:
        ids = fill(lite)
    env = clean_env(tmp_path, CHINWAG_PG_DSN=pg_dsn)
    code, out, err = await chinwag(["sessions", "migrate", "--to", "postgres"], env)
    assert code == 0 and "verified" in out, err
    with SessionDB(home / "state.db") as lite:
        for i in range(2):  # the daemon kept running: 4 more messages after the copy
            lite.append_message(ids[2], "user", f"later question {i}")
            lite.append_message(ids[2], "assistant", f"later answer {i}")
        extra = new_session_id()
        lite.create_session(extra, "telegram", user_id="u9")
        lite.append_message(extra, "user", "a new conversation")
    code, out, err = await chinwag(["sessions", "migrate", "--to", "postgres", "--skip-existing"], env)
    assert code == 1, out + err
    assert "copied 1 session(s), 1 message(s)" in out and "skipped 7 already there" in out
    assert "sqlite: 8 sessions, 75 messages" in out and "postgres: 8 sessions, 71 messages" in out
    assert "every copied session verified" not in out
    assert "verified: the 1 copied session(s) hold the same messages on both sides" in out
    assert f"{ids[2]}: 14 messages on sqlite, 10 on postgres" in out
    assert "1 of the 7 skipped session(s) differ from sqlite" in out

    code, out, err = await chinwag(["sessions", "migrate", "--to", "postgres", "--skip-existing", "--json"], env)
    report = json.loads(out)
    assert code == 1 and report["verified"] == 0
    assert report["differing"] == [{"session_id": ids[2], "sqlite": 14, "postgres": 10}]


async def test_stats_on_postgres_shows_only_what_postgres_has(tmp_path: Path, pg_dsn: str, postgres_server) -> None:
    """Issue 28 item 15: no write-ahead log of chinwag's own and no transcript files on Postgres, so
    `sessions stats` does not report them (as 0, they read as facts)."""
    home = tmp_path / "home"
    with SessionDB(home / "state.db") as lite:
        fill(lite)
    env = clean_env(tmp_path, CHINWAG_PG_DSN=pg_dsn)
    code, out, err = await chinwag(["sessions", "migrate", "--to", "postgres"], env)
    assert code == 0, err
    (home / "config.yaml").write_text("storage:\n  backend: postgres\n  postgres:\n    dsn: ${CHINWAG_PG_DSN}\n")
    code, out, err = await chinwag(["sessions", "stats", "--json"], env)
    assert code == 0, err
    stats = json.loads(out)
    assert stats["sessions"] == 7 and stats["messages"] == 70 and stats["db_bytes"] > 0
    assert not {"wal_bytes", "transcripts", "transcript_bytes"} & set(stats)
    code, out, err = await chinwag(["sessions", "stats"], env)
    assert code == 0 and "database" not in err
    assert "wal bytes" not in out and "transcripts" not in out and "db bytes" in out


async def test_migrate_carries_the_attachment_files_a_replica_shows(
    tmp_path: Path, pg_dsn: str, postgres_server
) -> None:
    """Issue 28 item 6: the files under home/media/ go with their rows, into the database the
    replicas share (a replica's home has no media/ of its own), and back into a home."""
    home = tmp_path / "home"
    photo = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8  # 2,056 bytes
    kept = MediaStore(home / "media").save_bytes(photo)
    with SessionDB(home / "state.db") as lite:
        sid = new_session_id()
        lite.create_session(sid, "telegram", user_id="u1")
        row = AttachmentRow("image", "image/png", kept.size, kept.sha256, "beach.png")
        lite.append_message(sid, "user", "[image: beach.png]", user_id="u1", attachments=[row])
        gone = AttachmentRow("image", "image/png", 10, "ab" * 32, "lost.png")  # a row whose file is not here
        lite.append_message(sid, "user", "[image: lost.png]", user_id="u1", attachments=[gone])
    env = clean_env(tmp_path, CHINWAG_PG_DSN=pg_dsn)
    code, out, err = await chinwag(["sessions", "migrate", "--to", "postgres"], env)
    assert code == 0, err
    assert "files: copied 1 (2.0 KB); 1 kept by a row but not in" in out

    replica_home = tmp_path / "replica"  # another machine: nothing under its media/
    with PostgresSessionDB(pg_dsn) as pg:
        store = MediaStore(replica_home / "media", shared=pg.shared_files())
        assert store.exists(kept.sha256) and store.read(kept.sha256) == photo
        assert (replica_home / "media" / kept.sha256[:2] / kept.sha256).read_bytes() == photo  # cached
        (replica_home / "media" / kept.sha256[:2] / kept.sha256).unlink()  # the console fetches it too
        server = OpsServer("127.0.0.1", 0, db=pg, media=store)
        await server.start()
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{server.url}/console/sessions/{sid}/media/{kept.sha256}") as resp:
                    assert resp.status == 200 and await resp.read() == photo
        finally:
            await server.stop()

    code, out, err = await chinwag(["sessions", "migrate", "--to", "postgres", "--skip-existing"], env)
    assert code == 0 and "files: 1 already there" in out, out + err

    back = tmp_path / "back"
    code, out, err = await chinwag(
        ["sessions", "migrate", "--to", "sqlite", "--dsn", pg_dsn], clean_env(tmp_path, CHINWAG_HOME=str(back))
    )
    assert code == 0 and "files: copied 1 (2.0 KB)" in out, out + err
    assert MediaStore(back / "media").read(kept.sha256) == photo
