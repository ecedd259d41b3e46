"""Writer process for tests/storage/test_crash.py: many chats appending at once, until it is killed.

Usage: python -m tests.storage.crash_writer HOME SEED [CHATS]
Each chat is an asyncio task going through the real stack (SessionStore -> SessionDB with the
mirrors attached). A message id is printed, and flushed, only after its append returned, i.e.
after the commit: every id printed must survive a SIGKILL. Some turns also undo (a transcript
rewrite) or start a new session (a sessions.json change), so a kill can land in those too.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from gateway.db import SessionDB
from gateway.sessions.mirrors import Mirrors
from gateway.sessions.reset import ResetPolicies, ResetPolicy
from gateway.sessions.store import SessionStore
from gateway.source import SessionSource


async def chat(store: SessionStore, db: SessionDB, n: int, rnd: random.Random) -> None:
    source = SessionSource(platform="telegram", chat_id=str(n), chat_type="dm", user_id=str(n))
    while True:
        sid = (await store.get_or_create(source)).entry.session_id
        role = "user" if rnd.random() < 0.6 else "assistant"
        text = f"chat {n} {role} {rnd.random():.6f} 部署 /srv/app-{rnd.randint(1, 99)}"
        message_id = await db.aappend_message(sid, role, text, user_id=str(n) if role == "user" else None)
        print(message_id, flush=True)
        roll = rnd.random()
        if roll < 0.03:
            await asyncio.to_thread(db.rewind, sid, 1)
        elif roll < 0.05:
            await store.reset(source)


async def main(home: Path, seed: int, chats: int) -> None:
    db = SessionDB(home / "state.db")
    mirrors = Mirrors(home, db, index_interval=0.02)
    mirrors.reconcile()
    store = SessionStore(db, ResetPolicies(ResetPolicy(mode="none")))
    print("ready", flush=True)
    rnd = random.Random(seed)
    await asyncio.gather(*(chat(store, db, n, random.Random(rnd.random())) for n in range(chats)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 16))
