"""A fake Telegram Bot API server on 127.0.0.1 for end-to-end tests of the real SDK.

Serves ``/bot<token>/<method>`` like api.telegram.org (form, multipart, JSON or query parameters;
method names case-insensitive) and answers in the Bot API envelope
``{"ok": true, "result": ...}`` / ``{"ok": false, "error_code": ..., "description": ...}``.

Implemented: getMe, getUpdates (long poll with timeout and offsets; 409 while a webhook is set;
an older poll is terminated with 409 when a newer one arrives), sendMessage (MarkdownV2 really
parsed: unescaped reserved characters and unclosed entities give the real 400 "can't parse
entities"; 4096 UTF-16 unit limit after entity parsing), editMessageText (without `reply_markup` it
drops the inline keyboard, as Telegram does), sendChatAction, setMyCommands, deleteWebhook,
setWebhook (updates are then POSTed to the webhook URL with the secret header), getWebhookInfo.

Flood control (opt in with `pace_chats=True`): like Telegram, a chat takes about one message or
edit a second (private) and one per 3 s (groups) -- sendMessage, editMessageText and deleteMessage
coming quicker get 429 with `retry_after`, counted in `flood_refusals`. Time is `clock` (default
time.monotonic; tests pass a virtual clock's `now`), which also stamps `calls`.

Test controls: `push_message` / `push_raw` inject updates, `calls` records every request,
`fail(method, kind)` scripts failures (retry_after, server_error, parse_entities, blocked, drop,
hang, unauthorized, migrated), `blocked_chats` makes sends to a chat fail with 403, `revoke_token()`
makes the token invalid.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import aiohttp
from aiohttp import web

from tests.fakes.loopback import Served, serve, wait_until

RESERVED_V2 = set("_*[]()~`>#+-=|{}.!")


class MarkdownV2Error(ValueError):
    pass


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def parse_markdown_v2(text: str) -> str:
    """Parse MarkdownV2 as the Bot API does (for the constructs it has) and return the plain
    text. Raises MarkdownV2Error with Telegram's wording on invalid markup."""
    out: list[str] = []
    stack: list[str] = []
    i, n = 0, len(text)

    def byte_offset(pos: int) -> int:
        return len(text[:pos].encode("utf-8"))

    def toggle(kind: str) -> None:
        if kind in stack:
            if stack[-1] != kind:
                raise MarkdownV2Error(f"Can't find end of {stack[-1]} entity at byte offset {byte_offset(i)}")
            stack.pop()
        else:
            stack.append(kind)

    def read_code(start: int, closing: str) -> int:
        """Read code/pre content from `start` until the unescaped `closing`; return index after it."""
        j = start
        while j < n:
            if text[j] == "\\":
                if j + 1 < n and text[j + 1] in "`\\":
                    out.append(text[j + 1])
                    j += 2
                    continue
                raise MarkdownV2Error("Character '\\' is reserved and must be escaped with the preceding '\\'")
            if text.startswith(closing, j):
                return j + len(closing)
            if text[j] == "`":
                raise MarkdownV2Error(
                    f"Can't find end of {'Pre' if closing == '```' else 'Code'} entity at byte offset {byte_offset(start)}"
                )
            out.append(text[j])
            j += 1
        raise MarkdownV2Error(
            f"Can't find end of {'Pre' if closing == '```' else 'Code'} entity at byte offset {byte_offset(start)}"
        )

    while i < n:
        c = text[i]
        line_start = i == 0 or text[i - 1] == "\n"
        if c == "\\":
            if i + 1 < n and 1 <= ord(text[i + 1]) <= 126:
                out.append(text[i + 1])
                i += 2
                continue
            raise MarkdownV2Error("Character '\\' is reserved and must be escaped with the preceding '\\'")
        if text.startswith("```", i):
            j = i + 3
            nl = text.find("\n", j)
            if nl != -1 and all(ch.isalnum() or ch in "+#._-" for ch in text[j:nl]):
                j = nl + 1  # language line
            i = read_code(j, "```")
            continue
        if c == "`":
            i = read_code(i + 1, "`")
            continue
        if c == "*":
            toggle("Bold")
        elif c == "_":
            if text.startswith("__", i):
                toggle("Underline")
                i += 1
            else:
                toggle("Italic")
        elif c == "~":
            toggle("Strikethrough")
        elif c == "|" and text.startswith("||", i):
            toggle("Spoiler")
            i += 1
        elif c == "[":
            stack.append("TextUrl")
        elif c == "]":
            if not stack or stack[-1] != "TextUrl":
                raise MarkdownV2Error("Character ']' is reserved and must be escaped with the preceding '\\'")
            if i + 1 >= n or text[i + 1] != "(":
                raise MarkdownV2Error(f"Can't find end of TextUrl entity at byte offset {byte_offset(i)}")
            j = i + 2
            while j < n and text[j] != ")":
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise MarkdownV2Error(f"Can't find end of URL at byte offset {byte_offset(i)}")
            stack.pop()
            i = j
        elif c == ">" and line_start:
            pass  # block quote marker
        elif c in RESERVED_V2:
            raise MarkdownV2Error(f"Character '{c}' is reserved and must be escaped with the preceding '\\'")
        else:
            out.append(c)
        i += 1
    if stack:
        raise MarkdownV2Error(f"Can't find end of {stack[-1]} entity at byte offset {byte_offset(n)}")
    return "".join(out)


class ApiError(Exception):
    def __init__(self, code: int, description: str, parameters: dict | None = None) -> None:
        super().__init__(description)
        self.code, self.description, self.parameters = code, description, parameters


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


@dataclass
class Failure:
    kind: str
    retry_after: int = 1
    status: int = 500


class FakeTelegram:
    """One fake bot. `base_url` is what goes into the adapter's `base_url` setting."""

    PACED = ("sendmessage", "editmessagetext", "deletemessage")
    PACE = {"private": 1.0, "group": 3.0}  # seconds between paced calls per chat

    def __init__(
        self,
        token: str = "123456:TEST-secret-token",
        username: str = "chinwag_bot",
        *,
        clock: Callable[[], float] = time.monotonic,
        pace_chats: bool = False,
    ) -> None:
        self.token = token
        self.clock = clock
        self.pace_chats = pace_chats
        self.flood_refusals = 0
        self._last_paced: dict[int, float] = {}
        self.valid_tokens = {token}
        self.bot_user = {
            "id": int(token.split(":")[0]),
            "is_bot": True,
            "first_name": "Chinwag",
            "username": username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }
        self.calls: list[Call] = []
        self.peers: set[Any] = set()  # the client sockets (host, port) API calls came over
        self.hold: asyncio.Event | None = None  # set: API answers wait until it is set
        self.updates: list[dict[str, Any]] = []
        self.next_update_id = 1000
        self.next_press = 0  # callback query ids (press)
        self.answered_presses: list[str] = []  # answerCallbackQuery ids
        self.messages: dict[tuple[int, int], dict[str, Any]] = {}
        self.next_message_id: dict[int, int] = {}
        self.chats: dict[int, dict[str, Any]] = {}
        self.failures: dict[str, list[Failure]] = {}
        self.blocked_chats: set[int] = set()
        self.commands: list[dict[str, str]] = []  # the menu set without a language_code
        self.menus: dict[str | None, list[dict[str, str]]] = {}  # language_code -> the menu set for it
        self.webhook: dict[str, Any] | None = None
        self.webhook_deliveries: list[int] = []  # HTTP statuses of webhook POSTs
        self.files: dict[str, bytes] = {}  # file_id -> bytes, served by getFile + the file URL
        self.downloads: list[str] = []  # file paths downloaded, in order
        self._changed = asyncio.Condition()
        self._poll_generation = 0
        self._release = asyncio.Event()
        self._served: Served | None = None
        self._client: aiohttp.ClientSession | None = None
        self.port = 0

    # -- server lifecycle ---------------------------------------------------------------------
    async def start(self, port: int = 0) -> "FakeTelegram":
        """Serve on 127.0.0.1 (`port` 0: any free port; a fixed one to come back where a client
        already points)."""
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._served = await serve(app, port, access_log=None)
        self.port = self._served.port
        self._client = aiohttp.ClientSession()
        return self

    async def stop(self) -> None:
        self._release.set()
        async with self._changed:
            self._poll_generation += 1
            self._changed.notify_all()
        if self._client:
            await self._client.close()
        if self._served:
            await self._served.close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/file/bot"

    def add_file(self, data: bytes, **fields: Any) -> dict[str, Any]:
        """Store a file as the Bot API would and return its description (file_id, file_size,
        plus `fields`, e.g. mime_type, file_name, width/height, duration)."""
        file_id = f"F{len(self.files) + 1:04d}"
        self.files[file_id] = data
        return {"file_id": file_id, "file_unique_id": "u" + file_id, "file_size": len(data), **fields}

    # -- test controls ------------------------------------------------------------------------
    def fail(self, method: str, kind: str, times: int = 1, **opts: Any) -> None:
        """Script `times` failures of `method` (lower-case match). Kinds: retry_after,
        server_error (`status`), parse_entities, blocked, drop, hang, unauthorized,
        migrated (`status` carries the new chat id)."""
        self.failures.setdefault(method.lower(), []).extend(Failure(kind, **opts) for _ in range(times))

    def release_hangs(self) -> None:
        self._release.set()

    def revoke_token(self) -> None:
        self.valid_tokens.discard(self.token)

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method.lower() == method.lower()]

    def sent(self, chat_id: int | None = None) -> list[dict[str, Any]]:
        """Messages the bot sent (as stored: message dict plus `_parse_mode`/`_raw_text`)."""
        return [
            m
            for (cid, _), m in sorted(self.messages.items(), key=lambda kv: kv[1]["_seq"])
            if m.get("from", {}).get("id") == self.bot_user["id"] and (chat_id is None or cid == chat_id)
        ]

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
        return await wait_until(predicate, timeout)

    # chats and users --------------------------------------------------------------------------
    @staticmethod
    def user(user_id: int, first_name: str = "Ann", username: str | None = None, last_name: str | None = None) -> dict:
        u: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username:
            u["username"] = username
        if last_name:
            u["last_name"] = last_name
        return u

    def private_chat(self, user: dict) -> dict:
        chat = {"id": user["id"], "type": "private", "first_name": user["first_name"]}
        if "username" in user:
            chat["username"] = user["username"]
        self.chats[chat["id"]] = chat
        return chat

    def group_chat(self, chat_id: int, title: str, supergroup: bool = False, forum: bool = False) -> dict:
        chat: dict[str, Any] = {"id": chat_id, "type": "supergroup" if supergroup or forum else "group", "title": title}
        if forum:
            chat["is_forum"] = True
        self.chats[chat_id] = chat
        return chat

    def make_message(
        self,
        chat: dict,
        sender: dict | None,
        text: str,
        *,
        thread_id: int | None = None,
        reply_to: dict | None = None,
        entities: list[dict] | None = None,
        auto_entities: bool = True,
        topic: bool | None = None,
    ) -> dict:
        """A message as Telegram would deliver it, with mention/command entities computed the
        way clients do (offsets in UTF-16 units)."""
        mid = self._new_message_id(chat["id"])
        msg: dict[str, Any] = {"message_id": mid, "date": int(time.time()), "chat": chat, "text": text}
        if sender is not None:
            msg["from"] = sender
        if thread_id is not None:
            msg["message_thread_id"] = thread_id
            if chat.get("is_forum") if topic is None else topic:
                msg["is_topic_message"] = True
        if reply_to is not None:
            msg["reply_to_message"] = {k: v for k, v in reply_to.items() if not k.startswith("_")}
        if entities is None and auto_entities:
            entities = _auto_entities(text)
        if entities:
            msg["entities"] = entities
        self.messages[(chat["id"], mid)] = {**msg, "_seq": len(self.messages)}
        return msg

    def push_message(self, chat: dict, sender: dict | None, text: str, **kw: Any) -> dict:
        msg = self.make_message(chat, sender, text, **kw)
        self.push_update({"message": msg})
        return msg

    def push_update(self, body: dict[str, Any]) -> dict[str, Any]:
        update = {"update_id": self.next_update_id, **body}
        self.next_update_id += 1
        self.push_raw(update)
        return update

    def press(self, message: dict[str, Any], user: dict[str, Any], data: str) -> dict[str, Any]:
        """A person presses the button carrying `data` on a message the bot sent (a callback query)."""
        self.next_press += 1
        query = {"id": str(self.next_press), "from": user, "message": message, "chat_instance": "ci", "data": data}
        return self.push_update({"callback_query": query})

    def push_raw(self, update: Any) -> None:
        """Queue any JSON value as an update (malformed ones included)."""
        self.updates.append(update)
        if self.webhook:
            asyncio.get_running_loop().create_task(self._deliver_webhook(update))
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _deliver_webhook(self, update: Any) -> None:
        assert self._client and self.webhook
        headers = {"Content-Type": "application/json"}
        if self.webhook.get("secret_token"):
            headers["X-Telegram-Bot-Api-Secret-Token"] = self.webhook["secret_token"]
        try:
            async with self._client.post(self.webhook["url"], data=json.dumps(update), headers=headers) as resp:
                self.webhook_deliveries.append(resp.status)
                if resp.status != 200:
                    self.webhook["last_error"] = f"Wrong response from the webhook: {resp.status} {resp.reason}"
        except aiohttp.ClientError:
            self.webhook_deliveries.append(0)
            self.webhook["last_error"] = "Connection refused"

    def _new_message_id(self, chat_id: int) -> int:
        self.next_message_id[chat_id] = self.next_message_id.get(chat_id, 0) + 1
        return self.next_message_id[chat_id]

    # -- HTTP ---------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        params = await _read_params(request)
        self.calls.append(Call(method, params, at=self.clock()))
        if method.lower() != "getupdates":  # the SDK polls on a pool of its own
            if request.transport is not None:
                self.peers.add(request.transport.get_extra_info("peername"))
            if self.hold is not None:
                await self.hold.wait()
        if request.match_info["token"] not in self.valid_tokens:
            return _error(401, "Unauthorized")
        scripted = self.failures.get(method.lower())
        if scripted:
            failure = scripted.pop(0)
            response = await self._scripted(request, failure)
            if response is not None:
                return response
        handler = getattr(self, "_api_" + method.lower(), None)
        if handler is None:
            return _error(404, "Not Found")
        if self.pace_chats and method.lower() in self.PACED:
            refused = self._flood_check(params)
            if refused is not None:
                return refused
        try:
            result = await handler(params)
        except ApiError as exc:
            return _error(exc.code, exc.description, exc.parameters)
        return web.json_response({"ok": True, "result": result})

    async def _scripted(self, request: web.Request, f: Failure) -> web.StreamResponse | None:
        if f.kind == "retry_after":
            return _error(429, f"Too Many Requests: retry after {f.retry_after}", {"retry_after": f.retry_after})
        if f.kind == "server_error":
            return _error(f.status, "Internal Server Error" if f.status == 500 else "Bad Gateway")
        if f.kind == "parse_entities":
            return _error(
                400, "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 0"
            )
        if f.kind == "blocked":
            return _error(403, "Forbidden: bot was blocked by the user")
        if f.kind == "migrated":  # a group upgraded to a supergroup has a new id
            return _error(
                400, "Bad Request: group chat was upgraded to a supergroup chat", {"migrate_to_chat_id": f.status}
            )
        if f.kind == "unauthorized":
            return _error(401, "Unauthorized")
        if f.kind == "drop":
            # close the socket without an answer: the client sees a dropped connection
            assert request.transport is not None
            request.transport.abort()
            raise ConnectionResetError("fake: dropped")
        if f.kind == "hang":
            await self._release.wait()
            return None
        raise ValueError(f"unknown failure kind {f.kind}")

    def _flood_check(self, p: dict) -> web.Response | None:
        try:
            chat_id = int(p.get("chat_id"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
        kind = "private" if (self.chats.get(chat_id) or {}).get("type", "private") == "private" else "group"
        now, last = self.clock(), self._last_paced.get(chat_id)
        if last is not None and now - last < self.PACE[kind] - 1e-9:
            self.flood_refusals += 1
            wait = max(1, int(-(-(self.PACE[kind] - (now - last)) // 1)))
            return _error(429, f"Too Many Requests: retry after {wait}", {"retry_after": wait})
        self._last_paced[chat_id] = now
        return None

    # -- Bot API methods ----------------------------------------------------------------------
    async def _api_getfile(self, p: dict) -> dict:
        file_id = str(p.get("file_id"))
        if file_id not in self.files:
            raise ApiError(400, "Bad Request: invalid file_id")
        return {
            "file_id": file_id,
            "file_unique_id": "u" + file_id,
            "file_size": len(self.files[file_id]),
            "file_path": f"documents/{file_id}",
        }

    async def _download(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] not in self.valid_tokens:
            return web.Response(status=401)
        path = request.match_info["path"]
        self.downloads.append(path)
        data = self.files.get(path.rpartition("/")[2])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    async def _api_getme(self, p: dict) -> dict:
        return self.bot_user

    async def _api_getupdates(self, p: dict) -> list:
        if self.webhook:
            raise ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first",
            )
        offset = int(p.get("offset") or 0)
        limit = int(p.get("limit") or 100)
        timeout = float(p.get("timeout") or 0)
        if offset:
            # confirming: everything before offset is forgotten, as on the real server
            self.updates = [u for u in self.updates if not _uid_before(u, offset)]
        async with self._changed:
            self._poll_generation += 1
            mine = self._poll_generation
            self._changed.notify_all()
        deadline = time.monotonic() + timeout
        while True:
            pending = [u for u in self.updates if not _uid_before(u, offset)][:limit]
            if pending:
                return pending
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait(), left)
                except asyncio.TimeoutError:
                    pass
            if self._poll_generation != mine:
                raise ApiError(
                    409,
                    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
                )

    async def _api_sendmessage(self, p: dict) -> dict:
        chat_id = _chat_id(p)
        if chat_id in self.blocked_chats:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        text = str(p.get("text") or "")
        rendered = self._render(text, p.get("parse_mode"))
        chat = self.chats.get(chat_id) or {"id": chat_id, "type": "private", "first_name": "?"}
        msg: dict[str, Any] = {
            "message_id": self._new_message_id(chat_id),
            "from": {k: self.bot_user[k] for k in ("id", "is_bot", "first_name", "username")},
            "chat": chat,
            "date": int(time.time()),
            "text": rendered,
        }
        if p.get("message_thread_id") is not None:
            msg["message_thread_id"] = int(p["message_thread_id"])
            if chat.get("is_forum"):
                msg["is_topic_message"] = True
        if p.get("reply_markup") is not None:  # inline buttons: a test presses them with `press`
            msg["reply_markup"] = _json(p["reply_markup"])
        reply = _json(p.get("reply_parameters"))
        if reply:
            target = self.messages.get((chat_id, int(reply["message_id"])))
            if target is None and not reply.get("allow_sending_without_reply"):
                raise ApiError(400, "Bad Request: message to be replied not found")
            if target is not None:
                msg["reply_to_message"] = {k: v for k, v in target.items() if not k.startswith("_")}
        self.messages[(chat_id, msg["message_id"])] = {
            **msg,
            "_seq": len(self.messages),
            "_raw_text": text,
            "_parse_mode": p.get("parse_mode"),
        }
        return msg

    async def _api_answercallbackquery(self, p: dict) -> bool:
        self.answered_presses.append(str(p.get("callback_query_id")))
        return True

    async def _api_editmessagetext(self, p: dict) -> dict:
        chat_id = _chat_id(p)
        key = (chat_id, int(p.get("message_id") or 0))
        if key not in self.messages:
            raise ApiError(400, "Bad Request: message to edit not found")
        rendered = self._render(str(p.get("text") or ""), p.get("parse_mode"))
        stored = self.messages[key]
        markup = _json(p.get("reply_markup"))  # absent: like Telegram, the edit drops the inline keyboard
        if stored.get("text") == rendered and stored.get("reply_markup") == markup:
            raise ApiError(
                400,
                "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
            )
        stored.update(
            text=rendered, edit_date=int(time.time()), _raw_text=p.get("text"), _parse_mode=p.get("parse_mode")
        )
        if markup is None:
            stored.pop("reply_markup", None)
        else:
            stored["reply_markup"] = markup
        return {k: v for k, v in stored.items() if not k.startswith("_")}

    async def _api_deletemessage(self, p: dict) -> bool:
        key = (_chat_id(p), int(p.get("message_id") or 0))
        if self.messages.pop(key, None) is None:
            raise ApiError(400, "Bad Request: message to delete not found")
        return True

    async def _api_sendchataction(self, p: dict) -> bool:
        _chat_id(p)
        if p.get("action") not in {"typing", "upload_photo", "record_video", "upload_document", "choose_sticker"}:
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _api_setmycommands(self, p: dict) -> bool:
        commands = _json(p.get("commands")) or []
        for c in commands:
            name, desc = c.get("command", ""), c.get("description", "")
            if not (1 <= len(name) <= 32 and all(ch.islower() or ch.isdigit() or ch == "_" for ch in name)):
                raise ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not 1 <= len(desc) <= 256:
                raise ApiError(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
        self.menus[p.get("language_code") or None] = commands
        if not p.get("language_code"):
            self.commands = commands
        return True

    async def _api_deletewebhook(self, p: dict) -> bool:
        self.webhook = None
        if str(p.get("drop_pending_updates", "")).lower() == "true":
            self.updates.clear()
        return True

    async def _api_setwebhook(self, p: dict) -> bool:
        url = p.get("url") or ""
        if not url:
            self.webhook = None
            return True
        if not str(url).startswith(("https://", "http://127.0.0.1")):
            raise ApiError(400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
        self.webhook = {
            "url": url,
            "secret_token": p.get("secret_token"),
            "allowed_updates": _json(p.get("allowed_updates")),
        }
        return True

    async def _api_getwebhookinfo(self, p: dict) -> dict:
        info: dict[str, Any] = {
            "url": self.webhook["url"] if self.webhook else "",
            "has_custom_certificate": False,
            "pending_update_count": len(self.updates) if not self.webhook else 0,
        }
        if self.webhook and self.webhook.get("last_error"):
            info["last_error_date"] = int(time.time())
            info["last_error_message"] = self.webhook["last_error"]
        return info

    def _render(self, text: str, parse_mode: Any) -> str:
        if parse_mode == "MarkdownV2":
            try:
                rendered = parse_markdown_v2(text)
            except MarkdownV2Error as exc:
                raise ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        elif parse_mode in (None, ""):
            rendered = text
        else:
            raise ApiError(400, f"Bad Request: unsupported parse_mode {parse_mode}")
        if not rendered.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if utf16_len(rendered) > 4096:
            raise ApiError(400, "Bad Request: message is too long")
        return rendered


def _uid_before(update: Any, offset: int) -> bool:
    uid = update.get("update_id") if isinstance(update, dict) else None
    return isinstance(uid, int) and offset > 0 and uid < offset


def _auto_entities(text: str) -> list[dict]:
    """Mention and command entities the way clients send them (UTF-16 offsets)."""
    import re

    entities = []
    for m in re.finditer(r"(?<![\w/])@[A-Za-z0-9_]{3,32}|(?<!\S)/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{3,32})?", text):
        kind = "mention" if m.group(0).startswith("@") else "bot_command"
        entities.append({"type": kind, "offset": utf16_len(text[: m.start()]), "length": utf16_len(m.group(0))})
    return entities


def _chat_id(p: dict) -> int:
    value = p.get("chat_id")
    if value is None or value == "":
        raise ApiError(400, "Bad Request: chat_id is empty")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ApiError(400, "Bad Request: chat not found") from None


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


async def _read_params(request: web.Request) -> dict[str, Any]:
    params: dict[str, Any] = dict(request.query)
    if request.method == "POST" and request.can_read_body:
        ctype = request.content_type
        if ctype == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                params.update(body)
        else:
            form = await request.post()
            params.update({k: v for k, v in form.items() if isinstance(v, str)})
    return params


def _error(code: int, description: str, parameters: dict | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=code)
