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
from gateway.sessions.access import title_refusal
from gateway.source import describe_session_key

MAX_UNDO = 50


async def cmd_stop(ctx: CommandContext) -> str:
    # Normally handled on arrival by the runner (never queued); this path runs when idle.
    return await ctx.services.stop_chat(ctx.key)


async def cmd_approve(ctx: CommandContext) -> str:
    return ctx.services.answer_approval(ctx.msg, True, ctx.args)


async def cmd_deny(ctx: CommandContext) -> str:
    return ctx.services.answer_approval(ctx.msg, False, ctx.args)


async def cmd_tools(ctx: CommandContext) -> str:
    return "Tools the assistant may use here:\n" + "\n".join(ctx.services.tool_lines(ctx.msg))


async def cmd_title(ctx: CommandContext) -> str:
    entry = await ctx.session()
    db = ctx.services.db
    if not ctx.args:
        session = await db.aread(db.get_session, entry.session_id)
        title = session.get("title") if session else None
        return (
            f"This conversation is titled “{title}”."
            if title
            else (
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
        return f"That title can't be used: {exc}"
    if not clean:
        return "Title cleared."
    return f"Titled this conversation “{clean}”{cut_notice(ctx.args, clean)}. Later, /resume {clean} brings it back."


async def cmd_undo(ctx: CommandContext) -> str:
    n = 1
    if ctx.args:
        number = ascii_number(ctx.args)
        if number is None or not 1 <= number <= MAX_UNDO:
            return f"Usage: /undo [n] — n is a number of exchanges from 1 to {MAX_UNDO}."
        n = number
    entry = await ctx.session()
    db = ctx.services.db
    visible = await asyncio.to_thread(db.get_messages, entry.session_id)
    exchanges = min(n, sum(1 for m in visible if m["role"] == "user"))  # what there is to undo
    hidden = await asyncio.to_thread(db.rewind, entry.session_id, n)
    await ctx.services.forget(entry.session_id)
    if not hidden:
        return "Nothing to undo in this conversation."
    if exchanges < n:  # fewer than asked: one parenthesis says both
        what = "the only exchange there was" if exchanges == 1 else f"the {exchanges} exchanges there were"
        counted = f"({hidden} messages; you asked for {n})"
    else:
        what = "the last exchange" if exchanges == 1 else f"the last {exchanges} exchanges"
        counted = f"({hidden} messages)"
    return f"Undid {what} {counted}. They are hidden from this conversation but stay in the history."


async def cmd_retry(ctx: CommandContext) -> str | None:
    entry = await ctx.session()
    services = ctx.services
    rows = await asyncio.to_thread(services.db.get_messages, entry.session_id)
    last_user = next((r for r in reversed(rows) if r["role"] == "user"), None)
    if last_user is None:
        return "Nothing to retry: this conversation has no message of yours yet."
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
            return (
                f"This conversation is too short to compress ({asked} exchange): a summary would be no "
                "shorter. /new starts a fresh one."
            )
    return await services.compress(ctx.msg, entry.session_id, auto=False)


async def cmd_status(ctx: CommandContext) -> str:
    entry = ctx.existing()
    services = ctx.services
    lines = []
    if entry is None:
        lines.append("No conversation yet in this chat: send a message to start one.")
    else:
        s = await services.db.aread(services.db.get_session, entry.session_id)
        if s is None:
            lines.append("No conversation yet in this chat: send a message to start one.")
        else:
            lines += [
                f"Session: {s['id']}",
                f"Title: {s.get('title') or '(none — set one with /title)'}",
                f"Messages: {s.get('message_count', 0)}",
                f"Tokens: {s.get('input_tokens', 0)} in, {s.get('output_tokens', 0)} out",
                f"Started: {when(s.get('started_at'))}; last active: {when(s.get('last_active_at'))}",
            ]
            if s.get("parent_session_id"):
                lines.append(f"Continues: {s['parent_session_id']}")
    busy_mode, waiting = services.chat_state(ctx.key)
    lines.append(f"Model: {services.model_settings.describe()}")
    lines.append(f"When busy: {busy_mode} (waiting here: {waiting})")
    if services.ops_url:
        lines.append(f"Ops: {services.ops_url} (/healthz, /readyz, /metrics, console at /console/)")
    elif services.ops_down:
        lines.append(f"Ops: not running ({services.ops_down})")
    return "\n".join(lines)


async def cmd_whoami(ctx: CommandContext) -> str:
    services, source = ctx.services, ctx.source
    store = services.store
    why = describe_session_key(source, store.group_sessions_per_user, store.thread_sessions_per_user)
    policy = store.policies.for_source(source)
    lines = [
        f"You: {source.user_name or '-'} (id {source.person_id or 'unknown'} on {source.platform.value})"
        + (", admin" if ctx.is_admin else ""),
        f"Session key: {ctx.key}",
        f"Why: {why}.",
        f"Reset policy: {policy.describe()}.",
    ]
    entry = ctx.existing()
    session = await services.db.aread(services.db.get_session, entry.session_id) if entry else None
    if session is not None:
        lines.append(f"Current session: {label(session)}")
        due = policy.next_reset_why(float(session["last_active_at"]))
        if due is not None:
            at = datetime.fromtimestamp(due[0], policy.tz).strftime("%Y-%m-%d %H:%M %Z")
            lines.append(
                f"Next reset: {at}, if the conversation is idle until then"
                if due[1] == "idle"
                else f"Next reset: {at} (the daily reset)"
            )
    else:
        lines.append("Current session: none yet.")
    return "\n".join(lines)
