"""`chinwag run` and `chinwag chat` as real subprocesses on `storage.backend: postgres`: the answer is
stored in Postgres (not in the home's SQLite, and no transcript files are written), and a later
process finds the earlier conversation there."""

from pathlib import Path

import psycopg

from tests.cli.test_cli_run import chinwag, clean_env
from tests.fakes.openai_server import FakeOpenAI


async def test_run_and_chat_share_the_postgres_database(tmp_path: Path, pg_dsn: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text('storage:\n  backend: postgres\n  postgres:\n    dsn: "${CHINWAG_PG_DSN}"\n')
    async with FakeOpenAI() as fake:
        env = clean_env(
            tmp_path,
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
            CHINWAG_MODEL="fake-model",
            CHINWAG_PG_DSN=pg_dsn,
        )
        fake.push("The capital of Mongolia is Ulaanbaatar.")
        code, out, err = await chinwag(["run"], env, "what is the capital of Mongolia?\n")
        assert code == 0, err
        assert "The capital of Mongolia is Ulaanbaatar." in out
        with psycopg.connect(pg_dsn) as conn:
            stored = [r[0] for r in conn.execute("SELECT content FROM messages ORDER BY id")]
        assert stored == ["what is the capital of Mongolia?", "The capital of Mongolia is Ulaanbaatar."]
        assert not (home / "state.db").exists() and not list(home.glob("sessions/*.jsonl"))
        code, out, err = await chinwag(["chat"], env, "/new\n/search Mongolia capital\n")
        assert code == 0, err
        assert "Traceback" not in err and "Ulaanbaatar" in out


async def test_an_unreachable_database_is_one_sentence(tmp_path: Path, postgres_server) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text('storage:\n  backend: postgres\n  postgres:\n    dsn: "${CHINWAG_PG_DSN}"\n')
    dsn = postgres_server.dsn("no_such_db") + " password=hunter2"
    code, out, err = await chinwag(["run"], clean_env(tmp_path, CHINWAG_PG_DSN=dsn), "")
    assert code != 0 and "cannot open the Postgres database" in err and "no_such_db" in err
    assert "hunter2" not in err and "Traceback" not in err


async def test_sessions_commands_follow_the_configured_backend(tmp_path: Path, pg_dsn: str) -> None:
    from gateway.storage.postgres.db import PostgresSessionDB

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text('storage:\n  backend: postgres\n  postgres:\n    dsn: "${CHINWAG_PG_DSN}"\n')
    with PostgresSessionDB(pg_dsn) as db:
        db.create_session("20240101_000000_abcdef01", "telegram", title="Mongolia trip")
        db.append_message("20240101_000000_abcdef01", "user", "what is the capital of Mongolia?")
    env = clean_env(tmp_path, CHINWAG_PG_DSN=pg_dsn)
    code, out, err = await chinwag(["sessions", "list"], env)
    assert code == 0, err
    assert "Mongolia trip" in out
    code, out, err = await chinwag(["sessions", "search", "capital"], env)
    assert code == 0 and "Mongolia trip" in out, err
    code, out, err = await chinwag(["sessions", "repair"], env)
    assert code == 2 and "no transcript files to repair" in err
    assert not (home / "state.db").exists()
