"""The console's HTTP routes on the ops server: HTML pages under /console/, JSON under /api/v1/.

Each page is the template of one `reads` function's data; the API returns that same data as
JSON. Reads and rendering run in a worker thread (SQLite and Jinja would otherwise block the
event loop that also answers webhooks and health checks). Handlers hold no SQL and no rules: they
parse, call `reads`, and choose the status code.

Errors: a `reads.BadParam` is a 400, an unknown session a 404, a taken title a 409, all as
`{"error": "..."}` on the API and as a small page on /console/; anything unexpected is logged and
answered 500 without a traceback. Every response under /console/ and /api/v1/ carries a strict
Content-Security-Policy (scripts and styles from the console's own files only), no-store caching,
and no framing.

Files of attachments are served at /console/sessions/<id>/media/<sha256>: only a file some kept
attachment of that session's messages names (the access rule of the transcript itself; the path
on disk comes from the hash, never from the request), streamed from the store. Raster images whose
bytes say they are one are served as that image type for inline display; everything else as
application/octet-stream to download, so no uploaded HTML, SVG or script ever runs in the console's
origin (with nosniff and a sandboxing CSP besides).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from datetime import datetime, timezone
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote, urlencode

import jinja2
from aiohttp import web
from markupsafe import Markup, escape

from agent.transcript import tool_calls_for_person
from gateway.console import auth, charts, highlight, markdown, reads
from gateway.db import StorageFace
from gateway.language import DEFAULT, Language, _, catalog, current, from_accept_language, parse_language, speaking
from gateway.storage.media import MediaStore

log = logging.getLogger(__name__)

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}
PACKAGE = "gateway.console"
MEDIA_CSP = "default-src 'none'; img-src 'self'; sandbox"
LANGUAGE_COOKIE = "chinwag_lang"  # the console's language, set by its switch; else Accept-Language


def _when(value: Any) -> Markup:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return Markup("—")
    moment = datetime.fromtimestamp(value, tz=timezone.utc)
    return Markup('<time datetime="{}">{}</time>').format(moment.isoformat(), moment.strftime("%Y-%m-%d %H:%M"))


def _filesize(value: Any) -> str:
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _number(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, dict):
        return str(int(sum(value.values())))
    return f"{value:g}"


def _duration(seconds: Any) -> str:
    s = float(seconds or 0)
    if s < 90:
        return _("{n} s", n=f"{s:.0f}")
    if s < 5400:
        return _("{n} min", n=f"{s / 60:.0f}")
    return _("{n} h", n=f"{s / 3600:.1f}")


def _figure(value: Any) -> Markup:
    """A number the status page shows large, inside its sentence."""
    return Markup('<span class="n">{}</span>').format(value)


def _html_gettext(msgid: str, /, **named: Any) -> Markup:
    """A template's `_`: the text in the page's language, escaped, its placeholders filled after the
    lookup (escaped, unless a value is already markup such as a link or a <time>); without values
    the text is left as written (the script fills `{reason}` itself)."""
    text = escape(catalog(current()).gettext(msgid))
    return text.format(**named) if named else text


def _html_ngettext(singular: str, plural: str, n: int, /, **named: Any) -> Markup:
    return escape(catalog(current()).ngettext(singular, plural, n)).format(n=n, **named)


def _session_link(session_id: str, text: str, css: str | None = None) -> Markup:
    css_attr = Markup(' class="{}"').format(css) if css else ""
    return Markup('<a{} href="/console/sessions/{}">{}</a>').format(css_attr, _path(session_id), text)


def _session_links(sessions: list[dict[str, Any]], css: str | None = None) -> Markup:
    return Markup(", ").join(_session_link(s["id"], s.get("title") or s["id"], css) for s in sessions)


def page_language(request: web.Request) -> Language:
    """The console's language for `request`: the switch's cookie, else the browser's
    Accept-Language, else English."""
    chosen = request.cookies.get(LANGUAGE_COOKIE)
    if chosen in {language.value for language in Language}:
        return Language(chosen)
    return from_accept_language(request.headers.get("Accept-Language")) or DEFAULT


def make_templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(PACKAGE, "templates"),
        autoescape=True,  # every value is escaped unless a filter here returns Markup
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        when=_when,
        filesize=_filesize,
        number=_number,
        duration=_duration,
        markdown=markdown.render,
        figure=_figure,
    )
    env.globals.update(
        _=_html_gettext,
        n_=_html_ngettext,
        session_link=_session_link,
        session_links=_session_links,
        languages=list(Language),
    )
    return env


def static_dir() -> Path:
    return Path(str(resources.files(PACKAGE).joinpath("static")))


class ConsoleRoutes:
    """The handlers, over one StorageFace, the metrics and the adapters' readiness report."""

    def __init__(
        self,
        db: StorageFace,
        access: auth.Access,
        metrics: reads.MetricsView | None = None,
        adapters: Callable[[], dict[str, Any]] | None = None,
        media: MediaStore | None = None,
    ) -> None:
        self.db = db
        self.access = access
        self.metrics = metrics
        self.adapters = adapters
        self.media = media  # the app's file store (its database copy on Postgres); None: no file is served
        self.templates = make_templates()

    def mount(self, app: web.Application) -> None:
        app.middlewares.append(self.middleware)
        r = app.router
        r.add_get("/console", self.to_console)
        r.add_get("/console/", self.sessions_page)
        r.add_get("/console/search", self.search_page)
        r.add_get("/console/sessions/{id}", self.transcript_page)
        r.add_get("/console/sessions/{id}/media/{sha256}", self.media_file)
        r.add_get("/console/status", self.status_page)
        r.add_get("/console/schedules", self.schedules_page)
        r.add_get("/console/language", self.set_language)
        r.add_get("/console/login", self.login_page)
        r.add_post("/console/login", self.login)
        r.add_post("/console/logout", self.logout)
        r.add_static("/console/static/", static_dir(), append_version=False)
        r.add_get("/api/v1/sessions", self.api_sessions)
        r.add_get("/api/v1/search", self.api_search)
        r.add_get("/api/v1/sessions/{id}", self.api_session)
        r.add_patch("/api/v1/sessions/{id}", self.api_rename)
        r.add_delete("/api/v1/sessions/{id}", self.api_delete)
        r.add_get("/api/v1/sessions/{id}/export", self.api_export)
        r.add_get("/api/v1/status", self.api_status)
        r.add_get("/api/v1/schedules", self.api_schedules)

    # -- the gate: access, errors, headers -----------------------------------------------------
    @web.middleware
    async def middleware(self, request: web.Request, handler: auth.Handler) -> web.StreamResponse:
        if not auth.protected(request.path):
            return await handler(request)
        with speaking(page_language(request)):  # the pages, charts and error pages are in it
            return await self._answer(request, handler)

    async def _answer(self, request: web.Request, handler: auth.Handler) -> web.StreamResponse:
        try:
            response = self.access.refusal(request) or await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:  # a redirect: raised on, as aiohttp wants
                exc.headers.update({"Cache-Control": "no-store", **SECURITY_HEADERS})
                raise
            else:
                response = self._error(request, exc.status, exc.text)
        except reads.BadParam as exc:
            response = self._error(request, 400, str(exc))
        except Exception:
            log.exception("console request %s %s failed", request.method, request.path)
            response = self._error(request, 500, "internal error (see the gateway's log)")
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if not request.path.startswith("/console/static/"):
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    def _error(self, request: web.Request, status: int, message: str | None) -> web.StreamResponse:
        reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        message = message or {404: "not found", 405: "method not allowed"}.get(status, "request refused")
        if message.startswith(f"{status}: "):  # aiohttp's own default text, "404: Not Found"
            message = message[len(f"{status}: ") :].lower()
        if auth.is_api(request.path):
            return web.json_response({"error": message}, status=status)
        html = self.templates.get_template("error.html").render(
            page="error", status=status, reason=reason, message=message, lang=current(), here=request.path_qs
        )
        return web.Response(text=html, status=status, content_type="text/html")

    async def _render(self, request: web.Request, name: str, status: int = 200, **context: Any) -> web.Response:
        context.setdefault("logged_in", self.access.login_needed)
        context.update(lang=current(), here=request.path_qs)
        html = await asyncio.to_thread(lambda: self.templates.get_template(name).render(**context))
        return web.Response(text=html, status=status, content_type="text/html")

    # -- pages ----------------------------------------------------------------------------------
    async def to_console(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/console/")

    async def sessions_page(self, request: web.Request) -> web.Response:
        filters = reads.ListFilters.from_query(request.query)
        data = await asyncio.to_thread(reads.sessions_page, self.db, filters)
        params = filters.params(after=None)
        next_url = "/console/?" + urlencode({**params, "after": data["next"]}) if data["next"] else None
        return await self._render(
            request,
            "sessions.html",
            page="sessions",
            sessions=data["sessions"],
            filters=filters,
            filter_params=params,
            platforms=reads.PLATFORMS,
            next_url=next_url,
            first_url="/console/" + ("?" + urlencode(params) if params else ""),
            deleted=reads.plausible_id(request.query.get("deleted")),
            api_url="/api/v1/sessions" + ("?" + urlencode(filters.params()) if filters.params() else ""),
        )

    async def search_page(self, request: web.Request) -> web.Response:
        query = reads.clean_text(request.query.get("q")).strip()
        result = await self._search(query) if query else {"hits": []}
        for hit in result["hits"]:
            hit["pieces"] = highlight.segments(hit["snippet"], [tuple(r) for r in hit["highlights"]])
        return await self._render(
            request,
            "search.html",
            page="search",
            query=query,
            result=result,
            api_url="/api/v1/search?" + urlencode({"q": query}),
        )

    async def transcript_page(self, request: web.Request) -> web.Response:
        after = _int_param(request, "after")
        data = await asyncio.to_thread(reads.transcript, self.db, request.match_info["id"], after, self.media)
        if data is None:
            raise web.HTTPNotFound(text="no session with that id")
        sid = data["session"]["id"]
        next_url = f"/console/sessions/{_path(sid)}?after={data['next_after']}" if data["next_after"] else None
        for message in data["messages"]:
            message["calls"] = tool_calls_for_person(message["tool_calls"]) if message["tool_calls"] else []
        return await self._render(
            request,
            "transcript.html",
            page="transcript",
            next_url=next_url,
            api_url=f"/api/v1/sessions/{_path(sid)}",
            **data,
        )

    async def media_file(self, request: web.Request) -> web.StreamResponse:
        sid = reads.plausible_id(request.match_info["id"])
        sha = reads.plausible_sha256(request.match_info["sha256"])
        found = await asyncio.to_thread(self.db.session_attachment, sid, sha) if sid and sha else None
        if found is None or sha is None:
            raise web.HTTPNotFound(text="no such file in this session")
        if self.media is None:
            raise web.HTTPNotFound(text="this server keeps no files")
        try:
            path = await asyncio.to_thread(self.media.local, sha)  # fetched once from the shared copy
            with open(path, "rb") as fh:
                head = fh.read(16)
        except FileNotFoundError:
            raise web.HTTPNotFound(text="that file is no longer kept") from None
        image = reads.image_type(head) if found["kind"] == "image" else None
        name = found["file_name"] or f"{found['kind']}-{sha[:12]}"
        disposition = "inline" if image else "attachment"
        ascii_name = "".join(c if c.isascii() and (c.isalnum() or c in "-_. ") else "_" for c in name)[:120]
        headers = {
            "Content-Type": image or "application/octet-stream",
            "Content-Disposition": f"{disposition}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}",
            "Content-Security-Policy": MEDIA_CSP,
        }
        return web.FileResponse(path, headers=headers)

    async def status_page(self, request: web.Request) -> web.Response:
        data = await asyncio.to_thread(reads.status, self.db, self.metrics, self.adapters)
        hour = data["last_hour"]
        messages_chart = charts.line_chart(
            _("Messages per minute"),
            [charts.Series(_("in"), hour["messages_in"]), charts.Series(_("out"), hour["messages_out"])],
        )
        latency_chart = charts.line_chart(
            _("Turn latency"),
            [
                charts.Series(_("mean"), hour["turn_seconds_avg"]),
                charts.Series(_("slowest"), hour["turn_seconds_max"]),
            ],
            unit="s",
        )
        return await self._render(
            request,
            "status.html",
            page="status",
            state=data,
            messages_chart=messages_chart,
            latency_chart=latency_chart,
            api_url="/api/v1/status",
        )

    async def schedules_page(self, request: web.Request) -> web.Response:
        include_finished = request.query.get("all") == "1"
        data = await asyncio.to_thread(reads.schedules, self.db, include_finished)
        return await self._render(
            request,
            "schedules.html",
            page="schedules",
            api_url="/api/v1/schedules" + ("?all=1" if include_finished else ""),
            **data,
        )

    async def set_language(self, request: web.Request) -> web.Response:
        """The language switch: `?to=zh&next=/console/...` keeps the choice in a cookie for a year."""
        chosen = parse_language(request.query.get("to"))
        if chosen is None:
            raise reads.BadParam("to must be one of: " + ", ".join(language.value for language in Language))
        response = web.HTTPFound(auth.safe_next(request.query.get("next")))
        response.set_cookie(
            LANGUAGE_COOKIE, chosen.value, max_age=365 * 86400, path="/console", samesite="Lax", secure=request.secure
        )
        raise response

    async def login_page(self, request: web.Request) -> web.Response:
        if not self.access.login_needed:
            raise web.HTTPFound("/console/")
        return await self._render(
            request, "login.html", page="login", logged_in=False, next=auth.safe_next(request.query.get("next"))
        )

    async def login(self, request: web.Request) -> web.Response:
        if not self.access.login_needed:
            raise web.HTTPFound("/console/")
        form = await request.post()
        token, target = form.get("token"), auth.safe_next(str(form.get("next") or ""))
        if not isinstance(token, str) or not self.access.token_ok(token):
            typed = isinstance(token, str) and token.strip()
            error = _("That token is not right.") if typed else _("Enter the console token (http.console_token).")
            return await self._render(
                request, "login.html", status=401, page="login", logged_in=False, next=target, error=error
            )
        response = web.HTTPFound(target)
        response.set_cookie(
            auth.COOKIE,
            self.access.login_cookie(),
            httponly=True,
            samesite="Strict",
            path="/",
            secure=request.secure,
        )
        raise response

    async def logout(self, request: web.Request) -> web.Response:
        response = web.HTTPFound("/console/login" if self.access.login_needed else "/console/")
        response.del_cookie(auth.COOKIE, path="/")
        raise response

    # -- the JSON API ---------------------------------------------------------------------------
    async def api_sessions(self, request: web.Request) -> web.Response:
        filters = reads.ListFilters.from_query(request.query)
        return _json(await asyncio.to_thread(reads.sessions_page, self.db, filters))

    async def api_search(self, request: web.Request) -> web.Response:
        query = reads.clean_text(request.query.get("q")).strip()
        if not query:
            raise reads.BadParam("q is required: the words to search for")
        return _json(await self._search(query))

    async def _search(self, query: str) -> dict[str, Any]:
        """A search, timed in `chinwag_search_seconds` like the chat's /search and the agent's."""
        started = time.monotonic()
        result = await asyncio.to_thread(reads.search, self.db, query)
        if self.metrics is not None:
            self.metrics.observe("search_seconds", time.monotonic() - started)
        return result

    async def api_session(self, request: web.Request) -> web.Response:
        after = _int_param(request, "after")
        data = await asyncio.to_thread(reads.transcript, self.db, request.match_info["id"], after, self.media)
        if data is None:
            raise web.HTTPNotFound(text="no session with that id")
        return _json(data)

    async def api_rename(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise reads.BadParam('the body must be JSON: {"title": "new title"}') from None
        try:
            session = await asyncio.to_thread(reads.rename, self.db, request.match_info["id"], body)
        except reads.Conflict as exc:
            return web.json_response({"error": str(exc)}, status=409)
        if session is None:
            raise web.HTTPNotFound(text="no session with that id")
        return _json({"session": session})

    async def api_delete(self, request: web.Request) -> web.Response:
        sid = request.match_info["id"]
        if not await asyncio.to_thread(reads.delete, self.db, sid):
            raise web.HTTPNotFound(text="no session with that id")
        return _json({"deleted": sid})

    async def api_export(self, request: web.Request) -> web.Response:
        body = await asyncio.to_thread(reads.export_jsonl, self.db, request.match_info["id"])
        if body is None:
            raise web.HTTPNotFound(text="no session with that id")
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in request.match_info["id"])[:80]
        return web.Response(
            body=body.encode("utf-8"),
            content_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{name}.jsonl"'},
        )

    async def api_schedules(self, request: web.Request) -> web.Response:
        return _json(await asyncio.to_thread(reads.schedules, self.db, request.query.get("all") == "1"))

    async def api_status(self, request: web.Request) -> web.Response:
        return _json(await asyncio.to_thread(reads.status, self.db, self.metrics, self.adapters))


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(data, ensure_ascii=False, default=str), status=status, content_type="application/json"
    )


def _path(session_id: str) -> str:
    return quote(session_id, safe="")


def _int_param(request: web.Request, name: str) -> int | None:
    value = request.query.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise reads.BadParam(f"{name} must be a whole number") from None
