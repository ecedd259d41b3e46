"""Exactly once for Feishu webhook events, measured from outside as Feishu behaves: a real
`chinwag run` subprocess in webhook mode (encrypted, signed events) against the Feishu fake,
SIGKILLed between storing an event and answering it, then restarted.

Feishu redelivers an event only when it got no 2xx (for about 6 h), so the two cases differ:
- an event acknowledged before the kill is never sent again: the restart must answer it, once,
  from the inbox alone (a turn that was running is rerun, one queued behind it runs after it);
- an event whose acknowledgement Feishu did not see is sent again, with the same ids: the inbox
  must refuse the copy (and acknowledge it, or Feishu keeps trying) without answering twice.
Answers are counted per event on the fake's side (what the person would see). The one duplicate
window of DESIGN §11 (the platform accepted a send, the outbox record of it did not commit) is
closed on Feishu: every part goes out with a `uuid` of its outbox row, and Feishu (as its fake)
answers a repeat with the first message. So under random kills nothing is answered twice, and a
test that holds a send's answer to land a kill in that window sees the reply once.
"""

from __future__ import annotations

import asyncio
import collections
import random
import re
import sqlite3
from pathlib import Path
from typing import Any, Callable

import aiohttp
import pytest

from tests.fakes.daemon import Daemon, MakeRequest, diagnose, post_until_acknowledged, settled
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.loopback import wait_until
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.slow  # left out of a quick local run (`pytest -m "not slow"`); CI runs it

APP_ID, APP_SECRET = "cli_crashtest", "crash-app-secret"
ENCRYPT_KEY, TOKEN = "crash-encrypt-key", "crash-verification-token"
WEBHOOK = "/webhooks/feishu"


def feishu_platform(feishu: FakeFeishu) -> Callable[[int], dict]:
    return lambda port: {
        "feishu": {
            "app_id": APP_ID,
            "app_secret": APP_SECRET,
            "domain": feishu.base_url,
            "mode": "webhook",
            "encrypt_key": ENCRYPT_KEY,
            "verification_token": TOKEN,
            "allowed_users": ["*"],
            "api_backoff_base": 0.01,
            "api_backoff_cap": 0.05,
        }
    }


def message(feishu: FakeFeishu, chat: int, text: str) -> tuple[dict[str, Any], str]:
    """A DM event of person `chat` and the answer the fake model gives it."""
    event = feishu.message_event(text, chat_id=f"oc_chat{chat}", sender=f"ou_p{chat}", token=TOKEN)
    return event, "echo: " + text


def signed(feishu: FakeFeishu, event: dict[str, Any]) -> MakeRequest:
    """Each attempt encrypted and signed afresh, as Feishu sends a redelivery: same event, new request."""
    return lambda: feishu.webhook_request(event, ENCRYPT_KEY)


def answers(feishu: FakeFeishu) -> collections.Counter:
    return collections.Counter(m["text"] for m in feishu.sent if m["text"].startswith("echo: "))


async def started_feishu() -> FakeFeishu:
    feishu = FakeFeishu(APP_ID, APP_SECRET)
    await feishu.start()
    return feishu


async def duplicates_refused(http: aiohttp.ClientSession, daemon: Daemon) -> int:
    async with http.get(daemon.url("/metrics")) as resp:
        text = await resp.text()
    found = re.search(r'^chinwag_duplicates_total\{platform="feishu"\} (\d+)', text, re.M)
    return int(found.group(1)) if found else 0


def outbox_unsent(tmp: Path) -> int:
    conn = sqlite3.connect(tmp / "home" / "state.db")
    try:
        return conn.execute("SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL").fetchone()[0]
    finally:
        conn.close()


async def test_events_stored_then_sigkilled_are_answered_once_and_redeliveries_refused(tmp_path):
    feishu = await started_feishu()
    try:
        async with FakeOpenAI() as llm, aiohttp.ClientSession() as http:
            daemon = Daemon(tmp_path, llm, feishu_platform(feishu))
            await daemon.start()
            url = daemon.url(WEBHOOK)
            llm.gate = asyncio.Event()  # turns reach the model and wait there: stored, not answered
            running, running_answer = message(feishu, 1, "first of chat 1")
            queued, queued_answer = message(feishu, 1, "second of chat 1")  # behind the running turn
            resent, resent_answer = message(feishu, 2, "only one of chat 2")  # Feishu will resend it
            statuses: list[int] = []
            for event in (running, queued, resent):
                await post_until_acknowledged(http, url, signed(feishu, event), statuses)
            await llm.wait_requests(2)  # chat 1's first turn and chat 2's turn are running
            await daemon.kill()
            assert not answers(feishu)
            llm.gate.set()
            llm.gate = None

            await daemon.start()
            # Feishu did not see the acknowledgement of `resent` (say it timed out): it sends it
            # again as the daemon comes back, while its rerun is under way or about to be.
            redelivered: list[int] = []
            await post_until_acknowledged(http, url, signed(feishu, resent), redelivered)
            expected = {running_answer, queued_answer, resent_answer}
            try:
                await wait_until(lambda: set(answers(feishu)) >= expected, 60)
            except AssertionError:
                raise AssertionError(f"unanswered: {diagnose(tmp_path, expected - set(answers(feishu)))}") from None
            # and once more after it was answered (Feishu retries for hours)
            await post_until_acknowledged(http, url, signed(feishu, resent), redelivered)
            await asyncio.sleep(0.3)  # anything sent twice shows up now
            got = answers(feishu)
            assert got == {running_answer: 1, queued_answer: 1, resent_answer: 1}, got
            chat1 = [m["text"] for m in feishu.sent if m["chat_id"] == "oc_chat1"]
            assert chat1 == [running_answer, queued_answer]  # in the order they were sent
            assert redelivered[-1] == 200 and 200 in redelivered[:-1]  # acknowledged, so Feishu stops
            assert await duplicates_refused(http, daemon) == 2
            assert outbox_unsent(tmp_path) == 0
            assert await daemon.terminate() == 0
    finally:
        await feishu.stop()


async def test_sigkill_at_random_moments_under_load_loses_nothing_and_answers_once(tmp_path):
    chats, per_chat, kills = 4, 8, 3
    rng = random.Random(20261202)
    feishu = await started_feishu()
    try:
        async with FakeOpenAI() as llm, aiohttp.ClientSession() as http:
            llm.delay = 0.05  # turns take a while, so kills land inside them
            daemon = Daemon(tmp_path, llm, feishu_platform(feishu))
            await daemon.start()
            statuses: list[int] = []
            expected: list[str] = []

            async def chat_poster(chat: int) -> None:
                for n in range(per_chat):
                    event, answer = message(feishu, chat, f"chat {chat} event {n}")
                    expected.append(answer)
                    await post_until_acknowledged(http, daemon.url(WEBHOOK), signed(feishu, event), statuses)
                    await asyncio.sleep(rng.uniform(0, 0.05))

            posters = asyncio.gather(*(chat_poster(c) for c in range(chats)))
            for _ in range(kills):
                await asyncio.sleep(rng.uniform(0.4, 1.0))
                await daemon.kill()
                await daemon.start()
            await asyncio.wait_for(posters, 45)
            assert len(expected) == chats * per_chat
            try:
                await wait_until(lambda: set(answers(feishu)) >= set(expected), 60)
            except AssertionError:
                raise AssertionError(
                    f"unanswered: {diagnose(tmp_path, set(expected) - set(answers(feishu)))}"
                ) from None
            await wait_until(lambda: settled(tmp_path), 60)  # anything that would be sent twice has been
            got = answers(feishu)
            duplicates = sum(count - 1 for count in got.values() if count > 1)
            redelivered = sum(1 for s in statuses if not 200 <= s < 300)
            print(
                f"\nfeishu: {len(expected)} events, {kills} SIGKILLs, {redelivered} deliveries not acknowledged "
                f"and redelivered, {duplicates} answered twice"
            )
            assert set(got) == set(expected)  # every event answered, nothing answered that was not asked
            assert duplicates == 0, got.most_common(5)
            assert redelivered > 0  # the kills did land while events were arriving
            assert await daemon.terminate() == 0
    finally:
        await feishu.stop()


async def test_a_kill_after_feishu_accepted_a_reply_and_before_its_record_does_not_repeat_it(tmp_path):
    """The duplicate window, hit on purpose: Feishu has the reply, the outbox does not know; the
    restart sends it again with the same uuid and Feishu returns the first message."""
    feishu = await started_feishu()
    try:
        async with FakeOpenAI() as llm, aiohttp.ClientSession() as http:
            daemon = Daemon(tmp_path, llm, feishu_platform(feishu))
            await daemon.start()
            feishu.hold_answers = asyncio.Event()
            event, answer = message(feishu, 3, "answered into the window")
            await post_until_acknowledged(http, daemon.url(WEBHOOK), signed(feishu, event), [])
            await wait_until(lambda: answers(feishu)[answer] == 1, 60)  # accepted; its id not yet returned
            await daemon.kill()
            assert outbox_unsent(tmp_path) == 1  # committed with the answer, not recorded as sent
            feishu.hold_answers.set()
            feishu.hold_answers = None

            await daemon.start()
            await wait_until(lambda: outbox_unsent(tmp_path) == 0, 60)  # the restart delivered it
            sent = answers(feishu)[answer]
            assert sent == 1  # sent again on start, with the same uuid: Feishu kept the first
            assert len(llm.requests) == 1  # the answer was committed: the model is not asked again
            assert await daemon.terminate() == 0
    finally:
        await feishu.stop()
