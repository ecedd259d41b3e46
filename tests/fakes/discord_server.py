"""A fake Discord (REST API + gateway websocket) on 127.0.0.1 for end-to-end tests.

The real discord.py client is pointed at it (`discord.http.Route.BASE` and
`DiscordWebSocket.DEFAULT_GATEWAY`). It speaks the parts of the v10 protocol a bot uses:

- gateway: HELLO, IDENTIFY -> READY (+ GUILD_CREATE per guild), RESUME -> replay missed events +
  RESUMED, HEARTBEAT -> HEARTBEAT_ACK, INVALID_SESSION for an unknown session, close 4004 for a bad
  token and 4014 when privileged intents are not allowed;
- REST: users/@me, oauth2/applications/@me, gateway(/bot), channels/{id}, create/edit message,
  typing, a channel's history (before/after, limit); JSON bodies with `Content-Type: application/json` exactly (discord.py compares it).

Application commands: bulk registration (PUT applications/{app}/commands, and per guild) is stored
in `commands` (scope None = global, else the guild id); `slash()` / `autocomplete()` dispatch an
INTERACTION_CREATE as a person's client would; the interaction callback
(POST interactions/{id}/{token}/callback) and the follow-up webhook (POST webhooks/{app}/{token},
PATCH .../messages/@original or /{id}) are recorded in `interactions[id]` ("responses",
"original", "followups"). Webhook routes are authorised by the interaction token, not the bot's.

It records every call and gateway frame, injects inbound events, and scripts failures: 429 with
`retry_after` (and the `Via` header discord.py expects of a genuine rate limit), 5xx, dropped and
stalled gateway connections, and a revoked token. Like Discord, it echoes the bot's own sent
messages back as MESSAGE_CREATE. With `pace_channels=True` it enforces Discord's message rate per
channel (5 creates/edits/deletes per 5 s, on `clock`): calls beyond it get a 429 (counted in
`rate_refusals`). A create with `enforce_nonce` whose nonce was seen returns the message the first
one made and posts nothing (as Discord does within minutes; counted in `nonce_repeats`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from aiohttp import WSMsgType, web

from tests.fakes.loopback import Served, serve, wait_until

DISCORD_EPOCH_MS = 1420070400000
MESSAGE_CONTENT_INTENT = 1 << 15
PRIVILEGED_INTENTS = (1 << 1) | (1 << 8) | MESSAGE_CONTENT_INTENT  # members, presences, content

# Discord channel types used here
TEXT, DM, PUBLIC_THREAD = 0, 1, 11


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # exactly "application/json": aiohttp's json_response would add "; charset=utf-8", which
    # discord.py does not recognise as JSON
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    return web.Response(status=status, body=json.dumps(data).encode(), headers=hdrs)


def _iso(ts: float | None = None) -> str:
    return datetime.fromtimestamp(ts if ts is not None else time.time(), timezone.utc).isoformat()


@dataclass
class Call:
    method: str
    path: str
    body: Any
    headers: dict[str, str]
    status: int = 0
    at: float = 0.0


@dataclass
class _Failure:
    method: str
    path: re.Pattern[str]
    status: int
    count: int
    retry_after: float | None
    body: Any


@dataclass
class _Conn:
    ws: web.WebSocketResponse
    stalled: bool = False  # stop answering heartbeats and delivering events
    identified: bool = False
    frames_in: list[dict[str, Any]] = field(default_factory=list)


class FakeDiscord:
    def __init__(
        self,
        *,
        token: str = "fake-discord-token",
        bot_id: int = 900000000000000001,
        bot_name: str = "chinwag",
        heartbeat_interval_ms: int = 41250,
        allow_privileged: bool = True,
        clock: Callable[[], float] = time.monotonic,
        pace_channels: bool = False,
    ) -> None:
        self.token = token
        self.clock = clock
        self.pace_channels = pace_channels
        self.rate_refusals = 0
        self._channel_calls: dict[int, list[float]] = {}
        self.bot_id = bot_id
        self.bot_name = bot_name
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.allow_privileged = allow_privileged
        self.application_id = bot_id
        self.echo_own_messages = True
        self.accepting = True  # False: the gateway refuses websocket upgrades (an outage)

        self.guilds: dict[int, dict[str, Any]] = {}
        self.channels: dict[int, dict[str, Any]] = {}  # every known channel/thread by id
        self.messages: dict[int, dict[str, Any]] = {}

        self.calls: list[Call] = []
        self.sent: list[dict[str, Any]] = []  # messages the bot created (POST), in order
        self.nonces: dict[str, int] = {}  # nonce -> the message it created (enforce_nonce)
        self.nonce_repeats = 0  # creates answered with the message an earlier one made
        # set: a create is stored (the message is posted) but answered only once it is set, so a
        # test can kill the bot between Discord accepting a message and the bot learning its id
        self.hold_creates: asyncio.Event | None = None
        self.edits: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.commands: dict[int | None, list[dict[str, Any]]] = {}  # scope -> registered commands
        self.interactions: dict[str, dict[str, Any]] = {}  # interaction id -> what the bot answered
        self._tokens: dict[str, str] = {}  # interaction token -> interaction id
        self.typing: list[int] = []
        self.history_reads: list[tuple[int, dict[str, str]]] = []  # (channel id, query) per history page read
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.connections = 0

        self._failures: list[_Failure] = []
        self._ids = itertools.count(1)
        self._conns: list[_Conn] = []
        self._live: _Conn | None = None  # the connection of the current gateway session
        self.session_id: str | None = None
        self._seq = 0
        self._events: list[dict[str, Any]] = []  # dispatches of this session, for RESUME replay
        self._served: Served | None = None
        self.port = 0
        self.cdn: dict[str, bytes] = {}  # attachment id -> bytes, served at the attachment's url

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> "FakeDiscord":
        app = web.Application()
        app.router.add_get("/gateway", self._ws_handler)
        app.router.add_route("*", "/api/v10/{tail:.*}", self._rest)
        app.router.add_get("/attachments/{id}/{name}", self._attachment)
        self._served = await serve(app)
        self.port = self._served.port
        return self

    async def stop(self) -> None:
        for conn in list(self._conns):
            await conn.ws.close()
        if self._served:
            await self._served.close()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The `platforms.discord` section pointing a bot at this fake, reconnecting quickly."""
        return {
            "token": self.token,
            "api_base": self.api_base,
            "gateway_url": self.gateway_url,
            "guild_ready_timeout": 0.05,
            "reconnect_base": 0.05,
            "reconnect_cap": 0.2,
            **extra,
        }

    # -- world building ----------------------------------------------------------------------
    def snowflake(self) -> int:
        return ((int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22) + next(self._ids)

    def user(self, user_id: int, name: str, *, bot: bool = False, global_name: str | None = None) -> dict:
        data = {"id": str(user_id), "username": name, "discriminator": "0", "avatar": None, "global_name": global_name}
        if bot:
            data["bot"] = True
        return data

    @property
    def bot_user(self) -> dict:
        return self.user(self.bot_id, self.bot_name, bot=True)

    def add_guild(self, guild_id: int, name: str = "guild") -> dict:
        # the bot's member record carries its managed role, as Discord gives a bot on joining
        roles = [
            self._role(guild_id, "@everyone", position=0),
            self._role(self.bot_role_id(guild_id), self.bot_name, position=1, managed=True),
        ]
        me = {
            "user": self.bot_user,
            "roles": [str(self.bot_role_id(guild_id))],
            "joined_at": _iso(),
            "deaf": False,
            "mute": False,
            "flags": 0,
        }
        guild = {
            "id": str(guild_id),
            "name": name,
            "channels": [],
            "threads": [],
            "roles": roles,
            "members": [me],
            "member_count": 3,
            "unavailable": False,
            "features": [],
        }
        self.guilds[guild_id] = guild
        return guild

    @staticmethod
    def bot_role_id(guild_id: int) -> int:
        return guild_id + 1

    @staticmethod
    def _role(role_id: int, name: str, *, position: int, managed: bool = False) -> dict:
        return {
            "id": str(role_id),
            "name": name,
            "permissions": "0",
            "position": position,
            "color": 0,
            "hoist": False,
            "managed": managed,
            "mentionable": True,
            "flags": 0,
        }

    def add_text_channel(self, guild_id: int, channel_id: int, name: str = "general") -> dict:
        channel = {
            "id": str(channel_id),
            "type": TEXT,
            "guild_id": str(guild_id),
            "name": name,
            "position": len(self.guilds[guild_id]["channels"]),
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
        }
        self.guilds[guild_id]["channels"].append(channel)
        self.channels[channel_id] = channel
        return channel

    def add_dm(self, channel_id: int, recipient: dict) -> dict:
        channel = {"id": str(channel_id), "type": DM, "recipients": [recipient], "last_message_id": None}
        self.channels[channel_id] = channel
        return channel

    def thread_payload(self, guild_id: int, parent_id: int, thread_id: int, name: str, owner_id: int) -> dict:
        return {
            "id": str(thread_id),
            "type": PUBLIC_THREAD,
            "guild_id": str(guild_id),
            "parent_id": str(parent_id),
            "owner_id": str(owner_id),
            "name": name,
            "message_count": 0,
            "member_count": 1,
            "rate_limit_per_user": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": _iso(),
                "locked": False,
            },
        }

    async def create_thread(
        self,
        guild_id: int,
        parent_id: int,
        thread_id: int,
        name: str = "thread",
        *,
        owner_id: int = 1,
        announce: bool = True,
    ) -> dict:
        """A thread appears; with `announce`, the bot hears THREAD_CREATE (else it must look it up)."""
        thread = self.thread_payload(guild_id, parent_id, thread_id, name, owner_id)
        self.channels[thread_id] = thread
        if announce:
            self.guilds[guild_id]["threads"].append(thread)
            await self.dispatch("THREAD_CREATE", dict(thread, newly_created=True))
        return thread

    def attachment(self, data: bytes, filename: str, content_type: str | None = None) -> dict:
        """An attachment as Discord describes it, its url served by this fake (as the CDN would)."""
        att_id = str(self.snowflake())
        self.cdn[att_id] = data
        url = f"http://127.0.0.1:{self.port}/attachments/{att_id}/{filename}"
        att = {"id": att_id, "filename": filename, "size": len(data), "url": url, "proxy_url": url}
        if content_type:
            att["content_type"] = content_type
        return att

    async def _attachment(self, request: web.Request) -> web.Response:
        data = self.cdn.get(request.match_info["id"])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    def message_payload(
        self,
        channel_id: int,
        author: dict,
        content: str,
        *,
        mentions: list[dict] | None = None,
        reply_to: dict | None = None,
        attachments: list[dict] | None = None,
        msg_type: int | None = None,
        mention_roles: list[int] | None = None,
    ) -> dict:
        channel = self.channels.get(channel_id, {})
        data: dict[str, Any] = {
            "id": str(self.snowflake()),
            "channel_id": str(channel_id),
            "author": author,
            "content": content,
            "timestamp": _iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": mentions or [],
            "mention_roles": [str(r) for r in mention_roles or []],
            "attachments": attachments or [],
            "embeds": [],
            "pinned": False,
            "flags": 0,
            "type": 0 if msg_type is None else msg_type,
        }
        if channel.get("guild_id"):
            data["guild_id"] = channel["guild_id"]
        if reply_to is not None:
            data["type"] = 19 if msg_type is None else msg_type
            data["message_reference"] = {
                "type": 0,
                "message_id": reply_to["id"],
                "channel_id": reply_to["channel_id"],
                "guild_id": reply_to.get("guild_id"),
            }
            data["referenced_message"] = reply_to
        return data

    async def user_says(self, channel_id: int, author: dict, content: str, **kw: Any) -> dict:
        """Inject a user's message as MESSAGE_CREATE; returns the payload."""
        data = self.message_payload(channel_id, author, content, **kw)
        self.messages[int(data["id"])] = data
        await self.dispatch("MESSAGE_CREATE", data)
        return data

    # -- gateway control ---------------------------------------------------------------------
    async def dispatch(self, event: str, data: Any) -> int:
        """Send a DISPATCH to the live session (or buffer it for a RESUME when none is live)."""
        self._seq += 1
        frame = {"op": 0, "t": event, "s": self._seq, "d": data}
        self._events.append(frame)
        conn = self._live
        if conn is not None and not conn.stalled and not conn.ws.closed:
            await conn.ws.send_str(json.dumps(frame))
        return self._seq

    async def send_raw(self, text: str) -> None:
        """Send an arbitrary frame (e.g. malformed JSON) on the live connection."""
        assert self._live is not None, "no live gateway connection"
        await self._live.ws.send_str(text)

    async def drop_connection(self, *, code: int | None = None) -> None:
        """Drop the live connection: abort the TCP stream, or close with a close code."""
        conn = self._live
        assert conn is not None, "no live gateway connection"
        self._live = None
        if code is None:
            transport = conn.ws._req.transport if conn.ws._req else None  # type: ignore[union-attr]
            if transport is not None:
                transport.abort()
        else:
            await conn.ws.close(code=code)

    def stall(self) -> None:
        """The live connection goes silent: no ACKs, no events (the socket stays open)."""
        assert self._live is not None, "no live gateway connection"
        self._live.stalled = True

    def forget_sessions(self) -> None:
        """The gateway loses its sessions (as after a Discord restart): RESUME gets INVALID_SESSION."""
        self.session_id = None

    def revoke_token(self, new_token: str = "rotated-token") -> None:
        self.token = new_token

    def fail_next(
        self,
        method: str,
        path_regex: str,
        status: int,
        *,
        count: int = 1,
        retry_after: float | None = None,
        body: Any = None,
    ) -> None:
        """The next `count` matching REST calls answer `status` (429s carry `retry_after`)."""
        self._failures.append(_Failure(method.upper(), re.compile(path_regex), status, count, retry_after, body))

    @property
    def live(self) -> bool:
        return self._live is not None and not self._live.ws.closed

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Poll `predicate` until truthy (returns its value) or fail after `timeout` s."""
        return await wait_until(predicate, timeout, error=TimeoutError)

    # -- gateway -----------------------------------------------------------------------------
    async def _ws_handler(self, request: web.Request) -> web.StreamResponse:
        if not self.accepting:
            return web.Response(status=503, text="gateway unavailable")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        conn = _Conn(ws)
        self._conns.append(conn)
        self.connections += 1
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}}))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                conn.frames_in.append(frame)
                await self._on_frame(conn, frame)
        finally:
            self._conns.remove(conn)
            if self._live is conn:
                self._live = None
        return ws

    async def _on_frame(self, conn: _Conn, frame: dict[str, Any]) -> None:
        op, data = frame.get("op"), frame.get("d")
        if op == 1:  # HEARTBEAT
            self.heartbeats += 1
            if not conn.stalled:
                await conn.ws.send_str(json.dumps({"op": 11}))
        elif op == 2:  # IDENTIFY
            self.identifies.append(data)
            if data.get("token") != self.token:
                await conn.ws.close(code=4004, message=b"Authentication failed.")
                return
            if data.get("intents", 0) & PRIVILEGED_INTENTS and not self.allow_privileged:
                await conn.ws.close(code=4014, message=b"Disallowed intent(s).")
                return
            await self._start_session(conn)
        elif op == 6:  # RESUME
            self.resumes.append(data)
            if data.get("token") != self.token:
                await conn.ws.close(code=4004, message=b"Authentication failed.")
                return
            if data.get("session_id") != self.session_id or self.session_id is None:
                await conn.ws.send_str(json.dumps({"op": 9, "d": False}))
                return
            self._live, conn.identified = conn, True
            after = data.get("seq") or 0
            for event in self._events:
                if event["s"] > after:
                    await conn.ws.send_str(json.dumps(event))
            await self.dispatch("RESUMED", {})

    async def _start_session(self, conn: _Conn) -> None:
        self.session_id = uuid.uuid4().hex
        self._seq, self._events = 0, []
        self._live, conn.identified = conn, True
        await self.dispatch(
            "READY",
            {
                "v": 10,
                "user": self.bot_user,
                "session_id": self.session_id,
                "resume_gateway_url": self.gateway_url,
                "shard": [0, 1],
                "guilds": [{"id": str(gid), "unavailable": True} for gid in self.guilds],
                "application": {"id": str(self.application_id), "flags": 0},
            },
        )
        for guild in self.guilds.values():
            await self.dispatch("GUILD_CREATE", guild)

    # -- REST --------------------------------------------------------------------------------
    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"]
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
        call = Call(request.method, path, body, dict(request.headers), at=self.clock())
        self.calls.append(call)
        response = (
            self._scripted_failure(request.method, path)
            or self._channel_pace(request.method, path)
            or await self._route(request, path, body)
        )
        call.status = response.status
        return response

    def _channel_pace(self, method: str, path: str) -> web.Response | None:
        m = re.fullmatch(r"/channels/(\d+)/messages(/\d+)?", path)
        if not self.pace_channels or m is None or method not in ("POST", "PATCH", "DELETE"):
            return None
        now = self.clock()
        recent = [t for t in self._channel_calls.get(int(m.group(1)), []) if t > now - 5.0]
        if len(recent) >= 5:
            self.rate_refusals += 1
            retry = recent[0] + 5.0 - now
            return _json(
                {"message": "You are being rate limited.", "retry_after": retry, "global": False},
                429,
                {"Via": "1.1 google", "Retry-After": str(max(1, round(retry))), "X-RateLimit-Scope": "shared"},
            )
        self._channel_calls[int(m.group(1))] = [*recent, now]
        return None

    def _scripted_failure(self, method: str, path: str) -> web.Response | None:
        for failure in self._failures:
            if failure.count > 0 and failure.method == method and failure.path.search(path):
                failure.count -= 1
                if failure.status == 429:
                    retry = failure.retry_after if failure.retry_after is not None else 0.05
                    return _json(
                        {"message": "You are being rate limited.", "retry_after": retry, "global": False},
                        429,
                        {
                            "Via": "1.1 google",
                            "Retry-After": str(max(1, round(retry))),
                            "X-RateLimit-Limit": "5",
                            "X-RateLimit-Remaining": "0",
                            "X-RateLimit-Reset-After": str(retry),
                            "X-RateLimit-Bucket": "fakebucket",
                            "X-RateLimit-Scope": "user",
                        },
                    )
                return _json(failure.body or {"message": "scripted failure", "code": 0}, failure.status)
        return None

    async def _route(self, request: web.Request, path: str, body: Any) -> web.Response:
        if path.startswith(("/interactions/", "/webhooks/")):
            return self._interaction_route(request.method, path, body)
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return _json({"message": "401: Unauthorized", "code": 0}, 401)
        method = request.method
        if method == "GET" and path == "/users/@me":
            return _json(self.bot_user)
        if method == "GET" and path == "/oauth2/applications/@me":
            return _json(
                {
                    "id": str(self.application_id),
                    "name": self.bot_name,
                    "description": "",
                    "icon": None,
                    "bot_public": True,
                    "bot_require_code_grant": False,
                    "owner": self.user(1, "owner"),
                    "verify_key": "00",
                    "flags": 0,
                }
            )
        if method == "GET" and path in ("/gateway", "/gateway/bot"):
            return _json(
                {
                    "url": self.gateway_url,
                    "shards": 1,
                    "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1},
                }
            )
        m = re.fullmatch(r"/applications/(\d+)(?:/guilds/(\d+))?/commands", path)
        if m and method == "PUT":
            return self._register_commands(m.group(2), body)
        m = re.fullmatch(r"/channels/(\d+)(/.*)?", path)
        if not m:
            return _json({"message": "404: Not Found", "code": 0}, 404)
        channel_id, rest = int(m.group(1)), m.group(2) or ""
        channel = self.channels.get(channel_id)
        if channel is None:
            return _json({"message": "Unknown Channel", "code": 10003}, 404)
        if method == "GET" and rest == "":
            return _json(channel)
        if method == "POST" and rest == "/typing":
            self.typing.append(channel_id)
            return web.Response(status=204)
        if method == "POST" and rest == "/messages":
            return await self._create_message(channel_id, body)
        if method == "GET" and rest == "/messages":
            self.history_reads.append((channel_id, dict(request.query)))
            return self._history(channel_id, request.query)
        m = re.fullmatch(r"/messages/(\d+)", rest)
        if method == "PATCH" and m:
            return self._edit_message(int(m.group(1)), body)
        if method == "DELETE" and m:
            if self.messages.pop(int(m.group(1)), None) is None:
                return _json({"message": "Unknown Message", "code": 10008}, 404)
            self.deleted.append(m.group(1))
            return web.Response(status=204)
        return _json({"message": "405: Method Not Allowed", "code": 0}, 405)

    def _history(self, channel_id: int, query: Any) -> web.Response:
        """GET /channels/{id}/messages as Discord answers it: `limit` 1-100 (default 50), at most one
        anchor (`before` or `after`; `around` is not served); the page is the `limit` messages nearest
        the anchor (with `after`, the oldest ones past it), always sent newest first."""
        try:
            limit = int(query.get("limit", 50))
            anchors = {k: int(query[k]) for k in ("before", "after") if k in query}
        except ValueError:
            return _json({"message": "Invalid Form Body", "code": 50035}, 400)
        if not 1 <= limit <= 100 or len(anchors) > 1 or "around" in query:
            return _json({"message": "Invalid Form Body", "code": 50035}, 400)
        ids = sorted(i for i, m in self.messages.items() if int(m["channel_id"]) == channel_id)
        if "after" in anchors:
            page = [i for i in ids if i > anchors["after"]][:limit]
        elif "before" in anchors:
            page = [i for i in ids if i < anchors["before"]][-limit:]
        else:
            page = ids[-limit:]
        return _json([self.messages[i] for i in reversed(page)])

    async def _create_message(self, channel_id: int, body: Any) -> web.Response:
        content = (body or {}).get("content") or ""
        if len(content) > 2000:
            return _json(
                {
                    "message": "Invalid Form Body",
                    "code": 50035,
                    "errors": {
                        "content": {
                            "_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]
                        }
                    },
                },
                400,
            )
        if not content:
            return _json({"message": "Cannot send an empty message", "code": 50006}, 400)
        nonce = (body or {}).get("nonce")
        if nonce is not None and (body or {}).get("enforce_nonce") and str(nonce) in self.nonces:
            # Discord: a repeat of an enforced nonce (within minutes) returns the first message
            self.nonce_repeats += 1
            first = self.messages[self.nonces[str(nonce)]]
            return _json({k: v for k, v in first.items() if k != "request"})
        reply_to = None
        ref = (body or {}).get("message_reference")
        if ref:
            reply_to = self.messages.get(int(ref["message_id"]))
            if reply_to is None and ref.get("fail_if_not_exists", True):
                return _json({"message": "Invalid Form Body", "code": 50035}, 400)
        data = self.message_payload(channel_id, self.bot_user, content, reply_to=reply_to)
        data["request"] = body  # what the client sent (allowed_mentions etc.), for assertions
        data["components"] = (body or {}).get("components") or []
        if nonce is not None:
            data["nonce"] = nonce
            if (body or {}).get("enforce_nonce"):
                self.nonces[str(nonce)] = int(data["id"])
        self.messages[int(data["id"])] = data
        self.sent.append(data)
        if self.echo_own_messages:
            await self.dispatch("MESSAGE_CREATE", {k: v for k, v in data.items() if k != "request"})
        if self.hold_creates is not None:
            await self.hold_creates.wait()
        return _json({k: v for k, v in data.items() if k != "request"})

    def _edit_message(self, message_id: int, body: Any) -> web.Response:
        message = self.messages.get(message_id)
        if message is None:
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        content = (body or {}).get("content") or ""
        if len(content) > 2000:
            return _json({"message": "Invalid Form Body", "code": 50035}, 400)
        message["content"] = content
        if "components" in (body or {}):  # as on Discord, an edit that leaves them out keeps them
            message["components"] = body["components"]
        message["edited_timestamp"] = _iso()
        self.edits.append({"id": str(message_id), "content": content})
        return _json({k: v for k, v in message.items() if k != "request"})

    # -- application commands and interactions ----------------------------------------------------
    def _register_commands(self, guild_id: str | None, body: Any) -> web.Response:
        if not isinstance(body, list):
            return _json({"message": "Invalid Form Body", "code": 50035}, 400)
        stored = []
        for command in body:
            name = command.get("name", "")
            if not re.fullmatch(r"[-_a-z0-9]{1,32}", name) or not 1 <= len(command.get("description", "")) <= 100:
                return _json({"message": "Invalid Form Body", "code": 50035, "errors": {"name": name}}, 400)
            stored.append(
                {
                    "type": 1,
                    "options": [],
                    "default_member_permissions": None,
                    "nsfw": False,
                    **command,
                    "id": str(self.snowflake()),
                    "application_id": str(self.application_id),
                    "version": str(self.snowflake()),
                    **({"guild_id": guild_id} if guild_id else {}),
                }
            )
        self.commands[int(guild_id) if guild_id else None] = stored
        return _json(stored)

    def command_named(self, name: str, guild_id: int | None = None) -> dict[str, Any] | None:
        for scope in (guild_id, None):
            for command in self.commands.get(scope, []):
                if command["name"] == name:
                    return command
        return None

    async def slash(
        self,
        channel_id: int,
        user: dict,
        name: str,
        options: dict[str, Any] | None = None,
        *,
        focused: str | None = None,
        kind: int = 2,
        locale: str = "en-US",
    ) -> str:
        """A person runs `/name` (kind 2) or types into an option (`autocomplete`, kind 4) in a
        channel; returns the interaction id. Option types come from the registered command."""
        channel = self.channels[channel_id]
        guild_id = int(channel["guild_id"]) if channel.get("guild_id") else None
        command = self.command_named(name, guild_id)
        if command is None:
            raise AssertionError(f"/{name} is not registered")
        kinds = {o["name"]: o["type"] for o in command.get("options") or []}
        opts = []
        for key, value in (options or {}).items():
            option: dict[str, Any] = {"name": key, "type": kinds[key], "value": value}
            if key == focused:
                option["focused"] = True
            opts.append(option)
        payload: dict[str, Any] = {"id": command["id"], "name": name, "type": 1, "options": opts}
        if guild_id:
            payload["guild_id"] = str(guild_id)
        return await self._interact(channel_id, user, kind, payload, locale=locale)

    async def press(self, message: dict[str, Any], user: dict, custom_id: str) -> str:
        """A person presses the button `custom_id` on a message the bot sent (a component
        interaction, type 3); returns the interaction id."""
        extra = {"message": {k: v for k, v in message.items() if k != "request"}}
        return await self._interact(
            int(message["channel_id"]), user, 3, {"custom_id": custom_id, "component_type": 2}, extra
        )

    async def _interact(
        self,
        channel_id: int,
        user: dict,
        kind: int,
        payload: dict[str, Any],
        extra: dict[str, Any] | None = None,
        locale: str = "en-US",
    ) -> str:
        """Dispatch an interaction of `kind` with `payload` as its data, by `user` in the channel."""
        channel = self.channels[channel_id]
        guild_id = int(channel["guild_id"]) if channel.get("guild_id") else None
        interaction_id = str(self.snowflake())
        token = f"itok-{uuid.uuid4().hex}"
        self._tokens[token] = interaction_id
        self.interactions[interaction_id] = {
            "responses": [],
            "original": None,
            "followups": [],
            "token": token,
            "channel_id": channel_id,
        }
        data: dict[str, Any] = {
            "id": interaction_id,
            "application_id": str(self.application_id),
            "type": kind,
            "token": token,
            "version": 1,
            "data": payload,
            "channel_id": str(channel_id),
            "channel": channel,
            "locale": locale,  # the person's client language
            "app_permissions": "2248473465835073",
            "entitlements": [],
            "attachment_size_limit": 8388608,
            "authorizing_integration_owners": {"0": str(guild_id)} if guild_id else {"1": user["id"]},
            "context": 0 if guild_id else 1,
            **(extra or {}),
        }
        if guild_id:
            data["guild_id"] = str(guild_id)
            data["guild_locale"] = "en-US"
            data["member"] = {
                "user": user,
                "roles": [],
                "joined_at": _iso(),
                "deaf": False,
                "mute": False,
                "flags": 0,
                "permissions": "2248473465835073",
            }
        else:
            data["user"] = user
        await self.dispatch("INTERACTION_CREATE", data)
        return interaction_id

    async def autocomplete(self, channel_id: int, user: dict, name: str, option: str, typed: str) -> str:
        return await self.slash(channel_id, user, name, {option: typed}, focused=option, kind=4)

    def _interaction_route(self, method: str, path: str, body: Any) -> web.Response:
        m = re.fullmatch(r"/interactions/(\d+)/([^/]+)/callback", path)
        if m and method == "POST":
            record = self.interactions.get(m.group(1))
            if record is None or record["token"] != m.group(2):
                return _json({"message": "Unknown interaction", "code": 10062}, 404)
            if record["responses"]:
                return _json({"message": "Interaction has already been acknowledged.", "code": 40060}, 400)
            record["responses"].append(body)
            kind = (body or {}).get("type")
            flags = ((body or {}).get("data") or {}).get("flags") or 0
            record["ephemeral"] = bool(flags & 64)
            if kind == 4:  # answered at once with a message
                record["original"] = {"content": body["data"].get("content", ""), "flags": flags}
            return _json(
                {
                    "interaction": {
                        "id": m.group(1),
                        "type": 2,
                        "response_message_loading": kind == 5,
                        "response_message_ephemeral": bool(flags & 64),
                    },
                    "resource": {"type": kind},
                }
            )
        m = re.fullmatch(r"/webhooks/(\d+)/([^/]+)(?:/messages/(@original|\d+))?", path)
        if not m or m.group(2) not in self._tokens:
            return _json({"message": "Unknown Webhook", "code": 10015}, 404)
        record = self.interactions[self._tokens[m.group(2)]]
        channel_id = int(record["channel_id"])
        content = (body or {}).get("content") or ""
        if len(content) > 2000:
            return _json({"message": "Invalid Form Body", "code": 50035}, 400)
        target = m.group(3)
        if method == "POST" and target is None:
            flags = (body or {}).get("flags") or 0
            message = self.message_payload(channel_id, self.bot_user, content)
            message["flags"] = flags
            message["webhook_id"] = str(self.application_id)
            record["followups"].append(message)
            self.messages[int(message["id"])] = message
            return _json(message)
        if method == "PATCH" and target == "@original":
            if not record["responses"]:
                return _json({"message": "Unknown Message", "code": 10008}, 404)
            original = record.get("original") or {}
            if "id" not in original:
                original = {
                    **self.message_payload(channel_id, self.bot_user, content),
                    "flags": original.get("flags", 0),
                }
                original["webhook_id"] = str(self.application_id)
            original["content"] = content
            original.setdefault("edits", 0)
            original["edits"] += 1
            record["original"] = original
            return _json({k: v for k, v in original.items() if k != "edits"})
        if method == "PATCH" and target:
            message = self.messages.get(int(target))
            if message is None:
                return _json({"message": "Unknown Message", "code": 10008}, 404)
            message["content"] = content
            return _json(message)
        return _json({"message": "405: Method Not Allowed", "code": 0}, 405)

    def answer_text(self, interaction_id: str) -> list[str]:
        """What the person sees as the interaction's answer: the original response, then follow-ups."""
        record = self.interactions[interaction_id]
        out = [record["original"]["content"]] if record.get("original") and "content" in record["original"] else []
        return out + [m["content"] for m in record["followups"]]
