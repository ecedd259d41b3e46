"""Recall's window vectors on Postgres (schema v7): a database made before them upgrades with its
messages as the embedding backlog; the shared semantic suite (test_shared_suites.py) covers the rest."""

import asyncio
import threading

import psycopg

from gateway.recall.index import backfill, stats
from gateway.recall.rank import find_sessions
from gateway.storage import vectors
from gateway.storage.postgres.connection import Connection
from gateway.storage.postgres.db import PostgresSessionDB
from gateway.storage.postgres.schema import migrate
from gateway.storage.postgres.tokens import words_vector
from tests.fakes.loopback import wait_until, wait_until_blocking
from tests.recall.test_semantic import Endpoint, concept_embedding


def test_a_v6_database_upgrades_with_its_messages_as_the_backlog(pg_dsn: str) -> None:
    texts = ["did you meet anyone at the cafe?", "yes, a woman, we had coffee", "and the car?", "sold the prius"]
    with psycopg.connect(pg_dsn) as raw:
        assert migrate(raw, target=6) == 0
        raw.execute("INSERT INTO sessions (id, source, started_at, last_active_at) VALUES ('old', 'cli', 1, 1)")
        for i, text in enumerate(texts):
            raw.execute(
                "INSERT INTO messages (session_id, role, content, timestamp, words) VALUES ('old', %s, %s, 1, %s)",
                ("user" if i % 2 == 0 else "assistant", text, words_vector(text)),
            )
        raw.commit()
    served = Endpoint()
    served.fake.embed = lambda texts, model: [concept_embedding(t) for t in texts]
    try:
        embedder = served.embedder()
        with PostgresSessionDB(pg_dsn) as db:
            assert stats(db, str(embedder.model))["backlog"] == 4
            assert backfill(db, embedder) == 4
            assert stats(db, str(embedder.model)) == {"backlog": 0, "windows": 1, "vector_bytes": 8}
            assert [h.session_id for h in find_sessions(db, "Tom's wife", embedder=embedder, see_all=True)] == ["old"]
    finally:
        served.close()


def test_two_replicas_storing_the_same_batch_store_it_once(pg_dsn: str) -> None:
    # every replica runs an indexer: the one that commits second must find the batch taken
    with PostgresSessionDB(pg_dsn) as first, PostgresSessionDB(pg_dsn) as second:
        first.create_session("s", "telegram")
        for text in ["did you meet anyone?", "a woman at the cafe"]:
            first.append_message("s", "user", text)
        model = "m"
        windows, upto, _ = first.read(lambda conn: vectors.pending_windows(conn, model, 100))
        blobs = [vectors.quantise(concept_embedding(w.text)) for w in windows]
        with psycopg.connect(pg_dsn) as raw:  # the first replica's commit, held open
            assert vectors.store_op(model, windows, blobs, upto, 0)(Connection(raw), [])
            outcome: list[object] = []
            racer = threading.Thread(
                target=lambda: outcome.append(second.write(vectors.store_op(model, windows, blobs, upto, 0)))
            )
            racer.start()
            wait_until_blocking(lambda: blocked_on_a_lock(pg_dsn))
            raw.commit()
            racer.join(10)
        assert outcome == [False]  # not an error: the batch is read again and is done
        assert first.read(lambda conn: vectors.stored(conn, model))[0] == 1


def blocked_on_a_lock(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").fetchone()
        return bool(row and row[0])


async def test_one_replica_embeds_the_shared_backlog_and_another_takes_over(pg_dsn: str) -> None:
    from gateway.recall.index import BackgroundIndexer
    from gateway.runtime.leases import SharedLeases
    from gateway.service.app import EMBED_POLL_SECONDS, embed_while_leading
    from tests.storage.postgres.test_replicas import QuietHost

    served = Endpoint()
    embedded: list[int] = []
    served.fake.embed = lambda texts, model: embedded.append(len(texts)) or [concept_embedding(t) for t in texts]
    dbs = [PostgresSessionDB(pg_dsn) for _ in range(3)]
    writer = dbs[2]  # a third replica's commits: they reach no commit listener of the other two
    leases = [SharedLeases(db, pg_dsn) for db in dbs[:2]]
    # quiet_seconds 0: each message's window at once (the debounce has its own tests in test_semantic.py)
    indexers = [
        BackgroundIndexer(db, served.embedder(), poll_seconds=EMBED_POLL_SECONDS, quiet_seconds=0.0) for db in dbs[:2]
    ]
    model = str(indexers[0].embedder.model)
    try:
        for lease, indexer in zip(leases, indexers):
            await lease.start(QuietHost())
            embed_while_leading(lease, indexer)
        await wait_until(lambda: any(i.running for i in indexers), 10)
        await asyncio.sleep(1.0)  # a second beat: the other one must still be idle
        assert sum(i.running for i in indexers) == 1
        leader = next(n for n, i in enumerate(indexers) if i.running)
        writer.create_session("s", "telegram")
        writer.append_message("s", "user", "did you meet anyone at the cafe?")
        await wait_until(lambda: stats(writer, model)["backlog"] == 0, 10)  # found by the leader's poll
        await leases[leader].stop()  # the leader goes: the other one takes the backlog over
        await wait_until(lambda: indexers[1 - leader].running, 10)
        writer.append_message("s", "assistant", "a woman, over coffee")
        await wait_until(lambda: stats(writer, model)["backlog"] == 0, 10)
        assert sum(embedded) == 2  # each window embedded once: one by each leader in turn
    finally:
        for lease in leases:
            await lease.stop()
        for indexer in indexers:
            await asyncio.to_thread(indexer.stop)
        for db in dbs:
            db.close()
        served.close()
