"""Who may use the console: the loopback rule, the token, the login cookie and the CSRF guard.

- Open without login only when the server listens on a loopback address and no token is set.
  Then the request's Host header must name a loopback host too: otherwise any web page could
  point a name it controls at 127.0.0.1 (DNS rebinding) and read the console from the browser.
- Bound anywhere else, every console page and API call needs `http.console_token`: as
  `Authorization: Bearer <token>`, or as the cookie the login form sets. The cookie holds an HMAC
  of the token, not the token, so a copied cookie does not reveal it; it is HttpOnly and
  SameSite=Strict. A set token is required on loopback as well (a reverse proxy on the same host
  makes every visitor look local). Comparisons are constant-time (hmac.compare_digest).
- Bound elsewhere without a token, the console refuses every request: it never serves openly off
  loopback.
- CSRF: a request that changes something (anything but GET/HEAD/OPTIONS) must carry the bearer
  token or come from the console's own origin (its Origin, else Referer, names the Host it was
  sent to). A browser never sends a cross-site request with either, and a cross-site page cannot
  read or set the Authorization header.

Static files (CSS, JS) are public: they hold nothing, and the login page needs them.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from typing import Awaitable, Callable
from urllib.parse import quote, urlsplit

from aiohttp import web

COOKIE = "chinwag_console"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
API_PREFIX = "/api/v1/"
CONSOLE_PREFIX = "/console"
# the language switch only sets a display cookie, and the login page offers it too
PUBLIC_PATHS = ("/console/static/", "/console/login", "/console/language")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost; False for anything else, wildcard binds included."""
    name = (host or "").strip().strip("[]").lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_only(host_header: str) -> str:
    """'127.0.0.1:8765' -> '127.0.0.1', '[::1]:80' -> '::1'."""
    value = host_header.strip()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def cookie_value(token: str) -> str:
    return hmac.new(token.encode("utf-8"), b"chinwag console login", hashlib.sha256).hexdigest()


def same_text(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return False
    return hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))


def protected(path: str) -> bool:
    return path == CONSOLE_PREFIX or path.startswith((CONSOLE_PREFIX + "/", API_PREFIX))


def is_api(path: str) -> bool:
    return path.startswith(API_PREFIX) or path == API_PREFIX.rstrip("/")


class Access:
    """The access rules for one bound address and token."""

    def __init__(self, bind_host: str, token: str | None) -> None:
        self.token = token or None
        self.loopback = is_loopback(bind_host)
        self._cookie = cookie_value(self.token) if self.token else None

    @property
    def open(self) -> bool:
        return self.loopback and self.token is None

    @property
    def login_needed(self) -> bool:
        return self.token is not None

    def bearer_ok(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and same_text(value.strip(), self.token)

    def cookie_ok(self, request: web.Request) -> bool:
        return same_text(request.cookies.get(COOKIE), self._cookie)

    def token_ok(self, token: str | None) -> bool:
        return same_text((token or "").strip(), self.token)

    def login_cookie(self) -> str:
        assert self._cookie is not None
        return self._cookie

    @staticmethod
    def same_origin(request: web.Request) -> bool:
        source = request.headers.get("Origin") or request.headers.get("Referer")
        if not source or source == "null":
            return False
        parts = urlsplit(source)
        return bool(parts.netloc) and parts.netloc.lower() == request.host.lower()

    def refusal(self, request: web.Request) -> web.StreamResponse | None:
        """None when the request may go on; else the response that refuses it."""
        path = request.path
        if not protected(path):
            return None
        public = path.startswith(PUBLIC_PATHS)
        bearer = False
        if self.open:
            if not is_loopback(_host_only(request.host)):
                return deny(request, 403, "this console answers only requests addressed to a loopback host name")
        elif self.token is None:
            return deny(
                request, 403, "the console is off: http.host is not a loopback address and no http.console_token is set"
            )
        elif not public:
            bearer = self.bearer_ok(request)
            if not (bearer or self.cookie_ok(request)):
                if is_api(path):
                    if request.headers.get("Authorization"):  # one was sent: say it is wrong, not missing
                        return deny(request, 401, "that console token is not right (Authorization: Bearer <token>)")
                    return deny(request, 401, "a console token is required (Authorization: Bearer <token>)")
                target = request.path_qs if request.method in SAFE_METHODS else "/console/"
                raise web.HTTPFound(f"/console/login?next={quote(target, safe='/')}")
        if request.method not in SAFE_METHODS and not bearer and not self.same_origin(request):
            return deny(request, 403, "cross-origin request refused: send the bearer token or use the console's page")
        return None


def deny(request: web.Request, status: int, message: str) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="chinwag console"'} if status == 401 else None
    if is_api(request.path) or request.headers.get("Accept", "").startswith("application/json"):
        return web.json_response({"error": message}, status=status, headers=headers)
    return web.Response(text=message + "\n", status=status, headers=headers, content_type="text/plain")


def safe_next(target: str | None) -> str:
    """Where to go after login: a console path only (never another site, never //host)."""
    if not target or not target.startswith("/console") or target.startswith("//") or "\\" in target:
        return "/console/"
    return target
