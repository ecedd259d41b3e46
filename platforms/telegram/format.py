"""Ordinary (model-written) markdown -> Telegram MarkdownV2.

Models write CommonMark-ish text: code fences, `inline code`, **bold**, *italic*, ~~strike~~,
[links](url), "# headings" and "> quotes". MarkdownV2 has its own syntax and refuses any of
``_*[]()~`>#+-=|{}.!`` left unescaped outside an entity, so every character that is not part of
a recognised construct is escaped. Unmatched markers are escaped too (they stay visible as typed).

The rendered text (what Telegram counts against its 4096 limit) is never longer than the input:
markers are dropped, nothing is added except bullet/heading changes of equal or smaller size.
"""

from __future__ import annotations

import re

# Characters MarkdownV2 reserves outside entities (Bot API, "MarkdownV2 style").
_RESERVED = set("_*[]()~`>#+-=|{}.!\\")

_FENCE = re.compile(r"^\s*```\s*([\w+#.-]*)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_QUOTE = re.compile(r"^>\s?(.*)$")

# Inline constructs, tried left to right; the earliest match wins, then the first listed.
_INLINE = re.compile(
    r"(?P<code>(?P<ticks>`+)(?P<code_body>.+?)(?P=ticks))"
    r"|(?P<link>\[(?P<link_text>[^\]\n]+)\]\((?P<link_url>(?:[^()\s]|\([^()\s]*\))+)\))"
    r"|(?P<bolditalic>\*\*\*(?P<bolditalic_body>\S(?:(?:(?!\*\*\*).)*?\S)?)\*\*\*)"
    r"|(?P<bold>\*\*(?P<bold_body>\S(?:(?:(?!\*\*).)*?\S)?)\*\*)"
    r"|(?P<bold2>(?<!\w)__(?P<bold2_body>\S(?:(?:(?!__).)*?\S)?)__(?!\w|\.\w))"
    r"|(?P<strike>~~(?P<strike_body>\S(?:(?:(?!~~).)*?\S)?)~~)"
    r"|(?P<italic>(?<![\w*])\*(?P<italic_body>[^\s*](?:[^*]*?[^\s*])?)\*(?![\w*]))"
    r"|(?P<italic2>(?<![\w_])_(?P<italic2_body>[^\s_](?:[^_]*?[^\s_])?)_(?![\w_]|\.\w))"
)


def escape(text: str) -> str:
    """Escape every reserved character for plain MarkdownV2 text."""
    return "".join("\\" + ch if ch in _RESERVED else ch for ch in text)


def escape_code(text: str) -> str:
    """Inside `code` and ```pre``` only the backtick and the backslash are escaped."""
    return text.replace("\\", "\\\\").replace("`", "\\`")


def escape_url(url: str) -> str:
    """Inside the (...) part of a link only ')' and '\\' are escaped."""
    return url.replace("\\", "\\\\").replace(")", "\\)")


def to_markdown_v2(text: str) -> str:
    """Convert markdown to MarkdownV2. Code fences become pre blocks (language kept)."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence:
            lang = fence.group(1)
            body: list[str] = []
            i += 1
            while i < len(lines) and not _FENCE.match(lines[i]):
                body.append(lines[i])
                i += 1
            i += 1  # skip the closing fence (or run off the end: an unclosed block is closed)
            out.append("```" + lang + "\n" + escape_code("\n".join(body)) + "\n```")
            continue
        out.append(_convert_line(lines[i]))
        i += 1
    return "\n".join(out)


def _convert_line(line: str) -> str:
    heading = _HEADING.match(line)
    if heading:
        inner = convert_inline(heading.group(2), frozenset({"bold"}))
        return "*" + inner + "*" if inner else ""
    quote = _QUOTE.match(line)
    if quote:
        return ">" + convert_inline(quote.group(1))
    return convert_inline(line)


def convert_inline(text: str, active: frozenset[str] = frozenset()) -> str:
    """Convert inline markup in one line. `active` holds styles already open around `text`:
    MarkdownV2 cannot nest an entity inside one of the same kind, so those markers are dropped."""
    out: list[str] = []
    pos = 0
    for m in _INLINE.finditer(text):
        out.append(escape(text[pos : m.start()]))
        out.append(_render(m, active))
        pos = m.end()
    out.append(escape(text[pos:]))
    return "".join(out)


_STYLE = {
    "bold": ("bold", "*"),
    "bold2": ("bold", "*"),
    "strike": ("strike", "~"),
    "italic": ("italic", "_"),
    "italic2": ("italic", "_"),
}


def _render(m: re.Match[str], active: frozenset[str]) -> str:
    kind = m.lastgroup
    # lastgroup is the innermost closing group; find the outer alternative that matched
    for name in ("code", "link", "bolditalic", "bold", "bold2", "strike", "italic", "italic2"):
        if m.group(name) is not None:
            kind = name
            break
    if kind == "code":
        if "code" in active:
            return escape(m.group(0))
        body = m.group("code_body")
        # `` `x` `` style: CommonMark strips one space of padding
        if m.group("ticks") != "`" and body.startswith(" ") and body.endswith(" ") and body.strip():
            body = body[1:-1]
        return "`" + escape_code(body) + "`"
    if kind == "bolditalic":
        body = m.group("bolditalic_body")
        inner = convert_inline(body, active | {"bold", "italic"})
        if "italic" not in active:
            inner = "_" + inner + "_"
        return inner if "bold" in active else "*" + inner + "*"
    if kind == "link":
        if "link" in active:
            return escape(m.group(0))
        label = convert_inline(m.group("link_text"), active | {"link"})
        return "[" + label + "](" + escape_url(m.group("link_url")) + ")"
    style, marker = _STYLE[kind or "bold"]
    body = m.group((kind or "bold") + "_body")
    inner = convert_inline(body, active | {style})
    if style in active:
        return inner
    return marker + inner + marker
