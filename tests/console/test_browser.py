"""The console in a real headless Chromium (Debian's `chromium`, driven over DevTools): the list,
a search that highlights, a transcript whose tool call opens on click, rename, delete, charts.
Screenshots of each page are saved (see cdp.screenshot_dir)."""

from __future__ import annotations

import json

import pytest

from tests.console.cdp import Browser, screenshot_dir
from tests.console.media_corpus import seed

pytestmark = pytest.mark.slow  # left out of a quick local run (`pytest -m "not slow"`); CI runs it


@pytest.fixture
async def browser():
    b = await Browser().start()
    yield b
    await b.close()


async def test_browse_search_open_rename_delete_and_status(serve, db, corpus, browser, tmp_path) -> None:
    served = await serve()
    served.metrics.inc("messages_in_total", by=4)
    served.metrics.inc("messages_out_total", by=3)
    served.metrics.observe("turn_seconds", 0.8)
    shots = screenshot_dir(tmp_path)
    b = browser

    # the list shows the stored sessions, newest activity first
    await b.goto(served.url + "/console/")
    titles = await b.js("[...document.querySelectorAll('tr[data-session]')].map(r => r.dataset.session)")
    assert titles == [corpus["quiet"], corpus["hostile"], corpus["deploy"], corpus["nginx"]]
    assert "nginx timeouts" in await b.js("document.querySelector('table.sessions').innerText")
    assert await b.js("document.querySelector('table.sessions').innerText.includes('<b>bold</b> title')")
    await b.screenshot(shots / "console-sessions.png")

    # search from the header box: the right session first, its words marked
    await b.js(
        "const f = document.querySelector('form.quick-search'); f.q.value = 'nginx.conf timeout'; f.requestSubmit()"
    )
    await b.wait_for("location.pathname === '/console/search' && document.readyState === 'complete'")
    marks = await b.js("[...document.querySelectorAll('.hit mark')].map(m => m.textContent)")
    assert "nginx.conf" in marks and "timeout" in marks
    assert await b.js("document.querySelector('.hit-title').textContent") == "nginx timeouts"
    assert await b.js("document.querySelector('.understood code').textContent") == "nginx.conf timeout"
    await b.screenshot(shots / "console-search.png")

    # open it: the tool call is collapsed and opens on a click
    await b.js("document.querySelector('.hit-title').click()")
    await b.wait_for(
        f"location.pathname === '/console/sessions/{corpus['nginx']}' && document.readyState === 'complete'"
    )
    assert await b.js("document.querySelector('details.tool-call').open") is False
    assert await b.js("document.querySelector('details.tool-call pre').checkVisibility()") is False
    await b.js("document.querySelector('details.tool-call summary').click()")
    assert await b.js("document.querySelector('details.tool-call').open") is True
    assert await b.js("document.querySelector('details.tool-call pre').checkVisibility()") is True
    assert "/etc/nginx/nginx.conf" in await b.js("document.querySelector('details.tool-call').innerText")
    await b.screenshot(shots / "console-transcript.png")

    # rename through the form
    await b.js(
        "const r = document.getElementById('rename'); r.title.value = 'nginx 504 fixed'; "
        "r.querySelector('button').click()"
    )
    await b.wait_for("document.getElementById('session-title').textContent === 'nginx 504 fixed'")
    assert db.get_session(corpus["nginx"])["title"] == "nginx 504 fixed"

    # delete: a first click only asks; the confirmation deletes and returns to the list
    await b.js("document.getElementById('delete').click()")
    assert await b.js("document.getElementById('confirm-delete').hidden") is False
    assert db.get_session(corpus["nginx"]) is not None
    await b.js("document.getElementById('delete-confirm').click()")
    await b.wait_for("location.pathname === '/console/' && document.getElementById('deleted-notice') !== null")
    assert db.get_session(corpus["nginx"]) is None
    rows = await b.js("[...document.querySelectorAll('tr[data-session]')].map(r => r.dataset.session)")
    assert corpus["nginx"] not in rows and len(rows) == 3

    # the status page draws both charts
    await b.goto(served.url + "/console/status")
    charts = await b.js(
        "[...document.querySelectorAll('svg.chart')].map(s => [...s.querySelectorAll('polyline')].map(p => "
        "p.getBBox().width > 0))"
    )
    assert charts == [[True, True], [True, True]]
    assert "telegram" in await b.js("document.querySelector('.adapters').innerText")
    await b.screenshot(shots / "console-status.png")

    problems = [e for e in b.log if e.get("level") == "error"]
    assert not problems, json.dumps(problems)[:2000]  # no CSP violation, no script error


async def test_an_attached_image_renders_in_the_transcript(serve, db, browser) -> None:
    files = seed(db)
    served = await serve()
    await browser.goto(f"{served.url}/console/sessions/{files['sid']}")
    await browser.wait_for(
        "document.querySelector('.attachment img') && document.querySelector('.attachment img').complete"
    )
    assert await browser.js("document.querySelector('.attachment img').naturalWidth") == 4  # decoded: the 4x3 PNG
    problems = [e for e in browser.log if e.get("level") == "error"]
    assert not problems, json.dumps(problems)[:2000]  # the image passes the page's CSP


async def test_a_missing_chromium_says_what_to_install(monkeypatch, tmp_path) -> None:
    from tests.console import cdp

    monkeypatch.setattr(cdp, "CHROMIUM", str(tmp_path / "no-chromium-here"))
    with pytest.raises(RuntimeError, match=r"need Debian's chromium.*\.ci/install-chromium"):
        await Browser().start()
