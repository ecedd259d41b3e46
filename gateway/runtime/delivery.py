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

The duplicate window: a crash after the platform accepted a part and before its record commits;
that part is sent again on start. Where the platform takes an idempotency key
(`takes_send_keys`: Feishu's `uuid`, Discord's `nonce`) every part goes with its row's key, so the
repeat returns the first message: the window is closed. Elsewhere (Telegram) each part is marked
"sending" before it goes (`OutboxSends`), and the start counts the marked parts it sends again as
uncertain (`uncertain_sends_total`): doubles are bounded by the sends in flight at the crash
(tests/runtime/test_delivery_crash*.py measure both).

A streamed answer's messages are recorded on its inbox entry as the platform returns them
(`StreamSends`), before the answer commits; the outbox row starts from them, and a rerun of a
turn a stop or crash cut short adopts them: the answer is edited in place, never sent anew.
Deliveries run shielded from their caller's cancel, and a stop waits for them (`settle`) before
the adapters go.

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
import hashlib
import json
import logging
import secrets
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from gateway import telemetry
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
            entry = await self.db.ainbox_add(
                platform,
                event_id,
                chat_key,
                encode_message(msg),
                msg.timestamp,
                msg.trace.traceparent if msg.trace is not None else None,
            )
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
                msg = decode_message(row["message"], row["id"])
                msg.trace = telemetry.resumed(row.get("trace_context"))  # its trace goes on
                out.append((row, msg))
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
    send_key: str | None = None  # the row's idempotency key (Feishu, Discord)
    shown: list[str] = field(default_factory=list)  # messages already sent for it: edited, not sent again
    key: str | None = None  # the chat whose lease must be held here (replicas)
    tries: int = 0  # sends tried so far (a span's `chinwag.retries`)


class OutboxSends:
    """A reply's sends recorded on its outbox row (platforms.base.SendRecord): "sending" before
    each new message where the platform takes no idempotency key (so a restart knows the send is
    uncertain; with a key the repeat is a no-op and the mark would cost a commit for nothing), its
    id as soon as the platform returns it."""

    def __init__(self, db: StorageFace, row_id: int, adapter: PlatformAdapter) -> None:
        self.db, self.row_id, self.mark = db, row_id, not adapter.takes_send_keys

    async def sending(self, part: int) -> None:
        if self.mark:
            await self.db.aoutbox_sending(self.row_id, part)

    async def sent(self, message_ids: list[str]) -> None:
        await self.db.aoutbox_record(self.row_id, 0, message_ids, done=False)


class StreamSends:
    """A streamed answer's messages, recorded on the inbox entry it answers before the answer (and
    its outbox row) commits: a turn cut short finds them when it runs again."""

    def __init__(self, db: StorageFace, entry_id: int) -> None:
        self.db, self.entry_id = db, entry_id

    async def sending(self, part: int) -> None:
        pass  # a live message is not yet a reply: its key (Feishu, Discord) finds it again on a rerun

    async def sent(self, message_ids: list[str]) -> None:
        await self.db.ainbox_reply_ids(self.entry_id, message_ids)


def entry_send_key(msg: InboundMessage) -> str | None:
    """The send key of a streamed answer to `msg`: a rerun of its turn sends the first message with
    the same key, so where the platform takes one (Feishu, Discord) the cut message is found again."""
    if not msg.message_id:
        return None
    return hashlib.sha256(f"{msg.source.platform.value}:{msg.message_id}".encode()).hexdigest()[:16]


class Outbox:
    """Commits replies and delivers them. A send that fails is not left for the next start: the
    reply joins its chat's retry queue, and every later reply of that chat queues behind it, so a
    chat's replies arrive in order. The queue is sent again with backoff (1 s doubling to 30 s);
    after `send_attempts` failed sends its head is parked: logged, counted (`outbox_parked` in
    /metrics and the console) and retried every `parked_retry_seconds` until the platform takes it.
    The record of a part already sent is retried until it commits (storage faults), since giving
    up on it would send that part again at the next start. A row handed over again while it is
    being sent or queued (a job that met a storage fault asks for its entry's unsent replies) is
    left to that delivery: queued twice, it was sent twice (tests/runtime/test_outbox_handover.py)."""

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
        self._sending: set[asyncio.Task] = set()  # deliveries under way (a stop lets them finish)
        self._handed: set[int] = set()  # outbox row ids being sent or queued: handed over again, ignored

    @staticmethod
    def reply_op(
        target: InboundMessage,
        text: str,
        answers: Iterable[InboundMessage],
        outcome: str = "answered",
        shown: Iterable[str] = (),
    ):
        """The record of a reply, to run in one transaction (alone, or with the assistant message
        that carries it as `after`): the outbox row and the done marks of the entries it answers.
        `shown`: the messages a streamed answer shows so far (edited, never sent again). Returns
        `(op, row)`: after the commit `row["id"]` is the outbox row id; `row["send_key"]` its key."""
        done = [m.inbox_id for m in answers if m.inbox_id is not None]
        source = target.source
        reply_to = target.message_id if source.chat_type != "dm" and target.message_id else None
        row: dict[str, Any] = {"id": None, "send_key": outbox.new_send_key(), "shown": list(shown)}

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
                shown_ids=row["shown"],
                send_key=row["send_key"],
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
    ) -> dict[str, Any]:
        """Commit a reply that is not carried by an assistant message (a command's answer, an
        apology); its row (`id`, `send_key`)."""
        op, row = self.reply_op(target, text, answers, outcome)
        await self.db.awrite(lambda conn, events: op(conn))
        return row

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
        *,
        send_key: str | None = None,
        shown: Iterable[str] = (),
        key: str | None = None,
    ) -> bool:
        """Send the reply, recording each message. False when it was not sent now: queued behind
        its chat's earlier replies, or it failed and is retried in order (see the class doc), or it
        is not this process's to send. `send_key`: the row's idempotency key; `shown`: the messages
        already sent for it (a streamed answer's, a previous attempt's), edited to the final text.
        `key`: the chat whose lease must still be held here (replicas): if another replica took it
        over, that one sends it. Shielded: a cancel of the caller (a /stop, the end of a stop's
        grace) must not cut a reply between its parts; `settle` waits for it."""
        if row_id in self._handed:  # queued or being sent already: handed over twice, it went twice
            return False
        item = _Unsent(row_id, source, text, reply_to, send_key, list(shown), key)
        chat = _chat(source)
        self._handed.add(row_id)
        queue = self._queues.get(chat)
        if queue is not None:
            queue.append(item)
            return False
        task = asyncio.ensure_future(self._send(item))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)
        try:
            outcome = await asyncio.shield(task)
        except asyncio.CancelledError:  # the send goes on; not queued if it fails (the next start sends it)
            task.add_done_callback(lambda _: self._handed.discard(row_id))
            raise
        if outcome != "failed":
            self._handed.discard(row_id)
            return outcome == "sent"
        if chat not in self._queues:  # (another reply of the chat may have failed meanwhile)
            self._queues[chat] = deque()
            self._retries[chat] = asyncio.create_task(self._retry(chat), name=f"outbox retry {chat}")
        self._queues[chat].appendleft(item)
        return False

    async def settle(self, timeout: float) -> None:
        """Let the deliveries under way finish (a stop, before the adapters go)."""
        if self._sending:
            await asyncio.wait(list(self._sending), timeout=timeout)

    async def _send(self, item: _Unsent) -> str:
        """One try at `item`: "sent", "failed" (retry later) or "elsewhere"."""
        source = item.source
        adapter = self.adapters.get(source.platform.value)
        if adapter is None:
            log.warning("outbox row %s is for %s, which is not running; kept", item.row_id, source.platform.value)
            return "elsewhere"
        if item.key is not None and self.leases.shared and not await self.leases.confirm(item.key):
            log.info("outbox row %s not sent here: chat %s is held by another replica now", item.row_id, item.key)
            return "elsewhere"
        # Through the adapter's own reply writer: it keeps the chat's send rate (the pacer a
        # streamed answer also uses), so a notice after a streamed answer is not refused as a flood;
        # and it records each new message around its send (the duplicate window is between them).
        reply = adapter.begin_reply(source, item.reply_to)
        reply.send_key, reply.record = item.send_key, OutboxSends(self.db, item.row_id, adapter)
        earlier = list(item.shown)
        reply.adopt(earlier)
        with telemetry.send(source.platform.value, item.tries) as span:
            item.tries += 1
            try:
                ids = await reply.finish(item.text)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sending a reply on %s failed; it is retried", source.platform.value)
                item.shown = list(reply.message_ids)  # what did go out is edited on the retry, not sent again
                span.set("chinwag.outcome", "failed")
                return "failed"
            span.set("chinwag.parts", len(ids) - len(earlier))
        if self.metrics is not None:
            for _ in range(len(ids) - len(earlier)):
                self.metrics.inc("messages_out_total", {"platform": source.platform.value})
        await self.record(item.row_id, len(ids), ids, done=True)
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
                self._handed.discard(item.row_id)
                if item.row_id in self.parked:
                    self.parked.discard(item.row_id)
                    log.info("parked reply %s delivered", item.row_id)
                failures, delay = 0, RETRY_FIRST_SECONDS
        finally:
            self._queues.pop(chat, None)
            self._retries.pop(chat, None)
            for item in queue:  # stopped (cancelled) with replies left: they stay in the outbox for the next start
                self.parked.discard(item.row_id)
                self._handed.discard(item.row_id)

    async def stop(self) -> None:
        """Stop retrying; what is still queued stays in the outbox (the next start sends it)."""
        for task in list(self._retries.values()):
            task.cancel()
        await asyncio.gather(*self._retries.values(), return_exceptions=True)

    async def deliver_unsent(self) -> int:
        """On start: send every reply a previous process committed and did not deliver, oldest first."""
        sent = 0
        for row in await asyncio.to_thread(self.db.outbox_unsent):
            if await self._deliver_row(row):
                sent += 1
        if sent:
            log.info("delivered %d repl%s left unsent by the previous run", sent, "y" if sent == 1 else "ies")
        return sent

    async def deliver_unsent_for(self, entry_id: int) -> None:
        """Send the replies to one inbox entry that were committed and not sent (a fault came between)."""
        for row in await asyncio.to_thread(self.db.outbox_unsent):
            if row["inbox_id"] == entry_id:
                await self._deliver_row(row)

    async def deliver_unsent_of(self, chat_key: str) -> int:
        """On taking a chat over (replicas): send the replies its previous holder committed and did not
        deliver, oldest first, before anything else of that chat runs."""
        sent = 0
        rows = await self.db.aread(self.db.read, lambda conn: outbox.unsent_of_chat(conn, chat_key))
        for row in rows:
            if await self._deliver_row(row, chat_key):
                sent += 1
        return sent

    async def _deliver_row(self, row: dict[str, Any], chat_key: str | None = None) -> bool:
        """A row a previous holder left unsent. A message it was sending and had no id of is an
        uncertain send: sent again (a no-op where the platform took the key), and counted."""
        source = SessionSource.from_dict(json.loads(row["target"]))
        shown = json.loads(row["platform_ids"] or "[]")
        if row.get("sending") is not None and row["sending"] >= len(shown) and self.metrics is not None:
            self.metrics.inc("uncertain_sends_total", {"platform": source.platform.value})
        with telemetry.redelivery(row.get("trace_context"), source.platform.value):
            return await self.deliver(
                row["id"], source, row["text"], row["reply_to"], send_key=row.get("send_key"), shown=shown, key=chat_key
            )


def _chat(source: SessionSource) -> tuple:
    """The chat a reply goes to (its order is kept per chat)."""
    return (source.platform.value, source.chat_id, source.thread_id)


def _finish_unreadable(entry_id: int, conn: Conn, events: Events) -> int:
    return inbox.finish(conn, [entry_id], "unreadable")
