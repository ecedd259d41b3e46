"""`StorageFace`: the behaviour both storage backends share, written once over `Conn`.

The face the floors above use is this class's public methods (gateway/storage/face.py names them
as a Protocol; gateway/db.py keeps `SessionDB(path)` and `open_db`). A backend subclass supplies
only its mechanisms: how a read gets a connection and a snapshot (`_point`, `read`,
`search_read`), how a write commits (`write`, `awrite`, commit listeners), its `dialect` (the SQL
it spells its own way, gateway/storage/conn.py; the write ops are gateway/storage/rows.py's for
both, and so are the deletes of gateway/storage/retention.py), and upkeep (optimize, vacuum,
rebuild).
Every method here is one line of plain SQL from gateway/storage (queries, inbox, outbox, media,
transfer) run through those; none asks which backend runs. Why one class and not a mixin per
table: the ~60 methods were written twice, and a table the next issue adds is one method here.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Collection, Iterable, Sequence, TypeVar

from gateway.errors import UnknownSession
from gateway.storage import (
    fence,
    inbox,
    media,
    outbox,
    people,
    queries,
    retention,
    rows,
    schedules,
    search,
    tool_calls,
    transfer,
)
from gateway.storage.conn import Conn, Dialect
from gateway.storage.events import CommitEvent, Events
from gateway.storage.media import AttachmentRow, SharedFiles
from gateway.storage.queries import Session
from gateway.storage.schema import IN_CONVERSATION

T = TypeVar("T")
CommitListener = Callable[[list[CommitEvent]], None]
WriteOp = Callable[[Conn, Events], T]


def _quietly(step: WriteOp[Any]) -> WriteOp[None]:
    """A step whose session may have been deleted meanwhile: nothing to do then."""

    def op(conn: Conn, events: Events) -> None:
        try:
            step(conn, events)
        except UnknownSession:
            pass

    return op


class StorageFace:
    """The shared half of a storage backend (see the module docstring)."""

    backend: str
    dialect: Dialect  # what this database spells its own way (its connections carry the same)
    notes_in_database = False  # MEMORY.md / USER.md: files in the home, or rows (postgres/notes.py)
    mirrors_in_home = True  # transcripts and sessions.json beside the database (none on Postgres: DESIGN §14)
    message_select = "SELECT * FROM messages"  # a message row as the face returns it
    path: str

    # -- the mechanisms a backend supplies ---------------------------------------------------------
    def _point(self, fn: Callable[[Conn], T]) -> T:
        """fn(conn) on a read connection, outside any snapshot (one statement's reads)."""
        raise NotImplementedError

    def read(self, fn: Callable[[Conn], T]) -> T:
        """Run fn(conn) in one read snapshot."""
        raise NotImplementedError

    def search_read(self, fn: Callable[[Conn], T]) -> T:
        """`read`, in a snapshot whose full-text indexes hold every message committed so far."""
        raise NotImplementedError

    def write(self, op: WriteOp[T]) -> T:
        """Run op(conn, events) in one transaction; return once committed."""
        raise NotImplementedError

    async def awrite(self, op: WriteOp[T]) -> T:
        raise NotImplementedError

    def add_commit_listener(self, listener: CommitListener) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def wal_bytes(self) -> int:
        return 0

    def ping(self, timeout: float = 2.0) -> int:
        """The schema version; raises when the database cannot be read (`/readyz`)."""
        raise NotImplementedError

    def stats(self) -> dict:
        """Counts and sizes for `sessions stats` (the backend's own measures)."""
        raise NotImplementedError

    def disk_usage(self) -> dict[str, int]:
        """What the database takes on disk now, read cheaply (the console's status page asks every
        few seconds): db_bytes, and wal_bytes where chinwag keeps a log of its own (SQLite)."""
        raise NotImplementedError

    def __enter__(self) -> "StorageFace":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def aread(self, read: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Await a read in a worker thread: `await db.aread(db.get_session, sid)`."""
        return await asyncio.to_thread(read, *args, **kwargs)

    # -- sessions: writes ------------------------------------------------------------------------
    def create_session(self, session_id: str, source: str, **fields: Any) -> None:
        self.write(rows.op_create_session(session_id, source, fields))

    async def acreate_session(self, session_id: str, source: str, **fields: Any) -> None:
        await self.awrite(rows.op_create_session(session_id, source, fields))

    def end_session(self, session_id: str, reason: str = "ended") -> None:
        self.write(rows.op_end(session_id, reason))

    async def aend_session(self, session_id: str, reason: str = "ended") -> None:
        await self.awrite(rows.op_end(session_id, reason))

    def reopen_session(self, session_id: str) -> None:
        self.write(rows.op_reopen(session_id))

    def add_tokens(self, session_id: str, input_tokens: int = 0, output_tokens: int = 0) -> None:
        self.write(rows.op_add_tokens(session_id, input_tokens, output_tokens))

    async def aadd_tokens(self, session_id: str, input_tokens: int = 0, output_tokens: int = 0) -> None:
        await self.awrite(rows.op_add_tokens(session_id, input_tokens, output_tokens))

    def set_title(self, session_id: str, title: str | None) -> str | None:
        """Set (None: clear) a title; returns it as stored. TitleTaken: another session has it in
        some letter case."""
        return self.write(rows.op_set_title(session_id, title))

    # -- messages: writes ------------------------------------------------------------------------
    def append_message(
        self,
        session_id: str,
        role: str,
        content: Any,
        *,
        seen_event: tuple[str, str] | None = None,
        attachments: Sequence[AttachmentRow] = (),
        after: Callable[[Conn, int], Any] | None = None,
        **fields: Any,
    ) -> int:
        return self.write(
            rows.op_append(self.dialect, session_id, role, content, fields, seen_event, attachments, after)
        )

    async def aappend_message(
        self,
        session_id: str,
        role: str,
        content: Any,
        *,
        seen_event: tuple[str, str] | None = None,
        attachments: Sequence[AttachmentRow] = (),
        after: Callable[[Conn, int], Any] | None = None,
        **fields: Any,
    ) -> int:
        return await self.awrite(
            rows.op_append(self.dialect, session_id, role, content, fields, seen_event, attachments, after)
        )

    def rewind(self, session_id: str, exchanges: int = 1) -> int:
        """`/undo`: hide the last `exchanges` user turns and all that followed. They stay stored."""
        return self.write(rows.op_rewind(session_id, exchanges))

    def supersede_after(self, session_id: str, message_id: int) -> int:
        """`/retry`: hide what followed `message_id` from the conversation; it stays searchable."""
        return self.write(rows.op_supersede_after(session_id, message_id))

    def mark_compacted(self, session_id: str, up_to_id: int | None = None) -> int:
        return self.write(rows.op_mark_compacted(session_id, up_to_id))

    # -- deletion and retention (gateway/storage/retention.py) ------------------------------------
    def delete_session(self, session_id: str) -> bool:
        """Delete the session and the scheduled jobs of its chat (they would answer in it)."""
        delete = retention.op_delete(session_id)

        def op(conn: Conn, events: Events) -> bool:
            key = conn.execute("SELECT session_key FROM sessions WHERE id = ?", (session_id,)).fetchone()
            deleted = bool(delete(conn, events))
            if deleted and key is not None and key[0]:
                schedules.delete(conn, "session_key", key[0])
            return deleted

        return self.write(op)

    def idle_sessions(self, older_than_days: float) -> list[str]:
        """Sessions idle for longer than that, longest idle first: what `prune` would delete (but
        for those it is told to keep)."""
        cutoff = retention.prune_cutoff(older_than_days)
        return self._point(lambda conn: queries.idle_sessions(conn, cutoff))

    def prune(
        self, older_than_days: float, keep: Iterable[str] = (), *, stop: Callable[[], bool] = lambda: False
    ) -> int:
        """Delete sessions whose last activity is older than the cutoff (not those in `keep`), a batch
        per transaction so chats keep writing meanwhile, and forget seen event ids past their
        redelivery window. `stop()` is asked between batches: a shutdown need not wait for a long
        first prune (the rest is done next time). Returns how many sessions were deleted."""
        deleted = 0
        for batch in retention.prune_batches(self.idle_sessions(older_than_days), keep):
            if stop():
                return deleted
            deleted += self.write(retention.op_delete_batch(batch))
        self.forget_seen_events()
        return deleted

    def forget_seen_events(self) -> int:
        """Drop seen inbound event ids older than any platform redelivers, a batch per transaction
        (the first upkeep of a big, old database must not hold the writer for long)."""
        total = 0
        while (n := self.write(retention.op_forget_seen_batch())) > 0:
            total += n
            if n < retention.FORGET_BATCH:
                break
        return total

    # -- routing entries and inbound de-duplication ---------------------------------------------
    def set_key_entry(
        self, session_key: str, session_id: str, origin: dict | None = None, reason: str | None = None
    ) -> None:
        self.write(rows.op_set_key(session_key, session_id, origin, reason))

    async def amove_key(
        self,
        session_key: str,
        session_id: str,
        origin: dict | None = None,
        reason: str | None = None,
        *,
        create: tuple[str, dict] | None = None,
        reopen: bool = False,
        end_previous: str | None = None,
    ) -> dict:
        """Point a key at a session in ONE transaction: create it first (`create` = (source,
        fields)) or reopen it, then move the key, then end the previous session with `reason`.
        All or nothing, and one commit instead of three on the path of a chat's first message.
        Returns the key entry."""
        return await self.awrite(
            rows.op_move_key(
                session_key, session_id, origin, reason, create=create, reopen=reopen, end_previous=end_previous
            )
        )

    async def aswitch_key(
        self,
        session_key: str,
        session_id: str,
        origin: dict | None,
        reason: str | None,
        *,
        now: float,
        reopen: bool = False,
        end_previous: str | None = None,
    ) -> dict:
        """`/resume` in ONE transaction: reopen the session (`reopen`), count the move as its
        activity at `now`, point the key at it, end `end_previous` with `reason` (gone meanwhile:
        nothing to end). Returns the key entry."""
        steps: list[WriteOp[Any]] = [*([rows.op_reopen(session_id)] if reopen else []), rows.op_touch(session_id, now)]
        steps.append(rows.op_set_key(session_key, session_id, origin, reason))
        if end_previous and end_previous != session_id:
            steps.append(_quietly(rows.op_end(end_previous, reason)))

        def op(conn: Conn, events: Events) -> dict:
            for step in steps:
                step(conn, events)
            entry = queries.key_row(conn, session_key)
            assert entry is not None  # set by this transaction
            return entry

        return await self.awrite(op)

    async def acontinue_in_child(
        self,
        parent_id: str,
        child_id: str,
        source: str,
        fields: dict,
        first_message: str,
        compacted_upto: int,
        session_key: str | None = None,
        origin: dict | None = None,
    ) -> None:
        """Compression's write, in ONE transaction: the child session (`fields`, its parent named)
        with `first_message` (role "system"), the parent's messages up to `compacted_upto` marked
        compacted, the parent ended ("compressed"), and the key moved to the child if it still
        points at the parent."""
        steps = [
            rows.op_create_session(child_id, source, {**fields, "parent_session_id": parent_id}),
            rows.op_append(self.dialect, child_id, "system", first_message, {}),
            rows.op_mark_compacted(parent_id, compacted_upto),
            rows.op_end(parent_id, "compressed"),
        ]
        move = rows.op_set_key(session_key, child_id, origin, "compressed") if session_key else None

        def op(conn: Conn, events: Events) -> None:
            for step in steps:
                step(conn, events)
            if move is not None:
                entry = queries.key_row(conn, str(session_key))
                if entry is None or entry["session_id"] == parent_id:
                    move(conn, events)

        await self.awrite(op)

    def delete_key_entry(self, session_key: str) -> None:
        self.write(rows.op_delete_key(session_key))

    def mark_event_seen(self, platform: str, event_id: str) -> bool:
        """True the first time this (platform, event id) is seen; persisted across restarts."""
        return self.write(rows.op_mark_seen(platform, event_id))

    async def amark_event_seen(self, platform: str, event_id: str) -> bool:
        return await self.awrite(rows.op_mark_seen(platform, event_id))

    # -- a person's own settings (gateway/storage/people.py) -------------------------------------
    def person_language(self, platform: str, person_id: str) -> str | None:
        """The language the person chose with /language (None: automatic)."""
        return self._point(lambda conn: people.language(conn, platform, person_id))

    async def aset_person_language(self, platform: str, person_id: str, chosen: str | None) -> None:
        await self.awrite(lambda conn, events: people.set_language(conn, platform, person_id, chosen))

    # -- delivery: the inbox and the outbox (gateway/storage/inbox.py, outbox.py) ---------------
    async def ainbox_add(
        self,
        platform: str,
        event_id: str,
        chat_key: str,
        message: str,
        received_at: float,
        trace_context: str | None = None,
    ) -> int | None:
        """Commit one inbound event; its entry id, or None for a redelivery (the dedup)."""
        return await self.awrite(
            lambda conn, events: inbox.add(conn, platform, event_id, chat_key, message, received_at, trace_context)
        )

    async def ainbox_finish(self, entry_ids: Iterable[int], outcome: str = "answered") -> int:
        ids = list(entry_ids)
        return await self.awrite(lambda conn, events: inbox.finish(conn, ids, outcome)) if ids else 0

    async def aoutbox_record(self, row_id: int, parts_sent: int, platform_ids: list[str], done: bool) -> None:
        with fence.unfenced():  # the parts were sent: refusing their record only sends them twice
            await self.awrite(
                lambda conn, events: outbox.record_parts(conn, row_id, parts_sent, list(platform_ids), done)
            )

    async def aoutbox_sending(self, row_id: int, part: int) -> None:
        """Part `part` is about to be sent (fenced: a replica that lost the chat does not send it)."""
        await self.awrite(lambda conn, events: outbox.sending(conn, row_id, part))

    async def ainbox_reply_ids(self, entry_id: int, platform_ids: list[str]) -> None:
        with fence.unfenced():  # the messages were sent: their ids are worth keeping whoever holds the chat
            await self.awrite(lambda conn, events: inbox.record_reply_ids(conn, entry_id, list(platform_ids)))

    # -- the tool-call journal (gateway/storage/tool_calls.py, DESIGN §15) -----------------------
    async def atool_call_start(
        self, inbox_id: int, position: int, call_id: str, server: str, tool: str, arguments: str
    ) -> None:
        """Committed before the call is sent (fenced by the turn's scope)."""
        await self.awrite(
            lambda conn, events: tool_calls.start(conn, inbox_id, position, call_id, server, tool, arguments)
        )

    async def atool_call_finish(
        self, inbox_id: int, position: int, result: str, outcome: str, approval: str | None = None
    ) -> None:
        # Not fenced: the call has run; refusing its record would only make the chat's next holder
        # see it in flight and call it again or call it lost (as aoutbox_record, for a sent reply).
        with fence.unfenced():
            await self.awrite(
                lambda conn, events: tool_calls.finish(conn, inbox_id, position, result, outcome, approval)
            )

    def tool_call(self, inbox_id: int, position: int) -> dict | None:
        return self._point(lambda conn: tool_calls.find(conn, inbox_id, position))

    def tool_calls_of(self, inbox_id: int) -> list[dict]:
        return self._point(lambda conn: tool_calls.of_entry(conn, inbox_id))

    def message_session(self, message_id: int) -> str | None:
        return self._point(lambda conn: queries.message_session(conn, int(message_id)))

    def inbox_unfinished(self) -> list[dict]:
        return self._point(inbox.unfinished)

    def outbox_unsent(self) -> list[dict]:
        return self._point(outbox.unsent)

    def inbox_backlog(self) -> int:
        return int(self._point(inbox.backlog))

    def probe_commit(self) -> None:
        """One real commit (a row rewritten in place): raises while the database cannot commit, as on
        a full disk, where reads still succeed (gateway.storage.health)."""
        self.write(lambda conn, events: conn.execute("UPDATE schema_version SET version = version"))

    def inbox_entry(self, entry_id: int) -> dict | None:
        """One inbox entry as stored, or None."""
        return self._point(lambda conn: inbox.entry(conn, int(entry_id)))

    def outbox_backlog(self) -> int:
        return int(self._point(outbox.backlog))

    # -- the import/export format (DESIGN §10), in gateway/storage/transfer.py -------------------
    def import_records(
        self, records: list[dict], skip_existing: bool = False, media_present: Collection[str] | None = None
    ) -> int:
        """Import `{"session": {...}, "messages": [...]}` records in one transaction: all or nothing.
        ImportRecordError or TitleTaken (a ValueError both) name the record; nothing is written.
        `media_present`: the hashes whose files are in the store (others are imported as dropped)."""
        return self.write(transfer.import_op(records, skip_existing, media_present, dialect=self.dialect))

    def export_session(self, session_id: str) -> dict:
        """`{"session": {...}, "messages": [...]}` with every row (hidden ones and flags included)."""

        def snapshot(conn: Conn) -> dict:
            session = queries.session_row(conn, session_id)
            if session is None:
                raise UnknownSession(session_id)
            return transfer.export_record(conn, dict(session), self.message_select)

        return self.read(snapshot)

    # -- reads, in gateway/storage/queries.py ----------------------------------------------------
    def get_session(self, session_id: str) -> Session | None:
        return self._point(lambda conn: queries.session_row(conn, session_id))

    def get_key_entry(self, session_key: str) -> dict | None:
        return self._point(lambda conn: queries.key_row(conn, session_key))

    def get_key_entry_and_session(self, session_key: str) -> tuple[dict | None, dict | None]:
        return self._point(lambda conn: queries.key_row_with_session(conn, session_key))

    def is_event_seen(self, platform: str, event_id: str) -> bool:
        return self._point(lambda conn: queries.event_seen(conn, str(platform), str(event_id)))

    def list_key_entries(self) -> list[dict]:
        return self._point(queries.key_rows)

    def find_session(self, ref: str) -> Session | None:
        """The session `ref` names: an exact id, a unique id prefix (>= 6 characters), a title (the
        exact title first, then in any letter case), or the unique hex end of an id
        (gateway/storage/queries.py find_session, the one rule)."""
        return self.match_session(ref)[0]

    def match_session(self, ref: str) -> tuple[Session | None, list[str]]:
        """`find_session`, and when it finds none the ids `ref` matched several of (to name them)."""
        return self.read(lambda conn: queries.find_session(conn, ref))

    def list_sessions_rich(
        self,
        source: str | None = None,
        user_id: str | None = None,
        limit: int = 20,
        offset: int = 0,
        exclude_sources: Iterable[str] | None = None,
        titled_only: bool = False,
    ) -> list[Session]:
        """Sessions by last activity (full rows: title, source, times, message count, first-message
        preview ...)."""
        return self._point(
            lambda conn: queries.list_sessions(conn, source, user_id, limit, offset, exclude_sources, titled_only)
        )

    def session_ids(self, source: str | None = None) -> list[str]:
        """Every session id (of one platform), oldest first."""
        return self._point(lambda conn: queries.session_ids(conn, source))

    def count_by_source(self) -> dict[str, int]:
        return self._point(queries.count_by_source)

    def list_sessions_page(
        self,
        *,
        source: str | None = None,
        user_id: str | None = None,
        titled: bool | None = None,
        active_from: float | None = None,
        active_before: float | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 50,
    ) -> list[dict]:
        """A keyset page of sessions by last activity (see queries.list_sessions_page)."""
        return self._point(
            lambda conn: queries.list_sessions_page(
                conn,
                source=source,
                user_id=user_id,
                titled=titled,
                active_from=active_from,
                active_before=active_before,
                after=after,
                limit=limit,
            )
        )

    def sessions_with_key(self, session_key: str, user_id: str | None = None, limit: int = 50) -> list[dict]:
        """The sessions one conversation key has pointed at, oldest first (its reset history)."""
        return self._point(lambda conn: queries.sessions_with_key(conn, session_key, user_id, limit))

    def get_messages_by_id(self, message_ids: Iterable[int]) -> dict[int, dict]:
        return self._point(lambda conn: queries.messages_by_id(conn, message_ids))

    def get_messages(self, session_id: str, include_inactive: bool = False) -> list[dict]:
        sql = f"{self.message_select} WHERE session_id = ?" + ("" if include_inactive else f" AND {IN_CONVERSATION}")
        return self._point(lambda conn: [dict(r) for r in conn.execute(sql + " ORDER BY id", (session_id,))])

    def get_messages_as_conversation(self, session_id: str) -> list[dict]:
        return queries.as_conversation(self.get_messages(session_id))

    def search_messages(
        self,
        query: str,
        role_filter: Iterable[str] | None = None,
        exclude_sources: Iterable[str] | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[dict]:
        return self.search_read(
            lambda conn: search.search_messages(conn, query, role_filter, exclude_sources, limit, offset)
        )

    def session_participants(self, session_id: str) -> set[str]:
        return self._point(lambda conn: queries.participants(conn, session_id))

    def children(self, session_id: str) -> list[str]:
        return self._point(lambda conn: queries.children(conn, session_id))

    def get_root(self, session_id: str) -> str:
        """The first session of a compression/delegation chain. A cycle stops the walk."""
        return self._point(lambda conn: queries.root_of(conn, session_id))

    def get_lineage(self, session_id: str) -> list[str]:
        """The whole chain `session_id` belongs to: its root and every descendant, root first."""
        return self._point(lambda conn: queries.chain_of(conn, session_id))

    def next_lineage_title(self, title: str) -> str:
        """ "x" -> "x #2", "x #2" -> "x #3", skipping numbers already taken."""
        return self._point(lambda conn: queries.next_lineage_title(conn, title))

    def count_sessions(self) -> int:
        return int(self._point(lambda conn: conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]))

    def count_messages(self) -> int:
        return int(self._point(lambda conn: conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]))

    # -- media (files under home/media/, rows in attachments: gateway/storage/media.py) ------------
    def attachments_of(self, message_ids: Iterable[int]) -> dict[int, list[dict]]:
        return self._point(lambda conn: media.attachments_of(conn, message_ids))

    def session_attachment(self, session_id: str, sha256: str) -> dict | None:
        """A kept attachment of this session's messages with this file, or None (the console
        serves a file only to who may see a message that has it)."""
        return self._point(lambda conn: media.attachment_in_session(conn, session_id, sha256))

    def referenced_media(self) -> set[str]:
        """Hashes of the files some kept attachment row still needs."""
        return self.read(media.referenced_hashes)

    def media_bytes(self) -> int:
        return int(self.read(media.stored_bytes))

    def shared_files(self) -> SharedFiles | None:
        """The database's copy of the attachments' files, for replicas that share no disk (None: the
        home's media/ is the only copy)."""
        return None

    def drop_oldest_media(self, over_bytes: int) -> list[str]:
        """Let go of the oldest files of ended sessions until `over_bytes` are freed (the rows stay,
        marked dropped); returns the hashes no longer needed."""
        return self.write(lambda conn, events: media.drop_oldest_of_ended_sessions(conn, over_bytes))
