"""`/attach PATH [caption]` in a piped `chinwag chat` (a real subprocess against the fake model):
the file's text reaches the model and is stored with the message; a bad path is answered by the
terminal itself and nothing reaches the model."""

from __future__ import annotations

from pathlib import Path

from gateway.db import SessionDB
from gateway.storage import media
from tests.cli.test_cli_run import chinwag, clean_env
from tests.fakes.openai_server import FakeOpenAI


def model_env(tmp_path: Path, fake: FakeOpenAI) -> dict[str, str]:
    return clean_env(tmp_path, OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-test", CHINWAG_MODEL="fake-model")


async def test_an_attached_text_file_reaches_the_model_and_is_kept(tmp_path: Path) -> None:
    folder = tmp_path / "my notes"
    folder.mkdir()
    notes = folder / "deploy plan.md"
    notes.write_text("step one: drain the walrus queue\nstep two: restart\n")
    async with FakeOpenAI() as fake:
        fake.push("The plan drains the queue first.")
        code, out, err = await chinwag(["chat"], model_env(tmp_path, fake), f'/attach "{notes}" what is step one?\n')
        assert code == 0, err
        assert "The plan drains the queue first." in out
        [request] = fake.requests
        user = request["messages"][-1]
        assert user["role"] == "user"
        assert user["content"].startswith("what is step one?\n[file: deploy plan.md (text/markdown, ")
        assert "step one: drain the walrus queue" in user["content"]
    db = SessionDB(tmp_path / "home" / "state.db")
    try:
        [session] = db.list_sessions_rich()
        [stored] = [m for m in db.get_messages(session["id"]) if m["role"] == "user"]
        [row] = db.read(lambda conn: media.attachments_of(conn, [stored["id"]]))[stored["id"]]
        assert row["kind"] == "file" and row["file_name"] == "deploy plan.md" and row["bytes"] == notes.stat().st_size
        kept = tmp_path / "home" / "media" / row["sha256"][:2] / row["sha256"]
        assert kept.read_bytes() == notes.read_bytes()
    finally:
        db.close()


async def test_a_missing_path_is_refused_by_the_terminal_and_nothing_is_sent(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-file.txt"
    async with FakeOpenAI() as fake:
        fake.push("hello back")
        lines = f"/attach {missing} look\n/attach\n/attach {tmp_path}\n/help\nhello\n"
        code, out, err = await chinwag(["chat"], model_env(tmp_path, fake), lines)
        assert code == 0, err
        assert f"Nothing was sent: there is no file at {missing}." in out
        assert "Usage: /attach PATH [caption]" in out
        assert f"Nothing was sent: {tmp_path} is a directory" in out
        assert "/attach PATH [caption] — send a file from this machine" in out  # the terminal's /help names it
        assert "Unknown command" not in out
        assert "hello back" in out
        [request] = fake.requests  # only "hello" reached the model
        assert request["messages"][-1]["content"] == "hello"
    assert not (tmp_path / "home" / "media").exists() or not any((tmp_path / "home" / "media").rglob("*"))


async def test_a_piped_answer_ending_in_a_newline_is_printed_once(tmp_path: Path) -> None:
    report = tmp_path / "report.csv"
    report.write_text("region,total\nnorth,12\n")
    async with FakeOpenAI() as fake:
        fake.push("Summary: north leads with 12.\n\n")  # streamed, ending in a blank line
        code, out, err = await chinwag(["chat"], model_env(tmp_path, fake), f"/attach {report} summarise\n")
        assert code == 0, err
    assert out.count("Summary: north leads with 12.") == 1, out
