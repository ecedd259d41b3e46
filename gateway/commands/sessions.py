"""Commands that move between conversations: /new, /resume, /search.

Privacy (DESIGN.md §6): /resume and /search reach only sessions the asking person took part in —
started, or wrote in — unless they are an admin or the deployment has a single owner. A session the
person may not see is answered exactly like one that does not exist, so ids cannot be probed.
"""

from __future__ import annotations

import asyncio
from typing import Any, Mapping, Sequence, TypeVar

from gateway.commands.context import CommandContext, ascii_number, messages_label, numeric_title_refusal
from gateway.commands.context import label as _label
from gateway.commands.context import when as _when
from gateway.db import VISIBLE, StorageFace, TitleTaken, sanitize_title
from gateway.language import _, n_
from gateway.recall.rank import find_sessions, recent_sessions
from gateway.sessions.access import may_see_session, title_refusal
from gateway.source import SessionSource

RESUME_LIST = 10
SNIPPET_CHARS = 120


def _one_line(text: str | None, limit: int = SNIPPET_CHARS) -> str:
    text = " ".join((text or "").split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if cut.count("«") > cut.count("»"):  # never end inside a mark: "step two: «wa…" points at nothing
        cut = cut[: cut.rindex("«")].rstrip()
    return cut + "…"


async def cmd_new(ctx: CommandContext) -> str:
    services = ctx.services
    title = sanitize_title(ctx.args) if ctx.args else None
    refusal = numeric_title_refusal(title)
    if refusal:
        return refusal
    old = ctx.existing()
    try:
        entry = await services.store.reset(ctx.source, reason="new", title=title)
    except TitleTaken as exc:  # nothing changed
        return await asyncio.to_thread(
            title_refusal,
            services.db,
            exc,
            ctx.source,
            is_admin=ctx.is_admin,
            single_owner=services.single_owner,
            resume_hint=True,
        )
    if old is not None:
        await services.forget(old.session_id)
    previous = None
    if old is not None and old.session_id != entry.session_id:
        previous = await services.db.aread(services.db.get_session, old.session_id)
    if previous and previous.get("message_count"):
        ref = previous.get("title") or previous["id"]
        if title:
            return _(
                "Started a new conversation “{title}”. The previous one is kept: /resume {ref}", title=title, ref=ref
            )
        return _("Started a new conversation. The previous one is kept: /resume {ref}", ref=ref)
    return _("Started a new conversation “{title}”.", title=title) if title else _("Started a new conversation.")


async def _visible(ctx: CommandContext, session: dict[str, Any]) -> bool:
    if ctx.see_all:
        return True
    participants = await ctx.services.db.aread(ctx.services.db.session_participants, session["id"])
    return may_see_session(session, participants, ctx.source, is_admin=ctx.is_admin, single_owner=False)


async def _listing(ctx: CommandContext) -> list[dict[str, Any]]:
    """The person's recent titled sessions, newest first (everyone's for an admin/single owner)."""
    current = ctx.existing()
    rows = await titled_sessions(ctx.services.db, ctx.source, ctx.see_all, RESUME_LIST + 1)
    return [r for r in rows if current is None or r["id"] != current.session_id][:RESUME_LIST]


async def titled_sessions(db: StorageFace, source: SessionSource, see_all: bool, limit: int) -> list[dict[str, Any]]:
    """The titled sessions `source`'s person may resume, newest first: the one rule for /resume's
    list and for a platform's /resume picker."""
    person = None if see_all else source.person_id
    if person is None and not see_all:
        return []
    rows: list[dict[str, Any]] = await db.aread(
        db.list_sessions_rich, user_id=person, limit=limit, exclude_sources=["tool"], titled_only=True
    )
    return rows


async def resume_choices(
    db: StorageFace, source: SessionSource, see_all: bool, typed: str, limit: int = 25
) -> list[tuple[str, str]]:
    """(label, value) pairs for a /resume picker: the person's titled sessions matching `typed`."""
    typed = typed.strip().lower()
    rows = await titled_sessions(db, source, see_all, 200 if typed else limit)
    out = []
    for row in rows:
        title = row.get("title") or ""
        if typed and typed not in title.lower() and not row["id"].startswith(typed):
            continue
        out.append((f"{title} — {messages_label(row)}", title))
    return out[:limit]


TITLE_MATCH_SCAN = 1000
Row = TypeVar("Row", bound=Mapping[str, Any])  # titled sessions looked through for a part of a title


async def _title_matches(ctx: CommandContext, ref: str) -> list[dict[str, Any]]:
    """The person's titled sessions `titles_matching` `ref`, newest first, at most a list."""
    person = None if ctx.see_all else ctx.source.person_id
    if person is None and not ctx.see_all:
        return []
    rows: list[dict[str, Any]] = await ctx.services.db.aread(
        ctx.services.db.list_sessions_rich,
        user_id=person,
        limit=TITLE_MATCH_SCAN,
        exclude_sources=["tool"],
        titled_only=True,
    )
    return titles_matching(rows, ref)[:RESUME_LIST]


def titles_matching(rows: Sequence[Row], ref: str) -> list[Row]:
    """The rows whose title starts with `ref` (in any letter case), else contains it; a unique
    prefix wins over other substring matches. The one rule for a session named by part of its
    title, in chat (/resume) and on the command line (`chinwag sessions show`)."""
    wanted = " ".join(ref.split()).casefold()
    if not wanted:
        return []
    prefix = [r for r in rows if r.get("title") and str(r["title"]).casefold().startswith(wanted)]
    if len(prefix) == 1:
        return prefix
    return [r for r in rows if r.get("title") and wanted in str(r["title"]).casefold()]


def _latest_in_chain(db: StorageFace, session_id: str) -> str:
    """A compressed conversation continues in its newest child: resume that one."""
    seen = {session_id}
    current = session_id
    while True:
        children = [c for c in db.children(current) if c not in seen]
        if not children:
            return current
        current = children[-1]
        seen.add(current)


async def cmd_resume(ctx: CommandContext) -> str:
    services = ctx.services
    db = services.db
    ref = ctx.args.strip()
    if not ref:
        rows = await _listing(ctx)
        services.remember_listing(ctx.key, [r["id"] for r in rows])
        if not rows:
            return _(
                "You have no titled conversations to resume yet. Give one a title with /title <name>, "
                "or find any conversation with /search <words>."
            )
        lines = [_("Your recent conversations:")]
        for i, r in enumerate(rows, 1):
            lines.append(
                _(
                    "{number}. {title} — {size}, last active {when} ({id})",
                    number=i,
                    title=r["title"],
                    size=messages_label(r),
                    when=_when(r.get("last_active_at")),
                    id=r["id"],
                )
            )
        lines.append(_("Send /resume <number>, /resume <title> or /resume <id>."))
        return "\n".join(lines)

    session = None
    index = ascii_number(ref) if len(ref) <= 3 else None
    if index is not None:
        listing = services.recall_listing(ctx.key)
        if listing is None:
            listing = [r["id"] for r in await _listing(ctx)]
        if not 1 <= index <= len(listing):
            return _("There is no number {number} in your list. Send /resume to see it.", number=index)
        session = await db.aread(db.get_session, listing[index - 1])
    if session is None:
        session = await db.aread(db.find_session, ref)
        if session is not None and not await _visible(ctx, session):
            session = None
    if session is None:
        matches = await _title_matches(ctx, ref)
        if len(matches) > 1:  # several: a numbered list, and `/resume 2` means what was shown
            services.remember_listing(ctx.key, [r["id"] for r in matches])
            lines = [_("Several conversations match “{ref}”:", ref=ref)]
            for i, r in enumerate(matches, 1):
                lines.append(
                    _(
                        "{number}. {title} — last active {when} ({id})",
                        number=i,
                        title=r["title"],
                        when=_when(r.get("last_active_at")),
                        id=r["id"],
                    )
                )
            lines.append(_("Send /resume <number> to pick one."))
            return "\n".join(lines)
        session = matches[0] if matches else None
    if session is None:
        return _("No conversation of yours matches “{ref}”. Send /resume for a list or /search <words>.", ref=ref)

    target_id = await asyncio.to_thread(_latest_in_chain, db, session["id"])
    if target_id != session["id"]:
        target = await db.aread(db.get_session, target_id)
        if target is None or not await _visible(ctx, target):
            target_id, target = session["id"], session
        session = target
    current = ctx.existing()
    if current is not None and current.session_id == session["id"]:
        return _("You are already in {session}.", session=_label(session))
    # One transaction: reopen it, move the key, end the one left, and count resuming as activity
    # (else an idle-reset policy would end the resumed session again on the very next message).
    await services.store.switch(ctx.source, session["id"], reason="resume")
    if current is not None:
        await services.forget(current.session_id)
    await services.forget(session["id"])
    text = n_(
        "Resumed {session}: {n} message, last active {when}.",
        "Resumed {session}: {n} messages, last active {when}.",
        session.get("message_count", 0),
        session=_label(session),
        when=_when(session.get("last_active_at")),
    )
    if session.get("preview"):
        text += "\n" + _("It began with: {preview}", preview=_one_line(session["preview"]))
    return text


async def cmd_search(ctx: CommandContext) -> str:
    services = ctx.services
    db = services.db
    query = ctx.args.strip()
    current = ctx.existing()
    lineage = await db.aread(db.get_lineage, current.session_id) if current else []
    person = ctx.source.person_id
    if not ctx.see_all and person is None:
        return _("I can't tell who you are here, so I can't search your conversations.")
    if not query:
        rows = await asyncio.to_thread(
            recent_sessions, db, limit=5, exclude_session_ids=lineage, person_id=person, see_all=ctx.see_all
        )
        if not rows:
            return _("No earlier conversations yet. Usage: /search <words>")
        lines = [_("Your recent conversations:")]
        for r in rows:
            lines.append(
                _(
                    "• {title} — {when} — /resume {id}\n  {preview}",
                    title=r.get("title") or _("(untitled)"),
                    when=_when(r.get("last_active_at")),
                    id=r["session_id"],
                    preview=_one_line(r.get("preview")),
                )
            )
        return "\n".join(lines)
    started = services.clock()
    hits = await asyncio.to_thread(
        find_sessions, db, query, limit=5, exclude_session_ids=lineage, person_id=person, see_all=ctx.see_all
    )
    services.observe("search_seconds", max(0.0, services.clock() - started))
    if not hits:
        if len(lineage) > 1:  # what this conversation was compressed from is not searched either
            return _(
                "No other conversation of yours mentions “{query}”. "
                "(/search looks beyond this conversation, including what it was summarised from.)",
                query=_one_line(query, 60),
            )
        return _("No conversation of yours mentions “{query}”.", query=_one_line(query, 60))
    answers = await asyncio.to_thread(_answers, db, [h.matched_message_ids[:1] for h in hits])
    lines = [_("Conversations matching “{query}”:", query=_one_line(query, 60))]
    for hit, answer in zip(hits, answers):
        lines.append(
            _(
                "• {title} — {when} — /resume {id}\n  {preview}",
                title=hit.title or _("(untitled)"),
                when=_when(hit.last_active_at or hit.started_at),
                id=hit.session_id,
                preview=_one_line(hit.snippet),
            )
        )
        if answer:
            lines.append(f"  ↳ {_one_line(answer)}")
    return "\n".join(lines)


def _answers(db: StorageFace, best: list[list[int]]) -> list[str | None]:
    """For each hit whose best match is something the person wrote, the reply it got (one line):
    what was found is usually the answer, not the question."""

    def read(conn: Any) -> list[str | None]:
        out: list[str | None] = []
        for ids in best:
            row = (
                conn.execute("SELECT session_id, role FROM messages WHERE id = ?", ids[:1]).fetchone() if ids else None
            )
            if row is None or row[1] != "user":
                out.append(None)
                continue
            reply = conn.execute(
                "SELECT content FROM messages WHERE session_id = ? AND id > ? AND role = 'assistant' "
                f"AND content IS NOT NULL AND content != '' AND {VISIBLE} ORDER BY id LIMIT 1",
                (row[0], ids[0]),
            ).fetchone()
            out.append(reply[0] if reply else None)
        return out

    return db.read(read)
