"""Inbound de-duplication by platform message id, persisted so it survives a restart.

Platforms redeliver: Feishu retries an event it thinks was not acknowledged (after 15 s, 5 min,
1 h, 6 h), Telegram replays updates after a reconnect. A message id seen before is dropped.

The check must not cost a commit per message on the hot path, so it is split:
- a process-local set of recent ids answers in-process redeliveries at once;
- a read of the `processed_events` table answers redeliveries across a restart. It is one
  primary-key lookup, so it runs inline on the event loop: cheaper than a hop to a worker thread
  (which costs more than the read and, under load, waits for the GIL);
- the mark itself: a message for the agent is marked in the same transaction that stores it as
  the person's message (`SessionDB.append_message(..., seen_event=…)`), so after a crash it is
  either stored and remembered, or neither, and then answered when redelivered: nothing is lost,
  nothing answered twice. Anything else (a command) is marked at once through the DB's single
  writer, without waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

log = logging.getLogger(__name__)

RECENT = 50_000  # ids remembered in memory (a few MB at most)


class Dedup:
    def __init__(self, db: Any, recent: int = RECENT) -> None:
        self.db = db
        self.recent = recent
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._pending: set[asyncio.Future] = set()

    async def first_time(self, platform: str, event_id: str, mark: bool = True) -> bool:
        """True the first time (platform, event_id) is offered, in this process or any earlier one.
        `mark=False`: the caller stores the mark itself, with the message (see above)."""
        key = (platform, event_id)
        if key in self._seen:
            return False
        self._seen[key] = None
        while len(self._seen) > self.recent:
            self._seen.popitem(last=False)
        if self.db.is_event_seen(platform, event_id):
            return False
        if mark:
            written = asyncio.ensure_future(self.db.amark_event_seen(platform, event_id))
            self._pending.add(written)
            written.add_done_callback(self._marked)
        return True

    def _marked(self, mark: asyncio.Future) -> None:
        self._pending.discard(mark)
        if not mark.cancelled() and mark.exception() is not None:
            log.error("could not persist a seen message id: %s", mark.exception())

    async def flush(self) -> None:
        """Wait for every mark written so far (shutdown)."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
