"""The database schema, as a list of forward migrations.

`MIGRATIONS[n]` takes a database at version n to version n + 1. A database made by an older
chinwag is upgraded on open; one made by a newer chinwag is refused, because an older program
writing into a newer schema could corrupt what it does not understand.
"""

from __future__ import annotations

import sqlite3

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

MIGRATIONS: list[str] = [
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

    -- Contentless: the text lives once, in messages.content. See gateway/fts.py.
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
    # v3 -> v4: delivery (DESIGN §11): the inbox of inbound events (dedup by its unique key; an
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
]

SCHEMA_VERSION = len(MIGRATIONS)


class SchemaTooNew(RuntimeError):
    """The database was written by a newer chinwag."""


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
    while version < target:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # re-read inside the write lock: another process may have migrated meanwhile
            version = current_version(conn)
            if version >= target:
                conn.execute("COMMIT")
                break
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(statement)
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version + 1,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        version += 1
    return start


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
