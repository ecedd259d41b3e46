"""`chinwag sessions …`: tables and --json, errors with exit code 2, import all-or-nothing, round trip."""

from __future__ import annotations

import io
import json
import sqlite3
import time
from pathlib import Path

import pytest

from gateway.cli.format import Progress, clip, width
from gateway.cli.main import main
from gateway.db import MAX_CONTENT_CHARS, SessionDB, TitleTaken, new_session_id
from gateway.sessions.mirrors import Mirrors
from gateway.storage.fts import ident_text, index_text
from gateway.storage.home import resolve_home
from gateway.storage.schema import MIGRATIONS, _statements
from tests.mirror_check import mirror_problems

DAY = 86400.0


def run(capsys, home: Path, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["--home", str(home), "sessions", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def seeded(home) -> dict[str, str]:
    """Three sessions: a titled Telegram one with a hidden turn, a Feishu one in Chinese, an old one."""
    now = time.time()
    ids = {}
    with SessionDB(home / "state.db") as db:
        ids["deploy"] = sid = new_session_id()
        db.create_session(sid, "telegram", user_id="u1", title="deploy notes", chat_type="dm", session_key="k1")
        db.append_message(sid, "user", "how do I deploy the gateway to staging?", user_id="u1")
        db.append_message(
            sid,
            "assistant",
            None,
            tool_calls=[{"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}],
        )
        db.append_message(sid, "tool", "ok: deployed", tool_call_id="c1", tool_name="shell")
        db.append_message(sid, "assistant", "Deployed with make ship.")
        db.append_message(sid, "user", "oops, wrong chat", user_id="u1")
        db.rewind(sid, 1)
        db.add_tokens(sid, 120, 40)
        db.set_key_entry("agent:main:telegram:dm:u1", sid, {"platform": "telegram"}, "created")
        ids["piano"] = sid = new_session_id()
        db.create_session(sid, "feishu", user_id="ou_2", title="钢琴课")
        db.append_message(sid, "user", "周末在公园练钢琴", user_id="ou_2")
        db.append_message(sid, "assistant", "好的，记住了。")
        db.end_session(sid, "idle")
        ids["old"] = sid = new_session_id(now - 90 * DAY)
        db.create_session(sid, "discord", user_id="u3", started_at=now - 90 * DAY)
        db.append_message(sid, "user", "ancient history", timestamp=now - 90 * DAY, user_id="u3")
    return ids


def test_list_table_and_json_with_filters(capsys, home, seeded):
    rc, out, _ = run(capsys, home, "list")
    assert rc == 0
    head, *rows = out.strip().splitlines()
    assert head.split()[:4] == ["ID", "TITLE", "SOURCE", "USER"]
    assert rows[0].startswith(seeded["piano"]) and "钢琴课" in rows[0]  # most recent first
    assert len(rows) == 3
    rc, out, _ = run(capsys, home, "list", "--json", "--source", "telegram")
    data = json.loads(out)
    assert [r["id"] for r in data] == [seeded["deploy"]] and data[0]["message_count"] == 4
    rc, out, _ = run(capsys, home, "list", "--json", "--user", "ou_2")
    assert [r["id"] for r in json.loads(out)] == [seeded["piano"]]
    rc, out, _ = run(capsys, home, "list", "--json", "--limit", "1")
    assert len(json.loads(out)) == 1
    with pytest.raises(SystemExit) as exit_:
        run(capsys, home, "list", "--limit", "0")
    assert exit_.value.code == 2


def test_show_by_title_prefix_and_hidden_messages(capsys, home, seeded):
    rc, out, _ = run(capsys, home, "show", "Deploy Notes")
    assert rc == 0 and seeded["deploy"] in out
    assert "[calls shell]" in out and "tool (shell): ok: deployed" in out
    assert "oops, wrong chat" not in out and "1 hidden message(s)" in out
    rc, out, _ = run(capsys, home, "show", seeded["deploy"][:20], "--all")
    assert "user [undone]: oops, wrong chat" in out
    rc, out, _ = run(capsys, home, "show", seeded["piano"], "--json")
    record = json.loads(out)
    assert record["session"]["end_reason"] == "idle" and record["messages"][0]["content"] == "周末在公园练钢琴"


def test_unknown_id_is_a_one_line_error_with_exit_2(capsys, home, seeded):
    for argv in (
        ["show", "nope"],
        ["delete", "nope", "--yes"],
        ["rename", "nope", "x"],
        ["export", "--session", "nope"],
    ):
        rc, out, err = run(capsys, home, *argv)
        assert rc == 2, argv
        assert err.count("\n") == 1 and err.startswith(f"{argv[0]}: no session matches 'nope'"), err
        assert out == ""


def test_search_uses_session_recall(capsys, home, seeded):
    rc, out, _ = run(capsys, home, "search", "deploy", "staging", "--json")
    hits = json.loads(out)
    assert rc == 0 and hits[0]["session_id"] == seeded["deploy"] and "score" in hits[0]
    rc, out, _ = run(capsys, home, "search", "钢琴")
    assert seeded["piano"] in out and seeded["deploy"] not in out
    rc, out, _ = run(capsys, home, "search", "钢琴", "--user", "u1", "--json")
    assert json.loads(out) == []  # u1 never took part in the piano session
    rc, out, _ = run(capsys, home, "search", "zebra")
    assert rc == 0 and "no session mentions 'zebra'" in out


def test_export_import_round_trip(capsys, home, seeded, tmp_path):
    rc, out, err = run(capsys, home, "export")  # to stdout
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) == 3 and all(set(json.loads(line)) == {"session", "messages"} for line in lines)
    dump = tmp_path / "dump.jsonl"
    rc, _, err = run(capsys, home, "export", str(dump))
    assert rc == 0 and dump.read_text() == out and "exported 3 session(s), 8 message(s)" in err

    other = tmp_path / "other"
    rc, out, _ = run(capsys, other, "import", str(dump))
    assert rc == 0 and "imported 3 session(s), 8 message(s)" in out
    rc, again, _ = run(capsys, other, "export")

    def comparable(text: str) -> list[dict]:
        records = [json.loads(line) for line in text.splitlines()]
        for r in records:
            for m in r["messages"]:
                m.pop("id")  # message ids are assigned by the importing database
        return records

    assert comparable(again) == comparable(dump.read_text())
    with SessionDB(other / "state.db") as db:
        assert db.get_session(seeded["deploy"])["message_count"] == 4
        assert [m["active"] for m in db.get_messages(seeded["deploy"], include_inactive=True)] == [1, 1, 1, 1, 0]
        assert mirror_problems(other, db) == []  # the transcripts carry the real flags

    rc, _, err = run(capsys, other, "import", str(dump))  # again: all exist
    assert rc == 2 and "line 1: session" in err and "already exists" in err
    rc, out, _ = run(capsys, other, "import", str(dump), "--skip-existing")
    assert rc == 0 and "skipped 3" in out


def bad_import(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = json.dumps(
    {"session": {"id": "20250101_000000_aaaaaaaa", "source": "local"}, "messages": [{"role": "user", "content": "hi"}]}
)
GOOD2 = json.dumps({"session": {"id": "20250101_000000_bbbbbbbb", "source": "local", "title": "two"}, "messages": []})


@pytest.mark.parametrize(
    "third, message",
    [
        (
            '{"session": {"id": "x1", "source": "local"} "messages": []}',
            "line 3: invalid JSON (Expecting ',' delimiter)",
        ),
        ("[1, 2]", 'line 3: expected an object like {"session": {...}, "messages": [...]}'),
        ('{"session": {"source": "local"}}', "line 3: session.id is missing"),
        ('{"session": {"id": "../../etc/x", "source": "local"}}', "line 3: session.id '../../etc/x' may only hold"),
        (
            '{"session": {"id": "x3", "source": "local"}, "messages": [{"role": "robot"}]}',
            'line 3: message 1: role must be one of user, assistant, tool, system, got "robot"',
        ),
        (
            '{"session": {"id": "x4", "source": "local", "started_at": "yesterday"}}',
            'line 3: session.started_at must be int or float or null, got "yesterday"',
        ),
        (
            '{"session": {"id": "20250101_000000_aaaaaaaa", "source": "local"}}',
            "line 3: session 20250101_000000_aaaaaaaa appears twice (also on line 1)",
        ),
        ('{"session": {"id": "x5", "source": "local", "title": "TWO"}}', "line 3: title 'TWO' is also used on line 2"),
        (
            '{"session": {"id": "x6", "source": "local"}, "messages": [{"role": "user", "active": "no"}]}',
            "line 3: message 1: active must be int or bool",
        ),
        (
            json.dumps(
                {
                    "session": {"id": "x7", "source": "local"},
                    "messages": [
                        {"role": "user", "content": "ok"},
                        {"role": "user", "content": "x" * (MAX_CONTENT_CHARS + 1)},
                    ],
                }
            ),
            f"line 3: message 2: content is {MAX_CONTENT_CHARS + 1:,} characters; the limit is {MAX_CONTENT_CHARS:,}",
        ),
    ],
)
def test_bad_import_names_the_line_and_changes_nothing(capsys, home, tmp_path, third, message):
    path = bad_import(tmp_path, GOOD, GOOD2, third)
    rc, out, err = run(capsys, home, "import", str(path))
    assert rc == 2
    assert err.startswith("import: " + message), err
    assert err.count("\n") == 1
    with SessionDB(home / "state.db") as db:
        assert db.count_sessions() == 0 and db.count_messages() == 0
    assert not list((home / "sessions").glob("*.jsonl"))


def test_import_title_clash_with_the_db_and_missing_file(capsys, home, seeded, tmp_path):
    path = bad_import(tmp_path, GOOD, json.dumps({"session": {"id": "y1", "source": "local", "title": "deploy notes"}}))
    rc, _, err = run(capsys, home, "import", str(path))
    assert rc == 2 and err.startswith(
        f"import: line 2: title 'deploy notes' is already used by session {seeded['deploy']}"
    )
    rc, _, err = run(capsys, home, "import", str(tmp_path / "missing.jsonl"))
    assert rc == 2 and err.strip().endswith("missing.jsonl: no such file")
    (tmp_path / "empty.jsonl").write_text("\n")
    rc, _, err = run(capsys, home, "import", str(tmp_path / "empty.jsonl"))
    assert rc == 2 and err == "import: no sessions in the input\n"
    with SessionDB(home / "state.db") as db:
        assert db.count_sessions() == 3


def test_delete_and_rename(capsys, home, seeded):
    run(capsys, home, "repair")
    transcript = home / "sessions" / f"{seeded['piano']}.jsonl"
    assert transcript.exists()
    rc, out, _ = run(capsys, home, "delete", "钢琴课", "--yes")
    assert rc == 0 and out.startswith(f"deleted {seeded['piano']} (钢琴课)")
    assert not transcript.exists()
    rc, out, _ = run(capsys, home, "rename", seeded["old"], "old", "stuff")
    assert rc == 0 and out.strip() == f"renamed {seeded['old']}: old stuff"
    rc, _, err = run(capsys, home, "rename", seeded["old"], "deploy", "notes")
    assert rc == 2 and err == f"rename: title 'deploy notes' is already used by session {seeded['deploy']}\n"
    with SessionDB(home / "state.db") as db:
        assert db.get_session(seeded["piano"]) is None and db.get_session(seeded["old"])["title"] == "old stuff"


def test_prune(capsys, home, seeded):
    rc, _, err = run(capsys, home, "prune", "--older-than", "0")
    assert rc == 2 and err == "prune: --older-than must be a positive number of days, got 0\n"
    with SessionDB(home / "state.db") as db:  # the deploy session is current for a chat; make it old too
        db.write(
            lambda c, e: c.execute(
                "UPDATE sessions SET last_active_at = last_active_at - 60 * 86400 WHERE id = ?", (seeded["deploy"],)
            )
        )
    rc, out, _ = run(capsys, home, "prune", "--older-than", "30", "--dry-run", "--json")
    assert json.loads(out)["would_delete"] == [seeded["old"]] and json.loads(out)["kept_current"] == 1
    rc, out, _ = run(capsys, home, "prune", "--older-than", "30")
    assert rc == 0 and out.startswith("deleted 1 session(s) idle for more than 30 day(s); kept 1")
    with SessionDB(home / "state.db") as db:
        assert db.get_session(seeded["old"]) is None and db.get_session(seeded["deploy"]) is not None


def test_repair_and_stats(capsys, home, seeded):
    rc, out, _ = run(capsys, home, "repair", "--json")
    report = json.loads(out)
    assert rc == 0 and report["files_created"] == 3 and report["index_rewritten"]
    path = home / "sessions" / f"{seeded['deploy']}.jsonl"
    path.write_bytes(path.read_bytes()[:-10])
    rc, out, _ = run(capsys, home, "repair")
    assert rc == 0 and "1 transcript(s) rewritten" in out
    rc, out, _ = run(capsys, home, "repair")
    assert "nothing to fix" in out
    rc, out, _ = run(capsys, home, "stats", "--json")
    stats = json.loads(out)
    assert stats["sessions"] == 3 and stats["messages"] == 8 and stats["transcripts"] == 3
    assert isinstance(stats["wal_bytes"], int)
    rc, out, _ = run(capsys, home, "stats")
    assert "sessions from telegram" in out and "wal bytes" in out


def test_unwritable_export_and_a_broken_database(capsys, home, seeded, tmp_path):
    rc, _, err = run(capsys, home, "export", str(tmp_path / "no" / "such" / "dir.jsonl"))
    assert rc == 2 and err.startswith("export: cannot write") and err.count("\n") == 1
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "state.db").write_bytes(b"this is not a database" * 100)
    rc, _, err = run(capsys, broken, "list")
    assert rc == 1 and err.startswith("list: database ") and "not a database" in err and err.count("\n") == 1


def test_sessions_without_subcommand_shows_usage(capsys, home):
    capsys.readouterr()
    assert main(["--home", str(home), "sessions"]) == 2
    assert "SUBCOMMAND" in capsys.readouterr().err


def test_home_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("CHINWAG_HOME", str(tmp_path / "env"))
    assert resolve_home().root == tmp_path / "env"
    assert resolve_home(tmp_path / "flag").db_path == tmp_path / "flag" / "state.db"
    config = tmp_path / "config.yaml"
    config.write_text(f"home: {tmp_path / 'cfg'}\n")
    assert resolve_home(None, config).sessions_dir == tmp_path / "cfg" / "sessions"
    assert resolve_home(tmp_path / "flag", config).root == tmp_path / "flag"  # --home wins
    monkeypatch.delenv("CHINWAG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    h = resolve_home()
    assert h.root == tmp_path / "user" / ".chinwag"
    assert (h.sessions_index.name, h.config_path.name, h.memory_path.name, h.user_path.name) == (
        "sessions.json",
        "config.yaml",
        "MEMORY.md",
        "USER.md",
    )
    with pytest.raises(ValueError):
        h.transcript_path("../escape")


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar():
    tty = TTY()
    with Progress(4, "export", tty) as bar:
        for n in range(1, 5):
            bar.update(n)
    assert "\rexport [" in tty.getvalue() and "100% 4/4" in tty.getvalue() and tty.getvalue().endswith("\n")
    quiet = io.StringIO()
    with Progress(10, "export", quiet) as bar:
        bar.update(10)
    assert quiet.getvalue() == ""  # small job, not a terminal
    log = io.StringIO()
    with Progress(1000, "import", log) as bar:
        for n in range(1, 1001):
            bar.update(n)
    assert log.getvalue().splitlines()[-1] == "import: 1000/1000 (100%)" and len(log.getvalue().splitlines()) == 11


def test_wide_characters_are_measured_in_columns():
    assert width("钢琴课") == 6 and width("abc") == 3
    assert clip("钢琴课钢琴课", 7) == "钢琴课…" and width(clip("钢琴课钢琴课", 7)) == 7


def test_db_import_is_all_or_nothing_and_leaves_mirrors_alone(home):
    """What `import` relies on when a record fails inside the transaction (checks cannot see it all)."""
    with SessionDB(home / "state.db") as db:
        mirrors = Mirrors(home, db)
        records = [
            {
                "session": {"id": "20250101_000000_00000001", "source": "local", "title": "same"},
                "messages": [{"role": "user", "content": "first"}],
            },
            {
                "session": {"id": "20250101_000000_00000002", "source": "local", "title": "same"},
                "messages": [{"role": "user", "content": "second"}],
            },
        ]
        with pytest.raises(TitleTaken):
            db.import_records(records)
        mirrors.close()
        assert db.count_sessions() == 0 and db.count_messages() == 0
        assert db.search_messages("first") == []
        assert not list((home / "sessions").glob("*.jsonl")) and not (home / "sessions.json").exists()


def v3_database(path: Path, titled: list[tuple[str, str, float]]) -> None:
    """A database as chinwag wrote it at schema v3, when titles were unique only in their exact case:
    sessions (id, title, started_at) in this rowid order, one message each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    for migration in MIGRATIONS[:3]:
        for statement in _statements(migration):
            conn.execute(statement)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (3)")
    for sid, title, started in titled:
        conn.execute(
            "INSERT INTO sessions (id, source, title, started_at, last_active_at, message_count) "
            "VALUES (?, 'local', ?, ?, ?, 1)",
            (sid, title, started, started),
        )
        text = f"said in {sid}"
        mid = conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            (sid, text, started),
        ).lastrowid
        conn.execute("INSERT INTO messages_fts (rowid, content) VALUES (?, ?)", (mid, index_text(text)))
        conn.execute("INSERT INTO messages_ident (rowid, content) VALUES (?, ?)", (mid, ident_text(text)))
    conn.commit()
    conn.close()


def test_delete_by_title_takes_the_exact_title_first(capsys, home):
    # "Nginx Outage" is stored first; "nginx outage" is another session (it started earlier)
    v3_database(home / "state.db", [("s_upper", "Nginx Outage", 200.0), ("s_lower", "nginx outage", 100.0)])
    rc, out, _ = run(capsys, home, "delete", "nginx outage", "--yes")
    assert rc == 0 and out.startswith("deleted s_lower (nginx outage)")
    with SessionDB(home / "state.db") as db:
        assert db.get_session("s_lower") is None and db.get_session("s_upper") is not None


def test_case_duplicate_titles_are_made_unique_losing_nothing(capsys, home):
    v3_database(
        home / "state.db",
        [("a", "Trip", 100.0), ("b", "trip", 200.0), ("c", "TRIP", 300.0), ("d", "trip #2", 400.0), ("e", "Ünï", 5.0)],
    )
    with SessionDB(home / "state.db") as db:
        titles = {r["id"]: r["title"] for r in db.list_sessions_rich(limit=10)}
        # the first keeps its title; later ones get the first free " #n", as a lineage's titles do
        assert titles == {"a": "Trip", "b": "trip #3", "c": "TRIP #4", "d": "trip #2", "e": "Ünï"}
        assert db.count_messages() == 5 and db.find_session("trip")["id"] == "a"
        with pytest.raises(TitleTaken) as taken:
            db.set_title("e", "tRiP")
        assert taken.value.holder == "a"
    rc, _, err = run(capsys, home, "rename", "e", "TRIP #3")
    assert rc == 2 and err == "rename: title 'TRIP #3' is already used by session b\n"


def test_list_and_search_count_the_same_messages(capsys, home, seeded):
    with SessionDB(home / "state.db") as db:  # a retried reply: out of the conversation, still findable
        q = db.append_message(seeded["deploy"], "user", "and the deploy to production?", user_id="u1")
        db.append_message(seeded["deploy"], "assistant", "the same deploy target, with prod")
        db.supersede_after(seeded["deploy"], q)
    rc, out, _ = run(capsys, home, "list", "--json")
    listed = {r["id"]: r["message_count"] for r in json.loads(out)}
    rc, out, _ = run(capsys, home, "search", "deploy", "production", "--json")
    found = {h["session_id"]: h["message_count"] for h in json.loads(out)}
    assert found == {seeded["deploy"]: listed[seeded["deploy"]]} and listed[seeded["deploy"]] == 5


def test_rename_follows_the_chat_title_rules_and_show_finds_part_of_a_title(capsys, home, seeded):
    rc, out, err = run(capsys, home, "rename", seeded["piano"], "12345")
    assert rc == 2 and "only a number" in err
    rc, out, err = run(capsys, home, "rename", seeded["piano"], "x" * 150)
    assert rc == 0 and "cut to 100 characters: titles are at most 100" in out
    rc, out, err = run(capsys, home, "show", "DEPLOY", "--json")  # a part of a title, any letter case
    assert rc == 0, err
    assert json.loads(out)["session"]["id"] == seeded["deploy"]


def test_an_export_file_is_owner_only(capsys, home, seeded, tmp_path):
    import os
    import stat

    old = os.umask(0o022)  # the usual umask: the mode comes from the code
    try:
        rc, out, err = run(capsys, home, "export", str(tmp_path / "all.jsonl"))
    finally:
        os.umask(old)
    assert rc == 0, err
    assert stat.S_IMODE((tmp_path / "all.jsonl").stat().st_mode) == 0o600  # it holds every conversation
