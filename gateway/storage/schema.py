"""The database schema, as a list of forward migrations.

`MIGRATIONS[n]` takes a database at version n to version n + 1. A database made by an older
chinwag is upgraded on open; one made by a newer chinwag is refused, because an older program
writing into a newer schema could corrupt what it does not understand.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Callable, Mapping

from gateway.errors import SchemaTooNew
from gateway.storage import people, schedules, tool_calls

ROLES = ("user", "assistant", "tool", "system")
TITLE_MAX = 100  # characters of a session title
# columns callers may set (the rest are kept by the database itself)
SESSION_FIELDS = (
    "user_id",
    "session_key",
    "chat_id",
    "chat_type",
    "chat_name",
    "thread_id",
    "user_name",
    "model",
    "title",
    "parent_session_id",
    "started_at",
)
MESSAGE_FIELDS = (
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "timestamp",
    "token_count",
    "finish_reason",
    "reasoning",
    "platform_message_id",
    "user_id",
)

# What the `active` and `compacted` flags mean, written once (every query and check uses these):
# - in the conversation (what the model is given, and what `sessions.message_count` counts):
IN_CONVERSATION = "active = 1"
# - visible (findable by search and recall, shown in transcripts): what was said and kept; compacted
#   and retried-away messages stay visible, what /undo took back does not.
_VISIBLE = "({t}active = 1 OR {t}compacted = 1)"
VISIBLE = _VISIBLE.format(t="")


def visible_sql(alias: str = "") -> str:
    """VISIBLE for a query where the messages table is called `alias` (e.g. "m")."""
    return _VISIBLE.format(t=f"{alias}." if alias else "")


def is_visible(message: Mapping[str, Any]) -> bool:
    """VISIBLE, for a message row already read."""
    return bool(message.get("active", 1) or message.get("compacted"))


Migration = str | Callable[[sqlite3.Connection], None]


def _titles_unique_in_any_case(conn: sqlite3.Connection) -> None:
    """v3 -> v4: a title is taken in any letter case ("Trip" and "trip" cannot both exist: a title
    typed to /resume or the CLI must name one session). Case-duplicates already stored keep their
    text: the session that had it first keeps it, each later one gets the first free " #n" suffix,
    as a lineage's titles do. Then the unique index compares with NOCASE, so the database enforces
    the rule. (NOCASE folds ASCII letters only, like every title comparison in SQLite.)"""
    fold = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")  # as NOCASE does
    taken = {t.translate(fold) for (t,) in conn.execute("SELECT title FROM sessions WHERE title IS NOT NULL")}
    later = conn.execute(
        "SELECT s.id, s.title FROM sessions s WHERE s.title IS NOT NULL AND EXISTS ("
        " SELECT 1 FROM sessions o WHERE o.title = s.title COLLATE NOCASE AND o.id != s.id"
        " AND (o.started_at < s.started_at OR (o.started_at = s.started_at AND o.id < s.id)))"
        " ORDER BY s.started_at, s.id"
    ).fetchall()
    for session_id, title in later:
        base, n = title[: TITLE_MAX - 8], 2
        while f"{base} #{n}".translate(fold) in taken:
            n += 1
        taken.add(f"{base} #{n}".translate(fold))
        conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (f"{base} #{n}", session_id))
    conn.execute("DROP INDEX idx_sessions_title")
    conn.execute("CREATE UNIQUE INDEX idx_sessions_title ON sessions(title COLLATE NOCASE) WHERE title IS NOT NULL")


_MESSAGES_V9 = """
CREATE TABLE messages_v9 (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER,
    finish_reason TEXT,
    reasoning TEXT,
    platform_message_id TEXT,
    user_id TEXT,
    active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0
);
"""


def _messages_without_autoincrement(conn: sqlite3.Connection) -> None:
    """v8 -> v9: message ids without AUTOINCREMENT, which rewrote its `sqlite_sequence` row (a page
    of WAL) in every append commit: one of the 5.6 pages a one-message commit wrote.

    An id must still never be given twice (the indexer's mark, recall's vector progress, the
    transcripts, attachments and the outbox name messages by id), and a plain rowid is max(id) + 1,
    which would give a deleted newest message's id again. So `message_ids.floor` holds the largest id
    ever deleted, raised by a trigger on delete (rare: retention and `sessions delete`), and an
    append takes max(max(id), floor) + 1 (`gateway.storage.rows`): two lookups, no write.

    The table is rebuilt (SQLite cannot drop AUTOINCREMENT in place) the way SQLite documents
    (https://sqlite.org/lang_altertable.html, "making other kinds of table schema changes"): with
    foreign keys off, a new table gets every row with its id (the full-text indexes are keyed by
    them), the old one is dropped, the new one takes its name, its indexes and triggers are made
    again from their stored SQL, and the foreign keys are checked before the commit."""
    seq = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()
    top = conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
    conn.execute("CREATE TABLE message_ids (floor INTEGER NOT NULL)")
    conn.execute("INSERT INTO message_ids (floor) VALUES (?)", (max(int(seq[0]) if seq else 0, int(top)),))
    # every index and trigger of the table, as written (the vector triggers of v7 among them)
    attached = conn.execute(
        "SELECT sql FROM sqlite_master WHERE tbl_name = 'messages' AND type IN ('index', 'trigger') AND sql IS NOT NULL"
    ).fetchall()
    for statement in _statements(_MESSAGES_V9):
        conn.execute(statement)
    conn.execute("INSERT INTO messages_v9 SELECT * FROM messages ORDER BY id")
    conn.execute("DROP TABLE messages")  # with its indexes and triggers; foreign keys are off (migrate)
    conn.execute("ALTER TABLE messages_v9 RENAME TO messages")
    for (sql,) in attached:
        conn.execute(sql)
    conn.execute(
        "CREATE TRIGGER message_ids_floor_on_delete AFTER DELETE ON messages "
        "BEGIN UPDATE message_ids SET floor = max(floor, OLD.id); END"
    )
    broken = conn.execute("PRAGMA foreign_key_check(attachments)").fetchall()  # the rows that name messages
    if broken:
        raise sqlite3.IntegrityError(f"rebuilding messages broke {len(broken)} foreign key(s): {list(broken[0])}")


# The body of the trigger that drops the vector window holding a message /undo took back and sends
# the indexer back to embed what is left of it, on either database (postgres/schema.py v7):
# `least` is its smaller-of-two function.
WINDOW_OF_HIDDEN_MESSAGE = """\
        UPDATE vector_progress SET upto_id = {least}(upto_id, coalesce((
            SELECT min(first_id) - 1 FROM message_vectors
            WHERE session_id = NEW.session_id AND first_id <= NEW.id AND last_id >= NEW.id), upto_id));
        DELETE FROM message_vectors
        WHERE session_id = NEW.session_id AND first_id <= NEW.id AND last_id >= NEW.id;"""

# From SQLite's v10 and Postgres's v7 on, both databases take the same migrations: the SQL is
# written once, in type names each reads alike (SQLite gives bigint and integer INTEGER affinity,
# double precision REAL, text TEXT). Postgres has one of its own after them (v13, media_files), so a
# migration both take from now on is appended to each backend's MIGRATIONS itself, not to this
# list (Postgres databases at v13 have passed the place its spread would give it).
SHARED_MIGRATIONS: list[str] = [
    # delivery under faults (DESIGN §11): a reply's idempotency key (Feishu `uuid`, Discord `nonce`),
    # the part being sent (a restart knows which sends are uncertain) and the streamed reply's
    # message ids, known before the answer commits (a rerun edits them)
    """
    ALTER TABLE outbox ADD COLUMN send_key text;
    ALTER TABLE outbox ADD COLUMN sending integer;
    ALTER TABLE inbox ADD COLUMN reply_ids text;
    """,
    tool_calls.TABLE,  # the tool-call journal (DESIGN §15; its SQL is in gateway.storage.tool_calls)
    # scheduled turns (DESIGN §16; SQL in gateway.storage.schedules). The due-run poll reads
    # (enabled, next_run_at); a session's and a person's jobs are deleted with their data.
    schedules.TABLE,
    # a person's own settings (DESIGN §17: the /language choice), keyed by the person's identity
    # on the platform (Feishu: union_id across apps); SQL in gateway.storage.people
    people.TABLE,
    # traces (DESIGN §18): the inbound message's W3C traceparent, so a reply sent or a turn run by
    # a later process is tied to the message's trace (gateway.telemetry)
    "ALTER TABLE inbox ADD COLUMN trace_context text;",
]

MIGRATIONS: list[Migration] = [
    # v0 -> v1: sessions, messages and the two contentless full-text indexes
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        source TEXT NOT NULL,
        user_id TEXT,
        session_key TEXT,
        chat_id TEXT,
        chat_type TEXT,
        chat_name TEXT,
        thread_id TEXT,
        user_name TEXT,
        model TEXT,
        title TEXT,
        parent_session_id TEXT,
        started_at REAL NOT NULL,
        ended_at REAL,
        end_reason TEXT,
        last_active_at REAL NOT NULL,
        message_count INTEGER NOT NULL DEFAULT 0,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        preview TEXT
    );
    CREATE UNIQUE INDEX idx_sessions_title ON sessions(title) WHERE title IS NOT NULL;
    CREATE INDEX idx_sessions_last_active ON sessions(last_active_at);
    CREATE INDEX idx_sessions_source ON sessions(source, last_active_at);
    CREATE INDEX idx_sessions_user ON sessions(user_id, last_active_at);
    CREATE INDEX idx_sessions_parent ON sessions(parent_session_id);

    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        role TEXT NOT NULL,
        content TEXT,
        tool_call_id TEXT,
        tool_calls TEXT,
        tool_name TEXT,
        timestamp REAL NOT NULL,
        token_count INTEGER,
        finish_reason TEXT,
        reasoning TEXT,
        platform_message_id TEXT,
        user_id TEXT,
        active INTEGER NOT NULL DEFAULT 1,
        compacted INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX idx_messages_session ON messages(session_id, id);

    -- Contentless: the text lives once, in messages.content. See gateway/storage/fts.py.
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        content, content='', tokenize='unicode61 remove_diacritics 2'
    );
    CREATE VIRTUAL TABLE messages_ident USING fts5(
        content, content='', tokenize='trigram'
    );

    CREATE TABLE session_participants (
        session_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        PRIMARY KEY (session_id, user_id)
    ) WITHOUT ROWID;
    CREATE INDEX idx_participants_user ON session_participants(user_id);
    """,
    # v1 -> v2: routing entries (key -> current session) and persisted inbound de-duplication
    """
    CREATE TABLE session_keys (
        session_key TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        origin TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        reason TEXT
    );
    CREATE TABLE processed_events (
        platform TEXT NOT NULL,
        event_id TEXT NOT NULL,
        seen_at REAL NOT NULL,
        PRIMARY KEY (platform, event_id)
    ) WITHOUT ROWID;
    CREATE INDEX idx_processed_events_seen ON processed_events(seen_at);
    """,
    # v2 -> v3: the word index's vocabulary, read by recall to expand a prefix into its terms
    # (an fts5vocab table stores nothing: it is a view of the index)
    """
    CREATE VIRTUAL TABLE messages_vocab USING fts5vocab(messages_fts, 'instance');
    """,
    # v3 -> v4: titles unique in any letter case
    _titles_unique_in_any_case,
    # v4 -> v5: lean writes (gateway/storage/indexer.py, gateway/storage/writer.py). A one-message
    # commit wrote 18 pages, 4 of them the sessions row and its three indexes holding
    # last_active_at, which every append moves. One index now holds last activity (with the source,
    # so listing one source scans it without reading rows) and the person index leaves it out.
    # The full-text indexes are filled in batches after the commit; fts_state.indexed_upto is the
    # last message id they hold (every message so far: they were indexed inline until now).
    """
    DROP INDEX idx_sessions_last_active;
    DROP INDEX idx_sessions_source;
    DROP INDEX idx_sessions_user;
    CREATE INDEX idx_sessions_active ON sessions(last_active_at, source);
    CREATE INDEX idx_sessions_user_id ON sessions(user_id);
    CREATE TABLE fts_state (indexed_upto INTEGER NOT NULL);
    INSERT INTO fts_state (indexed_upto) SELECT COALESCE(MAX(id), 0) FROM messages;
    """,
    # v5 -> v6: media kept with messages (files under home/media/, see gateway/storage/media.py);
    # a row with sha256 NULL names a file that was not kept (too big, refused, failed)
    """
    CREATE TABLE attachments (
        id INTEGER PRIMARY KEY,
        message_id INTEGER NOT NULL REFERENCES messages(id),
        kind TEXT NOT NULL,
        mime_type TEXT,
        bytes INTEGER,
        sha256 TEXT,
        file_name TEXT,
        platform_file_id TEXT,
        created_at REAL NOT NULL,
        dropped_at REAL
    );
    CREATE INDEX idx_attachments_message ON attachments(message_id);
    CREATE INDEX idx_attachments_sha ON attachments(sha256) WHERE sha256 IS NOT NULL;
    """,
    # v6 -> v7: embedding vectors of message windows, for recall's semantic stage (gateway/storage/vectors.py)
    # IF NOT EXISTS: this step is written to run after any other step that lands beside it
    """
    CREATE TABLE IF NOT EXISTS message_vectors (
        session_id TEXT NOT NULL,
        first_id INTEGER NOT NULL,
        last_id INTEGER NOT NULL,
        model TEXT NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (session_id, first_id)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS idx_message_vectors_newest ON message_vectors(model, last_id);
    CREATE TABLE IF NOT EXISTS vector_progress (
        model TEXT PRIMARY KEY,
        upto_id INTEGER NOT NULL
    );
    -- a window holding a message that /undo took back or that was deleted is dropped, and the
    -- indexer is sent back to re-embed what is left of it
    CREATE TRIGGER IF NOT EXISTS message_vectors_session_gone AFTER DELETE ON sessions
    BEGIN
        DELETE FROM message_vectors WHERE session_id = OLD.id;
    END;
    CREATE TRIGGER IF NOT EXISTS message_vectors_message_hidden AFTER UPDATE OF active ON messages
    WHEN NEW.active = 0 AND NEW.compacted = 0
    BEGIN
"""
    + WINDOW_OF_HIDDEN_MESSAGE.format(least="min")
    + """
    END;
    CREATE TRIGGER IF NOT EXISTS message_vectors_message_gone AFTER DELETE ON messages
    BEGIN
        DELETE FROM message_vectors
        WHERE session_id = OLD.session_id AND first_id <= OLD.id AND last_id >= OLD.id;
    END;
    """,
    # v7 -> v8: delivery (DESIGN §11): the inbox of inbound events (dedup by its unique key; an
    # entry is done when its turn is) and the outbox of replies until the platform has them.
    # Their SQL is in gateway.storage.inbox and gateway.storage.outbox.
    """
    CREATE TABLE inbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        platform TEXT NOT NULL,
        event_id TEXT NOT NULL,
        chat_key TEXT NOT NULL,
        message TEXT NOT NULL,
        received_at REAL NOT NULL,
        started_at REAL,
        user_message_id INTEGER,
        attempts INTEGER NOT NULL DEFAULT 0,
        done_at REAL,
        outcome TEXT,
        UNIQUE (platform, event_id)
    );
    CREATE INDEX idx_inbox_open ON inbox(id) WHERE done_at IS NULL;
    CREATE INDEX idx_inbox_done ON inbox(done_at) WHERE done_at IS NOT NULL;

    CREATE TABLE outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        inbox_id INTEGER,
        platform TEXT NOT NULL,
        chat_key TEXT NOT NULL,
        target TEXT NOT NULL,
        reply_to TEXT,
        text TEXT NOT NULL,
        message_id INTEGER,
        created_at REAL NOT NULL,
        parts_sent INTEGER NOT NULL DEFAULT 0,
        platform_ids TEXT,
        sent_at REAL
    );
    CREATE INDEX idx_outbox_unsent ON outbox(id) WHERE sent_at IS NULL;
    CREATE INDEX idx_outbox_sent ON outbox(sent_at) WHERE sent_at IS NOT NULL;
    """,
    # v8 -> v9: one page less per append (no sqlite_sequence row); ids still never reused
    _messages_without_autoincrement,
    # v9 -> v10: FTS5 merges 8 segments of a level at a time instead of 4, so each message's index
    # entry is rewritten fewer times as the index grows: indexing 100k messages in the indexer's
    # batches of 256 took 36.8 instead of 46.4 µs of CPU per message, with the same index size and
    # the same query times (common word, 2-character Chinese AND word, phrase: 3.2/1.7/4.7 ms).
    # 16 saved only 2 µs more and leaves up to 15 segments a level for every query to read.
    """
    INSERT INTO messages_fts (messages_fts, rank) VALUES ('automerge', 8);
    INSERT INTO messages_ident (messages_ident, rank) VALUES ('automerge', 8);
    """,
    *SHARED_MIGRATIONS,  # v10 -> v15
]

SCHEMA_VERSION = len(MIGRATIONS)


def current_version(conn: sqlite3.Connection) -> int:
    has_table = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone()
    if not has_table:
        return 0
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: sqlite3.Connection, target: int = SCHEMA_VERSION, path: str = "") -> int:
    """Bring the database up to `target`, one migration per transaction. Returns the old version."""
    version = current_version(conn)
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"database {path or ''} has schema v{version}, newer than this chinwag understands "
            f"(v{SCHEMA_VERSION}); upgrade chinwag or point it at another database"
        )
    start = version
    # Off while migrating (a rebuilt table is dropped and renamed: v9), on again after; a step that
    # rebuilds a table checks the keys itself. It cannot change inside a transaction.
    foreign_keys = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    if version < target:
        conn.execute("PRAGMA foreign_keys = OFF")
    try:
        _run_migrations(conn, version, target)
    finally:
        conn.execute(f"PRAGMA foreign_keys = {int(foreign_keys)}")
    return start


def _run_migrations(conn: sqlite3.Connection, version: int, target: int) -> None:
    while version < target:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # re-read inside the write lock: another process may have migrated meanwhile
            version = current_version(conn)
            if version >= target:
                conn.execute("COMMIT")
                break
            step = MIGRATIONS[version]
            if callable(step):
                step(conn)
            else:
                for statement in _statements(step):
                    conn.execute(statement)
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version + 1,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        version += 1


def _statements(script: str) -> list[str]:
    """Split a migration into statements (executescript would commit our transaction)."""
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        if line.strip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out
