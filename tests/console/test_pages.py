"""The HTML pages: hostile text rendered as text, highlighting, collapsed tool calls, charts."""

from __future__ import annotations

import re

from gateway.console import charts, highlight, markdown


async def page(served, path) -> tuple[int, str]:
    async with served.session() as http:
        async with http.get(path) as resp:
            assert resp.headers["Content-Type"].startswith("text/html")
            return resp.status, await resp.text()


async def test_script_in_a_message_or_title_renders_as_text(serve, corpus) -> None:
    served = await serve()
    status, html = await page(served, f"/console/sessions/{corpus['hostile']}")
    assert status == 200
    assert "<script>alert" not in html and "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in html
    assert "<img" not in html and "onerror=alert(1)&gt;" in html
    assert 'href="javascript:' not in html
    assert "<b>bold</b>" not in html and "&lt;b&gt;bold&lt;/b&gt; title" in html
    # every <script> on the page is the console's own file
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/console/static/console.js" defer>']
    status, listing = await page(served, "/console/")
    assert "<b>bold</b>" not in listing and "&lt;script&gt;" in listing


async def test_list_page_shows_rows_filters_and_pages(serve, db, corpus) -> None:
    served = await serve()
    status, html = await page(served, "/console/?limit=2")
    assert status == 200
    assert html.count('<tr data-session="') == 2
    assert f'data-session="{corpus["quiet"]}"' in html and f'data-session="{corpus["hostile"]}"' in html
    older = re.search(r'<a href="([^"]+)" rel="next"', html)
    assert older
    status, html2 = await page(served, older.group(1).replace("&amp;", "&"))
    assert f'data-session="{corpus["deploy"]}"' in html2 and f'data-session="{corpus["nginx"]}"' in html2
    status, html3 = await page(served, "/console/?platform=feishu")
    assert html3.count('<tr data-session="') == 1 and "Bo" in html3
    status, bad = await page(served, "/console/?from=not-a-date")
    assert status == 400 and "YYYY-MM-DD" in bad


async def test_search_page_marks_the_words_and_says_how_it_understood(serve, corpus) -> None:
    served = await serve()
    status, html = await page(served, "/console/search?q=nginx.conf+timeout")
    assert status == 200
    assert "Understood as: <code>nginx.conf timeout</code>" in html
    assert "<mark>nginx.conf</mark>" in html and "<mark>timeout</mark>" in html
    assert f"/console/sessions/{corpus['nginx']}#m" in html
    status, html = await page(served, "/console/search?q=%E9%83%A8%E7%BD%B2%E7%BD%91%E5%85%B3")  # 部署网关
    assert "<mark>部署网关</mark>" in html
    status, html = await page(served, "/console/search?q=%3Cscript%3E")
    assert status == 200 and "<script>" not in html.replace('<script src="/console/static/console.js" defer>', "")


async def test_transcript_collapses_tool_calls_and_greys_undone(serve, db, corpus) -> None:
    db.rewind(corpus["nginx"], 1)
    served = await serve()
    status, html = await page(served, f"/console/sessions/{corpus['nginx']}")
    assert status == 200
    assert re.search(r'<details class="tool-call"><summary>called read_file</summary>', html)
    assert '<details class="tool-result"><summary>tool result · read_file' in html
    assert "<details open" not in html
    assert html.count("state-undone") == 4
    assert '<pre><span class="lang">nginx</span><code class="lang-nginx">proxy_read_timeout 300s;</code></pre>' in html
    assert "<code>proxy_read_timeout</code>" in html and "<strong>300s</strong>" in html


async def test_unknown_session_page_is_404(serve) -> None:
    served = await serve()
    status, html = await page(served, "/console/sessions/20990101_000000_00000000")
    assert status == 404 and "no session with that id" in html


async def test_status_page_draws_its_charts(serve) -> None:
    served = await serve()
    served.metrics.inc("messages_in_total", by=5)
    served.metrics.observe("turn_seconds", 2.0)
    status, html = await page(served, "/console/status")
    assert status == 200
    assert html.count("<svg") == 2 and html.count("<polyline") == 4
    assert 'data-adapter="telegram"' in html and "ready" in html


def test_markdown_escapes_everything_it_does_not_make() -> None:
    out = str(
        markdown.render('<a href="x" onclick="y">hi</a> **b** `<i>` [ok](https://e.com/?a=1&b="2") [no](javascript:x)')
    )
    assert '<a href="x"' not in out and not re.search(r"<[^>]* onclick=", out)
    assert "&lt;a href=&quot;x&quot; onclick=&quot;y&quot;&gt;hi&lt;/a&gt;" in out
    assert "<strong>b</strong>" in out and "<code>&lt;i&gt;</code>" in out
    assert '<a href="https://e.com/?a=1&amp;b=&quot;2&quot;" rel="nofollow noopener noreferrer">ok</a>' in out
    assert "javascript" in out and 'href="javascript' not in out


def test_markdown_blocks() -> None:
    out = str(
        markdown.render("# Title\n\n- one\n- two\n\n1. first\n2. second\n\n> said\n\nline a\nline b\n```\n<x>\n```")
    )
    assert "<h3>Title</h3>" in out
    assert "<ul><li>one</li><li>two</li></ul>" in out and "<ol><li>first</li><li>second</li></ol>" in out
    assert "<blockquote><p>said</p></blockquote>" in out and "<p>line a<br>\nline b</p>" in out
    assert "<pre><code>&lt;x&gt;</code></pre>" in out
    assert str(markdown.render("an unclosed ```\ncode")).startswith("<p>an unclosed")


def test_markdown_long_lines_are_shown_escaped_without_formatting() -> None:
    line = "**a " * 10_000 + "<b>"
    out = str(markdown.render(line))
    assert "<strong>" not in out and out.endswith("&lt;b&gt;</p>")


def test_highlight_kinds_of_words() -> None:
    text = "Start the painting: nginx.conf said E1234 at 部署网关超时; x marks the spot, fox"
    marked = lambda words: [text[a:b] for a, b in highlight.match_ranges(text, words)]
    assert marked(["paint"]) == ["paint"]  # a prefix at a word start
    assert marked(["art"]) == []  # not inside "Start"
    assert marked(["x"]) == ["x"]  # a short word only whole: not the x of "fox"
    assert marked(["nginx.conf", "nginx", "conf"]) == ["nginx.conf"]  # merged, the identifier whole
    assert marked(["E1234"]) == ["E1234"] and marked(["1234"]) == ["1234"]
    assert marked(["部署", "署网", "网关", "超时"]) == ["部署网关超时"]


def test_snippet_ranges_point_into_the_snippet() -> None:
    text = "word " * 200 + "the needle is here " + "word " * 200
    snippet, ranges = highlight.snippet(text, ["needle"])
    assert snippet.startswith("…") and snippet.endswith("…")
    assert [snippet[a:b] for a, b in ranges] == ["needle"]
    assert highlight.segments("ab needle cd", [(3, 9)]) == [("ab ", False), ("needle", True), (" cd", False)]


def test_chart_scales_and_escapes() -> None:
    svg = str(charts.line_chart('a "chart" <x>', [charts.Series("in <b>", [0, 1, 3] + [0] * 57)]))
    assert svg.startswith("<svg") and "<b>" not in svg and "&lt;b&gt;" in svg and "style=" not in svg
    assert charts.nice_step(3) == 5 and charts.nice_step(0.12) == 0.2 and charts.nice_step(7.4) == 10


def y_labels(svg: str) -> list[str]:
    return re.findall(r'text-anchor="end"[^>]*>([^<]*)</text>', svg)


def test_chart_axis_speaks_one_unit_in_round_steps() -> None:
    """Issue 28 item 14: the latency axis read "0 ms" to "5 s" in quarters (1.25 s, 3.75 s)."""
    slow = str(charts.line_chart("Turn latency", [charts.Series("slowest", [4.2] + [0.0] * 59)], unit="s"))
    assert y_labels(slow) == ["0 s", "1 s", "2 s", "3 s", "4 s", "5 s"]
    fast = str(charts.line_chart("Turn latency", [charts.Series("slowest", [0.3] + [0.0] * 59)], unit="s"))
    assert y_labels(fast) == ["0 ms", "100 ms", "200 ms", "300 ms"]
    idle = str(charts.line_chart("Turn latency", [charts.Series("slowest", [0.0] * 60)], unit="s"))
    assert y_labels(idle) == ["0 s", "0.2 s", "0.4 s", "0.6 s", "0.8 s", "1 s"]
    counts = str(charts.line_chart("Messages", [charts.Series("in", [0.0] * 60)]))
    assert y_labels(counts) == ["0", "1"]  # no fractions of a message
    busy = str(charts.line_chart("Messages", [charts.Series("in", [0.0] * 59 + [37.0])]))
    assert y_labels(busy) == ["0", "10", "20", "30", "40"]


def test_markdown_tables_render_as_tables_and_stay_escaped() -> None:
    """Issue 28 item 14: a model's table showed as raw pipes."""
    out = str(
        markdown.render(
            "Compare:\n| name | size |\n|:-----|-----:|\n| `a|b` | **3** |\n| <b>x</b> | 4 \\| 5 |\n\nafter"
        )
    )
    assert "<p>Compare:</p>" in out and "<p>after</p>" in out
    assert '<table><thead><tr><th>name</th><th class="right">size</th></tr></thead><tbody>' in out
    assert '<tr><td><code>a|b</code></td><td class="right"><strong>3</strong></td></tr>' in out
    assert '<tr><td>&lt;b&gt;x&lt;/b&gt;</td><td class="right">4 | 5</td></tr></tbody></table>' in out
    # pipes without a delimiter row are text, not a table
    assert "<table" not in str(markdown.render("a | b\nc | d"))
