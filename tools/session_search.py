"""`session_search`: the agent's recall of earlier conversations (DESIGN.md §5).

Two modes:
- no query: the most recent conversations (id, title, source, when, last active, message count,
  preview of the first user message). No model call.
- a query: `gateway.recall.find_sessions` ranks whole conversations; for each one found, the
  conversation is rendered (tool output cut to its first and last 250 characters, tool calls by
  name), cut to 100,000 characters around the densest cluster of matching messages, and the
  auxiliary model writes a recap focused on the query. All recaps run in parallel, each with 3
  tries (1 s, then 2 s apart), under one overall deadline. A session whose recap is not available
  (no model, model errors, deadline) gets a raw preview instead, marked "summary_kind": "preview":
  the tool never fails because the model did.

The result is JSON: {"query": <as understood>, "count": n, "results": [{session_id, when, source,
title, summary, summary_kind, ...}]}.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from agent.llm import ModelNotConfigured, ModelSettings, complete, describe_error, make_client
from agent.tools import Tool, ToolContext
from agent.transcript import RECAP, Rendered, render
from gateway import telemetry
from gateway.db import is_visible
from gateway.recall import semantic
from gateway.recall.rank import HIDDEN_SOURCES, MAX_SESSIONS, find_sessions, plan_query, recent_sessions
from gateway.text import valid_text

log = logging.getLogger(__name__)

MAX_SESSION_CHARS = 100_000
MAX_RECAP_TOKENS = 10_000
RECAP_TEMPERATURE = 0.1
TOOL_EDGE_CHARS = 250
PREVIEW_CHARS = 1_500
TRIES = 3
BACKOFF = (1.0, 2.0)  # seconds before the second and the third try
DEFAULT_DEADLINE = 60.0

RECAP_INSTRUCTIONS = (
    "You are helping an assistant remember an earlier conversation. You get the transcript of that "
    "conversation (possibly cut) and the topic the assistant is looking for. Write a recap focused on "
    "that topic, covering:\n"
    "- what the person asked for or wanted to achieve;\n"
    "- what was done, and how it turned out;\n"
    "- decisions taken, solutions found, conclusions reached;\n"
    "- exact details worth reusing: commands, file paths, error messages, URLs, names, numbers, dates;\n"
    "- what was left open or unresolved.\n"
    "Write in the past tense, as a factual account, in the language of the conversation. Quote exact "
    "strings verbatim. If the transcript says nothing about the topic, say so in one sentence. Do not "
    "invent anything that is not in the transcript."
)


# ---------------------------------------------------------------------------------------------
# rendering a conversation


def render_messages(messages: Iterable[dict[str, Any]]) -> Rendered:
    """A readable transcript: one block per message; tool output cut, tool calls by name only."""
    return render(messages, RECAP, TOOL_EDGE_CHARS)


def cut_around(text: str, points: list[int], max_chars: int = MAX_SESSION_CHARS) -> str:
    """At most `max_chars` of `text`, centred on the densest cluster of `points` (offsets of
    matching messages); the start when there are none. Cut ends are marked."""
    if len(text) <= max_chars:
        return text
    points = sorted(p for p in points if 0 <= p < len(text))
    if points:
        # the window of width max_chars that holds the most points (two-pointer sweep)
        best_count, best = 0, (points[0], points[0])
        lo = 0
        for hi, p in enumerate(points):
            while p - points[lo] >= max_chars:
                lo += 1
            if hi - lo + 1 > best_count:
                best_count, best = hi - lo + 1, (points[lo], p)
        centre = (best[0] + best[1]) // 2
    else:
        centre = 0
    start = max(0, min(centre - max_chars // 2, len(text) - max_chars))
    end = start + max_chars
    head = "…[earlier part of the conversation cut]…\n\n" if start > 0 else ""
    tail = "\n\n…[later part of the conversation cut]…" if end < len(text) else ""
    return head + text[start:end] + tail


def _visible_lineage_messages(db: Any, root: str) -> list[dict[str, Any]]:
    """Every message of the lineage a person could find again (not those /undo took back, not
    hidden-source sessions)."""
    out: list[dict[str, Any]] = []
    for sid in db.get_lineage(root):
        session = db.get_session(sid)
        if session is None or session.get("source") in HIDDEN_SOURCES:
            continue
        for row in db.get_messages(sid, include_inactive=True):
            if is_visible(row):
                out.append(row)
    return out


def _when(epoch: float | None) -> str:
    if not epoch:
        return "unknown"
    return datetime.fromtimestamp(float(epoch), tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


# ---------------------------------------------------------------------------------------------
# recaps


@dataclass
class _Task:
    hit: Any  # gateway.recall.SessionHit
    transcript: str  # what the model reads: cut to MAX_SESSION_CHARS around the matches
    preview: str  # what the person gets without a recap: a window around the best match


async def _recap_once(client: Any, settings: ModelSettings, query: str, task: _Task) -> str:
    hit = task.hit
    header = (
        f"Topic searched for: {query}\n"
        f"Conversation {hit.session_id} ({hit.source}, started {_when(hit.started_at)}"
        + (f", titled “{hit.title}”" if hit.title else "")
        + ")\n\nTRANSCRIPT:\n"
    )
    result = await complete(
        client,
        settings,
        [{"role": "system", "content": RECAP_INSTRUCTIONS}, {"role": "user", "content": header + task.transcript}],
        temperature=RECAP_TEMPERATURE,
        max_tokens=MAX_RECAP_TOKENS,
    )
    text = (result.text or result.message.get("reasoning") or "").strip()
    if not text:
        raise ValueError("the model returned an empty recap")
    return text


async def _recap(client: Any, settings: ModelSettings, query: str, task: _Task, backoff: tuple[float, ...]) -> str:
    """Up to TRIES attempts, sleeping backoff[i] between them. Raises the last error."""
    last: BaseException | None = None
    for attempt in range(TRIES):
        try:
            return await _recap_once(client, settings, query, task)
        except asyncio.CancelledError:
            raise
        except ModelNotConfigured:
            raise
        except Exception as exc:  # any model failure: try again, then fall back to a preview
            last = exc
            log.info("recap of %s failed (try %d/%d): %s", task.hit.session_id, attempt + 1, TRIES, describe_error(exc))
            if attempt + 1 < TRIES:
                await asyncio.sleep(backoff[min(attempt, len(backoff) - 1)] if backoff else 0)
    assert last is not None
    raise last


async def _recap_all(
    settings: ModelSettings | None,
    client: Any,
    query: str,
    tasks: list[_Task],
    deadline: float,
    backoff: tuple[float, ...],
) -> tuple[list[str | None], str | None]:
    """Recaps for every task (None where unavailable) and, when some are missing, why."""
    if not tasks:
        return [], None
    if settings is None or not settings.is_configured:
        return [None] * len(tasks), "no model configured"
    own_client = None
    if client is None:
        client = own_client = make_client(settings)
    jobs = [asyncio.ensure_future(_recap(client, settings, query, t, backoff)) for t in tasks]
    try:
        done, pending = await asyncio.wait(jobs, timeout=max(0.0, deadline))
        for job in pending:
            job.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        out: list[str | None] = []
        reasons: list[str] = []
        for job in jobs:
            if job in pending:
                out.append(None)
                reasons.append(f"deadline of {deadline:g} s passed")
            elif (error := job.exception()) is not None:
                out.append(None)
                reasons.append(describe_error(error))
            else:
                out.append(job.result())
        return out, (reasons[0] if reasons else None)
    finally:
        if own_client is not None:
            await own_client.close()


# ---------------------------------------------------------------------------------------------
# the tool


def _roles(role_filter: Any) -> list[str] | None:
    if not role_filter:
        return None
    if isinstance(role_filter, str):
        role_filter = role_filter.split(",")
    roles = [str(r).strip() for r in role_filter if str(r).strip()]
    return roles or None


def _error(message: str) -> str:
    return json.dumps({"error": message, "count": 0, "results": []}, ensure_ascii=False)


async def asession_search(
    query: str | bytes | None = "",
    role_filter: Any = None,
    limit: int = 3,
    db: Any = None,
    current_session_id: str | None = None,
    *,
    person_id: str | None = None,
    see_all: bool = True,
    model: ModelSettings | None = None,
    client: Any = None,
    deadline: float = DEFAULT_DEADLINE,
    backoff: tuple[float, ...] = BACKOFF,
    recaps: bool = True,
    embedder: Any = semantic.DEFAULT,
    observe: Callable[[str, float], None] | None = None,
) -> str:
    """The tool's work (see the module docstring). Returns JSON; never raises for bad input or
    model trouble. `observe` hears the search's wall time (`chinwag_search_seconds`; recaps not included)."""
    if db is None:
        return _error("the session database is not available")
    try:
        limit = max(1, min(int(limit), MAX_SESSIONS))
    except (TypeError, ValueError):
        limit = 3
    lineage: list[str] = []
    if current_session_id:
        lineage = await asyncio.to_thread(db.get_lineage, current_session_id)

    text = query.decode("utf-8", errors="replace") if isinstance(query, (bytes, bytearray)) else (query or "")
    text = valid_text(str(text))  # a model's tool arguments may hold a lone surrogate (gateway.text)
    if not str(text).strip():
        rows = await asyncio.to_thread(
            recent_sessions,
            db,
            limit=limit,
            exclude_session_ids=lineage,
            exclude_sources=HIDDEN_SOURCES,
            person_id=person_id,
            see_all=see_all,
        )
        results = [
            {
                "session_id": r["session_id"],
                "title": r.get("title"),
                "source": r.get("source"),
                "when": _when(r.get("started_at")),
                "last_active": _when(r.get("last_active_at")),
                "message_count": r.get("message_count") or 0,
                "preview": r.get("preview") or "",
            }
            for r in rows
        ]
        return json.dumps({"mode": "recent", "count": len(results), "results": results}, ensure_ascii=False)

    plan = plan_query(text)
    started = time.monotonic()
    with telemetry.span("chinwag.recall", {"chinwag.recall.candidates": 0}) as span:
        hits = await asyncio.to_thread(  # (the ranking sets the candidates on this span: the thread has its context)
            find_sessions,
            db,
            text,
            limit=limit,
            exclude_session_ids=lineage,
            exclude_sources=HIDDEN_SOURCES,
            person_id=person_id,
            see_all=see_all,
            role_filter=_roles(role_filter),
            embedder=embedder,
        )
        span.set("chinwag.recall.sessions", len(hits))
    if observe is not None:
        observe("search_seconds", time.monotonic() - started)

    def prepare() -> list[_Task]:
        tasks = []
        for hit in hits:
            rendered = render_messages(_visible_lineage_messages(db, hit.session_id))
            points = [rendered.offsets[m] for m in hit.matched_message_ids if m in rendered.offsets]
            preview = cut_around(rendered.text, points[:1], PREVIEW_CHARS) if rendered.text else "(no messages)"
            tasks.append(_Task(hit, cut_around(rendered.text, points), preview))
        return tasks

    tasks = await asyncio.to_thread(prepare)
    settings = model if recaps else None
    try:
        recap_texts, why = await _recap_all(settings, client, plan.understood or text, tasks, deadline, backoff)
    except Exception as exc:  # e.g. a client that cannot be built: previews for all
        recap_texts, why = [None] * len(tasks), describe_error(exc)
    if not recaps:
        why = "recaps are turned off"
    results = []
    for task, recap in zip(tasks, recap_texts):
        hit = task.hit
        entry = {
            "session_id": hit.session_id,
            "when": _when(hit.started_at),
            "source": hit.source,
            "title": hit.title,
            "last_active": _when(hit.last_active_at),
            "message_count": hit.message_count,
            "matched": hit.matched,
        }
        if recap:
            entry |= {"summary": recap, "summary_kind": "recap"}
        else:
            entry |= {
                "summary": f"[raw preview, no recap: {why or 'unavailable'}]\n{task.preview}",
                "summary_kind": "preview",
            }
        results.append(entry)
    return json.dumps(
        {"mode": "search", "query": plan.understood or str(text).strip(), "count": len(results), "results": results},
        ensure_ascii=False,
    )


def session_search(
    query: str | bytes | None = "",
    role_filter: Any = None,
    limit: int = 3,
    db: Any = None,
    current_session_id: str | None = None,
    **options: Any,
) -> str:
    """Synchronous form (DESIGN.md §10). Runs its own event loop; called from inside a running
    loop it does the work on a helper thread (blocking the caller until done)."""
    coro_args = dict(
        query=query, role_filter=role_filter, limit=limit, db=db, current_session_id=current_session_id, **options
    )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(asession_search(**coro_args))
    box: dict[str, Any] = {}

    def worker() -> None:
        try:
            box["result"] = asyncio.run(asession_search(**coro_args))
        except BaseException as exc:  # surfaced to the caller below
            box["error"] = exc

    thread = threading.Thread(target=worker, name="session-search", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


# ---------------------------------------------------------------------------------------------
# registration


DESCRIPTION = (
    "Recall earlier conversations with this person: every past session is searchable, and this tool "
    "returns a focused recap of each conversation found.\n"
    "Use it whenever the person refers to the past — 'last time', 'we did this before', 'remember "
    "when', 'what did we decide about X', 'that script you wrote for me' — or asks about earlier "
    "work, or when you suspect the problem at hand was solved before. Do not guess about past "
    "conversations: search.\n"
    "Two modes. No query: the most recent conversations (titles, dates, previews), instant. With a "
    "query: the up to 5 conversations that best match, each with a recap.\n"
    "Writing queries: give the distinctive words — names, project words, error codes, file names, "
    "commands, hosts (e.g. 'nginx 502 upstream timeout', 'ERR_004211', 'deploy.sh staging', '部署 网关 "
    "超时'). A whole question also works. Conversations where more of the words occur rank higher, so "
    "no operators are needed; put a fixed phrase in double quotes. Dates help ('on 2 May', "
    "'in June 2024'). The current conversation is never returned."
)

PARAMETERS = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "Words to look for (or a question). Empty: list recent conversations.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 5,
            "description": "How many conversations (default 3, at most 5).",
        },
        "role_filter": {
            "type": "string",
            "description": "Only match messages from these roles, comma separated: user, assistant, tool.",
        },
    },
    "required": [],
}


@dataclass(frozen=True)
class SearchSettings:
    """What the tool is built with (gateway.runtime.agent_factory reads them from the config):
    `recall.deadline_seconds`, `recall.recaps`, the auxiliary model that writes recaps and its
    client (a callable: the client is made when a recap first needs it, and shared with the agent
    factory), and the embedder recall's semantic stage uses (semantic.DEFAULT: the one installed)."""

    deadline: float = DEFAULT_DEADLINE
    recaps: bool = True
    recap_model: ModelSettings | None = None
    recap_client: Callable[[], Any] = lambda: None
    embedder: Any = semantic.DEFAULT
    observe: Callable[[str, float], None] | None = None  # hears each search's wall time (search_seconds)


def make_session_search_tool(settings: SearchSettings | None = None) -> Tool:
    """The tool over `settings` (None: the defaults, no recap model: found sessions get previews)."""
    deps = settings or SearchSettings()

    async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
        person = ctx.source.person_id if ctx.source is not None else None
        see_all = bool(ctx.is_admin or ctx.single_owner)
        if person is None and not see_all:  # never widen recall to everyone because an id is missing
            return _error("cannot tell who is asking, so no earlier conversations can be shown")
        query = args.get("query") or ""
        if not isinstance(query, str):
            query = json.dumps(query, ensure_ascii=False)
        return await asession_search(
            query,
            role_filter=args.get("role_filter"),
            limit=args.get("limit") or 3,
            db=ctx.db,
            current_session_id=ctx.session_id,
            person_id=person,
            see_all=see_all,
            model=deps.recap_model,
            client=deps.recap_client(),
            deadline=deps.deadline,
            recaps=deps.recaps,
            embedder=deps.embedder,
            observe=deps.observe,
        )

    return Tool(name="session_search", description=DESCRIPTION, parameters=PARAMETERS, handler=handler)


SESSION_SEARCH_TOOL = make_session_search_tool()
