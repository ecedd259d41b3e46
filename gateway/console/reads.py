"""What the console shows, as plain JSON-ready data: one function per page, shared by the HTML
pages and the JSON API so the two can never disagree.

Everything goes through the storage face (`StorageFace` methods) and recall (`find_sessions`,
`plan_query`), as the CLI does; no SQL here. Request parameters are parsed here too, into typed
filters, with a `BadParam` (a 400) for anything malformed: lone surrogates and NULs are dropped
from text (SQLite cannot store them, and a page cannot encode them), ids that cannot exist are
simply not found, dates must be YYYY-MM-DD.

Attachments are listed with each message: what was sent (kind, type, size, name) and whether its
file is here -- `kept` (served by the console's media route, images shown inline), `not_kept` (too big
or not downloadable: only named), `dropped` (upkeep freed its space) or `missing` (a row says kept but
the store lacks the file, e.g. an import without --with-media before rows were marked).

Paging is keyset, on (last activity, id) of the last row shown: a page deep in 100k sessions
costs what the first one does (bench/console.py), where OFFSET would re-read every skipped row.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, replace
from datetime import date, datetime, timezone
from typing import Any, Callable, Mapping, Protocol
from urllib.parse import quote

from gateway.commands.context import numeric_title_refusal
from gateway.console import highlight
from gateway.db import StorageFace, TitleTaken, UnknownSession, sanitize_title
from gateway.recall import find_sessions, plan_query
from gateway.schedules.model import public_view
from gateway.schedules.store import FaceScheduleStore
from gateway.source import Platform
from gateway.storage.fts import MAX_QUERY_CHARS
from gateway.storage.media import MediaStore

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
MAX_TEXT = 10_000  # characters kept of any text parameter
MAX_ID = 200
TRANSCRIPT_PAGE = 2000  # messages per transcript page
SEARCH_LIMIT = 5  # recall's own cap: the console shows what /search would
PLATFORMS = tuple(p.value for p in Platform)
_SURROGATE_OR_NUL = re.compile("[\ud800-\udfff\x00]")
# what a browser may show inline: raster formats only (an SVG can carry script)
INLINE_IMAGES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class BadParam(ValueError):
    """A request parameter that cannot be understood; the message says which and why."""


class Conflict(ValueError):
    """The change cannot be made as asked (a title another session already has)."""


class MetricsView(Protocol):
    def last_hour(self, name: str) -> list[dict[str, float]]: ...

    def gauge(self, name: str) -> float | dict[str, float] | None: ...

    def observe(self, name: str, value: float) -> None: ...


def clean_text(value: str | None, limit: int = MAX_TEXT) -> str:
    """A parameter as text the store and the page can hold: no lone surrogates, no NULs."""
    return _SURROGATE_OR_NUL.sub("", value or "")[:limit]


def plausible_id(value: str | None) -> str | None:
    """A session id as given, or None when it cannot be one (empty, too long, not text)."""
    if not value or len(value) > MAX_ID or _SURROGATE_OR_NUL.search(value):
        return None
    return value


def _day(value: str, name: str) -> float:
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise BadParam(f"{name} must be a date as YYYY-MM-DD, got {value[:40]!r}") from None
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc).timestamp()


def encode_cursor(row: Mapping[str, Any]) -> str:
    return f"{float(row['last_active_at'])!r}~{row['id']}"


def decode_cursor(value: str) -> tuple[float, str]:
    stamp, sep, sid = value.partition("~")
    try:
        moment = float(stamp)
    except ValueError:
        moment = float("nan")
    if not sep or not sid or moment != moment or abs(moment) == float("inf"):
        raise BadParam("after must be the `next` value of a previous page")
    return moment, sid


@dataclass(frozen=True)
class ListFilters:
    platform: str | None = None
    user: str | None = None
    titled: bool | None = None
    date_from: str | None = None  # YYYY-MM-DD, UTC, inclusive
    date_to: str | None = None  # YYYY-MM-DD, UTC, inclusive
    after: str | None = None  # the cursor
    limit: int = PAGE_SIZE

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> "ListFilters":
        get = lambda name: clean_text(query.get(name), 200).strip() or None
        platform = get("platform")
        if platform is not None and platform not in PLATFORMS:
            raise BadParam(f"platform must be one of {', '.join(PLATFORMS)}")
        titled_text = (get("titled") or "").lower()
        titled = {"": None, "any": None, "1": True, "yes": True, "true": True, "0": False, "no": False}.get(
            titled_text, "bad"
        )
        if titled == "bad":
            raise BadParam("titled must be 1 (titled only), 0 (untitled only) or empty")
        limit_text = get("limit")
        try:
            limit = int(limit_text) if limit_text else PAGE_SIZE
        except ValueError:
            raise BadParam("limit must be a whole number") from None
        if not 1 <= limit <= MAX_PAGE_SIZE:
            raise BadParam(f"limit must be between 1 and {MAX_PAGE_SIZE}")
        filters = cls(get("platform"), get("user"), titled, get("from"), get("to"), get("after"), limit)  # type: ignore[arg-type]
        filters.bounds()  # validate now, so a bad date is a 400 before any read
        if filters.after:
            decode_cursor(filters.after)
        return filters

    def bounds(self) -> tuple[float | None, float | None]:
        start = _day(self.date_from, "from") if self.date_from else None
        end = _day(self.date_to, "to") + 86400 if self.date_to else None
        return start, end

    def params(self, **changes: Any) -> dict[str, str]:
        """The filters as query parameters (for links), with `changes` applied."""
        f = replace(self, **changes)
        out = {
            "platform": f.platform,
            "user": f.user,
            "titled": None if f.titled is None else ("1" if f.titled else "0"),
            "from": f.date_from,
            "to": f.date_to,
            "after": f.after,
            "limit": None if f.limit == PAGE_SIZE else str(f.limit),
        }
        return {k: v for k, v in out.items() if v}


def sessions_page(db: StorageFace, filters: ListFilters) -> dict[str, Any]:
    start, end = filters.bounds()
    rows = db.list_sessions_page(
        source=filters.platform,
        user_id=filters.user,
        titled=filters.titled,
        active_from=start,
        active_before=end,
        after=decode_cursor(filters.after) if filters.after else None,
        limit=filters.limit + 1,
    )
    more = len(rows) > filters.limit
    rows = rows[: filters.limit]
    return {
        "sessions": rows,
        "next": encode_cursor(rows[-1]) if more and rows else None,
        "filters": filters.params(after=None),
    }


def _hit_message(db: StorageFace, ids: list[int]) -> dict | None:
    found = db.get_messages_by_id(ids[:1]) if ids else {}
    return found.get(ids[0]) if ids else None


def search(db: StorageFace, query: str) -> dict[str, Any]:
    """The sessions `query` is about, ranked as `/search` ranks them, with highlighted snippets."""
    text = clean_text(query).strip()
    plan = plan_query(text)
    words = plan.highlight_words()
    started = time.perf_counter()
    hits = find_sessions(db, text, limit=SEARCH_LIMIT, see_all=True) if text else []
    out = []
    for hit in hits:
        message = _hit_message(db, hit.matched_message_ids)
        source_text = message["content"] if message and message.get("content") else (hit.snippet or "")
        snippet, ranges = highlight.snippet(source_text, words)
        out.append(
            {
                "session_id": hit.session_id,
                "title": hit.title,
                "source": hit.source,
                "user_id": hit.user_id,
                "started_at": hit.started_at,
                "last_active_at": hit.last_active_at,
                "message_count": hit.message_count,
                "score": round(hit.score, 4),
                "matched": hit.matched,
                "snippet": snippet,
                "highlights": [list(r) for r in ranges],  # code-point offsets into snippet
                "message": (
                    {"id": message["id"], "session_id": message["session_id"], "role": message["role"]}
                    if message
                    else None
                ),
            }
        )
    return {
        "query": text,
        "understood": plan.understood,
        "highlight_words": words,
        "truncated": len(text) > MAX_QUERY_CHARS,
        "hits": out,
        "seconds": round(time.perf_counter() - started, 4),
    }


def media_url(session_id: str, sha256: str) -> str:
    return f"/console/sessions/{quote(session_id, safe='')}/media/{sha256}"


def plausible_sha256(value: str | None) -> str | None:
    return value if value and _SHA256.fullmatch(value) else None


def image_type(head: bytes) -> str | None:
    """The raster image type the first bytes of a file say it is, or None."""
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _attachment_view(att: dict, session_id: str, media: MediaStore | None) -> dict[str, Any]:
    sha = att.get("sha256")
    if not sha:
        state = "not_kept"
    elif att.get("dropped"):
        state = "dropped"
    else:
        state = "kept" if media is not None and media.exists(sha) else "missing"
    url = media_url(session_id, sha) if state == "kept" and sha else None
    mime = (att.get("mime_type") or "").split(";")[0].strip().lower() or None
    return {
        "id": att["id"],
        "kind": att["kind"],
        "mime_type": att.get("mime_type"),
        "bytes": att.get("bytes"),
        "sha256": sha,
        "file_name": att.get("file_name"),
        "state": state,
        "url": url,
        "inline": bool(url) and att["kind"] == "image" and mime in INLINE_IMAGES,
    }


def _message_view(row: dict) -> dict[str, Any]:
    calls: Any = None
    if row.get("tool_calls"):
        try:
            calls = json.loads(row["tool_calls"])
        except ValueError:
            calls = row["tool_calls"]
    if row["active"]:
        state = "active"
    else:
        state = "superseded" if row["compacted"] else "undone"
    return {
        "id": row["id"],
        "session_id": row["session_id"],
        "role": row["role"],
        "content": row["content"],
        "timestamp": row["timestamp"],
        "tool_calls": calls,
        "tool_name": row.get("tool_name"),
        "tool_call_id": row.get("tool_call_id"),
        "user_id": row.get("user_id"),
        "state": state,
    }


def _brief(db: StorageFace, session_id: str | None) -> dict | None:
    if not session_id:
        return None
    row = db.get_session(session_id)
    return {"id": session_id, "title": row.get("title") if row else None, "exists": row is not None}


def transcript(
    db: StorageFace, session_id: str, after: int | None = None, media: MediaStore | None = None
) -> dict[str, Any] | None:
    """A session, its messages (hidden ones flagged, in order, each with its attachments), its
    lineage and its key's history. `media`: the store, to tell a kept file from a missing one."""
    sid = plausible_id(session_id)
    session = db.get_session(sid) if sid else None
    if session is None or sid is None:
        return None
    rows = db.get_messages(sid, include_inactive=True)
    if after is not None:
        rows = [r for r in rows if r["id"] > after]
    more = len(rows) > TRANSCRIPT_PAGE
    rows = rows[:TRANSCRIPT_PAGE]
    key = session.get("session_key")
    files = db.attachments_of(r["id"] for r in rows)
    messages = []
    for r in rows:
        view = _message_view(r)
        view["attachments"] = [_attachment_view(a, sid, media) for a in files.get(r["id"], [])]
        messages.append(view)
    return {
        "session": session,
        "messages": messages,
        "next_after": rows[-1]["id"] if more and rows else None,
        "parent": _brief(db, session.get("parent_session_id")),
        "children": [_brief(db, child) for child in db.children(sid)],
        "key": db.get_key_entry(key) if key else None,
        "key_history": db.sessions_with_key(key, session.get("user_id")) if key else [],
    }


def rename(db: StorageFace, session_id: str, body: Any) -> dict[str, Any] | None:
    """Set or clear a session's title from a PATCH body `{"title": ...}`; None if no such session."""
    if not isinstance(body, dict) or "title" not in body or set(body) - {"title"}:
        raise BadParam('send a JSON object {"title": "new title"} (null or "" clears it)')
    title = body["title"]
    if title is not None and not isinstance(title, str):
        raise BadParam("title must be a string or null")
    if title and _SURROGATE_OR_NUL.search(title):
        raise BadParam("title holds characters that are not text (a lone surrogate or NUL)")
    refusal = numeric_title_refusal(sanitize_title(title))  # the chat's rule: /resume 12345 is a number
    if refusal:
        raise BadParam(refusal.split(":")[0] + " (/resume N means number N of a list)")
    sid = plausible_id(session_id)
    if sid is None:
        return None
    try:
        db.set_title(sid, title or None)
    except UnknownSession:
        return None
    except TitleTaken as exc:
        raise Conflict(str(exc)) from None
    session = db.get_session(sid)
    return dict(session) if session is not None else None


def delete(db: StorageFace, session_id: str) -> bool:
    sid = plausible_id(session_id)
    return bool(sid) and db.delete_session(sid)  # type: ignore[arg-type]


def export_jsonl(db: StorageFace, session_id: str) -> str | None:
    """The session as one line of the import/export format (DESIGN §10), or None."""
    sid = plausible_id(session_id)
    if sid is None:
        return None
    try:
        record = db.export_session(sid)
    except UnknownSession:
        return None
    return json.dumps(record, ensure_ascii=False) + "\n"


def schedules(db: StorageFace, include_finished: bool) -> dict[str, Any]:
    """Everyone's scheduled jobs by next run (the console is the operator's); finished one-offs
    only when asked."""
    jobs = FaceScheduleStore(db).list_all(include_finished)
    return {"schedules": [public_view(job) for job in jobs], "all": include_finished}


def _count(metrics: MetricsView | None, name: str) -> int | None:
    """A gauge that counts things, as a whole number (the metrics keep floats: `7`, not `7.0`)."""
    value = metrics.gauge(name) if metrics else None
    return int(value) if isinstance(value, (int, float)) else None


def status(
    db: StorageFace, metrics: MetricsView | None, adapters: Callable[[], dict[str, Any]] | None
) -> dict[str, Any]:
    """Adapters' readiness, queue depth, agent cache, file sizes and the last hour's series."""
    try:
        readiness = adapters() if adapters else {"ready": False, "adapters": {}, "detail": "no adapter is running"}
    except Exception as exc:  # the page still shows the rest
        readiness = {"ready": False, "adapters": {}, "detail": f"readiness check failed: {exc}"}
    series = (lambda name: metrics.last_hour(name)) if metrics else (lambda name: [])
    turns = series("turn_seconds")
    return {
        "adapters": readiness,
        "queue_depth": _count(metrics, "queue_depth"),
        "agent_cache": _count(metrics, "agent_cache_size"),
        "mirror_backlog": _count(metrics, "mirror_backlog"),
        "parked_replies": _count(metrics, "outbox_parked"),  # replies the platform keeps refusing (gateway.delivery)
        "storage": {"path": db.path, **db.disk_usage()},  # on Postgres: the database's size, no log of ours
        "last_hour": {
            "minutes": [p["minute"] for p in turns] or [p["minute"] for p in series("messages_in_total")],
            "messages_in": [p["count"] for p in series("messages_in_total")],
            "messages_out": [p["count"] for p in series("messages_out_total")],
            "turns": [p["count"] for p in turns],
            "turn_seconds_avg": [round(p["sum"] / p["count"], 4) if p["count"] else 0.0 for p in turns],
            "turn_seconds_max": [round(p["max"], 4) for p in turns],
        },
    }
