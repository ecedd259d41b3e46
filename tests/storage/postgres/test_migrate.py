"""`chinwag sessions migrate --to postgres` and back, as a real subprocess: every session, message
(hidden ones with their flags) and chat key arrives, the counts are printed and agree, a second
run without --skip-existing refuses in a sentence, and the way back gives the same records."""

from pathlib import Path

from gateway.db import SessionDB, new_session_id
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
