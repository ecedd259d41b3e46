"""A committed reply is sent once however many callers hand the outbox its row (gateway.runtime.
delivery.Outbox). A job that met a storage fault after its reply committed asks, once storage is
back, for its entry's unsent replies (`deliver_unsent_for`), and the reply may be queued for a
retry just then: its send failed on the same full disk (the "sending" mark before it could not
commit). Handed over twice, it was queued twice and sent twice."""

from __future__ import annotations

from gateway.db import SessionDB
from gateway.runtime.delivery import Inbox, Outbox
from gateway.source import SessionSource
from tests.fakes.chat_adapter import ChatAdapter
from tests.fakes.loopback import wait_until


class RefusingFirst(ChatAdapter):
    """The platform (or the mark before the send) fails the first send; later ones go."""

    def __init__(self) -> None:
        super().__init__("telegram")
        self.refusals = 1

    async def send(
        self, source: SessionSource, text: str, reply_to: str | None = None, key: str | None = None
    ) -> list[str]:
        if self.refusals:
            self.refusals -= 1
            raise ConnectionError("refused")
        return await super().send(source, text, reply_to, key)


async def test_a_reply_queued_for_a_retry_and_handed_over_again_is_sent_once(tmp_path):
    db = SessionDB(tmp_path / "state.db")
    adapter = RefusingFirst()
    outbox = Outbox(db, {"telegram": adapter})
    try:
        msg = adapter.message("hello")
        assert await Inbox(db).admit(msg, "chat")
        row = await outbox.commit(msg, "echo: hello", [msg], "answered")
        assert not await outbox.deliver(row["id"], msg.source, "echo: hello", None, send_key=row["send_key"])
        assert outbox.backlogged(msg.source)  # refused: queued for a retry
        await outbox.deliver_unsent_for(msg.inbox_id or 0)  # the job after its storage fault
        await wait_until(lambda: not outbox.backlogged(msg.source), 30)  # the retry went through its queue
        assert adapter.texts() == ["echo: hello"]
        assert not db.outbox_unsent()
    finally:
        await outbox.stop()
        db.close()
