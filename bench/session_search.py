"""session_search's recaps run at once: the seconds for `--sessions` recaps whose model takes
`--delay` s each, against the fake OpenAI endpoint on 127.0.0.1 and a real SQLite store.

    python -m bench.session_search [--sessions 5] [--delay 1.0]

In parallel the whole search takes about one delay plus the search itself; one after another it
would take `sessions` delays. The test (tests/tools/test_session_search.py) proves the recaps are in
flight together by holding every reply until all have arrived; this prints the wall-clock figure,
which depends on the machine and so is no test's business.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from agent.llm import ModelSettings
from gateway.db import SessionDB
from tests.fakes.openai_server import FakeOpenAI
from tools.session_search import asession_search


async def run(args: argparse.Namespace) -> None:
    db = SessionDB(Path(tempfile.mkdtemp(prefix="chinwag-bench-search-")) / "state.db")
    for i in range(args.sessions):
        sid = f"20240301_1200{i:02d}_{i:08x}"
        db.create_session(sid, "telegram", user_id="alice", started_at=1_709_294_400.0 + i * 3600)
        db.append_message(sid, "user", f"postgres vacuum run {i}", user_id="alice")
        db.append_message(sid, "assistant", "done")
    async with FakeOpenAI() as fake:
        fake.delay = args.delay
        model = ModelSettings(base_url=fake.base_url, api_key="k", name="fake-model", timeout=60)
        started = time.monotonic()
        out = json.loads(await asession_search("postgres vacuum", limit=args.sessions, db=db, model=model))
        elapsed = time.monotonic() - started
    db.close()
    recaps = sum(1 for r in out["results"] if r["summary_kind"] == "recap")
    print(
        f"{recaps} recaps of {args.delay:g} s each in {elapsed:.2f} s "
        f"(one after another: {args.sessions * args.delay:.1f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--delay", type=float, default=1.0)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
