"""`chinwag doctor`: its hints fit the case, and it checks the transcripts as repair does."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from gateway.cli.doctor import run_doctor
from gateway.db import SessionDB
from gateway.sessions.mirrors import Mirrors
from gateway.storage.home import Home
from tests.fakes.openai_server import FakeOpenAI


async def doctor(home: Path, **env: str) -> tuple[int, str]:
    out = io.StringIO()
    code = await asyncio.to_thread(run_doctor, None, None, timeout=3.0, out=out, env={"CHINWAG_HOME": str(home), **env})
    return code, out.getvalue()


async def test_the_v1_hint_only_when_the_base_url_lacks_it(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        root = f"http://127.0.0.1:{fake.port}"
        code, text = await doctor(tmp_path / "home", OPENAI_BASE_URL=root + "/api/v1")  # ends in /v1 already
        assert code == 1 and "/api/v1/models not found (HTTP 404)" in text
        assert "usually ends in /v1" not in text
        code, text = await doctor(tmp_path / "home", OPENAI_BASE_URL=root)
        assert code == 1 and "usually ends in /v1" in text


async def test_doctor_checks_the_transcripts_like_repair(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    ids = ["20260101_000000_aaaaaaaa", "20260101_000000_bbbbbbbb", "20260101_000000_cccccccc"]
    with SessionDB(home.db_path) as db:
        mirrors = Mirrors(home, db)
        for sid in ids:
            db.create_session(sid, "local", user_id="me")
            db.append_message(sid, "user", f"hello {sid}")
            db.append_message(sid, "assistant", "hi")
        mirrors.close()
    code, text = await doctor(home.root)
    assert code == 0, text
    assert "transcripts: 3 session(s), all match the database" in text
    home.transcript_path(ids[0]).unlink()
    home.transcript_path(ids[1]).write_bytes(b'{"role": "user", "cont\n')
    code, text = await doctor(home.root)
    assert code == 0, text  # the database is intact; repair rewrites the files
    assert f"transcript {ids[0]} is missing" in text
    assert f"transcript {ids[1]} is garbled" in text
    assert "chinwag sessions repair" in text
    assert ids[2] not in text
