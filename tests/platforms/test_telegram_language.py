"""Speaking the person's language on Telegram (DESIGN §17): the real adapter against the fake Bot
API, the real runner on SQLite. The hint is the sender's `language_code`; `/language` overrides it
and is kept in the database across a restart."""

from __future__ import annotations

from gateway.language import Language, speaking
from gateway.sessions.store import ResetNotice
from tests.fakes.loopback import wait_until
from tests.fakes.telegram_server import FakeTelegram
from tests.platforms.test_telegram_e2e import stack  # noqa: F401 (the fixture)

LI = {**FakeTelegram.user(50, "Li", "li"), "language_code": "zh-hans"}
ANN = {**FakeTelegram.user(51, "Ann", "ann"), "language_code": "en"}
MEI = {**FakeTelegram.user(52, "Mei", "mei"), "language_code": "zh-hant"}
AOI = {**FakeTelegram.user(53, "Aoi", "aoi"), "language_code": "ja"}


async def ask(stack, user: dict, text: str, count: int) -> str:  # noqa: F811
    tg = stack.telegram
    tg.push_message(tg.private_chat(user), user, text)
    replies = await stack.wait_replies(user["id"], count)
    return replies[count - 1]["text"]


async def test_a_chinese_app_is_answered_in_chinese(stack):  # noqa: F811
    assert "可用命令" in await ask(stack, LI, "/help", 1)
    assert await ask(stack, LI, "/undo", 2) == "这个对话里没有可撤销的内容。"
    assert "没有 /frobnicate 这个命令" in await ask(stack, LI, "/frobnicate", 3)


async def test_a_traditional_chinese_app_is_answered_in_traditional_chinese(stack):  # noqa: F811
    assert await ask(stack, MEI, "/undo", 1) == "這個對話裡沒有可撤銷的內容。"
    assert "繁體中文" in await ask(stack, LI, "/language zh-tw", 1)  # typed in any case
    assert await ask(stack, LI, "/undo", 2) == "這個對話裡沒有可撤銷的內容。"


async def test_a_japanese_app_is_answered_in_japanese(stack):  # noqa: F811
    assert await ask(stack, AOI, "/undo", 1) == "この会話には取り消せるものがありません。"
    assert "コマンド一覧" in await ask(stack, AOI, "/help", 2)


async def test_an_english_app_is_answered_in_english(stack):  # noqa: F811
    assert "Commands:" in await ask(stack, ANN, "/help", 1)
    assert "Nothing to undo in this conversation" in await ask(stack, ANN, "/undo", 2)
    assert "Unknown command /frobnicate" in await ask(stack, ANN, "/frobnicate", 3)


async def test_the_persons_choice_beats_the_hint_and_survives_a_restart(stack):  # noqa: F811
    assert "English" in await ask(stack, LI, "/language en", 1)
    assert "Nothing to undo" in await ask(stack, LI, "/undo", 2)
    await stack.restart()
    assert "Nothing to undo" in await ask(stack, LI, "/undo", 3)
    assert "简体中文" in await ask(stack, LI, "/language", 4)  # the choices are named in themselves
    assert "跟随" in await ask(stack, LI, "/language auto", 5)
    assert "没有可撤销" in await ask(stack, LI, "/undo", 6)
    assert "/language [en|zh|zh-TW|ja|auto]" in await ask(stack, LI, "/language klingon", 7)


def test_a_reset_notice_in_chinese():
    notice = ResetNotice("idle", "s1", "周报")
    with speaking(Language.ZH):
        assert notice.text() == "上一个对话闲置了一段时间，已为你开启新对话。想继续之前的对话，请发送 /resume 周报"
    assert notice.text().startswith("Started a new conversation: the previous one had been idle")


async def test_the_command_menu_is_set_in_english_and_for_chinese_apps(stack):  # noqa: F811
    tg = stack.telegram
    await wait_until(lambda: None in tg.menus and "zh" in tg.menus)
    english = {c["command"]: c["description"] for c in tg.menus[None]}
    chinese = {c["command"]: c["description"] for c in tg.menus["zh"]}
    assert english["undo"] == "hide the last n exchanges (kept in history)"
    assert chinese["undo"] == "撤销最近 n 轮对话（历史记录中仍保留）"
    assert english.keys() == chinese.keys()
    await wait_until(lambda: "ja" in tg.menus)
    assert {c["command"]: c["description"] for c in tg.menus["ja"]}[
        "undo"
    ] == "直近 n 回のやり取りを取り消す（履歴には残る）"
