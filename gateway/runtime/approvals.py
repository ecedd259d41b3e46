"""Asking the person before a tool runs (`require_approval`, DESIGN §15): `Approvals`.

The turn that wants to call `orders.cancel_order` sends "Run orders.cancel_order {"id": 42}?
/approve 3 or /deny 3" to its chat (with buttons where the adapter has them: `send_choice`) and
waits. `/approve` and `/deny` are answered on arrival, ahead of the chat's queue (the turn they
answer is running in it, as `/stop` is); bare, they answer this person's oldest request in this
chat, with an id that request. In a group only the person whose turn it is, or an admin, may
answer. No answer within `mcp.approval_timeout_seconds` is a denial. The decision goes back to the
turn (journaled with the call: gateway.runtime.mcp_calls) and the turn goes on either way; the
question is then settled where the adapter can show it (`settle_choice`: Feishu's card, Telegram's
and Discord's message say what was decided, their buttons gone; in the background, so a slow or
rate-limited platform never holds up the call).

Pending requests live in memory: a turn waiting for an answer is a running turn, and a crash
reruns the turn, which asks again (nothing was sent to the server before the answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from dataclasses import dataclass, field
from typing import Callable, Iterator

from agent.tools import ToolContext
from gateway.language import _
from gateway.source import SessionSource
from gateway.text import valid_text
from platforms.base import PlatformAdapter
from tools.mcp import McpTool

log = logging.getLogger(__name__)

APPROVED, DENIED, TIMED_OUT = "approved", "denied by the person", "not approved in time"
ARGUMENTS_SHOWN = 300  # characters of the arguments in the question


def chat_of(source: SessionSource) -> str:
    return f"{source.platform.value}:{source.chat_id}:{source.thread_id or ''}"


@dataclass
class Request:
    id: int
    chat: str
    person: str | None
    what: str  # "orders.cancel_order {"id": 42}"
    decided: asyncio.Future[str] = field(repr=False)


class Approvals:
    def __init__(self, timeout: float, adapter_of: Callable[[SessionSource], PlatformAdapter | None]) -> None:
        self.timeout = timeout
        self._adapter_of = adapter_of  # the chat's adapter, which asks (with buttons where it has them)
        self._ids = itertools.count(1)
        self.pending: dict[int, Request] = {}

    async def ask(self, ctx: ToolContext, tool: McpTool, arguments: str) -> str:
        """`approved`, `denied by the person` or `not approved in time`."""
        if ctx.source is None:  # no chat to ask in
            return DENIED
        shown = arguments if len(arguments) <= ARGUMENTS_SHOWN else arguments[:ARGUMENTS_SHOWN] + "…"
        request = Request(
            next(self._ids),
            chat_of(ctx.source),
            ctx.source.person_id,
            f"{tool.server}.{tool.tool} {shown}",
            asyncio.get_running_loop().create_future(),
        )
        self.pending[request.id] = request
        try:
            text = _("Run {what}? /approve {id} or /deny {id}", what=request.what, id=request.id)
            choices = [(_("Approve"), f"/approve {request.id}"), (_("Deny"), f"/deny {request.id}")]
            adapter, question = self._adapter_of(ctx.source), []
            if adapter is not None:
                with _logged("asking for approval", ctx.source):
                    question = await adapter.send_choice(ctx.source, valid_text(text), choices)
            try:
                decision = await asyncio.wait_for(asyncio.shield(request.decided), self.timeout)
            except TimeoutError:
                decision = TIMED_OUT
        finally:
            self.pending.pop(request.id, None)
        if adapter is not None and question:
            with _logged("settling the approval question", ctx.source):
                await adapter.settle_choice(ctx.source, question, valid_text(settled(decision, request.what)))
        return decision

    def answer(self, source: SessionSource, is_admin: bool, approve: bool, args: str) -> str:
        """The reply to `/approve [id]` or `/deny [id]` from `source`."""
        chat, person = chat_of(source), source.person_id
        here = [r for r in self.pending.values() if r.chat == chat and not r.decided.done()]
        wanted = args.strip().lstrip("#")
        if wanted:
            found = [r for r in here if str(r.id) == wanted]
            if not found:
                return _("There is no request {id} waiting here.", id=wanted)
            request = found[0]
        else:
            mine = [r for r in here if r.person == person]
            if not mine:
                return _("Nothing is waiting for your approval here.")
            request = min(mine, key=lambda r: r.id)
        if request.person != person and not is_admin:
            return _("Only the person who asked, or an admin, may answer that request.")
        decision = APPROVED if approve else DENIED
        request.decided.set_result(decision)
        return settled(decision, request.what)


def settled(decision: str, what: str) -> str:
    """What a decided request says, to the person who answered and on the question itself."""
    if decision == APPROVED:
        return _("Approved: {what}", what=what)
    if decision == DENIED:
        return _("Denied: {what}", what=what)
    return _("Not approved in time: {what}", what=what)


@contextlib.contextmanager
def _logged(what: str, source: SessionSource) -> Iterator[None]:
    """A failed question or settling is logged, never raised: the person can still type /approve,
    and the timeout ends the wait otherwise."""
    try:
        yield
    except Exception:
        log.exception("%s on %s failed", what, source.platform.value)
