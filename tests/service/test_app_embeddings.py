"""Recall's semantic stage as the daemon and the CLI wire it: `embeddings` configured -> the
embedder built at start, the background indexer embedding what is committed, the backlog in
/metrics and `chinwag sessions stats`, `chinwag sessions embed` backfilling with progress. The real
`chinwag run` subprocess and the real openai client against the fake /embeddings on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path

import aiohttp

from gateway.cli.main import main
from gateway.db import SessionDB
from tests.cli.test_cli_run import TIMEOUT, clean_env, read_until, start_run
from tests.fakes.openai_server import FakeOpenAI
from tests.recall.test_semantic import Endpoint, add, concept_embedding


def write_config(home: Path, base_url: str, model: str = "concepts", extra: str = "", prefixes: str = "") -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        "platforms: {local: {enabled: true, user: tester}}\n"
        f"embeddings: {{provider: openai, base_url: '{base_url}', api_key: k, model: {model}{prefixes}}}\n" + extra,
        encoding="utf-8",
    )


def seed(home: Path) -> None:
    with SessionDB(home / "state.db") as db:
        add(db, "cafe", ["I met a woman at the cafe", "how lovely", "we talked for hours"], user_id="tester")
        add(db, "cars", ["my prius broke down", "sorry to hear that"], started=1.7e9 + 100, user_id="tester")


async def test_the_daemon_embeds_in_the_background_and_shows_the_backlog(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with FakeOpenAI() as fake:
        fake.embed = lambda texts, model: [concept_embedding(t) for t in texts]
        write_config(home, fake.base_url, extra="http: {port: 0}\n")
        seed(home)
        proc = await start_run(clean_env(tmp_path, OPENAI_BASE_URL=fake.base_url))
        try:
            err_lines: list[str] = []
            match = await asyncio.wait_for(
                read_until(proc.stderr, r"ops http on (http://127\.0\.0\.1:\d+)", err_lines), TIMEOUT
            )
            await asyncio.wait_for(read_until(proc.stderr, r"chinwag running: local", err_lines), TIMEOUT)
            readings: list[str] = []
            async with aiohttp.ClientSession() as http:
                for _ in range(int(TIMEOUT * 4)):
                    async with http.get(match.group(1) + "/metrics") as resp:
                        text = await resp.text()
                    found = re.search(r"\nchinwag_embedding_backlog (\S+)\n", text)
                    readings.append(found.group(1) if found else "")
                    if readings[-1] in ("0", "0.0") and len(fake.embedding_requests) >= 1:
                        break
                    await asyncio.sleep(0.25)
            assert readings[-1] in ("0", "0.0"), readings
            assert "\nchinwag_embedding_failures 0" in text
            assert {r["model"] for r in fake.embedding_requests} == {"concepts"}
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), TIMEOUT)
            rest = (await proc.stderr.read()).decode()
            assert code == 0, "".join(err_lines) + rest
            assert "Traceback" not in rest
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    with SessionDB(home / "state.db") as db:
        stored = db.read(lambda conn: conn.execute("SELECT DISTINCT session_id FROM message_vectors").fetchall())
    assert sorted(r[0] for r in stored) == ["cafe", "cars"]


def run_cli(capsys, home: Path, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["--home", str(home), "sessions", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_sessions_embed_backfills_with_progress_and_stats_and_search_use_it(capsys, tmp_path: Path) -> None:
    home = tmp_path / "home"
    served = Endpoint()
    try:
        served.fake.embed = lambda texts, model: [concept_embedding(t) for t in texts]
        write_config(home, served.fake.base_url)
        seed(home)
        rc, out, _ = run_cli(capsys, home, "stats", "--json")
        before = json.loads(out)
        assert (before["embedding_model"], before["embedding_backlog"]) == ("endpoint:concepts", 5)
        rc, out, err = run_cli(capsys, home, "embed")
        assert rc == 0, err
        assert "embedded 5 message(s) with endpoint:concepts" in out and "backlog 0" in out
        assert "embedding: 5/5 (100%)" in err  # the progress bar, as plain lines off a terminal
        rc, out, _ = run_cli(capsys, home, "stats")
        assert re.search(r"embedding backlog\s+0", out) and re.search(r"embedded windows\s+2", out)
        # no word of "wife" occurs anywhere: the CLI ranks as the daemon does, by meaning alone
        rc, out, _ = run_cli(capsys, home, "search", "wife", "--json")
        assert rc == 0 and [h["session_id"] for h in json.loads(out)][:1] == ["cafe"]
        # another model: everything is embedded again, the old vectors go
        write_config(home, served.fake.base_url, model="concepts-v2")
        rc, out, _ = run_cli(capsys, home, "embed")
        assert rc == 0 and "embedded 5 message(s) with endpoint:concepts-v2" in out
        with SessionDB(home / "state.db") as db:
            models = db.read(lambda conn: conn.execute("SELECT DISTINCT model FROM message_vectors").fetchall())
        assert [m[0] for m in models] == ["endpoint:concepts-v2"]
        # an e5-style model behind the endpoint gets its prefixes
        write_config(
            home, served.fake.base_url, "e5", prefixes=", query_prefix: 'query: ', passage_prefix: 'passage: '"
        )
        served.fake.embedding_requests.clear()
        run_cli(capsys, home, "embed")
        run_cli(capsys, home, "search", "wife")
        inputs = [text for r in served.fake.embedding_requests for text in r["input"]]
        assert inputs[0].startswith("passage: user: I met") and inputs[-1] == "query: wife"
        # the endpoint failing: a clear line, exit 1, nothing lost
        write_config(home, served.fake.base_url, model="concepts-v3")
        served.fake.embedding_status = 500
        rc, _, err = run_cli(capsys, home, "embed")
        assert rc == 1 and "embed: stopped, 5 message(s) left to embed" in err
    finally:
        served.close()


def test_sessions_embed_without_embeddings_says_how_to_turn_them_on(capsys, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    seed(home)
    rc, _, err = run_cli(capsys, home, "embed")
    assert rc == 2 and "embeddings are off" in err and err.count("\n") == 1
    rc, out, _ = run_cli(capsys, home, "stats", "--json")
    assert rc == 0 and "embedding_backlog" not in json.loads(out)
