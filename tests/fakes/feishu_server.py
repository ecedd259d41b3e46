"""A fake Feishu/Lark open platform on 127.0.0.1 for tests.

Serves what the adapter (through lark-oapi) talks to:
- POST /open-apis/auth/v3/tenant_access_token/internal   tenant tokens (revocable: expire_tokens)
- GET  /open-apis/bot/v3/info                              the bot's open_id
- POST /open-apis/im/v1/messages[?receive_id_type]          send; /{id}/reply reply; PUT /{id} edit
  (`hold_answers`: a send is accepted but its answer waits, as when a crash cuts it off)
- POST/DELETE /open-apis/im/v1/messages/{id}/reactions[/{rid}]
- PATCH /open-apis/im/v1/messages/{id}                     replace an interactive card (needs
  `update_multi`; 5 per second per message, on `clock`, else 429 code 99991400; `hold_patches`:
  one waits, unanswered and not applied, while that event is unset: Feishu being slow)
- POST /open-apis/cardkit/v1/cards, PUT .../cards/{id}, PUT .../cards/{id}/elements/{eid}/content
  CardKit card entities: created from JSON 2.0, sent once by card_id, updated with strictly
  increasing `sequence` (else code 300317), 10 operations a second per card; `cardkit_denied`
  answers the missing-scope error, `reject_cards` refuses interactive messages altogether
- POST /callback/ws/endpoint + GET /ws                     the long connection, speaking the SDK's
  protobuf frames (pbbp2.Frame): pushes events, records the client's acks, answers pings
and plays Feishu's sending side for webhooks (encrypts, signs: see `webhook_request`). A press on a
card's button is the `card.action.trigger` callback Feishu sends (`card_action_event`: schema 2.0,
the operator, the button's `behaviors` callback value, the card's message and chat in `context`),
pushed like an event (`press`); its answer (toast, card) is the frame's acknowledgement.

Everything is recorded in `calls`; failures are scripted with `fail_next`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import WSMsgType, web
from Crypto.Cipher import AES
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from tests.fakes.loopback import Served, serve, wait_until


@dataclass
class Call:
    route: str
    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]


@dataclass
class Failure:
    route: str
    status: int
    body: dict[str, Any]
    headers: dict[str, str]
    times: int


@dataclass
class _Conn:
    ws: web.WebSocketResponse
    muted: bool = False  # a muted connection stays open but answers nothing (half-dead link)
    pings: int = 0


def encrypt(encrypt_key: str, plaintext: str) -> str:
    """Feishu's event encryption: base64(iv + AES-256-CBC(sha256(key), PKCS7(plaintext)))."""
    key = hashlib.sha256(encrypt_key.encode()).digest()
    iv = os.urandom(16)
    data = plaintext.encode()
    pad = 16 - len(data) % 16
    data += bytes([pad]) * pad
    return base64.b64encode(iv + AES.new(key, AES.MODE_CBC, iv).encrypt(data)).decode()


def sign(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()


class FakeFeishu:
    def __init__(
        self,
        app_id: str,
        app_secret: str,
        bot_open_id: str = "ou_bot",
        bot_name: str = "chinwag",
        ping_interval: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app_id, self.app_secret = app_id, app_secret
        self.clock = clock
        self.cardkit_denied = False
        self.reject_cards = False
        self.cards: dict[str, dict[str, Any]] = {}  # card_id -> {"card", "sequence", "ops", "sent"}
        self.rate_refusals = 0
        self._op_times: dict[str, list[float]] = {}  # message or card id -> recent update times
        self.bot_open_id, self.bot_name = bot_open_id, bot_name
        self.ping_interval = ping_interval
        self.calls: list[Call] = []
        self.failures: list[Failure] = []
        self.valid_tokens: set[str] = set()
        self.delays: dict[str, float] = {}  # route -> seconds to stall its next answer
        self.reject_post = False  # answer rich (post) messages with "invalid content"
        # While set to an unset Event, a send is accepted (it is in `sent`) but its answer waits:
        # the sender does not learn the message id (a crash test's duplicate window).
        self.hold_answers: asyncio.Event | None = None
        self.hold_patches: asyncio.Event | None = None
        self.sent: list[dict[str, Any]] = []  # messages the bot posted, in order
        self.chat_of: dict[str, str] = {}  # message id -> its chat (events made here, the bot's sends and replies)
        self.reactions: dict[str, dict[str, Any]] = {}  # reaction_id -> {message_id, emoji, deleted}
        self.acks: dict[str, dict[str, Any]] = {}  # frame message_id -> the client's response
        self.conns: list[_Conn] = []
        self.ws_connects = 0
        self.ticket = ""
        self._ids = itertools.count(1)
        self._uuids: dict[str, str] = {}
        self._served: Served | None = None
        self.base_url = ""
        # file_key -> bytes, served by the message resource API to the message that carries it
        self.resources: dict[str, bytes] = {}
        self.resource_requests: list[tuple[str, str, str]] = []  # (message_id, file_key, type)

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._token)
        app.router.add_get("/open-apis/bot/v3/info", self._bot_info)
        app.router.add_post("/open-apis/im/v1/messages", self._create)
        app.router.add_post("/open-apis/im/v1/messages/{mid}/reply", self._reply)
        app.router.add_put("/open-apis/im/v1/messages/{mid}", self._update)
        app.router.add_patch("/open-apis/im/v1/messages/{mid}", self._patch)
        app.router.add_post("/open-apis/cardkit/v1/cards", self._card_create)
        app.router.add_put("/open-apis/cardkit/v1/cards/{cid}", self._card_update)
        app.router.add_put("/open-apis/cardkit/v1/cards/{cid}/elements/{eid}/content", self._card_content)
        app.router.add_get("/open-apis/im/v1/messages/{mid}", self._get)
        app.router.add_get("/open-apis/im/v1/messages/{mid}/resources/{key}", self._resource)
        app.router.add_post("/open-apis/im/v1/messages/{mid}/reactions", self._react)
        app.router.add_delete("/open-apis/im/v1/messages/{mid}/reactions/{rid}", self._unreact)
        app.router.add_post("/callback/ws/endpoint", self._endpoint)
        app.router.add_get("/ws", self._ws)
        self._served = await serve(app)
        self.base_url = self._served.url
        return self.base_url

    async def stop(self) -> None:
        for conn in self.conns:
            await conn.ws.close()
        if self._served:
            await self._served.close()

    # -- scripting --------------------------------------------------------------------------------
    def fail_next(
        self,
        route: str,
        status: int = 500,
        code: int = 1,
        msg: str = "scripted failure",
        times: int = 1,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.failures.append(Failure(route, status, {"code": code, "msg": msg}, headers or {}, times))

    def expire_tokens(self) -> None:
        """Revoke every issued tenant token, as Feishu does when one expires or is reset."""
        self.valid_tokens.clear()

    def calls_to(self, route: str) -> list[Call]:
        return [c for c in self.calls if c.route == route]

    async def drop_connections(self) -> None:
        for conn in list(self.conns):
            await conn.ws.close()

    def mute_connections(self) -> None:
        for conn in self.conns:
            conn.muted = True

    @property
    def live_conns(self) -> list[_Conn]:
        return [c for c in self.conns if not c.ws.closed]

    async def push_event(self, payload: dict[str, Any] | bytes, parts: int = 1) -> str:
        """Send an event over the newest open long connection; return the frame's message id.

        With parts > 1 the payload is cut into that many frames (sum/seq headers), as Feishu does
        with large events.
        """
        conns = self.live_conns
        if not conns:
            raise RuntimeError("no long connection open")
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        frame_id = uuid.uuid4().hex
        size = -(-len(data) // parts)
        for seq in range(parts):
            frame = Frame()
            frame.SeqID, frame.LogID, frame.service, frame.method = next(self._ids), 0, 1, 1
            for key, value in (
                ("type", "event"),
                ("message_id", frame_id),
                ("trace_id", "t"),
                ("sum", str(parts)),
                ("seq", str(seq)),
            ):
                h = frame.headers.add()
                h.key, h.value = key, value
            frame.payload = data[seq * size : (seq + 1) * size]
            await conns[-1].ws.send_bytes(frame.SerializeToString())
        return frame_id

    # -- Feishu's sending side for webhooks ----------------------------------------------------
    def webhook_request(
        self,
        payload: dict[str, Any],
        encrypt_key: str = "",
        bad_signature: bool = False,
    ) -> tuple[bytes, dict[str, str]]:
        """Body and headers Feishu would POST for `payload` (encrypted and signed with a key)."""
        if not encrypt_key:
            return json.dumps(payload).encode(), {"Content-Type": "application/json"}
        body = json.dumps({"encrypt": encrypt(encrypt_key, json.dumps(payload))}).encode()
        ts, nonce = str(int(time.time())), uuid.uuid4().hex
        sig = sign(ts, nonce, encrypt_key, body)
        if bad_signature:
            sig = sign(ts, nonce, encrypt_key + "x", body)
        return body, {
            "Content-Type": "application/json",
            "X-Lark-Request-Timestamp": ts,
            "X-Lark-Request-Nonce": nonce,
            "X-Lark-Signature": sig,
        }

    def message_event(
        self,
        text: str = "hello",
        chat_id: str = "oc_dm1",
        chat_type: str = "p2p",
        sender: str = "ou_alice",
        union_id: str | None = "on_alice",
        mentions: list[tuple[str, str, str]] | None = None,
        thread_id: str | None = None,
        root_id: str | None = None,
        parent_id: str | None = None,
        message_id: str | None = None,
        event_id: str | None = None,
        msg_type: str = "text",
        content: Any = None,
        token: str = "",
    ) -> dict[str, Any]:
        """A v2 im.message.receive_v1 event; mentions are (key, open_id, name) triples."""
        message: dict[str, Any] = {
            "message_id": message_id or f"om_{uuid.uuid4().hex[:12]}",
            "chat_id": chat_id,
            "chat_type": chat_type,
            "message_type": msg_type,
            "content": json.dumps(content if content is not None else {"text": text}),
            "create_time": str(int(time.time() * 1000)),
            "mentions": [
                {"key": k, "id": {"open_id": oid, "union_id": "on_" + oid[3:]}, "name": n, "tenant_key": "tk"}
                for k, oid, n in (mentions or [])
            ],
        }
        self.chat_of[message["message_id"]] = chat_id
        for key, value in (("thread_id", thread_id), ("root_id", root_id), ("parent_id", parent_id)):
            if value:
                message[key] = value
        sender_id = {"open_id": sender, "user_id": "u_" + sender[3:]}
        if union_id:
            sender_id["union_id"] = union_id
        return {
            "schema": "2.0",
            "header": {
                "event_id": event_id or uuid.uuid4().hex,
                "event_type": "im.message.receive_v1",
                "create_time": str(int(time.time() * 1000)),
                "token": token,
                "app_id": self.app_id,
                "tenant_key": "tk",
            },
            "event": {
                "sender": {"sender_id": sender_id, "sender_type": "user", "tenant_key": "tk"},
                "message": message,
            },
        }

    def buttons(self, message: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """label -> the callback value of each button a sent card shows now (none once patched away)."""
        found: dict[str, dict[str, Any]] = {}

        def walk(element: Any) -> None:
            if isinstance(element, dict):
                if element.get("tag") == "button":
                    for behavior in element.get("behaviors") or []:
                        if behavior.get("type") == "callback":
                            found[element["text"]["content"]] = behavior.get("value") or {}
                for value in element.values():
                    walk(value)
            elif isinstance(element, list):
                for item in element:
                    walk(item)

        walk(message["content"].get("body"))
        return found

    def card_action_event(
        self,
        message: dict[str, Any],
        label: str,
        operator: str = "ou_alice",
        union_id: str | None = "on_alice",
        token: str = "",
    ) -> dict[str, Any]:
        """The v2 card.action.trigger callback for a press on `label` of the card `message` (as in
        `sent`); `token` is the verification token, in the header as for events."""
        return {
            "schema": "2.0",
            "header": {
                "event_id": uuid.uuid4().hex,
                "token": token,
                "create_time": str(int(time.time() * 1000)),
                "event_type": "card.action.trigger",
                "tenant_key": "tk",
                "app_id": self.app_id,
            },
            "event": {
                "operator": {
                    "tenant_key": "tk",
                    "user_id": "u_" + operator[3:],
                    "open_id": operator,
                    "union_id": union_id,
                },
                "token": f"c-{uuid.uuid4().hex}",  # for a delayed update of this card (unused here)
                "action": {"value": self.buttons(message)[label], "tag": "button"},
                "host": "im_message",
                "context": {
                    "open_message_id": message["message_id"],
                    "open_chat_id": self.chat_of[message["message_id"]],
                },
            },
        }

    async def press(self, message: dict[str, Any], label: str, **operator: Any) -> str:
        """Press `label` on a sent card over the long connection; the frame id (see `acks`)."""
        return await self.push_event(self.card_action_event(message, label, **operator))

    async def _resource(self, request: web.Request) -> web.Response:
        mid, key = request.match_info["mid"], request.match_info["key"]
        self.resource_requests.append((mid, key, request.query.get("type", "")))
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            return web.json_response({"code": 99991661, "msg": "missing access token"}, status=401)
        data = self.resources.get(key)
        if data is None:
            return web.json_response({"code": 234003, "msg": "file not found"}, status=404)
        return web.Response(
            body=data,
            content_type="application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="{key}"'},
        )

    # -- waiting ------------------------------------------------------------------------------------
    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
        return await wait_until(predicate, timeout)

    # -- handlers -----------------------------------------------------------------------------------
    async def _record(self, route: str, request: web.Request) -> tuple[Call, web.Response | None]:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw
        call = Call(route, request.method, request.path, dict(request.query), body, dict(request.headers))
        self.calls.append(call)
        if route in self.delays:
            await asyncio.sleep(self.delays.pop(route))
        for failure in self.failures:
            if failure.route == route and failure.times > 0:
                failure.times -= 1
                return call, web.json_response(failure.body, status=failure.status, headers=failure.headers)
        if route not in ("token", "endpoint"):
            auth = request.headers.get("Authorization", "")
            if not auth.startswith("Bearer ") or auth[7:] not in self.valid_tokens:
                body = {"code": 99991663, "msg": "Invalid access token for authorization."}
                return call, web.json_response(body, status=400)
        return call, None

    async def _token(self, request: web.Request) -> web.Response:
        call, failed = await self._record("token", request)
        if failed:
            return failed
        body = call.body or {}
        if body.get("app_id") != self.app_id or body.get("app_secret") != self.app_secret:
            return web.json_response({"code": 10014, "msg": "app secret invalid"})
        token = f"t-{uuid.uuid4().hex}"
        self.valid_tokens.add(token)
        return web.json_response({"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200})

    async def _bot_info(self, request: web.Request) -> web.Response:
        _call, failed = await self._record("bot_info", request)
        if failed:
            return failed
        bot = {"activate_status": 2, "app_name": self.bot_name, "open_id": self.bot_open_id}
        return web.json_response({"code": 0, "msg": "ok", "bot": bot})

    def _store(self, call: Call, kind: str, chat_id: str | None, parent: str | None) -> web.Response:
        body = call.body or {}
        if body.get("uuid") and body["uuid"] in self._uuids:  # Feishu's idempotent send
            mid = self._uuids[body["uuid"]]
            return web.json_response({"code": 0, "msg": "success", "data": {"message_id": mid}})
        if body.get("msg_type") == "post" and self.reject_post:
            return web.json_response({"code": 230001, "msg": "invalid message content"}, status=400)
        try:
            content = json.loads(body.get("content", ""))
        except (TypeError, json.JSONDecodeError):
            return web.json_response({"code": 230001, "msg": "content is not JSON"}, status=400)
        if body.get("msg_type") == "interactive":
            refused = self._check_card_message(content)
            if refused is not None:
                return refused
        mid = f"om_bot_{next(self._ids)}"
        chat = chat_id or (self.chat_of.get(parent) if parent else None)
        if chat:
            self.chat_of[mid] = chat
        if body.get("uuid"):
            self._uuids[body["uuid"]] = mid
        self.sent.append(
            {
                "kind": kind,
                "message_id": mid,
                "chat_id": chat_id,
                "reply_to": parent,
                "reply_in_thread": bool(body.get("reply_in_thread")),
                "msg_type": body.get("msg_type"),
                "content": content,
                "text": _text_of(body.get("msg_type"), content, self.cards),
            }
        )
        return web.json_response({"code": 0, "msg": "success", "data": {"message_id": mid, "chat_id": chat_id}})

    async def _create(self, request: web.Request) -> web.Response:
        call, failed = await self._record("create", request)
        if failed:
            return failed
        if request.query.get("receive_id_type") != "chat_id":
            return web.json_response({"code": 99992402, "msg": "field validation failed"}, status=400)
        return await self._held(self._store(call, "create", (call.body or {}).get("receive_id"), None))

    async def _reply(self, request: web.Request) -> web.Response:
        call, failed = await self._record("reply", request)
        if failed:
            return failed
        if not request.match_info["mid"].startswith("om_"):  # message ids are om_...; anything else is refused
            return web.json_response({"code": 230001, "msg": "invalid message_id"}, status=400)
        return await self._held(self._store(call, "reply", None, request.match_info["mid"]))

    async def _held(self, response: web.Response) -> web.Response:
        if self.hold_answers is not None:
            await self.hold_answers.wait()
        return response

    async def _update(self, request: web.Request) -> web.Response:
        call, failed = await self._record("update", request)
        if failed:
            return failed
        body = call.body or {}
        if body.get("msg_type") == "post" and self.reject_post:
            return web.json_response({"code": 230001, "msg": "invalid message content"}, status=400)
        for msg in self.sent:
            if msg["message_id"] == request.match_info["mid"]:
                msg["content"] = json.loads(body["content"])
                msg["text"] = _text_of(body.get("msg_type"), msg["content"])
                return web.json_response({"code": 0, "msg": "success", "data": {}})
        return web.json_response({"code": 230011, "msg": "message not found"}, status=400)

    # -- cards ------------------------------------------------------------------------------------
    def card_text(self, message: dict[str, Any]) -> str:
        """What an interactive message shows now: its markdown, from the card entity when it has one."""
        content = message["content"]
        card = content
        if content.get("type") == "card":
            card = self.cards[content["data"]["card_id"]]["card"]
        return "".join(_element_text(e) for e in card.get("body", {}).get("elements", []))

    def _check_card_message(self, content: dict[str, Any]) -> web.Response | None:
        if self.reject_cards:
            return web.json_response({"code": 230099, "msg": "Failed to create card content"}, status=400)
        if content.get("type") == "card":
            entity = self.cards.get(str((content.get("data") or {}).get("card_id")))
            if entity is None:
                return web.json_response({"code": 230099, "msg": "card_id not found"}, status=400)
            if entity["sent"]:
                return web.json_response({"code": 230099, "msg": "card entity can only be sent once"}, status=400)
            entity["sent"] = True
        return None

    def _paced(self, key: str, limit: int) -> web.Response | None:
        now = self.clock()
        recent = [t for t in self._op_times.get(key, []) if t > now - 1.0]
        if len(recent) >= limit:
            self.rate_refusals += 1
            return web.json_response(
                {"code": 99991400, "msg": "request trigger frequency limit"},
                status=429,
                headers={"x-ogw-ratelimit-reset": "1"},
            )
        self._op_times[key] = [*recent, now]
        return None

    async def _patch(self, request: web.Request) -> web.Response:
        call, failed = await self._record("patch", request)
        if failed:
            return failed
        if self.hold_patches is not None:
            await self.hold_patches.wait()
        mid = request.match_info["mid"]
        msg = next((m for m in self.sent if m["message_id"] == mid), None)
        if msg is None or msg["msg_type"] != "interactive":
            return web.json_response({"code": 230011, "msg": "message not found or not a card"}, status=400)
        card = json.loads((call.body or {}).get("content") or "{}")
        if not (card.get("config") or {}).get("update_multi"):
            return web.json_response({"code": 230099, "msg": "card must set update_multi"}, status=400)
        paced = self._paced(mid, 5)
        if paced is not None:
            return paced
        msg["content"] = card
        msg["text"] = self.card_text(msg)
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    def _denied(self) -> web.Response | None:
        if self.cardkit_denied:
            body = {
                "code": 99991672,
                "msg": "Access denied. One of the following scopes is required: [cardkit:card:write]",
            }
            return web.json_response(body, status=400)
        return None

    async def _card_create(self, request: web.Request) -> web.Response:
        call, failed = await self._record("card_create", request)
        if failed or (failed := self._denied()):
            return failed
        body = call.body or {}
        card = json.loads(body.get("data") or "{}")
        if body.get("type") != "card_json" or card.get("schema") != "2.0":
            return web.json_response({"code": 300301, "msg": "invalid card json"}, status=400)
        card_id = f"ck_{next(self._ids)}"
        self.cards[card_id] = {"card": card, "sequence": 0, "ops": [], "sent": False}
        return web.json_response({"code": 0, "msg": "success", "data": {"card_id": card_id}})

    def _card_op(self, card_id: str, sequence: Any) -> tuple[dict[str, Any] | None, web.Response | None]:
        entity = self.cards.get(card_id)
        if entity is None:
            return None, web.json_response({"code": 300309, "msg": "card not found"}, status=400)
        if not isinstance(sequence, int) or sequence <= entity["sequence"]:
            return None, web.json_response({"code": 300317, "msg": "sequence number compare failed"}, status=400)
        paced = self._paced(card_id, 10)
        if paced is not None:
            return None, paced
        entity["sequence"] = sequence
        entity["ops"].append((self.clock(), sequence))
        return entity, None

    def _card_changed(self, card_id: str) -> None:
        """A message showing this card entity shows its new text."""
        for msg in self.sent:
            if msg["msg_type"] == "interactive" and (msg["content"].get("data") or {}).get("card_id") == card_id:
                msg["text"] = self.card_text(msg)

    async def _card_content(self, request: web.Request) -> web.Response:
        call, failed = await self._record("card_content", request)
        if failed or (failed := self._denied()):
            return failed
        body = call.body or {}
        entity, refused = self._card_op(request.match_info["cid"], body.get("sequence"))
        if refused is not None:
            return refused
        assert entity is not None
        if not entity["card"].get("config", {}).get("streaming_mode"):
            return web.json_response({"code": 300310, "msg": "card is not in streaming mode"}, status=400)
        for element in entity["card"]["body"]["elements"]:
            if element.get("element_id") == request.match_info["eid"]:
                element["content"] = body.get("content", "")
                self._card_changed(request.match_info["cid"])
                return web.json_response({"code": 0, "msg": "success", "data": {}})
        return web.json_response({"code": 300311, "msg": "element not found"}, status=400)

    async def _card_update(self, request: web.Request) -> web.Response:
        call, failed = await self._record("card_update", request)
        if failed or (failed := self._denied()):
            return failed
        body = call.body or {}
        entity, refused = self._card_op(request.match_info["cid"], body.get("sequence"))
        if refused is not None:
            return refused
        assert entity is not None
        entity["card"] = json.loads((body.get("card") or {}).get("data") or "{}")
        self._card_changed(request.match_info["cid"])
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _get(self, request: web.Request) -> web.Response:
        _call, failed = await self._record("get", request)
        if failed:
            return failed
        mid = request.match_info["mid"]
        if any(m["message_id"] == mid for m in self.sent):
            sender = {"id": self.app_id, "id_type": "app_id", "sender_type": "app", "tenant_key": "tk"}
        else:  # anything else is treated as a person's message
            sender = {"id": "ou_someone", "id_type": "open_id", "sender_type": "user", "tenant_key": "tk"}
        item = {"message_id": mid, "msg_type": "text", "sender": sender}
        return web.json_response({"code": 0, "msg": "success", "data": {"items": [item]}})

    async def _react(self, request: web.Request) -> web.Response:
        call, failed = await self._record("reaction", request)
        if failed:
            return failed
        rid = f"r_{next(self._ids)}"
        emoji = ((call.body or {}).get("reaction_type") or {}).get("emoji_type")
        self.reactions[rid] = {"message_id": request.match_info["mid"], "emoji": emoji, "deleted": False}
        return web.json_response({"code": 0, "msg": "success", "data": {"reaction_id": rid}})

    async def _unreact(self, request: web.Request) -> web.Response:
        _call, failed = await self._record("unreaction", request)
        if failed:
            return failed
        reaction = self.reactions.get(request.match_info["rid"])
        if reaction is None:
            return web.json_response({"code": 231003, "msg": "reaction not found"}, status=400)
        reaction["deleted"] = True
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _endpoint(self, request: web.Request) -> web.Response:
        call, failed = await self._record("endpoint", request)
        if failed:
            return failed
        body = call.body or {}
        if body.get("AppID") != self.app_id or body.get("AppSecret") != self.app_secret:
            return web.json_response({"code": 1000040345, "msg": "app secret invalid"})
        host = self.base_url.replace("http://", "ws://")
        config = {"ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 0, "PingInterval": self.ping_interval}
        # like Feishu's, the URL carries a per-connection secret ticket
        self.ticket = f"tk-{uuid.uuid4().hex}"
        url = f"{host}/ws?device_id=d{next(self._ids)}&service_id=1&access_key=ak&ticket={self.ticket}"
        data = {"URL": url, "ClientConfig": config}
        return web.json_response({"code": 0, "msg": "ok", "data": data})

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        conn = _Conn(ws)
        self.conns.append(conn)
        self.ws_connects += 1
        async for msg in ws:
            if msg.type != WSMsgType.BINARY:
                continue
            frame = Frame()
            frame.ParseFromString(msg.data)
            headers = {h.key: h.value for h in frame.headers}
            if conn.muted:
                continue
            if frame.method == 0 and headers.get("type") == "ping":
                conn.pings += 1
                pong = Frame()
                pong.SeqID, pong.LogID, pong.service, pong.method = 0, 0, frame.service, 0
                h = pong.headers.add()
                h.key, h.value = "type", "pong"
                await ws.send_bytes(pong.SerializeToString())
            elif frame.method == 1:
                self.acks[headers.get("message_id", "")] = json.loads(frame.payload or b"{}")
        return ws


def _text_of(msg_type: str | None, content: dict[str, Any], cards: dict[str, Any] | None = None) -> str:
    if msg_type == "interactive":
        card = content
        if content.get("type") == "card" and cards is not None:
            card = cards.get(str((content.get("data") or {}).get("card_id")), {}).get("card", {})
        return "".join(_element_text(e) for e in (card.get("body") or {}).get("elements", []))
    if msg_type == "text":
        return str(content.get("text", ""))
    if msg_type == "post":
        for locale in content.values():
            return "".join(el.get("text", "") for para in locale.get("content", []) for el in para)
    return json.dumps(content)


def _element_text(element: dict[str, Any]) -> str:
    """What a card element shows as text: a markdown element's content, a div's text."""
    return str(element.get("content") or (element.get("text") or {}).get("content", ""))


class HandlerHost:
    """Mounts an adapter's webhook handlers on an aiohttp app on 127.0.0.1 (the gateway's role)."""

    def __init__(self, handlers: dict[str, Any]) -> None:
        self.handlers = handlers
        self.url = ""
        self._served: Served | None = None

    async def start(self) -> str:
        app = web.Application()
        for path, handler in self.handlers.items():
            app.router.add_post(path, handler)
        self._served = await serve(app)
        self.url = self._served.url
        return self.url

    async def stop(self) -> None:
        if self._served:
            await self._served.close()
