"""Feishu/Lark event webhooks: decrypt, authenticate, answer the URL challenge.

Feishu POSTs events to the app's request URL. When an encrypt key is set, the body is
``{"encrypt": base64(iv + AES-256-CBC(sha256(encrypt_key), json))}`` and the request carries
``X-Lark-Signature = sha256(timestamp + nonce + encrypt_key + raw body)``. Every event also
carries the verification token (``header.token`` in v2 events, ``token`` in the challenge and
v1 events). A request that fails a check is refused (401 bad signature, 403 bad token) and
nothing from it reaches the gateway.

The SDK's own dispatcher answers every failure with HTTP 500, which tells Feishu to retry
forged requests; hence these explicit checks (decryption still uses the SDK's AESCipher).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from aiohttp import web
from lark_oapi.core.utils import AESCipher

log = logging.getLogger(__name__)

HEADER_TIMESTAMP = "X-Lark-Request-Timestamp"
HEADER_NONCE = "X-Lark-Request-Nonce"
HEADER_SIGNATURE = "X-Lark-Signature"
MAX_BODY = 1 << 20  # events are small; a megabyte is far beyond any real one


class WebhookRejected(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class WebhookKeys:
    verification_token: str = ""
    encrypt_key: str = ""

    def __repr__(self) -> str:  # secrets never reach logs
        return (
            f"WebhookKeys(verification_token={'set' if self.verification_token else 'unset'}, "
            f"encrypt_key={'set' if self.encrypt_key else 'unset'})"
        )


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


def decode_request(body: bytes, headers: Mapping[str, str], keys: WebhookKeys) -> dict[str, Any]:
    """Decrypt and authenticate one webhook request; return the event payload dict.

    Raises `WebhookRejected` with the HTTP status to answer.
    """
    try:
        outer = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise WebhookRejected(400, "body is not JSON") from None
    if not isinstance(outer, dict):
        raise WebhookRejected(400, "body is not a JSON object")

    payload = outer
    encrypted = outer.get("encrypt")
    if encrypted is not None:
        if not keys.encrypt_key:
            raise WebhookRejected(400, "encrypted event but no encrypt_key configured")
        try:
            payload = json.loads(AESCipher(keys.encrypt_key).decrypt_str(str(encrypted)))
        except Exception:  # wrong key, bad padding, bad base64: all one answer
            raise WebhookRejected(401, "cannot decrypt event (wrong encrypt_key?)") from None
        if not isinstance(payload, dict):
            raise WebhookRejected(400, "decrypted event is not a JSON object")

    is_challenge = payload.get("type") == "url_verification"
    # The challenge is answered on the token alone (Feishu does not sign it); every event with an
    # encrypt key configured must carry a valid signature.
    if keys.encrypt_key and not is_challenge:
        ts = headers.get(HEADER_TIMESTAMP, "")
        nonce = headers.get(HEADER_NONCE, "")
        sig = headers.get(HEADER_SIGNATURE, "")
        expected = signature(ts, nonce, keys.encrypt_key, body)
        if not sig or not hmac.compare_digest(sig.encode(), expected.encode()):
            raise WebhookRejected(401, "bad signature")

    if keys.verification_token:
        header = payload.get("header") if isinstance(payload.get("header"), dict) else {}
        token = header.get("token") if header else payload.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), keys.verification_token.encode()):
            raise WebhookRejected(403, "bad verification token")
    return payload


async def read_body(request: web.Request, limit: int) -> bytes | None:
    """The whole request body, or None when it is longer than `limit` bytes.

    `request.content.read(n)` returns what has been buffered so far, not n bytes: a signed 800 KB
    event arrived cut short and failed as "not JSON", while a 5 MB body never reached the size
    check. So: refuse on the declared length at once, else read to the end, counting."""
    if request.content_length is not None and request.content_length > limit:
        return None
    body = bytearray()
    while True:
        chunk = await request.content.read(65536)
        if not chunk:
            return bytes(body)
        body += chunk
        if len(body) > limit:
            return None


def make_handler(
    keys: WebhookKeys, on_payload: Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]
) -> Callable[[web.Request], Any]:
    """An aiohttp handler for POST /webhooks/feishu (events, and card callbacks: both are signed
    and carry the token alike).

    `on_payload` receives each authenticated event and returns once the gateway has committed it
    (not answered it: Feishu expects an answer within 3 s), with the body to answer (None: the
    plain acknowledgement; a card callback's answer may say how the card changes). Only then is the event acknowledged;
    if it raises, the answer is 500 and Feishu redelivers (a malformed event is not its concern:
    that is logged and acknowledged, since a redelivery would be just as malformed).
    """

    async def handle(request: web.Request) -> web.Response:
        body = await read_body(request, MAX_BODY)
        if body is None:
            return web.json_response({"msg": "body too large"}, status=413)
        try:
            payload = decode_request(body, request.headers, keys)
        except WebhookRejected as exc:
            log.warning("feishu webhook refused (%s): %s", exc.status, exc.reason)
            return web.json_response({"msg": exc.reason}, status=exc.status)
        if payload.get("type") == "url_verification":
            return web.json_response({"challenge": payload.get("challenge", "")})
        try:
            answer = await on_payload(payload)
        except Exception:
            log.exception("feishu webhook event could not be stored; asking for redelivery")
            return web.json_response({"msg": "not stored"}, status=500)
        return web.json_response({"msg": "success"} if answer is None else answer)

    return handle
