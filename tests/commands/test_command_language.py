"""Command answers in the person's language (DESIGN §17), through the real runner on SQLite: the
hint is the source's `language` (what Telegram's `language_code` becomes). The texts built from
parts of other modules (the reset policy, why a key, a schedule's timing) follow the same language."""

from __future__ import annotations

from datetime import datetime, timezone

from gateway.language import Language, speaking
from gateway.schedules.model import ChatRef, Schedule, new_id
from gateway.schedules.store import FaceScheduleStore
from gateway.schedules.times import Timing, describe, next_run_after, parse_timing
from gateway.sessions.reset import ResetPolicies, ResetPolicy
from tests.fakes.gateway_harness import Gateway

ZH = {"language": "zh-CN"}


async def test_whoami_in_chinese(tmp_path):
    policies = ResetPolicies(default=ResetPolicy(mode="idle", idle_minutes=60))
    async with Gateway(tmp_path, policies=policies) as gw:
        where = {"chat_id": "-5", "user_id": "42", "chat_type": "group", "user_name": "Li", **ZH}
        await gw.say("你好", mentioned=True, **where)
        text = (await gw.say("/whoami", **where))[0]
        assert "你：Li（telegram 上的 ID：42）" in text
        assert "会话键：agent:main:telegram:group:-5:42" in text
        assert "原因：这是群聊：每位成员各有自己的对话。" in text
        assert "重置规则：闲置 1 小时后重置。" in text


async def test_new_in_chinese_names_the_kept_conversation(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("/new 周报", **ZH)
        await gw.say("这周做了什么", **ZH)
        assert (await gw.say("/new", **ZH))[0] == "已开始新对话。之前的对话已保留：/resume 周报"
        assert (await gw.say("/new 月报", **ZH))[0] == "已开始新对话“月报”。"


async def test_schedules_in_chinese(tmp_path):
    async with Gateway(tmp_path) as gw:
        assert (await gw.say("/schedules", **ZH))[0].startswith("你还没有定时任务。")
        source = gw.adapter.source("100", "100", "dm")
        now = datetime(2026, 12, 2, 8, 0, tzinfo=timezone.utc)
        timing = parse_timing(
            at=None, cron=None, every_minutes=30, timezone_name="UTC", now=now, min_interval_minutes=5
        )
        first = next_run_after(timing, now)
        assert first is not None
        job = Schedule.new(new_id(), "telegram:100", ChatRef(source, gw.store.key_for(source)), timing, "喝水", first)
        assert FaceScheduleStore(gw.db).create(job, 20)
        listing = (await gw.say("/schedules", **ZH))[0]
        assert listing == f"你的定时任务：\n{job.id} · 每 30 分钟 · 下次运行：2026-12-02 周三 08:30 UTC（UTC） · 喝水"
        assert (await gw.say("/schedules pause", **ZH))[0].startswith("用法：/schedules")
        assert (await gw.say(f"/schedules pause {job.id}", **ZH))[0].startswith(
            f"已暂停：{job.id} · 每 30 分钟 · 已暂停"
        )


def test_a_one_off_reads_in_the_language_spoken():
    at = datetime(2026, 12, 3, 1, 0, tzinfo=timezone.utc)
    timing = Timing("once", "Asia/Shanghai", at, at=at)
    with speaking(Language.ZH):
        assert describe(timing) == "单次：2026-12-03 周四 09:00 CST（Asia/Shanghai）"
    assert describe(timing) == "once at Thu 2026-12-03 09:00 CST (Asia/Shanghai)"
