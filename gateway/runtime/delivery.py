"""Delivery (DESIGN §11): what makes every acknowledged message answered exactly once.

- `Inbox.admit` commits an inbound message to the inbox (gateway.storage.inbox) before the adapter
  acknowledges it to the platform; its unique (platform, event id) is the de-duplication, so a
  redelivery is refused by the same commit. The entry is started when its turn stores the
  person's message and done when the turn's reply is committed, in the same transaction.
- `Outbox` commits a reply (with the assistant message that carries it, when there is one) and
  delivers it part by part, recording after each part the platform's message ids. A send that
  fails is retried while the process runs, in the chat's order (then parked and retried slowly:
  `gateway.delivery`); on start the replies not yet delivered are sent from the first part not
  recorded.

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
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from gateway.db import StorageFace
from gateway.runtime.leases import ChatLeases, SoloLeases
from gateway.runtime.metrics import Metrics
from gateway.source import SessionSource
from gateway.storage import inbox, outbox
from gateway.storage.conn import Conn
from gateway.storage.events import Events
from gateway.storage.health import StorageHealth, storage_fault
from platforms.base import Attachment, InboundMessage, PlatformAdapter

log = logging.getLogger(__name__)

RecordOp = Callable[[Conn, int], Any]
RETRY_FIRST_SECONDS = 1.0  # a failed send is tried again after 1 s, then 2, 4, ... up to 30 s
RETRY_CAP_SECONDS = 30.0


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
    def __init__(self, db: StorageFace, leases: ChatLeases | None = None, health: StorageHealth | None = None) -> None:
        self.db = db
        self.leases: ChatLeases = leases or SoloLeases()
        self.health = health or StorageHealth(db)

    async def admit(self, msg: InboundMessage, chat_key: str) -> bool:
        """Commit `msg` to the inbox; False for a redelivery (nothing stored, nothing to answer).
        Sets `msg.inbox_id`. Returns only once the entry is durable: the adapter may then ack."""
        platform = msg.source.platform.value
        event_id = msg.message_id or f"anon-{secrets.token_hex(8)}"
        try:
            entry = await self.db.ainbox_add(platform, event_id, chat_key, encode_message(msg), msg.timestamp)
        except Exception as exc:  # not stored: the adapter must not acknowledge it (5xx, no offset)
            if storage_fault(exc):
                self.health.failed(exc)
            raise
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


@dataclass
class _Unsent:
    """A committed reply not yet (fully) sent: what a retry needs to send the rest."""

    row_id: int
    source: SessionSource
    text: str
    reply_to: str | None
    done: int = 0  # parts already sent and recorded
    key: str | None = None  # the chat whose lease must be held here (replicas)


class Outbox:
    """Commits replies and delivers them. A send that fails is not left for the next start: the
    reply joins its chat's retry queue, and every later reply of that chat queues behind it, so a
    chat's replies arrive in order. The queue is sent again with backoff (1 s doubling to 30 s);
    after `send_attempts` failed sends its head is parked: logged, counted (`outbox_parked` in
    /metrics and the console) and retried every `parked_retry_seconds` until the platform takes it.
    The record of a part already sent is retried until it commits (storage faults), since giving
    up on it would send that part again at the next start."""

    def __init__(
        self,
        db: StorageFace,
        adapters: dict[str, PlatformAdapter],
        metrics: Metrics | None = None,
        leases: ChatLeases | None = None,
        *,
        health: StorageHealth | None = None,
        send_attempts: int = 5,
        parked_retry_seconds: float = 300.0,
    ) -> None:
        self.db, self.adapters, self.metrics = db, adapters, metrics
        self.leases: ChatLeases = leases or SoloLeases()
        self.health = health or StorageHealth(db)
        self.send_attempts, self.parked_retry_seconds = send_attempts, parked_retry_seconds
        self._queues: dict[tuple, deque[_Unsent]] = {}  # chat -> replies behind a failed send, in order
        self._retries: dict[tuple, asyncio.Task] = {}
        self.parked: set[int] = set()  # outbox row ids given up for now (retried slowly)

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

    async def record(self, row_id: int, parts_sent: int, platform_ids: list[str], done: bool) -> None:
        """Record sent parts, retrying through a storage fault until it commits (see the class doc)."""
        await self.health.committed(lambda: self.db.aoutbox_record(row_id, parts_sent, platform_ids, done))

    def backlogged(self, source: SessionSource) -> bool:
        """Does this chat have replies waiting for a retry? (A new reply must go behind them.)"""
        return _chat(source) in self._queues

    async def deliver(
        self,
        row_id: int,
        source: SessionSource,
        text: str,
        reply_to: str | None,
        done: int = 0,
        key: str | None = None,
    ) -> bool:
        """Send the reply's parts from `done` on, recording each. False when it was not sent now:
        queued behind its chat's earlier replies, or it failed and is retried in order (see the
        class doc), or it is not this process's to send. `key`: the chat whose lease must still
        be held here (replicas): if another replica took it over, that one sends it."""
        item = _Unsent(row_id, source, text, reply_to, done, key)
        chat = _chat(source)
        queue = self._queues.get(chat)
        if queue is not None:
            queue.append(item)
            return False
        outcome = await self._send(item)
        if outcome != "failed":
            return outcome == "sent"
        self._queues[chat] = deque([item])
        self._retries[chat] = asyncio.create_task(self._retry(chat), name=f"outbox retry {chat}")
        return False

    async def _send(self, item: _Unsent) -> str:
        """One try at the rest of `item`: "sent", "failed" (retry later) or "elsewhere"."""
        source = item.source
        adapter = self.adapters.get(source.platform.value)
        if adapter is None:
            log.warning("outbox row %s is for %s, which is not running; kept", item.row_id, source.platform.value)
            return "elsewhere"
        if item.key is not None and self.leases.shared and not await self.leases.confirm(item.key):
            log.info("outbox row %s not sent here: chat %s is held by another replica now", item.row_id, item.key)
            return "elsewhere"
        parts = adapter.split(item.text) or [item.text]
        ids: list[str] = []
        if item.done == 0:
            # One reply through the adapter's own reply writer: it keeps the chat's send rate
            # (the pacer a streamed answer also uses), so a notice after a streamed answer is not
            # refused as a flood. The duplicate window is between its sends and the record below.
            try:
                ids = await adapter.begin_reply(source, item.reply_to).finish(item.text)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sending a reply on %s failed; it is retried", source.platform.value)
                return "failed"
            self._count(source, len(ids))
            await self.record(item.row_id, len(parts), ids, done=True)
            item.done = len(parts)
            return "sent"
        for index in range(item.done, len(parts)):
            try:
                sent = await adapter.send(source, parts[index], reply_to=item.reply_to if index == 0 else None)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sending a reply on %s failed; it is retried", source.platform.value)
                return "failed"
            ids.extend(sent or [])
            self._count(source, 1)
            # The duplicate window is between the send above and this commit.
            await self.record(item.row_id, index + 1, ids, done=index + 1 == len(parts))
            item.done = index + 1
        return "sent"

    async def _retry(self, chat: tuple) -> None:
        """Send a chat's queued replies in order, the head again and again until it goes (see the class doc)."""
        queue = self._queues[chat]
        failures, delay = 1, RETRY_FIRST_SECONDS  # the send that queued the head failed once
        try:
            while queue:
                item = queue[0]
                if failures >= self.send_attempts and item.row_id not in self.parked:
                    self.parked.add(item.row_id)
                    log.warning(
                        "reply %s on %s parked after %d failed sends; retried every %gs",
                        item.row_id,
                        item.source.platform.value,
                        failures,
                        self.parked_retry_seconds,
                    )
                if failures:
                    await asyncio.sleep(self.parked_retry_seconds if item.row_id in self.parked else delay)
                    delay = min(RETRY_CAP_SECONDS, delay * 2)
                if await self._send(item) == "failed":
                    failures += 1
                    continue
                queue.popleft()
                if item.row_id in self.parked:
                    self.parked.discard(item.row_id)
                    log.info("parked reply %s delivered", item.row_id)
                failures, delay = 0, RETRY_FIRST_SECONDS
        finally:
            self._queues.pop(chat, None)
            self._retries.pop(chat, None)
            for item in queue:  # stopped (cancelled) with replies left: they stay in the outbox for the next start
                self.parked.discard(item.row_id)

    async def stop(self) -> None:
        """Stop retrying; what is still queued stays in the outbox (the next start sends it)."""
        for task in list(self._retries.values()):
            task.cancel()
        await asyncio.gather(*self._retries.values(), return_exceptions=True)

    def _count(self, source: SessionSource, messages: int) -> None:
        if self.metrics is not None:
            for _ in range(messages):
                self.metrics.inc("messages_out_total", {"platform": source.platform.value})

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

    async def deliver_unsent_for(self, entry_id: int) -> None:
        """Send the replies to one inbox entry that were committed and not sent (a fault came between)."""
        for row in await asyncio.to_thread(self.db.outbox_unsent):
            if row["inbox_id"] == entry_id:
                source = SessionSource.from_dict(json.loads(row["target"]))
                await self.deliver(row["id"], source, row["text"], row["reply_to"], row["parts_sent"])

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


def _chat(source: SessionSource) -> tuple:
    """The chat a reply goes to (its order is kept per chat)."""
    return (source.platform.value, source.chat_id, source.thread_id)


def _finish_unreadable(entry_id: int, conn: Conn, events: Events) -> int:
    return inbox.finish(conn, [entry_id], "unreadable")
