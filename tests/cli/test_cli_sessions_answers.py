"""`chinwag sessions ...` refusals change nothing, and answers say what they mean (issue 15.14-24)."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.db import SessionDB
from tests.mirror_check import mirror_problems

IDS = [f"20261201_0746{n:02d}_{h}" for n, h in ((1, "aaaa1111"), (2, "bbbb2222"), (3, "cccc3333"), (4, "dddd4444"))]


def run(capsys, home: Path, *argv: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    capsys.readouterr()
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    rc = main(["--home", str(home), "sessions", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def home(tmp_path) -> Path:
    home = tmp_path / "home"
    with SessionDB(home / "state.db") as db:
        for i, sid in enumerate(IDS):
            db.create_session(sid, "telegram", user_id="u1", title=f"talk {i}")
            db.append_message(sid, "user", f"question {i} about nginx", user_id="u1")
            db.append_message(sid, "assistant", f"answer {i}")
        db.set_key_entry("agent:main:telegram:dm:u1", IDS[3], {"platform": "telegram"}, "created")
    return home


def title(home: Path, sid: str) -> str | None:
    with SessionDB(home / "state.db") as db:
        return db.get_session(sid)["title"]


def exists(home: Path, sid: str) -> bool:
    with SessionDB(home / "state.db") as db:
        return db.get_session(sid) is not None


def test_a_refused_rename_changes_nothing(capsys, home) -> None:
    rc, out, err = run(capsys, home, "rename", IDS[0], "")
    assert rc == 2 and "empty" in err
    assert title(home, IDS[0]) == "talk 0"
    rc, out, err = run(capsys, home, "rename", IDS[0], "\x07\x08")
    assert rc == 2 and title(home, IDS[0]) == "talk 0"


def test_delete_without_a_tty_needs_yes(capsys, home, monkeypatch) -> None:
    rc, out, err = run(capsys, home, "delete", IDS[0], stdin="n\n", monkeypatch=monkeypatch)
    assert rc == 2 and "--yes" in err
    assert exists(home, IDS[0])
    rc, out, err = run(capsys, home, "delete", IDS[0], "--yes")
    assert rc == 0 and not exists(home, IDS[0])


def test_deleting_a_chats_current_session_needs_a_flag(capsys, home) -> None:
    rc, out, err = run(capsys, home, "delete", IDS[3], "--yes")
    assert rc == 2 and "current" in err and "--include-current" in err
    assert exists(home, IDS[3])
    rc, out, err = run(capsys, home, "delete", IDS[3], "--yes", "--include-current")
    assert rc == 0 and not exists(home, IDS[3])


def test_an_ambiguous_prefix_lists_the_matches_and_a_hex_suffix_is_enough(capsys, home) -> None:
    rc, out, err = run(capsys, home, "show", "20261201_0746")
    assert rc == 2 and "ambiguous" in err
    for sid in IDS:
        assert sid in err
    rc, out, err = run(capsys, home, "show", "bbbb2222")
    assert rc == 0, err
    assert "question 1 about nginx" in out


def test_import_leaves_the_mirrors_consistent(capsys, home, tmp_path) -> None:
    rc, out, _ = run(capsys, home, "export", str(tmp_path / "all.jsonl"))
    assert rc == 0
    other = tmp_path / "other"
    rc, out, err = run(capsys, other, "import", str(tmp_path / "all.jsonl"))
    assert rc == 0, err
    assert (other / "sessions.json").is_file()
    with SessionDB(other / "state.db") as db:
        assert mirror_problems(other, db) == []


def test_an_unknown_source_is_named_and_an_empty_search_is_a_usage_error(capsys, home) -> None:
    rc, out, err = run(capsys, home, "list", "--source", "telegarm")
    assert rc == 2 and "telegarm" in err and "telegram" in err
    rc, out, err = run(capsys, home, "export", "--source", "telegarm")
    assert rc == 2
    rc, out, err = run(capsys, home, "search", "")
    assert rc == 2 and "search" in err
    rc, out, err = run(capsys, home, "search", "   ")
    assert rc == 2


def test_prune_dry_run_names_what_it_would_delete(capsys, home) -> None:
    with SessionDB(home / "state.db") as db:
        db.write(
            lambda conn, events: conn.execute("UPDATE sessions SET last_active_at = ?", (time.time() - 90 * 86400,))
        )
    rc, out, err = run(capsys, home, "prune", "--older-than", "30", "--dry-run")
    assert rc == 0
    for sid in IDS[:3]:
        assert sid in out
    assert IDS[3] not in out.split("kept")[0]
    rc, out, err = run(capsys, home, "prune", "--older-than", "30", "--dry-run", "--json")
    result = json.loads(out)
    assert "deleted" not in result and result["would_delete_count"] == 3
    assert sorted(result["would_delete"]) == IDS[:3]
    assert all(exists(home, sid) for sid in IDS)
    rc, out, err = run(capsys, home, "prune", "--older-than", "30", "--json")
    result = json.loads(out)
    assert result["deleted"] == 3 and sorted(result["deleted_ids"]) == IDS[:3]


def test_json_on_every_subcommand_that_prints_a_result(capsys, home, tmp_path) -> None:
    rc, out, err = run(capsys, home, "rename", IDS[0], "new name", "--json")
    assert rc == 0 and json.loads(out) == {"id": IDS[0], "title": "new name"}
    target = tmp_path / "one.jsonl"
    rc, out, err = run(capsys, home, "export", str(target), "--session", IDS[0], "--json")
    assert rc == 0 and json.loads(out) == {"sessions": 1, "messages": 2, "file": str(target)}
    rc, out, err = run(capsys, tmp_path / "third", "import", str(target), "--json")
    assert rc == 0 and json.loads(out) == {"imported": 1, "messages": 2, "skipped": 0}
    rc, out, err = run(capsys, home, "delete", IDS[1], "--yes", "--json")
    assert rc == 0 and json.loads(out) == {"deleted": IDS[1], "messages": 2}


def test_export_does_not_overwrite_a_file_without_force(capsys, home, tmp_path) -> None:
    target = tmp_path / "precious.jsonl"
    target.write_text("keep me\n", encoding="utf-8")
    rc, out, err = run(capsys, home, "export", str(target))
    assert rc == 2 and "--force" in err
    assert target.read_text(encoding="utf-8") == "keep me\n"
    rc, out, err = run(capsys, home, "export", str(target), "--force")
    assert rc == 0 and target.read_text(encoding="utf-8").count("\n") == 4
