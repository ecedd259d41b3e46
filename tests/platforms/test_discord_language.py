"""Discord in the person's language (DESIGN §17): slash-command and option descriptions registered
with zh-CN, zh-TW and ja localizations through discord.py's Translator, and a slash command from a Chinese client
answered in Chinese. The real adapter against the fake Discord."""

from __future__ import annotations

import asyncio

from tests.fakes.discord_server import FakeDiscord
from tests.platforms.test_discord_e2e import ANN_ID, DM_CHANNEL, stack  # noqa: F401 (the fixture)


async def test_commands_are_registered_with_chinese_descriptions(stack):  # noqa: F811
    d: FakeDiscord = stack.discord
    await d.wait_for(lambda: d.commands.get(None), 8)
    undo = d.command_named("undo")
    assert undo is not None
    assert undo["description"] == "hide the last n exchanges (kept in history)"
    assert undo["description_localizations"] == {
        "zh-CN": "撤销最近 n 轮对话（历史记录中仍保留）",
        "zh-TW": "撤銷最近 n 輪對話（歷史記錄中仍保留）",
        "ja": "直近 n 回のやり取りを取り消す（履歴には残る）",
    }
    [count] = undo["options"]
    assert count["description_localizations"] == {
        "zh-CN": "要撤销几轮对话（默认 1 轮）",
        "zh-TW": "要撤銷幾輪對話（預設 1 輪）",
        "ja": "取り消すやり取りの回数（既定は 1）",
    }


async def test_a_chinese_client_is_answered_in_chinese(stack):  # noqa: F811
    d: FakeDiscord = stack.discord
    await d.wait_for(lambda: d.commands.get(None), 8)
    chinese = await d.slash(DM_CHANNEL, d.user(ANN_ID, "ann"), "undo", locale="zh-CN")
    await d.wait_for(lambda: d.answer_text(chinese), 8)
    traditional = await d.slash(DM_CHANNEL, d.user(ANN_ID, "ann"), "undo", locale="zh-TW")
    await d.wait_for(lambda: d.answer_text(traditional), 8)
    english = await d.slash(DM_CHANNEL, d.user(ANN_ID, "ann"), "undo")
    await d.wait_for(lambda: d.answer_text(english), 8)
    await asyncio.wait_for(stack.runner.drain(), 8)
    assert d.answer_text(chinese) == ["这个对话里没有可撤销的内容。"]
    assert d.answer_text(traditional) == ["這個對話裡沒有可撤銷的內容。"]
    assert d.answer_text(english) == ["Nothing to undo in this conversation."]
