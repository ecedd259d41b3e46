"""Deferred full-text indexing: a message's text goes into the two FTS indexes in batches, after
the commit that stored the message, instead of inside it.

Why: FTS5 writes, per transaction and per index, a new segment, its structure record, an `_idx`
entry and a `_docsize` row. Measured on a 20k-message store, one message per commit wrote 18 pages
(73 KB of WAL), 9 of them FTS bookkeeping; indexed 256 messages at a time that cost is shared, and
the indexes get a segment per batch instead of one per message (fewer segments for a query to read).

The text each index gets (`index_texts`) is computed here too, on the writer thread, from the rows
just read back, not by the append on the caller's thread. That was the other way round, to keep
Python work off the shared writer, but it held the GIL on the event loop exactly when the writer
came back from each SQLite call: 100 chats appending at once (bench corpus, synchronous = OFF to
see CPU only, runs interleaved on a busy 2-core machine) went from 2,300-3,400 to 4,100-5,100
appends/s when the text moved here, and a chat's own append no longer waits for it (one chat
appending at a human pace: the indexing runs in the writer's idle time).

The rule: `fts_state.indexed_upto` is the largest message id whose text is in the indexes; every
message at or below it is indexed, none above it. Message ids only grow, never reused even after
a delete (message_ids.floor, gateway/storage/schema.py v9), so what is left to index is exactly
the messages above the mark, read back from `messages.content`. After a crash nothing is lost:
`catch_up` on open indexes what the last batch did not reach.

When: in the first append transaction after `INDEX_BATCH` messages wait (a writer rider: no commit
of its own), when the writer is idle, on close, and before any `SessionDB.read` that might search
(`needed`), so a search always sees every committed message.
"""

from __future__ import annotations

import collections
import threading

from gateway.storage.conn import Conn
from gateway.storage.connect import Connection
from gateway.storage.events import Events, Indexed, IndexPending, WriteOp
from gateway.storage.fts import index_texts

INDEX_BATCH = 256  # messages waiting before a batch is indexed without waiting for idle


def indexed_upto(conn: Conn) -> int:
    row = conn.execute("SELECT indexed_upto FROM fts_state").fetchone()
    return int(row[0]) if row else 0


def set_indexed_upto(conn: Conn, message_id: int) -> None:
    conn.execute("UPDATE fts_state SET indexed_upto = ?", (int(message_id),))


def remove_from_indexes(conn: Conn, message_id: int, content: str | None) -> None:
    """Contentless FTS5: a delete must repeat exactly the text that was indexed. Only for a message
    at or below the mark (one above it was never indexed)."""
    words, idents = index_texts(content)
    if words:
        conn.execute(
            "INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', ?, ?)", (message_id, words)
        )
    if idents:
        conn.execute(
            "INSERT INTO messages_ident (messages_ident, rowid, content) VALUES ('delete', ?, ?)", (message_id, idents)
        )


class DeferredIndex:
    """This process's view of the messages it appended and has not indexed yet.

    `on_commit` (a commit listener) and `upkeep` run on the writer thread; `needed` may be read
    from any thread."""

    def __init__(self, batch: int = INDEX_BATCH) -> None:
        self.batch = batch
        self._pending: collections.deque[int] = collections.deque()  # committed ids, oldest first
        self._lock = threading.Lock()
        self.batches = 0  # index transactions done by idle upkeep

    @property
    def needed(self) -> bool:
        return bool(self._pending)

    def on_commit(self, events: Events) -> None:
        with self._lock:
            for event in events:
                if isinstance(event, IndexPending):
                    self._pending.append(event.message_id)
                elif isinstance(event, Indexed):
                    while self._pending and self._pending[0] <= event.upto:
                        self._pending.popleft()

    def catch_up(self, conn: Conn, events: Events) -> int:
        """An op (inside the caller's transaction): index every message above the mark. Returns
        the new mark."""
        mark = indexed_upto(conn)
        last = mark
        words: list[tuple[int, str]] = []
        idents: list[tuple[int, str]] = []
        for message_id, content in conn.execute(
            "SELECT id, content FROM messages WHERE id > ? ORDER BY id", (mark,)
        ).fetchall():
            word_text, ident_text = index_texts(content)
            if word_text:
                words.append((message_id, word_text))
            if ident_text:
                idents.append((message_id, ident_text))
            last = message_id
        conn.executemany("INSERT INTO messages_fts (rowid, content) VALUES (?, ?)", words)
        conn.executemany("INSERT INTO messages_ident (rowid, content) VALUES (?, ?)", idents)
        if last != mark:
            set_indexed_upto(conn, last)
        events.append(Indexed(last))
        return last

    def rider(self) -> WriteOp[int] | None:
        """Writer rider: once a batch's worth waits, index it in the next append transaction."""
        return self.catch_up if len(self._pending) >= self.batch else None

    def upkeep(self, conn: Connection, idle: bool) -> bool:
        """Writer upkeep, when idle: index whatever waits (a full batch rides with the appends)."""
        if not self._pending or not idle:
            return False
        run_catch_up(conn, self)
        self.batches += 1
        return True


def run_catch_up(conn: Connection, index: DeferredIndex | None = None) -> int:
    """`catch_up` in a transaction of its own (the writer's upkeep, or a connection at open)."""
    events: Events = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        last = (index or DeferredIndex()).catch_up(conn, events)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    if index is not None:
        index.on_commit(events)
    return last
