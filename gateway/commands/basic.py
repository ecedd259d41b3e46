"""The commands about the current conversation: /title /undo /retry /compress /status /whoami /stop,
and the agent's tools: /tools /approve /deny.

(/help lists the table, so it lives with the table in gateway.commands.) Each handler takes a
`CommandContext` and returns the reply text, or None when it has nothing to send.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from gateway.commands.context import CommandContext, ascii_number, cut_notice, label, numeric_title_refusal, when
from gateway.db import TitleTaken, sanitize_title
from gateway.language import _, current, n_
from gateway.sessions.access import title_refusal
from gateway.source import SessionSource
from gateway.storage.schema import TITLE_MAX

MAX_UNDO = 50


async def cmd_stop(ctx: CommandContext) -> str:
    # Normally handled on arrival by the runner (never queued); this path runs when idle.
    return await ctx.services.stop_chat(ctx.key)


async def cmd_approve(ctx: CommandContext) -> str:
    return ctx.services.answer_approval(ctx.msg, True, ctx.args)


async def cmd_deny(ctx: CommandContext) -> str:
    return ctx.services.answer_approval(ctx.msg, False, ctx.args)


async def cmd_tools(ctx: CommandContext) -> str:
    return _("Tools the assistant may use here:") + "\n" + "\n".join(ctx.services.tool_lines(ctx.msg))


async def cmd_title(ctx: CommandContext) -> str:
    entry = await ctx.session()
    db = ctx.services.db
    if not ctx.args:
        session = await db.aread(db.get_session, entry.session_id)
        title = session.get("title") if session else None
        return (
            _("This conversation is titled “{title}”.", title=title)
            if title
            else _(
                "This conversation has no title yet. Set one with /title <name>; titled conversations are "
                "easy to /resume."
            )
        )
    refusal = numeric_title_refusal(sanitize_title(ctx.args))
    if refusal:
        return refusal
    try:
        clean = await asyncio.to_thread(db.set_title, entry.session_id, ctx.args)
    except TitleTaken as exc:
        return await asyncio.to_thread(
            title_refusal, db, exc, ctx.source, is_admin=ctx.is_admin, single_owner=ctx.services.single_owner
        )
    except ValueError as exc:
        return _("That title can't be used: {reason}", reason=exc)
    if not clean:
        return _("Title cleared.")
    if cut_notice(ctx.args, clean):
        return _(
            "Titled this conversation “{title}” (cut to {length} characters: titles are at most {max}). "
            "Later, /resume {title} brings it back.",
            title=clean,
            length=len(clean),
            max=TITLE_MAX,
        )
    return _("Titled this conversation “{title}”. Later, /resume {title} brings it back.", title=clean)


async def cmd_undo(ctx: CommandContext) -> str:
    n = 1
    if ctx.args:
        number = ascii_number(ctx.args)
        if number is None or not 1 <= number <= MAX_UNDO:
            return _("Usage: /undo [n] — n is a number of exchanges from 1 to {max}.", max=MAX_UNDO)
        n = number
    entry = await ctx.session()
    db = ctx.services.db
    visible = await asyncio.to_thread(db.get_messages, entry.session_id)
    exchanges = min(n, sum(1 for m in visible if m["role"] == "user"))  # what there is to undo
    hidden = await asyncio.to_thread(db.rewind, entry.session_id, n)
    await ctx.services.forget(entry.session_id)
    if not hidden:
        return _("Nothing to undo in this conversation.")
    if exchanges < n:  # fewer than asked: one parenthesis says both
        return n_(
            "Undid the only exchange there was ({messages} messages; you asked for {asked}). "
            "They are hidden from this conversation but stay in the history.",
            "Undid the {n} exchanges there were ({messages} messages; you asked for {asked}). "
            "They are hidden from this conversation but stay in the history.",
            exchanges,
            messages=hidden,
            asked=n,
        )
    return n_(
        "Undid the last exchange ({messages} messages). They are hidden from this conversation but stay in the history.",
        "Undid the last {n} exchanges ({messages} messages). "
        "They are hidden from this conversation but stay in the history.",
        exchanges,
        messages=hidden,
    )


async def cmd_retry(ctx: CommandContext) -> str | None:
    entry = await ctx.session()
    services = ctx.services
    rows = await asyncio.to_thread(services.db.get_messages, entry.session_id)
    last_user = next((r for r in reversed(rows) if r["role"] == "user"), None)
    if last_user is None:
        return _("Nothing to retry: this conversation has no message of yours yet.")
    # Hide the last exchange (question and reply) from the conversation; it stays searchable.
    await asyncio.to_thread(services.db.supersede_after, entry.session_id, last_user["id"] - 1)
    await services.forget(entry.session_id)
    await services.agent_turn(ctx.key, ctx.msg, entry, last_user["content"] or "")
    return None


MIN_COMPRESS_EXCHANGES = 2  # below this a summary is no shorter than what it summarises


async def cmd_compress(ctx: CommandContext) -> str:
    entry = await ctx.session()
    services = ctx.services
    if services.model_settings.is_configured:
        visible = await asyncio.to_thread(services.db.get_messages, entry.session_id)
        asked = sum(1 for m in visible if m["role"] == "user")
        if 0 < asked < MIN_COMPRESS_EXCHANGES:
            return n_(
                "This conversation is too short to compress ({n} exchange): a summary would be no "
                "shorter. /new starts a fresh one.",
                "This conversation is too short to compress ({n} exchanges): a summary would be no "
                "shorter. /new starts a fresh one.",
                asked,
            )
    return await services.compress(ctx.msg, entry.session_id, auto=False)


async def cmd_status(ctx: CommandContext) -> str:
    entry = ctx.existing()
    services = ctx.services
    lines = []
    if entry is None:
        lines.append(_("No conversation yet in this chat: send a message to start one."))
    else:
        s = await services.db.aread(services.db.get_session, entry.session_id)
        if s is None:
            lines.append(_("No conversation yet in this chat: send a message to start one."))
        else:
            lines += [
                _("Session: {id}", id=s["id"]),
                _("Title: {title}", title=s["title"]) if s.get("title") else _("Title: (none — set one with /title)"),
                _("Messages: {count}", count=s.get("message_count", 0)),
                _("Tokens: {input} in, {output} out", input=s.get("input_tokens", 0), output=s.get("output_tokens", 0)),
                _(
                    "Started: {started}; last active: {active}",
                    started=when(s.get("started_at")),
                    active=when(s.get("last_active_at")),
                ),
            ]
            if s.get("parent_session_id"):
                lines.append(_("Continues: {id}", id=s["parent_session_id"]))
    busy_mode, waiting = services.chat_state(ctx.key)
    lines.append(_("Model: {model}", model=services.model_settings.describe()))
    lines.append(_("When busy: {mode} (waiting here: {waiting})", mode=busy_mode, waiting=waiting))
    lines.append(_("Language: {language} (/language to change)", language=current().label))
    if services.ops_url:
        lines.append(_("Ops: {url} (/healthz, /readyz, /metrics, console at /console/)", url=services.ops_url))
    elif services.ops_down:
        lines.append(_("Ops: not running ({reason})", reason=services.ops_down))
    return "\n".join(lines)


def why_this_key(
    source: SessionSource,
    group_sessions_per_user: bool = True,
    thread_sessions_per_user: bool = False,
) -> str:
    """One sentence on why this source maps to its key (for `/whoami`, in the current language)."""
    if source.chat_type == "dm":
        why = _("a direct chat: one conversation per chat")
    elif source.thread_id is not None or source.chat_type == "thread":
        why = (
            _("a thread: each person has their own conversation here")
            if thread_sessions_per_user
            else _("a thread: everyone in it shares one conversation")
        )
    else:
        why = (
            _("a group: each member has their own conversation")
            if group_sessions_per_user
            else _("a group: the whole chat shares one conversation")
        )
    if source.user_id_alt and source.user_id_alt != source.user_id:
        why = _("{why} (you are identified by your cross-app id)", why=why)
    return why


async def cmd_whoami(ctx: CommandContext) -> str:
    services, source = ctx.services, ctx.source
    store = services.store
    why = why_this_key(source, store.group_sessions_per_user, store.thread_sessions_per_user)
    policy = store.policies.for_source(source)
    you = {"name": source.user_name or "-", "id": source.person_id or _("unknown"), "platform": source.platform.value}
    lines = [
        _("You: {name} (id {id} on {platform}), admin", **you)
        if ctx.is_admin
        else _("You: {name} (id {id} on {platform})", **you),
        _("Session key: {key}", key=ctx.key),
        _("Why: {why}.", why=why),
        _("Reset policy: {policy}.", policy=policy.describe()),
    ]
    entry = ctx.existing()
    session = await services.db.aread(services.db.get_session, entry.session_id) if entry else None
    if session is not None:
        lines.append(_("Current session: {session}", session=label(session)))
        due = policy.next_reset_why(float(session["last_active_at"]))
        if due is not None:
            at = datetime.fromtimestamp(due[0], policy.tz).strftime("%Y-%m-%d %H:%M %Z")
            lines.append(
                _("Next reset: {at}, if the conversation is idle until then", at=at)
                if due[1] == "idle"
                else _("Next reset: {at} (the daily reset)", at=at)
            )
    else:
        lines.append(_("Current session: none yet."))
    return "\n".join(lines)
