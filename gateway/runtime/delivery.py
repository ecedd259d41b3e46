"""Delivery (DESIGN §11): what makes every acknowledged message answered exactly once.

- `Inbox.admit` commits an inbound message to the inbox (gateway.storage.inbox) before the adapter
  acknowledges it to the platform; its unique (platform, event id) is the de-duplication, so a
  redelivery is refused by the same commit. The entry is started when its turn stores the
  person's message and done when the turn's reply is committed, in the same transaction.
- `Outbox` commits a reply (with the assistant message that carries it, when there is one) and
  delivers it part by part, recording after each part the platform's message ids. On start the
  replies not yet delivered are sent from the first part not recorded.

The one duplicate window: a crash after the platform accepted a part and before its record
commits; that part is sent again on start (at most one message per crash, counted by the crash
test in tests/runtime/test_delivery_crash.py).

On Postgres replicas (gateway.runtime.leases) every record of a chat's job commits only while this
replica holds the chat: the runner sets the chat's fence for the job (gateway.storage.fence) and
the database's writes check it, so nothing here takes a guard. A reply is sent only after the
lease is confirmed, and a replica taking a chat over sends that chat's unsent replies first.

Messages are stored normalised (source, text, ids, flags: no raw platform payload), so an entry
can be taken up again by a later process. A message without a platform id gets a random one: it
cannot be redelivered, so it needs no dedup, only a unique key.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import secrets
from typing import Any, Callable, Iterable

from gateway.db import StorageFace
from gateway.runtime.leases import ChatLeases, SoloLeases
from gateway.runtime.metrics import Metrics
from gateway.source import SessionSource
from gateway.storage import inbox, outbox
from gateway.storage.conn import Conn
from gateway.storage.events import Events
from platforms.base import Attachment, InboundMessage, PlatformAdapter

log = logging.getLogger(__name__)

RecordOp = Callable[[Conn, int], Any]


def encode_message(msg: InboundMessage) -> str:
    return json.dumps(
        {
            "source": msg.source.to_dict(),
            "text": msg.text,
            "message_id": msg.message_id,
            "mentioned": msg.mentioned,
            "reply_to_bot": msg.reply_to_bot,
            "reply_to_message_id": msg.reply_to_message_id,
            "timestamp": msg.timestamp,
            # what each file is (its bytes are fetched when the turn runs; after a restart the
            # adapter opens them again from the platform's file id: PlatformAdapter.reopen)
            "attachments": [
                {
                    "kind": a.kind,
                    "mime_type": a.mime_type,
                    "size": a.size,
                    "file_name": a.file_name,
                    "platform_file_id": a.platform_file_id,
                }
                for a in msg.attachments
            ],
        },
        ensure_ascii=False,
    )


def decode_message(text: str, inbox_id: int | None = None) -> InboundMessage:
    data = json.loads(text)
    return InboundMessage(
        source=SessionSource.from_dict(data["source"]),
        text=data.get("text") or "",
        message_id=data.get("message_id") or "",
        mentioned=bool(data.get("mentioned")),
        reply_to_bot=bool(data.get("reply_to_bot")),
        reply_to_message_id=data.get("reply_to_message_id"),
        timestamp=float(data.get("timestamp") or 0.0),
        inbox_id=inbox_id,
        attachments=[
            Attachment(
                a["kind"], None, a.get("mime_type"), a.get("size"), a.get("file_name"), a.get("platform_file_id")
            )
            for a in data.get("attachments") or []
        ],
    )


class Inbox:
    def __init__(self, db: StorageFace, leases: ChatLeases | None = None) -> None:
        self.db = db
        self.leases: ChatLeases = leases or SoloLeases()

    async def admit(self, msg: InboundMessage, chat_key: str) -> bool:
        """Commit `msg` to the inbox; False for a redelivery (nothing stored, nothing to answer).
        Sets `msg.inbox_id`. Returns only once the entry is durable: the adapter may then ack."""
        platform = msg.source.platform.value
        event_id = msg.message_id or f"anon-{secrets.token_hex(8)}"
        entry = await self.db.ainbox_add(platform, event_id, chat_key, encode_message(msg), msg.timestamp)
        if entry is None:
            return False
        msg.inbox_id = entry
        return True

    @staticmethod
    def started(*msgs: InboundMessage) -> RecordOp:
        """The record that goes with storing the person's message: its entries are started."""

        def op(conn: Conn, message_id: int) -> None:
            for msg in msgs:
                if msg.inbox_id is not None:
                    inbox.start(conn, msg.inbox_id, message_id)

        return op

    async def finish(self, msgs: Iterable[InboundMessage], outcome: str) -> None:
        await self.db.ainbox_finish([m.inbox_id for m in msgs if m.inbox_id is not None], outcome)

    async def unfinished_of(self, chat_key: str) -> list[tuple[dict, InboundMessage]]:
        """One chat's entries not done, oldest first (a replica holding the chat runs them)."""
        rows = await self.db.aread(self.db.read, lambda conn: inbox.unfinished_of_chat(conn, chat_key))
        return await asyncio.to_thread(self._decoded, rows)

    async def latest(self, platform: str) -> list[InboundMessage]:
        """The newest message taken in from each chat of `platform` (PlatformAdapter.catch_up_from)."""
        rows = await self.db.aread(self.db.read, lambda conn: inbox.latest_per_chat(conn, platform))
        return [msg for _row, msg in await asyncio.to_thread(self._decoded, rows)]

    def unfinished(self) -> list[tuple[dict, InboundMessage]]:
        """Entries not done, oldest first, with their messages (for the start-up)."""
        return self._decoded(self.db.inbox_unfinished())

    def _decoded(self, rows: list[dict]) -> list[tuple[dict, InboundMessage]]:
        out = []
        for row in rows:
            try:
                out.append((row, decode_message(row["message"], row["id"])))
            except (ValueError, KeyError, TypeError) as exc:  # written by a bug: skip it, never loop on it
                log.error("inbox entry %s cannot be read (%s); marked done", row["id"], exc)
                self.db.write(functools.partial(_finish_unreadable, int(row["id"])))
        return out


class Outbox:
    def __init__(
        self,
        db: StorageFace,
        adapters: dict[str, PlatformAdapter],
        metrics: Metrics | None = None,
        leases: ChatLeases | None = None,
    ) -> None:
        self.db, self.adapters, self.metrics = db, adapters, metrics
        self.leases: ChatLeases = leases or SoloLeases()

    @staticmethod
    def reply_op(
        target: InboundMessage,
        text: str,
        answers: Iterable[InboundMessage],
        outcome: str = "answered",
    ):
        """The record of a reply, to run in one transaction (alone, or with the assistant message
        that carries it as `after`): the outbox row and the done marks of the entries it answers.
        Returns `(op, row)`: after the commit `row["id"]` is the outbox row id."""
        done = [m.inbox_id for m in answers if m.inbox_id is not None]
        source = target.source
        reply_to = target.message_id if source.chat_type != "dm" and target.message_id else None
        row: dict[str, Any] = {"id": None}

        def op(conn: Conn, message_id: int | None = None) -> int:
            row["id"] = outbox.add(
                conn,
                platform=source.platform.value,
                chat_key=json.dumps([source.platform.value, source.chat_id, source.thread_id]),
                target=json.dumps(source.to_dict(), ensure_ascii=False),
                reply_to=reply_to,
                text=text,
                inbox_id=target.inbox_id,
                message_id=message_id,
            )
            inbox.finish(conn, done, outcome)
            return row["id"]

        return op, row

    async def commit(
        self,
        target: InboundMessage,
        text: str,
        answers: Iterable[InboundMessage],
        outcome: str,
    ) -> int:
        """Commit a reply that is not carried by an assistant message (a command's answer, an apology)."""
        op, _ = self.reply_op(target, text, answers, outcome)
        return await self.db.awrite(lambda conn, events: op(conn))

    async def deliver(
        self,
        row_id: int,
        source: SessionSource,
        text: str,
        reply_to: str | None,
        done: int = 0,
        key: str | None = None,
    ) -> bool:
        """Send the reply's parts from `done` on, recording each. False when it could not be sent
        (it stays in the outbox for the next start). `key`: the chat whose lease must still be
        held here (replicas): if another replica took it over, that one sends it."""
        adapter = self.adapters.get(source.platform.value)
        if adapter is None:
            log.warning("outbox row %s is for %s, which is not running; kept", row_id, source.platform.value)
            return False
        if key is not None and self.leases.shared and not await self.leases.confirm(key):
            log.info("outbox row %s not sent here: chat %s is held by another replica now", row_id, key)
            return False
        parts = adapter.split(text) or [text]
        ids: list[str] = []
        if done == 0:
            # One reply through the adapter's own reply writer: it keeps the chat's send rate
            # (the pacer a streamed answer also uses), so a notice after a streamed answer is not
            # refused as a flood. The duplicate window is between its sends and the record below.
            try:
                ids = await adapter.begin_reply(source, reply_to).finish(text)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sending a reply on %s failed; it stays in the outbox", source.platform.value)
                return False
            if self.metrics is not None:
                for _ in ids:
                    self.metrics.inc("messages_out_total", {"platform": source.platform.value})
            await self.db.aoutbox_record(row_id, len(parts), ids, done=True)
            return True
        for index in range(done, len(parts)):
            try:
                sent = await adapter.send(source, parts[index], reply_to=reply_to if index == 0 else None)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sending a reply on %s failed; it stays in the outbox", source.platform.value)
                return False
            ids.extend(sent or [])
            if self.metrics is not None:
                self.metrics.inc("messages_out_total", {"platform": source.platform.value})
            # The duplicate window is between the send above and this commit.
            await self.db.aoutbox_record(row_id, index + 1, ids, done=index + 1 == len(parts))
        return True

    async def deliver_unsent(self) -> int:
        """On start: send every reply a previous process committed and did not deliver, oldest first."""
        sent = 0
        for row in await asyncio.to_thread(self.db.outbox_unsent):
            source = SessionSource.from_dict(json.loads(row["target"]))
            if await self.deliver(row["id"], source, row["text"], row["reply_to"], row["parts_sent"]):
                sent += 1
        if sent:
            log.info("delivered %d repl%s left unsent by the previous run", sent, "y" if sent == 1 else "ies")
        return sent

    async def deliver_unsent_of(self, chat_key: str) -> int:
        """On taking a chat over (replicas): send the replies its previous holder committed and did not
        deliver, oldest first, before anything else of that chat runs."""
        sent = 0
        rows = await self.db.aread(self.db.read, lambda conn: outbox.unsent_of_chat(conn, chat_key))
        for row in rows:
            source = SessionSource.from_dict(json.loads(row["target"]))
            if await self.deliver(row["id"], source, row["text"], row["reply_to"], row["parts_sent"], key=chat_key):
                sent += 1
        return sent


def _finish_unreadable(entry_id: int, conn: Conn, events: Events) -> int:
    return inbox.finish(conn, [entry_id], "unreadable")
