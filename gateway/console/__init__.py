"""The web console: browse, search and manage every conversation from a browser (DESIGN §13).

Served by the ops HTTP server (gateway.service.http) at /console/, with its JSON API under
/api/v1/, over the same storage and recall interfaces as the CLI. Server-rendered pages
(Jinja2 templates, one stylesheet, one small script, all shipped in this package: no CDN, no
build step), each also available as JSON.

    auth       who may use it (loopback rule, token, login cookie, CSRF guard)
    reads      what each page shows, as data (no SQL: StorageFace methods and recall)
    routes     the HTTP handlers, pages and API
    markdown   message text as safe HTML
    highlight  where the query's words are in a snippet
    charts     the status page's inline SVG charts
"""

from __future__ import annotations

from typing import Any, Callable

from aiohttp import web

from gateway.console.auth import Access, is_loopback
from gateway.console.reads import MetricsView
from gateway.console.routes import ConsoleRoutes
from gateway.db import StorageFace
from gateway.storage.media import MediaStore

__all__ = ["Access", "ConsoleRoutes", "is_loopback", "mount_console"]


def mount_console(
    app: web.Application,
    db: StorageFace,
    *,
    bind_host: str,
    token: str | None = None,
    metrics: MetricsView | None = None,
    adapters: Callable[[], dict[str, Any]] | None = None,
    media: MediaStore | None = None,
) -> ConsoleRoutes:
    """Add the console's pages, API and access rules to `app` (before it starts). `media`: the
    app's store of attachments' files (None: the console serves none)."""
    routes = ConsoleRoutes(db, Access(bind_host, token), metrics=metrics, adapters=adapters, media=media)
    routes.mount(app)
    return routes
