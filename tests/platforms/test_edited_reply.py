"""EditedReply and EditPacer on virtual time: the first-send rule, coalescing and the pacing."""

from __future__ import annotations

import asyncio

from platforms.base import RateLimited
from platforms.edited_reply import EditedReply
from platforms.helpers import EditPacer
from tests.fakes.loopback import wait_until
from tests.fakes.virtual_clock import VirtualClock


class Platform:
    """Records each call with the virtual time it was made at."""

    def __init__(self, clock: VirtualClock, refuse_edits: int = 0) -> None:
        self.clock, self.calls, self.refuse_edits = clock, [], refuse_edits
        self.keys: list[str | None] = []  # the idempotency key of each send

    async def send(self, text: str, reply_to: str | None, final: bool, key: str | None = None) -> str:
        self.calls.append((self.clock.now(), "send", text, final))
        self.keys.append(key)
        return str(len(self.calls))

    async def edit(self, message_id: str, text: str, final: bool) -> None:
        if self.refuse_edits:
            self.refuse_edits -= 1
            raise RateLimited(4.0)
        self.calls.append((self.clock.now(), "edit", text, final))


def reply(platform: Platform, pacer: EditPacer) -> EditedReply:
    return EditedReply(key="chat", pacer=pacer, split=lambda t: [t], send_part=platform.send, edit_part=platform.edit)


async def test_an_answer_complete_before_the_first_send_rule_is_one_formatted_send():
    clock = VirtualClock(start=1000.0)  # float rounding at this magnitude once looped forever
    platform = Platform(clock)
    stream = reply(platform, EditPacer(1, 1.0, clock))
    await stream.update("Done. All of it.")
    await stream.finish("Done. **All** of it.")
    assert [(kind, text, final) for _at, kind, text, final in platform.calls] == [
        ("send", "Done. **All** of it.", True)
    ]


async def test_updates_are_coalesced_and_paced_and_a_429_holds_the_chat():
    clock = VirtualClock()
    platform = Platform(clock, refuse_edits=1)
    stream = reply(platform, EditPacer(1, 1.0, clock))
    text = "A sentence. " * 30
    for burst in range(0, len(text), 60):  # pieces arrive in bursts, faster than calls are made
        for end in range(burst + 5, min(burst + 60, len(text)) + 1, 5):
            await stream.update(text[:end])
        await asyncio.sleep(0.005)
    await stream.finish(text.strip())
    times = [at for at, *_ in platform.calls]
    assert all(b - a >= 1.0 for a, b in zip(times, times[1:]))
    assert times[1] - times[0] >= 4.0  # the refused edit's retry_after was waited out
    assert platform.calls[-1][1:] == ("edit", text.strip(), True)
    assert len(platform.calls) <= 8  # coalesced: 72 pieces, a call per burst at most


async def test_without_a_sentence_the_first_message_waits_for_the_first_delay():
    clock = VirtualClock()
    platform = Platform(clock)
    stream = reply(platform, EditPacer(1, 1.0, clock))
    began = clock.now()
    await stream.update("no full stop yet")
    await asyncio.sleep(0.01)
    assert platform.calls and platform.calls[0][0] - began >= 1.0
    await stream.fail()
    assert platform.calls[-1][1:] == ("edit", "no full stop yet", True)


async def test_a_cancelled_finish_is_cancelled_even_while_an_edit_is_in_flight():
    clock = VirtualClock()
    gate = asyncio.Event()

    class Slow(Platform):
        async def edit(self, message_id: str, text: str, final: bool) -> None:
            if not final:
                await gate.wait()  # a live edit the platform is slow to answer
            await super().edit(message_id, text, final)

    platform = Slow(clock)
    stream = reply(platform, EditPacer(1, 1.0, clock))
    await stream.update("First sentence. ")
    await stream.first_shown.wait()
    await stream.update("First sentence. Second one.")
    await wait_until(lambda: stream.calls >= 2)  # the live edit has started
    finishing = asyncio.create_task(stream.finish("First sentence. Second one. Done."))
    await asyncio.sleep(0.01)
    finishing.cancel()
    try:
        await finishing
        raise AssertionError("the cancel was swallowed: finish went on to write the final text")
    except asyncio.CancelledError:
        pass
    gate.set()
    await asyncio.sleep(0.01)
    assert all(not final for *_, final in platform.calls)  # nothing final was written after the cancel


async def test_live_updates_stop_for_good_once_may_show_says_no_and_abandon_sends_nothing():
    clock = VirtualClock()
    platform = Platform(clock)
    stream = reply(platform, EditPacer(1, 1.0, clock))
    allowed = [True]
    stream.may_show = lambda: allowed[0]
    await stream.update("A first sentence. ")
    await asyncio.sleep(0.01)
    assert [kind for _at, kind, *_ in platform.calls] == ["send"]
    allowed[0] = False  # the lease is no longer known to be held here
    await stream.update("A first sentence. And more of it.")
    await asyncio.sleep(0.01)
    allowed[0] = True  # too late: a stopped reply does not start editing again
    await stream.update("A first sentence. And more of it, still.")
    await asyncio.sleep(0.01)
    await stream.abandon()
    await stream.finish("ignored after abandon")
    assert [(kind, text) for _at, kind, text, _final in platform.calls] == [("send", "A first sentence.")]


class Sends:
    """A SendRecord that keeps what it was told."""

    def __init__(self) -> None:
        self.log: list[tuple[str, object]] = []

    async def sending(self, part: int) -> None:
        self.log.append(("sending", part))

    async def sent(self, message_ids: list[str]) -> None:
        self.log.append(("sent", list(message_ids)))


async def test_each_new_part_goes_with_its_key_and_is_recorded_around_its_send():
    clock = VirtualClock()
    platform = Platform(clock)
    stream = EditedReply(
        key="chat", pacer=EditPacer(5, 1.0, clock), split=lambda t: t.split("|"),
        send_part=platform.send, edit_part=platform.edit,
    )  # fmt: skip
    stream.send_key, stream.record = "k", Sends()
    await stream.update("one. |two")
    await wait_until(lambda: len(platform.calls) == 2)
    await stream.finish("one.|two|three")
    assert platform.keys == ["k-0", "k-1", "k-2"]
    # the live parts' ids are recorded as they come; the final text's last part is the caller's to record
    assert stream.record.log == [("sending", 0), ("sent", ["1"]), ("sending", 1), ("sent", ["1", "2"]), ("sending", 2)]


async def test_an_adopted_message_is_edited_to_the_new_text_and_never_sent_again():
    clock = VirtualClock()
    platform = Platform(clock)
    stream = reply(platform, EditPacer(1, 1.0, clock))
    stream.adopt(["cut"])  # what a run cut short by a stop or crash left showing
    assert stream.first_shown.is_set()
    assert await stream.finish("The whole answer.") == ["cut"]
    assert [(kind, text) for _at, kind, text, _final in platform.calls] == [("edit", "The whole answer.")]
    again = reply(platform, EditPacer(1, 1.0, clock))
    again.adopt(["cut"])
    assert await again.fail() == ["cut"]  # cut again before it wrote anything: left as it was, not deleted
    assert len(platform.calls) == 1
