"""Embedding vectors of message windows, stored beside the messages (storage floor: plain SQL, no SDK).

Recall's semantic stage (gateway/recall/semantic.py) compares a question with *windows*: up to
WINDOW consecutive visible user/assistant messages of one session, embedded as one text. Why
windows and not messages: a turn and its reply together say what happened ("did you meet anyone?"
/ "yes, a woman at the café"), and four messages share one vector, so an int8 vector of 384
dimensions costs 96 bytes per message (the budget is 256).

Tables (migrations in gateway/storage/schema.py v7 and gateway/storage/postgres/schema.py v7; the
SQL below runs on both backends):
- message_vectors(session_id, first_id, last_id, model, vector): one row per window; `vector` is
  int8, L2-normalised before quantising (cosine = dot / (|a| |b|) on the int8 values; int8 keeps
  rank order: measured 0.99+ cosine to the float vector on LoCoMo windows).
- vector_progress(model, upto_id): every message with a smaller id has been looked at for that
  model. Triggers drop a window when one of its messages is deleted or taken back by /undo and
  send the watermark back, so what is left of the window is embedded again.

A window's text is a line a message, "role: content" with the content cut to MESSAGE_CHARS; an
embedder with a budget of its own cuts the lines further (the local model's `fit`,
gateway/embeddings.py). The role labels stay although they are ~6 % of a LoCoMo window's tokens
(131 -> 124 without them): without them e5 cosine alone found fewer LoCoMo-Plus cues (dev scoped
any@5 0.139 -> 0.104; bench/recall.py --only plus --semantic local).

A window still open (fewer than WINDOW messages, the session may go on) is stored too once its
session is quiet (`pending_windows`' `quiet_before`; the indexer's QUIET_SECONDS), and is embedded
again with its new messages if the session goes on; while it waits, the watermark stays before it
and recall finds its messages by their words. The read past the watermark skips messages a stored
window covers, so a waiting window does not make the others be read again.
A model change is a new `model` value: its backlog starts at 0, and rows of other models are
replaced as the indexer goes (ranking only reads rows of the model in use).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import NamedTuple, Sequence

from gateway.storage.conn import Conn

WINDOW = 4  # messages per window
MESSAGE_CHARS = 400  # characters of one message that go into its window's text
ROLES = ("user", "assistant")
_VISIBLE = "(active = 1 OR compacted = 1)"


@dataclass
class Window:
    session_id: str
    first_id: int
    last_id: int
    lines: list[str]  # "role: content" of each message, the content cut to MESSAGE_CHARS
    size: int  # messages in it

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def quantise(vector: Sequence[float]) -> bytes:
    """int8 bytes of an L2-normalised vector, scaled so its largest component is ±127."""
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    top = max((abs(x) for x in vector), default=0.0) / norm or 1.0
    scale = 127.0 / top / norm
    return array("b", [max(-127, min(127, round(x * scale))) for x in vector]).tobytes()


def unpack(blob: bytes) -> array:
    values = array("b")
    values.frombytes(blob)
    return values


def progress(conn: Conn, model: str) -> int:
    row = conn.execute("SELECT upto_id FROM vector_progress WHERE model = ?", (model,)).fetchone()
    return int(row[0]) if row else 0


def backlog(conn: Conn, model: str) -> int:
    """Visible user/assistant messages not yet looked at for `model` (what the indexer has left)."""
    return int(
        conn.execute(
            f"SELECT count(*) FROM messages WHERE id > ? AND role IN ('user', 'assistant') AND {_VISIBLE}",
            (progress(conn, model),),
        ).fetchone()[0]
    )


def stored(conn: Conn, model: str) -> tuple[int, int]:
    """(windows, bytes of vectors) stored for `model`."""
    row = conn.execute(
        "SELECT count(*), coalesce(sum(length(vector)), 0) FROM message_vectors WHERE model = ?", (model,)
    ).fetchone()
    return int(row[0]), int(row[1])


def _window_lines(rows: list[tuple[int, str, str, float]]) -> list[str]:
    return [f"{role}: {(content or '')[:MESSAGE_CHARS]}" for _, role, content, _ in rows]


class Pending(NamedTuple):
    windows: list[Window]  # to embed now
    upto: int  # where the watermark moves once they are stored
    waiting_since: float | None  # the earliest last word among the sessions whose open window waits


def pending_windows(conn: Conn, model: str, max_messages: int, quiet_before: float | None = None) -> Pending:
    """The windows to embed for the next (at most) `max_messages` messages past the watermark that
    no stored window covers yet. A session's open window is rebuilt with its new messages; with
    `quiet_before`, an open window whose newest message is later than that waits (its session is
    still talking, and will likely fill it), and the watermark stays before it."""
    upto = progress(conn, model)
    rows = conn.execute(
        f"""SELECT id, session_id, role, content, timestamp FROM messages
            WHERE id > ? AND role IN ('user', 'assistant') AND {_VISIBLE}
            AND id > coalesce((SELECT last_id FROM message_vectors WHERE message_vectors.session_id =
                messages.session_id AND {conn.dialect.model_filter} = ? ORDER BY first_id DESC LIMIT 1), 0)
            ORDER BY id LIMIT ?""",
        (upto, model, max_messages),
    ).fetchall()
    if not rows:
        return Pending([], upto, None)
    new_upto = int(rows[-1][0])
    by_session: dict[str, list[tuple[int, str, str, float]]] = {}
    for mid, sid, role, content, ts in rows:
        if (content or "").strip():
            by_session.setdefault(sid, []).append((int(mid), role, content, float(ts)))
    windows: list[Window] = []
    waiting: list[Window] = []
    waiting_since: float | None = None
    hold = new_upto
    for sid, fresh in by_session.items():
        last = conn.execute(
            "SELECT first_id, last_id FROM message_vectors WHERE session_id = ? AND model = ? "
            "ORDER BY first_id DESC LIMIT 1",
            (sid, model),
        ).fetchone()
        if last is not None:  # the last stored window may still be open: take its messages back in
            earlier = conn.execute(
                f"""SELECT id, role, content, timestamp FROM messages
                    WHERE session_id = ? AND id >= ? AND id <= ? AND role IN ('user', 'assistant')
                    AND {_VISIBLE} AND content IS NOT NULL AND trim(content) != '' ORDER BY id""",
                (sid, int(last[0]), int(last[1])),
            ).fetchall()
            if 0 < len(earlier) < WINDOW:
                fresh = [(int(i), r, c, float(t)) for i, r, c, t in earlier] + fresh
        for start in range(0, len(fresh), WINDOW):
            chunk = fresh[start : start + WINDOW]
            window = Window(sid, chunk[0][0], chunk[-1][0], _window_lines(chunk), len(chunk))
            newest = max(r[3] for r in chunk)
            if len(chunk) < WINDOW and quiet_before is not None and newest > quiet_before:
                waiting.append(window)
                waiting_since = newest if waiting_since is None else min(waiting_since, newest)
                hold = min(hold, min(r[0] for r in chunk if r[0] > (int(last[1]) if last else 0)) - 1)
            else:
                windows.append(window)
    if waiting and not windows and len(rows) == max_messages:
        # the whole batch is open windows still talking: holding would read the same batch again
        return Pending(waiting, new_upto, None)
    return Pending(windows, hold, waiting_since)


def store_op(model: str, windows: list[Window], vectors: list[bytes], upto: int, expected_upto: int):
    """A writer op: store the windows' vectors and move the watermark to `upto`, unless the
    watermark moved meanwhile (an undo sent it back, or another indexer stored this batch: it is
    read again)."""

    def op(conn: Conn, events: list) -> bool:
        if not _claim(conn, model, expected_upto, upto):
            return False
        for window, vector in zip(windows, vectors):
            # a window that grew replaces its open version; rows of another model starting there go too
            conn.execute(
                "DELETE FROM message_vectors WHERE session_id = ? AND first_id >= ? AND first_id <= ?",
                (window.session_id, window.first_id, window.last_id),
            )
            conn.execute(
                "INSERT INTO message_vectors (session_id, first_id, last_id, model, vector) VALUES (?, ?, ?, ?, ?)",
                (window.session_id, window.first_id, window.last_id, model, vector),
            )
        return True

    return op


def _claim(conn: Conn, model: str, expected: int, upto: int) -> bool:
    """Move the watermark from `expected` to `upto`; False when it is elsewhere. The check and the
    move are one statement: replicas on one Postgres each run an indexer, and a second one storing
    the same batch waits on the row, then finds it moved (a check before the move let both store,
    and the second failed on the first's windows)."""
    moved = conn.execute(
        "UPDATE vector_progress SET upto_id = ? WHERE model = ? AND upto_id = ?", (upto, model, expected)
    ).rowcount
    if moved or expected != 0:
        return bool(moved)
    inserted = conn.execute(
        "INSERT INTO vector_progress (model, upto_id) VALUES (?, ?) ON CONFLICT (model) DO NOTHING", (model, upto)
    ).rowcount
    return inserted == 1


def forget_other_models_op(model: str, batch: int = 5000):
    """A writer op: delete up to `batch` windows of models other than `model`; returns how many."""

    def op(conn: Conn, events: list) -> int:
        cur = conn.execute(
            """DELETE FROM message_vectors WHERE (session_id, first_id) IN
               (SELECT session_id, first_id FROM message_vectors WHERE model != ? LIMIT ?)""",
            (model, batch),
        )
        conn.execute("DELETE FROM vector_progress WHERE model != ?", (model,))
        return cur.rowcount

    return op


def session_vectors_sql(n: int, model: str = "+model") -> str:
    """The windows of `n` sessions for one model (parameters: model, then the session ids). `model`
    is the dialect's filter on the column: on SQLite `+model` keeps the planner off the (model,
    last_id) index, which would walk every window of the model (O(store) per query: 8 ms at 100k
    messages) instead of the few sessions' primary-key ranges; Postgres's planner weighs the two by
    their statistics, and has no `+`."""
    return f"SELECT session_id, vector FROM message_vectors WHERE {model} = ? AND session_id IN ({','.join('?' * n)})"


def session_vectors(conn: Conn, model: str, session_ids: Sequence[str]) -> dict[str, list[bytes]]:
    """session -> the int8 vectors of its windows, for `model`."""
    out: dict[str, list[bytes]] = {}
    ids = list(dict.fromkeys(session_ids))
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        sql = session_vectors_sql(len(chunk), conn.dialect.model_filter)
        for sid, vector in conn.execute(sql, (model, *chunk)):
            out.setdefault(sid, []).append(vector)
    return out


def newest_vectors(conn: Conn, model: str, limit: int) -> list[tuple[str, bytes]]:
    """(session, vector) of the `limit` newest windows of `model` (the vector-only stage's scan)."""
    return [
        (sid, vector)
        for sid, vector in conn.execute(
            "SELECT session_id, vector FROM message_vectors WHERE model = ? ORDER BY last_id DESC LIMIT ?",
            (model, limit),
        )
    ]
