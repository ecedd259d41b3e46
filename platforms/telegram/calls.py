"""Calling the Bot API: bounded retries and the error helpers the adapter shares.

The SDK maps HTTP answers to exceptions: 429 -> RetryAfter, 400 -> BadRequest (a NetworkError
subclass, but final), 403 -> Forbidden, 401/404 -> InvalidToken, other failures -> NetworkError
(TimedOut included). Only RetryAfter and genuine network trouble are worth another attempt.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from datetime import timedelta
from typing import Awaitable, Callable, TypeVar

from telegram.error import BadRequest, InvalidToken, NetworkError, RetryAfter

from gateway import telemetry
from platforms.helpers import Backoff

log = logging.getLogger("platforms.telegram")
T = TypeVar("T")


async def call_with_retries(
    make: Callable[[], Awaitable[T]], attempts: int, backoff: Backoff, max_retry_after: float
) -> T:
    """Run one Bot API call up to `attempts` times: flood waits are honoured (up to
    `max_retry_after` seconds), network errors and 5xx back off. Other errors go to the caller,
    as does the last error when attempts run out."""
    for attempt in range(1, attempts + 1):
        try:
            return await make()
        except RetryAfter as exc:
            wait = retry_after_seconds(exc)
            if attempt == attempts or wait > max_retry_after:
                raise
            log.info("telegram: flood control, waiting %.1fs (attempt %d)", wait, attempt)
            telemetry.rate_limited(wait)
            await asyncio.sleep(wait)
        except BadRequest:
            raise
        except NetworkError as exc:  # includes TimedOut and 5xx
            if attempt == attempts:
                raise
            delay = backoff.next_delay()
            log.info("telegram: %s; retry %d in %.1fs", brief(exc), attempt, delay)
            await asyncio.sleep(delay)
    raise ValueError("attempts must be >= 1")


def chat_id_param(value: str) -> int | str:
    """Numeric chat ids go as ints; '@channelname' stays a string."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


def is_markup_error(exc: BadRequest) -> bool:
    text = str(exc).lower()
    return "parse entities" in text or "can't find end" in text


def retry_after_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the int -> timedelta migration warning
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def brief(exc: BaseException) -> str:
    """A one-line description of an error that never carries the bot token."""
    if isinstance(exc, InvalidToken):
        return "InvalidToken"
    return f"{type(exc).__name__}: {str(exc)[:300]}"
