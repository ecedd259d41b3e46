"""Replicas on one Postgres (DESIGN §14): the registry, per-chat leases with a fencing counter, and
advisory-lock leadership. The SQL and the registry's own connection; gateway/runtime/leases.py
decides when to use them.

- Registry: each `chinwag run` inserts a `replicas` row (id, host, pid, started) and holds the
  session-level advisory lock (REPLICA_LOCKS, its lock_id) on a connection of its own for its whole
  life. Postgres drops a session's advisory locks when the session ends, however it ends, so
  "alive" is "its lock is in pg_locks": a SIGKILLed replica's socket is closed by the kernel and
  its lock is gone at once (measured: the next poll sees it). A frozen replica (SIGSTOP) keeps its
  socket open; the server ends its session after IDLE_SESSION_TIMEOUT_MS without a statement
  (`idle_session_timeout`), and a live replica sends one every HEARTBEAT_SECONDS. TCP keepalives
  (client and server side) cover a host that vanished without closing anything.
- Lease: `chat_leases` maps a chat key to its holder and a fence. A claim succeeds when there is
  no lease, it expired (LEASE_SECONDS after its last renewal), or its holder is not alive; each
  claim adds one to the fence, which never goes down (a released lease keeps its row, expired).
  Every commit of a turn runs `check_fence` in its own transaction: the lease row must still name
  this replica and this fence, read `FOR SHARE`, so a takeover (which updates that row) waits for
  the commit to finish and a commit after a takeover is refused. Either the old holder's commit
  lands before the new holder reads the inbox, or it is rolled back.
- Pool connections end a transaction left idle 3 s (connection.py; a frozen replica inside a
  commit would otherwise hold the lease row's share lock and stall the takeover); a claim waits
  at most CLAIM_LOCK_TIMEOUT for that row.
- Leadership: `pg_try_advisory_lock(LEADER_LOCKS, hashtext(name))` on the registry connection, so
  it goes with the replica; the others retry every heartbeat.
- Wake-ups: an entry admitted on a replica that does not hold its chat is announced with
  `pg_notify(CHANNEL, chat key)`; the holder LISTENs on the registry connection. A poll every
  heartbeat is the safety net (a notification sent while nobody listened, a dead holder's chats).

The figures: heartbeat 0.5 s, idle_session_timeout 3 s, lease 4 s. A SIGKILLed holder's chats
are claimed at the next poll (<= 0.5 s); a frozen one's after ~3 s (its session is ended) and
at most 4 s (its lease expires), plus a poll: inside the 5 s target of issue 17 with a margin for
a loaded machine, and 6 missed heartbeats before a live replica would lose its registry.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from typing import Any, Callable

import psycopg

from gateway.errors import LeaseLost
from gateway.storage.events import Events
from gateway.storage.postgres.connection import Connection, to_pyformat

log = logging.getLogger(__name__)

REPLICA_LOCKS = 0x43570001  # advisory lock class ("CW", 1): one lock per live replica, its lock_id
LEADER_LOCKS = 0x43570002  # ("CW", 2): one per led thing (a Telegram poller, a Discord shard)
CHANNEL = "chinwag_inbox"
HEARTBEAT_SECONDS = 0.5
IDLE_SESSION_TIMEOUT_MS = 3000
LEASE_SECONDS = 4.0
CLAIM_LOCK_TIMEOUT = "1s"
FORGET_AFTER = 24 * 3600  # seconds after its last heartbeat a dead replica's row is deleted
# Dead-peer detection below the application: keepalive probes after 5 s idle, every 2 s, 3 lost
# = gone (~11 s), and unacknowledged data gives up after 10 s. Loopback never needs them.
KEEPALIVES: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3}

NOW = "extract(epoch FROM clock_timestamp())::float8"  # the database's clock: one for every host
LIVE = (
    "SELECT r.id FROM replicas r JOIN pg_locks k ON k.locktype = 'advisory' AND k.granted "
    "AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    f"AND k.classid::bigint = {REPLICA_LOCKS} AND k.objid::bigint = r.lock_id AND k.objsubid = 2"
)

Op = Callable[[Connection, Events], Any]


def new_replica_id() -> str:
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


# -- leases: ops run by PostgresSessionDB.write / read on a pooled connection --------------------
def op_claim(chat_key: str, replica_id: str, seconds: float = LEASE_SECONDS) -> Op:
    """Take the chat's lease when it is free, expired or its holder is dead: the new fence, or
    None when a live holder has it."""

    def op(conn: Connection, events: Events) -> int | None:
        conn.execute(f"SET LOCAL lock_timeout = '{CLAIM_LOCK_TIMEOUT}'")
        row = conn.execute(
            f"INSERT INTO chat_leases AS l (chat_key, replica_id, fence, expires_at) VALUES (?, ?, 1, {NOW} + ?) "
            "ON CONFLICT (chat_key) DO UPDATE SET replica_id = excluded.replica_id, fence = l.fence + 1, "
            "expires_at = excluded.expires_at "
            f"WHERE l.expires_at < {NOW} OR l.replica_id NOT IN ({LIVE}) RETURNING fence",
            (chat_key, replica_id, float(seconds)),
        ).fetchone()
        return int(row[0]) if row else None

    return op


RENEW = f"UPDATE chat_leases SET expires_at = {NOW} + ? WHERE replica_id = ? RETURNING chat_key, fence"


def op_renew(replica_id: str, seconds: float = LEASE_SECONDS) -> Op:
    """Extend every lease this replica still holds; {chat key: fence} of those."""

    def op(conn: Connection, events: Events) -> dict[str, int]:
        rows = conn.execute(RENEW, (float(seconds), replica_id)).fetchall()
        return {r[0]: int(r[1]) for r in rows}

    return op


def op_release_all(replica_id: str) -> Op:
    """At a clean stop: every lease of this replica expires now (rows and fences stay)."""

    def op(conn: Connection, events: Events) -> int:
        return conn.execute("UPDATE chat_leases SET expires_at = 0 WHERE replica_id = ?", (replica_id,)).rowcount

    return op


def check_fence(conn: Connection, chat_key: str, replica_id: str, fence: int | None) -> None:
    """In a commit's transaction: raise LeaseLost unless this replica still holds the chat at
    `fence`. The share lock makes a takeover wait for this commit. Run once per transaction: the
    job's scope binds it to each write (gateway.storage.fence)."""
    if fence is None:
        raise LeaseLost(chat_key)
    row = conn.execute(
        "SELECT 1 FROM chat_leases WHERE chat_key = ? AND replica_id = ? AND fence = ? FOR SHARE",
        (chat_key, replica_id, int(fence)),
    ).fetchone()
    if row is None:
        raise LeaseLost(chat_key)


def holds(conn: Connection, chat_key: str, replica_id: str, fence: int) -> bool:
    """Does this replica still hold the chat at `fence` (before a send)?"""
    row = conn.execute(
        "SELECT 1 FROM chat_leases WHERE chat_key = ? AND replica_id = ? AND fence = ?",
        (chat_key, replica_id, int(fence)),
    ).fetchone()
    return row is not None


def chats_to_run(conn: Connection, replica_id: str) -> list[tuple[str, frozenset[int]]]:
    """Chats with work left (an unfinished inbox entry, or an unsent reply to one) that this
    replica holds or may claim (no lease, an expired one, a dead holder's), oldest work first,
    each with the ids of its unfinished entries (empty: only replies are left). The unsent
    replies count: a holder that committed a reply and died (or lost its registry) before sending
    it leaves nothing unfinished in the inbox. The ids, not the newest one: entries admitted at
    once on two replicas commit in another order than their ids, so a late one can be below an
    id already seen."""
    rows = conn.execute(
        "SELECT w.chat_key, array_remove(array_agg(w.open_id), NULL) FROM ("
        " SELECT chat_key, id, id AS open_id FROM inbox WHERE done_at IS NULL"
        " UNION ALL"
        " SELECT i.chat_key, i.id, NULL FROM outbox o JOIN inbox i ON i.id = o.inbox_id WHERE o.sent_at IS NULL"
        ") w LEFT JOIN chat_leases l ON l.chat_key = w.chat_key "
        "WHERE l.chat_key IS NULL OR l.replica_id = ? "
        f"OR l.expires_at < {NOW} OR l.replica_id NOT IN ({LIVE}) "
        "GROUP BY w.chat_key ORDER BY min(w.id)",
        (replica_id,),
    ).fetchall()
    return [(r[0], frozenset(int(i) for i in r[1])) for r in rows]


def op_notify(chat_key: str) -> Op:
    """Wake the chat's holder: an entry it has not seen is in the inbox (sent at commit)."""
    return lambda conn, events: conn.execute("SELECT pg_notify(?, ?)", (CHANNEL, chat_key))


def live_replicas(conn: Connection) -> list[dict]:
    """The replicas whose registry lock is held, oldest first (for status and tests)."""
    rows = conn.execute(
        f"SELECT id, host, pid, started_at, seen_at FROM replicas WHERE id IN ({LIVE}) ORDER BY started_at"
    ).fetchall()
    return [dict(r) for r in rows]


# -- the registry: this replica's own connection --------------------------------------------------
class Registry:
    """One live replica: its `replicas` row and advisory lock, its leadership locks, its LISTEN.
    Used from one task at a time (gateway.runtime.leases' beat loop)."""

    def __init__(self, dsn: str, *, idle_timeout_ms: int = IDLE_SESSION_TIMEOUT_MS) -> None:
        self.dsn = dsn
        self.idle_timeout_ms = idle_timeout_ms
        self.replica_id = ""
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.leading: set[str] = set()

    async def open(self) -> str:
        """Register a new identity (a fresh id each time: a replica that lost its registry comes
        back as another, so its old fences can never match). Returns the replica id."""
        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, **KEEPALIVES)
        try:
            await conn.execute(f"SET idle_session_timeout = {int(self.idle_timeout_ms)}")
            for name, value in (
                ("tcp_keepalives_idle", 5),
                ("tcp_keepalives_interval", 2),
                ("tcp_keepalives_count", 3),
            ):
                await conn.execute(f"SET {name} = {value}")
            replica_id = new_replica_id()
            now = time.time()
            cur = await conn.execute(
                "INSERT INTO replicas (id, host, pid, started_at, seen_at) VALUES (%s, %s, %s, %s, %s) RETURNING lock_id",
                (replica_id, socket.gethostname(), os.getpid(), now, now),
            )
            row = await cur.fetchone()
            assert row is not None
            cur = await conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (REPLICA_LOCKS, int(row[0])))
            locked = await cur.fetchone()
            if not locked or not locked[0]:  # a fresh lock_id: only a bug gets here
                raise RuntimeError(f"replica lock {row[0]} is already held")
            await conn.execute(f"LISTEN {CHANNEL}")
            # rows of replicas gone for a day: their leases stay claimable without them (not LIVE)
            await conn.execute(
                to_pyformat(f"DELETE FROM replicas WHERE seen_at < ? AND id NOT IN ({LIVE})"), (now - FORGET_AFTER,)
            )
        except BaseException:
            await conn.close()
            raise
        self.conn, self.replica_id, self.leading = conn, replica_id, set()
        return replica_id

    async def wait_notifications(self, timeout: float) -> list[str]:
        """The chat keys announced within `timeout` seconds (at least one, or none at the timeout)."""
        assert self.conn is not None
        keys: list[str] = []
        async for note in self.conn.notifies(timeout=timeout):
            keys.append(note.payload)
            break
        return keys

    async def beat(self, lease_seconds: float = LEASE_SECONDS) -> dict[str, int]:
        """The heartbeat: the statements that keep this session from being ended as idle, and the
        renewal of this replica's leases ({chat key: fence} of those it still holds). On this
        connection, not the pool: a replica busy with many chats must not miss its beat queueing
        behind their reads and writes (measured: with 200 chats at once it did, and lost its
        registry to idle_session_timeout)."""
        assert self.conn is not None
        await self.conn.execute("UPDATE replicas SET seen_at = %s WHERE id = %s", (time.time(), self.replica_id))
        cur = await self.conn.execute(to_pyformat(RENEW), (float(lease_seconds), self.replica_id))
        return {r[0]: int(r[1]) for r in await cur.fetchall()}

    async def try_lead(self, name: str) -> bool:
        """Take the leadership of `name` if nobody holds it; True while this replica does."""
        if name in self.leading:
            return True
        assert self.conn is not None
        cur = await self.conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (LEADER_LOCKS, name))
        row = await cur.fetchone()
        if row and row[0]:
            self.leading.add(name)
            return True
        return False

    async def close(self) -> None:
        """A clean stop: say so in the row, then end the session (its locks go with it)."""
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            await conn.execute("UPDATE replicas SET stopped_at = %s WHERE id = %s", (time.time(), self.replica_id))
        except psycopg.Error:
            pass
        finally:
            await conn.close()
            self.leading = set()
