"""A small, safe Markdown renderer for message text: escape everything, then add a few tags.

Message text is written by whoever can reach the bot, so it is hostile input. Every character of
it is HTML-escaped first; the renderer only ever adds tags of its own, around text that is already
escaped. No raw HTML passes, no attribute holds message text except an http(s)/mailto link target
(escaped, and quoted), and nothing here can produce `<script>`, `on…=` handlers or `javascript:`.

The subset is what models and people write in chats: fenced code blocks (``` with a language),
inline `code`, **bold**, *italic* / _italic_, ~~strike~~, [links](https://…) and bare URLs,
# headings, - / * / 1. lists, > quotes, tables (a header row, a |---|:-:| delimiter row with as
many cells, alignment as a class: the CSP allows no style attribute), and paragraphs with their
line breaks kept. A table cell splits at a pipe outside code spans (`a|b` stays whole, as people
mean it; GitHub would split it); `\\|` is a pipe in the text. Anything else shows as the text
it is. Inline formatting is skipped on a line longer than INLINE_MAX (it is shown escaped, as
is): the lazy emphasis patterns can rescan a long line once per opening marker,
and one pasted 4 MB log line must not stall the page.
"""

from __future__ import annotations

import html
import re

from markupsafe import Markup

FENCE = re.compile(r"^\s{0,3}(```+|~~~+)\s*([\w+#.-]*)")
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
BULLET = re.compile(r"^\s{0,3}[-*+]\s+(.*)$")
NUMBERED = re.compile(r"^\s{0,3}(\d{1,9})[.)]\s+(.*)$")
QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
TABLE_DELIMITER = re.compile(r"^\s{0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
# on escaped text: [label](url) with an allowed scheme, then bare URLs, then emphasis
LINK = re.compile(r"\[([^\[\]\n]{1,500})\]\(((?:https?://|mailto:)[^\s()<>]{1,2000})\)")
BARE_URL = re.compile(r"(?<![\w/\"=])(https?://[^\s<>()\[\]]{1,2000}[^\s<>()\[\].,;:!?'\"])")
BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
ITALIC = re.compile(
    r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])|(?<![\w_])_(?=[^\s_])(.+?)(?<=[^\s_])_(?![\w_])"
)
INLINE_MAX = 20_000
STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _links(escaped: str) -> str:
    placeholders: list[str] = []

    def keep(tag: str) -> str:
        placeholders.append(tag)
        return f"\x00{len(placeholders) - 1}\x00"

    def link(m: re.Match[str]) -> str:
        return keep(f'<a href="{m.group(2)}" rel="nofollow noopener noreferrer">{m.group(1)}</a>')

    def bare(m: re.Match[str]) -> str:
        return keep(f'<a href="{m.group(1)}" rel="nofollow noopener noreferrer">{m.group(1)}</a>')

    out = LINK.sub(link, escaped)
    out = BARE_URL.sub(bare, out)
    out = _emphasis(out)
    return re.sub(r"\x00(\d+)\x00", lambda m: placeholders[int(m.group(1))], out)


def _emphasis(escaped: str) -> str:
    out = BOLD.sub(lambda m: f"<strong>{m.group(1) or m.group(2)}</strong>", escaped)
    out = ITALIC.sub(lambda m: f"<em>{m.group(1) or m.group(2)}</em>", out)
    return STRIKE.sub(lambda m: f"<del>{m.group(1)}</del>", out)


def inline(text: str) -> str:
    """One block's text: code spans kept literal, the rest escaped, then links and emphasis."""
    if len(text) > INLINE_MAX:
        return _esc(text)
    parts: list[str] = []
    pos = 0
    for m in CODE_SPAN.finditer(text):
        parts.append(_links(_esc(text[pos : m.start()])))
        parts.append(f"<code>{_esc(m.group(2))}</code>")
        pos = m.end()
    parts.append(_links(_esc(text[pos:])))
    return "".join(parts)


def _paragraph(lines: list[str]) -> str:
    return "<p>" + "<br>\n".join(inline(line) for line in lines) + "</p>"


def table_cells(line: str) -> list[str]:
    """A table row's cells: split at pipes outside code spans, `\\|` kept as a pipe, the outer
    pipes optional."""
    row = line.strip()
    cells: list[str] = []
    cell: list[str] = []
    i = 0
    while i < len(row):
        char = row[i]
        if char == "\\" and row[i + 1 : i + 2] == "|":
            cell.append("|")
            i += 2
            continue
        if char == "`":
            run = len(row[i:]) - len(row[i:].lstrip("`"))
            close = row.find("`" * run, i + run)
            if close != -1:
                cell.append(row[i : close + run])
                i = close + run
                continue
        if char == "|":
            cells.append("".join(cell))
            cell = []
        else:
            cell.append(char)
        i += 1
    cells.append("".join(cell))
    if row.startswith("|"):
        cells = cells[1:]
    if row.endswith("|") and not row.endswith("\\|") and cells:
        cells = cells[:-1]
    return [c.strip() for c in cells]


def _table_line(line: str) -> bool:
    """A line that may be a table row: a pipe in it, and no longer than INLINE_MAX (a longer one is
    shown as escaped text, and table_cells' search for closing backticks is kept short)."""
    return "|" in line and len(line) <= INLINE_MAX and bool(line.strip())


def _alignment(delimiter: str) -> str:
    cell = delimiter.strip()
    if cell.startswith(":") and cell.endswith(":"):
        return ' class="center"'
    return ' class="right"' if cell.endswith(":") else ""


def _table(header: list[str], aligns: list[str], rows: list[list[str]]) -> str:
    def row(cells: list[str], tag: str) -> str:
        cells = (cells + [""] * len(aligns))[: len(aligns)]  # as many cells as the header: pad or drop
        return "<tr>" + "".join(f"<{tag}{a}>{inline(c)}</{tag}>" for c, a in zip(cells, aligns)) + "</tr>"

    body = "".join(row(cells, "td") for cells in rows)
    return f"<table><thead>{row(header, 'th')}</thead><tbody>{body}</tbody></table>"


def _table_head(lines: list[str], i: int) -> tuple[list[str], list[str]] | None:
    """(header cells, alignments) when a table starts at line i, else None."""
    if not _table_line(lines[i]) or i + 1 >= len(lines) or not TABLE_DELIMITER.match(lines[i + 1]):
        return None
    header, delimiters = table_cells(lines[i]), table_cells(lines[i + 1])
    if len(header) != len(delimiters):
        return None
    return header, [_alignment(d) for d in delimiters]


def render(text: str | None) -> Markup:
    """Message text as safe HTML."""
    if not text:
        return Markup("")
    # a NUL would collide with the link placeholders; nothing legitimate needs it on a page
    lines = text.replace("\x00", "\ufffd").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    para: list[str] = []
    i = 0

    def flush() -> None:
        if para:
            out.append(_paragraph(para))
            para.clear()

    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence:
            flush()
            marker, lang = fence.group(1), fence.group(2)
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker[:3]):
                body.append(lines[i])
                i += 1
            i += 1  # the closing fence (or the end of the text)
            cls = f' class="lang-{_esc(lang)}"' if lang else ""
            label = f'<span class="lang">{_esc(lang)}</span>' if lang else ""
            out.append(f"<pre>{label}<code{cls}>{_esc(chr(10).join(body))}</code></pre>")
            continue
        heading = HEADING.match(line)
        if heading:
            flush()
            level = min(6, len(heading.group(1)) + 2)  # h3..h6: a message sits under the page's own headings
            out.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
            i += 1
            continue
        if BULLET.match(line) or NUMBERED.match(line):
            flush()
            ordered = bool(NUMBERED.match(line))
            pattern = NUMBERED if ordered else BULLET
            items: list[str] = []
            while i < len(lines) and pattern.match(lines[i]):
                m = pattern.match(lines[i])
                assert m is not None
                items.append(inline(m.group(m.lastindex or 1)))
                i += 1
            tag = "ol" if ordered else "ul"
            out.append(f"<{tag}>" + "".join(f"<li>{item}</li>" for item in items) + f"</{tag}>")
            continue
        table = _table_head(lines, i)
        if table:
            flush()
            i += 2
            rows: list[list[str]] = []
            while i < len(lines) and _table_line(lines[i]):
                rows.append(table_cells(lines[i]))
                i += 1
            out.append(_table(*table, rows))
            continue
        if QUOTE.match(line):
            flush()
            quoted: list[str] = []
            while i < len(lines) and QUOTE.match(lines[i]):
                m = QUOTE.match(lines[i])
                assert m is not None
                quoted.append(m.group(1))
                i += 1
            out.append("<blockquote>" + _paragraph(quoted) + "</blockquote>")
            continue
        if not line.strip():
            flush()
        else:
            para.append(line)
        i += 1
    flush()
    return Markup("\n".join(out))
