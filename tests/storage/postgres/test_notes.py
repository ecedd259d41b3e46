"""MEMORY.md/USER.md on Postgres: the memory tool writes the `notes` table (no files in the home),
the system prompt reads it, two replicas' concurrent edits both land (the second waits on the row
lock), `chinwag memory export|import` and `sessions migrate` carry the notes both ways, and a
differing target is kept unless --force."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psycopg
import pytest

from agent.tools import ToolContext, ToolRegistry
from gateway.db import SessionDB
from gateway.storage.postgres.db import PostgresSessionDB
from tests.cli.test_cli_run import chinwag, clean_env
from tests.fakes.loopback import wait_until_blocking
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tools.memory import MemoryStore, NoteFiles, NoteTable, make_memory_tool, note_place, read_snapshot

PG_CONFIG = 'storage:\n  backend: postgres\n  postgres:\n    dsn: "${CHINWAG_PG_DSN}"\n'


async def test_the_tool_edits_the_table_and_writes_no_file(tmp_path: Path, db: PostgresSessionDB) -> None:
    registry = ToolRegistry([make_memory_tool()])
    ctx = ToolContext(session_id="s1", db=db, home=tmp_path)
    for text in ("Deploy with make ship", "Staging host is stg-01"):
        result = await registry.call("memory", json.dumps({"action": "add", "target": "memory", "content": text}), ctx)
        assert result.startswith("added to MEMORY.md")
    args = {"action": "replace", "target": "memory", "old": "stg-01", "content": "Staging host is stg-02"}
    assert (await registry.call("memory", json.dumps(args), ctx)).startswith("replaced")
    await registry.call("memory", json.dumps({"action": "add", "target": "user", "content": "Name: Lin"}), ctx)
    assert list(tmp_path.iterdir()) == []
    assert read_snapshot(NoteTable(db)) == ("Deploy with make ship\n§\nStaging host is stg-02", "Name: Lin")
    assert db.read(lambda c: c.execute("SELECT version FROM notes WHERE name = 'MEMORY.md'").fetchone()[0]) == 3
    # a refused edit writes nothing
    args = {"action": "remove", "target": "memory", "old": "no such thing"}
    assert (await registry.call("memory", json.dumps(args), ctx)).startswith("error: no entry")
    assert db.read(lambda c: c.execute("SELECT version FROM notes WHERE name = 'MEMORY.md'").fetchone()[0]) == 3


def test_the_notes_live_where_the_backend_keeps_them(tmp_path: Path, db: PostgresSessionDB) -> None:
    assert isinstance(note_place(tmp_path, db), NoteTable)
    with SessionDB(tmp_path / "state.db") as lite:
        place = note_place(tmp_path, lite)
        assert isinstance(place, NoteFiles) and place.home == tmp_path
    assert note_place(None, None) is None


def test_two_replicas_editing_at_once_lose_no_edit(pg_dsn: str) -> None:
    """Replica A reads the file and stops inside its transaction; replica B's edit must wait on A's
    row lock (seen in pg_stat_activity), then apply to what A wrote."""
    with PostgresSessionDB(pg_dsn) as a, PostgresSessionDB(pg_dsn) as b:
        MemoryStore(NoteTable(a)).add("memory", "first")
        a_has_read, release = threading.Event(), threading.Event()

        def slow_change(text: str) -> str:
            a_has_read.set()
            release.wait(10)
            return text + "\n§\nfrom replica A\n"

        thread_a = threading.Thread(target=a.edit_notes, args=("MEMORY.md", slow_change))
        thread_a.start()
        assert a_has_read.wait(10)
        result_b: list[str] = []
        thread_b = threading.Thread(target=lambda: result_b.append(MemoryStore(NoteTable(b)).add("memory", "from B")))
        thread_b.start()

        def b_waits_on_a_lock() -> bool:
            with psycopg.connect(pg_dsn, autocommit=True) as watch:
                sql = (
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%'"
                )
                return watch.execute(sql).fetchone()[0] == 1  # type: ignore[index]

        wait_until_blocking(b_waits_on_a_lock, timeout=10)
        release.set()
        thread_a.join(10)
        thread_b.join(10)
        assert result_b and result_b[0].startswith("added")
        assert MemoryStore(NoteTable(a)).entries("memory") == ["first", "from replica A", "from B"]


def test_many_concurrent_adds_from_two_replicas_all_land(pg_dsn: str) -> None:
    with PostgresSessionDB(pg_dsn) as a, PostgresSessionDB(pg_dsn) as b:
        stores = [MemoryStore(NoteTable(a), {"memory": 5000}), MemoryStore(NoteTable(b), {"memory": 5000})]
        threads = [
            threading.Thread(target=lambda n=n: [stores[n % 2].add("memory", f"note {n}-{i}") for i in range(10)])
            for n in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(stores[0].entries("memory")) == sorted(f"note {n}-{i}" for n in range(4) for i in range(10))


async def test_run_on_postgres_remembers_in_the_table_and_prompts_from_it(tmp_path: Path, pg_dsn: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(PG_CONFIG)
    async with FakeOpenAI() as fake:
        env = clean_env(
            tmp_path, OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-test", CHINWAG_MODEL="m", CHINWAG_PG_DSN=pg_dsn
        )
        note = {"action": "add", "target": "user", "content": "Prefers answers in Mongolian"}
        fake.push(Reply(tool_calls=[ToolCall("memory", note)]), "Noted.")
        code, out, err = await chinwag(["run"], env, "remember that I prefer Mongolian\n")
        assert code == 0, err
        assert "Noted." in out
        assert not (home / "USER.md").exists()
        with PostgresSessionDB(pg_dsn) as db:
            assert db.read_notes("USER.md") == "Prefers answers in Mongolian\n"
        fake.push("Сайн байна уу")
        code, out, err = await chinwag(["run"], env, "/new\nhello\n")
        assert code == 0, err
        system = fake.requests[-1]["messages"][0]
        assert system["role"] == "system" and "Prefers answers in Mongolian" in system["content"]


async def test_memory_export_and_import_on_postgres(tmp_path: Path, pg_dsn: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(PG_CONFIG)
    env = clean_env(tmp_path, CHINWAG_HOME=str(home), CHINWAG_PG_DSN=pg_dsn)
    with PostgresSessionDB(pg_dsn) as db:
        MemoryStore(NoteTable(db)).add("memory", "port is 8080")
    out_dir = tmp_path / "notes"
    code, out, err = await chinwag(["memory", "export", str(out_dir)], env)
    assert code == 0, err
    assert (out_dir / "MEMORY.md").read_text() == "port is 8080\n" and not (out_dir / "USER.md").exists()
    assert "MEMORY.md: written" in out and "USER.md: empty at the source" in out

    (out_dir / "MEMORY.md").write_text("port is 9090\n§\ncache is redis\n")
    code, out, err = await chinwag(["memory", "import", str(out_dir)], env)
    assert code == 1 and "MEMORY.md: differs at the target, kept (--force replaces it)" in out
    code, out, err = await chinwag(["memory", "import", str(out_dir), "--force"], env)
    assert code == 0, err
    with PostgresSessionDB(pg_dsn) as db:
        assert db.read_notes("MEMORY.md") == "port is 9090\n§\ncache is redis\n"

    (out_dir / "USER.md").write_text("x" * 900)  # the tool refuses an entry this long: so does import
    code, out, err = await chinwag(["memory", "import", str(out_dir), "--force"], env)
    assert code == 2 and "USER.md: entry too long" in err and "nothing was written" in err
    with PostgresSessionDB(pg_dsn) as db:
        assert db.read_notes("USER.md") == ""


async def test_migrate_carries_the_notes_into_the_table_and_back(tmp_path: Path, pg_dsn: str) -> None:
    home = tmp_path / "home"
    with SessionDB(home / "state.db") as lite:
        lite.create_session("20240101_000000_abcdef01", "telegram")
    (home / "MEMORY.md").write_text("Deploy with make ship\n§\nStaging is stg-01\n")
    (home / "USER.md").write_text("Name: Lin\n")
    code, out, err = await chinwag(
        ["sessions", "migrate", "--to", "postgres"], clean_env(tmp_path, CHINWAG_PG_DSN=pg_dsn)
    )
    assert code == 0, err
    assert "MEMORY.md: copied" in out and "USER.md: copied" in out
    with PostgresSessionDB(pg_dsn) as db:
        assert read_snapshot(NoteTable(db)) == ("Deploy with make ship\n§\nStaging is stg-01", "Name: Lin")

    back = tmp_path / "back"
    env_back = clean_env(tmp_path, CHINWAG_HOME=str(back))
    code, out, err = await chinwag(["sessions", "migrate", "--to", "sqlite", "--dsn", pg_dsn], env_back)
    assert code == 0, err
    assert (back / "MEMORY.md").read_text() == "Deploy with make ship\n§\nStaging is stg-01\n"
    assert (back / "USER.md").read_text() == "Name: Lin\n"


@pytest.mark.parametrize("command", ["export", "import"])
async def test_memory_commands_on_sqlite_copy_files(tmp_path: Path, command: str) -> None:
    home, other = tmp_path / "home", tmp_path / "other"
    home.mkdir()
    other.mkdir()
    (home if command == "export" else other).joinpath("MEMORY.md").write_text("a note\n")
    env = clean_env(tmp_path, CHINWAG_HOME=str(home))
    code, out, err = await chinwag(["memory", command], env)
    assert code == 0 and "already files in" in out
    code, out, err = await chinwag(["memory", command, str(other)], env)
    assert code == 0, err
    assert (home / "MEMORY.md").read_text() == (other / "MEMORY.md").read_text() == "a note\n"
