"""A reply edited in place as it grows, at the rate a platform allows: the `ReplyStream` that
Telegram, Discord and Feishu's patch fallback share.

One writer task per reply does every platform call, so calls never overlap and updates that
arrive while it waits are coalesced into the next call (a model writes ~50 pieces a second; a
platform takes one edit a second). The first message goes out once the text holds a sentence or
has been growing for `first_delay` seconds: a one-word message that is then rewritten reads as
flicker; and not before `min_first` (0.4 s), so an answer the model writes in one go is sent
once, formatted, with no edit at all (streaming costs such a turn nothing). Past the platform's length limit the reply continues in a new message; finished parts
are no longer touched. Intermediate text is sent plain; `finish` applies the platform's
formatting in the final edit. A 429 holds the chat's pacer for its `retry_after` and the update
is merged into the next one; nothing is dropped from the final text. `may_show` is asked right
before each live call (a replica that no longer knows it holds the chat stops editing). A new part
goes out with the reply's idempotency key and is recorded around its send (`record`); `adopt` takes
the messages a cut-short run of the same reply left, which are then edited, never sent again.

The rate rule is the adapter's `EditPacer` (platforms.helpers), on the adapter's injectable clock, so
tests run the whole flow on virtual time without sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Awaitable, Callable

from platforms.base import RateLimited, ReplyStream
from platforms.helpers import EditPacer

log = logging.getLogger(__name__)

_UNKNOWN = "\0"  # what an adopted message shows: equal to no part
FINAL_ATTEMPTS = 5  # a final edit refused this often (429 each time) is given up
_SENTENCE = re.compile(r"[.!?…\n]\s|[。！？]")


# (text, reply_to, final, idempotency key) -> message id
SendPart = Callable[[str, "str | None", bool, "str | None"], Awaitable[str]]
EditPart = Callable[[str, str, bool], Awaitable[None]]  # (message id, text, final)
DeletePart = Callable[[str], Awaitable[None]]


class EditedReply(ReplyStream):
    """A `ReplyStream` over three platform calls: send a part, edit a part, delete a part.

    `split` cuts a text into the platform's parts (its length rule). The calls raise
    `RateLimited` for a 429; any other exception on an intermediate update stops the live updates
    (the final text is still sent at `finish`). With `final_differs` False (no formatting step), a
    part that already shows its final text is not edited again.
    """

    def __init__(
        self,
        *,
        key: str,
        pacer: EditPacer,
        split: Callable[[str], list[str]],
        send_part: SendPart,
        edit_part: EditPart,
        delete_part: DeletePart | None = None,
        reply_to: str | None = None,
        first_delay: float = 1.0,
        min_first: float = 0.4,
        final_differs: bool = True,
        what: str = "reply",
    ) -> None:
        super().__init__()
        self.key, self.pacer, self.clock = key, pacer, pacer.clock
        self._split, self._send, self._edit, self._delete = split, send_part, edit_part, delete_part
        self.reply_to, self.first_delay, self.what = reply_to, first_delay, what
        self.min_first = min(min_first, first_delay)
        self.final_differs = final_differs  # the final formatting differs from the live plain text
        self._text = ""
        self._status: str | None = None
        self._first_at: float | None = None  # when the first text arrived
        self._shown: list[str] = []  # what each sent part shows now
        self._final: str | None = None  # set by finish/fail: the writer's last job
        self._live = True  # False after an intermediate update failed for a reason other than 429
        self._adopted = False  # the reply took over the messages of an earlier run (`adopt`)
        self._dirty = asyncio.Event()
        self._closed = asyncio.Event()
        self._writer: asyncio.Task | None = None
        self.calls = 0  # platform calls made (for metrics and tests)

    # -- the contract ---------------------------------------------------------------------------
    def adopt(self, message_ids: list[str]) -> None:
        if self._shown or not message_ids:
            return
        self.message_ids = list(message_ids)
        self._adopted = True
        self._shown = [_UNKNOWN] * len(message_ids)  # what they show is not known: every part is edited
        self.first_shown.set()

    async def update(self, text: str) -> None:
        if self._final is not None or text == self._text:
            return
        self._text = text
        self._touch()

    async def status(self, line: str | None) -> None:
        if self._final is not None or line == self._status:
            return
        self._status = line
        self._touch()

    async def finish(self, text: str) -> list[str]:
        return await self._close(text)

    async def abandon(self) -> None:
        await self._close(None)

    async def fail(self, note: str | None = None) -> list[str]:
        if not note and (not self._shown or (self._adopted and not self._text)):
            await self._close(None)  # nothing shown, or only what an earlier run left: it stays
            return list(self.message_ids)
        parts = [p for p in (self._text.rstrip(), note) if p]
        return await self._close("\n\n".join(parts))

    # -- the writer -----------------------------------------------------------------------------
    def _touch(self) -> None:
        if self._first_at is None:
            self._first_at = self.clock.now()
        self._dirty.set()
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_live(), name=f"{self.what}-stream")

    async def _close(self, final: str | None) -> list[str]:
        if self._final is not None:
            return list(self.message_ids)
        self._final = final if final is not None else ""
        self._closed.set()
        writer, self._writer = self._writer, None
        if writer is not None:
            self._dirty.set()
            try:
                # it finishes the call it is making (never two calls at once); shielded, so a cancel
                # of ours stops us here instead of being spent on the writer and then swallowed
                await asyncio.shield(writer)
            except asyncio.CancelledError:
                if not writer.cancelled():
                    raise
        if final is not None:
            await self._write_final(final)
        return list(self.message_ids)

    def _display(self) -> str:
        text = self._text.rstrip()
        if self._status:
            return f"{text}\n\n{self._status}" if text else self._status
        return text

    def _ready_for_first(self) -> float:
        """Seconds until the first message may go out (0: now): a sentence (or a tool's status)
        once `min_first` has passed, any text after `first_delay`. An answer complete within
        `min_first` is sent once, formatted, with no live edit at all."""
        assert self._first_at is not None
        age = self.clock.now() - self._first_at
        if self._status or (_SENTENCE.search(self._text + " ") and len(self._text.strip()) > 1):
            return max(0.0, self.min_first - age)
        return max(0.0, self.first_delay - age)

    async def _write_live(self) -> None:
        while self._final is None and self._live:
            await self._dirty.wait()
            if self._final is not None:
                return
            if not self._shown:
                wait = self._ready_for_first()
                if wait > 1e-6:  # (float rounding of clock arithmetic must not loop forever)
                    await self._sleep_or_close(wait)
                    continue
            await self.pacer.wait(self.key)
            if self._final is not None:
                return  # finish arrived while we waited: the final write covers it
            if not self.may_show():  # asked as late as possible: the call goes out next
                self._live = False
                return
            self._dirty.clear()
            try:
                await self._render(self._display(), final=False)
            except RateLimited as exc:
                self.pacer.hold(self.key, exc.retry_after)
                self._dirty.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s: a live update failed (%s); the final text follows at the end", self.what, exc)
                self._live = False

    async def _sleep_or_close(self, seconds: float) -> None:
        """Sleep, but wake early when new text (it may hold a sentence) or finish/fail arrives."""
        self._dirty.clear()
        waits = [
            asyncio.ensure_future(self.clock.sleep(seconds)),
            asyncio.ensure_future(self._closed.wait()),
            asyncio.ensure_future(self._dirty.wait()),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        self._dirty.set()  # look again: send now, or wait the rest

    async def _write_final(self, text: str) -> None:
        for _attempt in range(FINAL_ATTEMPTS):
            await self.pacer.wait(self.key)
            try:
                await self._render(text, final=True)
                return
            except RateLimited as exc:
                self.pacer.hold(self.key, exc.retry_after)
        raise RuntimeError(f"{self.what}: the platform kept refusing the final text (429)")

    async def _render(self, text: str, *, final: bool) -> None:
        """Make the sent parts show `text`: edit changed parts, send new ones, drop extra ones."""
        parts = self._split(text) if text else []
        for i, part in enumerate(parts):
            if i < len(self._shown):
                if part == self._shown[i] and not (final and self.final_differs):
                    continue
                try:
                    await self._call(lambda: self._edit(self.message_ids[i], part, final))
                except (RateLimited, asyncio.CancelledError):
                    raise
                except Exception as exc:
                    if not final:
                        raise
                    # the part cannot be edited (deleted by someone, too old): the final text goes anew
                    log.warning("%s: final edit failed (%s); sending the part as a new message", self.what, exc)
                    # (no key: a keyed repeat would return the very message that cannot be edited)
                    self.message_ids[i] = await self._call(lambda: self._send(part, None, final, None))
                self._shown[i] = part
            else:
                reply_to = self.reply_to if i == 0 else None
                if self.record is not None:
                    await self.record.sending(i)
                message_id = await self._call(lambda: self._send(part, reply_to, final, self.part_key(i)))
                self.message_ids.append(message_id)
                self._shown.append(part)
                self.first_shown.set()
                if self.record is not None and not (final and i == len(parts) - 1):  # (the caller records the last)
                    await self.record.sent(list(self.message_ids))
        if final:
            for message_id in self.message_ids[len(parts) :]:
                if self._delete is not None:
                    await self._call(lambda: self._delete(message_id))  # type: ignore[misc]
            del self.message_ids[len(parts) :]
            del self._shown[len(parts) :]

    async def _call(self, make: Callable[[], Awaitable]):
        await self.pacer.wait(self.key)
        self.pacer.record(self.key)
        self.calls += 1
        return await make()
