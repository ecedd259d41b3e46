"""The console in the browser's language (DESIGN §17): rendered on the server from
`Accept-Language`, and a switch that keeps another choice in a cookie."""

from __future__ import annotations

import aiohttp

ZH_BROWSER = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}


async def page(served, path: str, headers: dict[str, str] | None = None, **kwargs) -> tuple[int, str]:
    async with served.session(**kwargs) as http:
        async with http.get(path, headers=headers or {}) as resp:
            return resp.status, await resp.text()


async def test_the_console_is_in_chinese_for_a_chinese_browser(serve, corpus) -> None:
    served = await serve()
    status, html = await page(served, "/console/", ZH_BROWSER)
    assert status == 200
    assert '<html lang="zh-Hans">' in html
    assert ">会话</a>" in html and 'placeholder="搜索对话"' in html and "chinwag 控制台" in html
    assert "Search conversations" not in html
    status, html = await page(served, "/console/status", ZH_BROWSER)
    assert "每分钟消息数" in html and "条排队消息" in html and ">现在</text>" in html  # the chart too
    status, html = await page(served, f"/console/sessions/{corpus['nginx']}", ZH_BROWSER)
    assert "重命名" in html and 'data-renamed="已重命名。"' in html  # the script's texts too
    status, html = await page(served, "/console/no-such-page", ZH_BROWSER)
    assert status == 404 and "返回会话列表" in html


async def test_a_taiwanese_browser_gets_traditional_chinese(serve, corpus) -> None:
    served = await serve()
    status, html = await page(served, "/console/", {"Accept-Language": "zh-TW,zh;q=0.8,en;q=0.5"})
    assert '<html lang="zh-Hant-TW">' in html and 'placeholder="搜尋對話"' in html


async def test_a_japanese_browser_gets_japanese(serve, corpus) -> None:
    served = await serve()
    status, html = await page(served, "/console/status", {"Accept-Language": "ja-JP,ja;q=0.9,en;q=0.5"})
    assert '<html lang="ja">' in html and "1 分あたりのメッセージ数" in html


async def test_an_english_or_unknown_browser_gets_english(serve, corpus) -> None:
    served = await serve()
    for headers in ({}, {"Accept-Language": "en-US,en;q=0.9"}, {"Accept-Language": "fr-FR"}):
        status, html = await page(served, "/console/", headers)
        assert '<html lang="en">' in html and ">Sessions</a>" in html, headers


async def test_the_switch_keeps_a_choice_over_the_browsers_language(serve, corpus) -> None:
    served = await serve()
    async with served.session(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:  # unsafe: an IP host
        async with http.get("/console/", headers=ZH_BROWSER) as resp:
            html = await resp.text()
        assert 'href="/console/language?to=en&amp;next=%2Fconsole%2F"' in html  # the switch, to English
        async with http.get("/console/language?to=en&next=/console/status", allow_redirects=False) as resp:
            assert resp.status == 302 and resp.headers["Location"] == "/console/status"
            assert resp.cookies["chinwag_lang"].value == "en"
        async with http.get("/console/status", headers=ZH_BROWSER) as resp:  # the cookie wins
            html = await resp.text()
        assert '<html lang="en">' in html and "Messages per minute" in html
        async with http.get("/console/language?to=klingon") as resp:
            assert resp.status == 400
        async with http.get("/console/language?to=zh&next=https://evil.example/", allow_redirects=False) as resp:
            assert resp.headers["Location"] == "/console/"  # never off the console
