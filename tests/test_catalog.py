"""The message catalog checked against the source (DESIGN §17), as CI runs it.

1. The texts are in the catalog: Babel extracts every msgid the code marks (`_`, `n_`, `N_`,
   `gettext`, `ngettext`); the template must list exactly those, and the zh catalog must translate
   each, with no fuzzy or empty entry, and its committed `.mo` must say what its `.po` says.
2. No text escapes the catalog: in gateway/commands, gateway/runtime and platforms/, a string
   literal that reads as a sentence and is handed to the person (returned by a handler, sent,
   replied, appended to a reply's lines) must be inside one of those calls. The scan reads the
   source with `ast`; a literal inside a marking call, a docstring, a log call or an exception is
   not the person's text.
"""

from __future__ import annotations

import ast
import gettext
import re
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po

from gateway.language import DOMAIN, LOCALE_DIR, Language

ROOT = Path(__file__).resolve().parents[1]
KEYWORDS = {"_": None, "n_": (1, 2), "N_": None, "gettext": (2,), "ngettext": (2, 3)}
MARKERS = set(KEYWORDS)
# as babel.cfg: Python, and the console's Jinja templates (Jinja's own Babel extractor)
METHOD_MAP = [("**.py", "python"), ("console/templates/**.html", "jinja2")]
SCANNED = ("gateway/commands", "gateway/runtime", "platforms")
# calls whose argument is what the person reads
SINKS = {"send", "reply", "notify", "refuse", "append", "send_text", "edit_text"}
SENTENCE = re.compile(r"[A-Za-z]{2,}[ ,:;.!?][ A-Za-z]")
# Literals the scan finds that are not the person's text, each with why (a new one needs a reason).
NOT_FOR_THE_PERSON = {
    # what the model reads about an attachment: stored in the transcript, searched; English like logs
    "gateway/runtime/media.py": ("size unknown", "[: ", " transcript: ", " (no ", " (transcription failed)"),
    # a tool's failure, read by the model
    "gateway/runtime/mcp_calls.py": ("unknown tool ",),
    # the terminal is the operator's own console: its /attach refusals stay English, as CLI output does
    "platforms/local.py": ("Nothing was sent.",),
    "platforms/local_attach.py": ("Usage: ", "Could not read the path", "Nothing was sent: "),
    # health reasons (/readyz, the console), HTTP answers to the platform, error matching, file names
    "platforms/telegram/adapter.py": (
        "poll failing",
        "token rejected",
        "conflict:",
        "not started",
        "bad ",
        "not stored",
    ),
    "platforms/telegram/calls.py": ("parse entities", "can't find end"),
    "platforms/telegram/inbound.py": ("voice.oga", "video_note.mp4"),
    "platforms/telegram/stream.py": ("telegram reply",),
    "platforms/discord/adapter.py": ("discord reply",),
    "platforms/discord/slash.py": ("discord interaction",),
    "platforms/feishu/webhook.py": ("body too large", "not stored"),
    # `chinwag sessions rename` prints it: CLI output stays English
    "gateway/commands/context.py": (" (cut to ",),
}


def extracted() -> set[str | tuple[str, str]]:
    found: set[str | tuple[str, str]] = set()
    for package in ("gateway", "platforms", "agent"):
        for _file, _line, message, _comments, _context in extract_from_dir(
            ROOT / package, method_map=METHOD_MAP, keywords=KEYWORDS
        ):
            found.add(message if isinstance(message, str) else tuple(message))
    return found


def catalog_ids(path: Path) -> dict[str | tuple[str, str], object]:
    with path.open("rb") as f:
        return {m.id if isinstance(m.id, str) else tuple(m.id): m for m in read_po(f) if m.id}


def test_the_template_lists_exactly_the_marked_texts():
    template = set(catalog_ids(LOCALE_DIR / f"{DOMAIN}.pot"))
    marked = extracted()
    assert sorted(map(str, marked - template)) == [], "run pybabel extract (README: Languages)"
    assert sorted(map(str, template - marked)) == [], "the template lists texts the code no longer has"


TRANSLATED = [language.catalog_dir for language in Language if language is not Language.EN]


@pytest.mark.parametrize("code", TRANSLATED)
def test_each_catalog_translates_every_text_and_none_is_fuzzy(code):
    po = catalog_ids(LOCALE_DIR / code / "LC_MESSAGES" / f"{DOMAIN}.po")
    missing = sorted(str(m) for m in extracted() if m not in po)
    assert missing == []
    fuzzy = sorted(str(k) for k, m in po.items() if m.fuzzy)  # type: ignore[attr-defined]
    assert fuzzy == []
    empty = sorted(str(k) for k, m in po.items() if not all(m.string if isinstance(m.string, tuple) else [m.string]))  # type: ignore[attr-defined]
    assert empty == []


@pytest.mark.parametrize("code", TRANSLATED)
def test_the_committed_mo_says_what_the_po_says(code):
    po = catalog_ids(LOCALE_DIR / code / "LC_MESSAGES" / f"{DOMAIN}.po")
    compiled = gettext.translation(DOMAIN, LOCALE_DIR, languages=[code])
    for msgid, message in po.items():
        string = message.string  # type: ignore[attr-defined]
        if isinstance(msgid, tuple):
            assert compiled.ngettext(msgid[0], msgid[1], 2) == string[0], "run pybabel compile"
        else:
            assert compiled.gettext(msgid) == string, "run pybabel compile"


def literal_texts(node: ast.AST) -> list[str]:
    """The sentence-like literals in an expression, skipping anything inside a marking call."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in MARKERS:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if SENTENCE.search(node.value) else []
    if isinstance(node, ast.JoinedStr):
        text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
        return [text] if SENTENCE.search(text) else []
    found: list[str] = []
    for child in ast.iter_child_nodes(node):
        found += literal_texts(child)
    return found


def handed_over(node: ast.AST) -> list[ast.AST]:
    """What `node` hands to the person: a returned value, or the arguments of a sink call."""
    if isinstance(node, ast.Return) and node.value is not None:
        return [node.value]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SINKS:
        return list(node.args)
    return []


def carried(value: ast.AST) -> list[str]:
    """The variables a handed-over value is made of: `text` in `return text`, `lines` in
    `return "\\n".join(lines)`."""
    if isinstance(value, ast.Name):
        return [value.id]
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "join":
        return [a.id for a in value.args if isinstance(a, ast.Name)]
    return []


def assigned_to(function: ast.AST, names: set[str]) -> list[ast.AST]:
    """The values a function writes into `names` (`text = f"..."`, `text += "..."`, `lines = [...]`):
    a reply built in a variable before it is returned is as much the person's text."""
    values: list[ast.AST] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            values.append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            if isinstance(node.target, ast.Name) and node.target.id in names:
                values.append(node.value)
    return values


def unmarked(path: Path) -> list[str]:
    name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    excused = lambda text: text.startswith(NOT_FOR_THE_PERSON.get(name, ()))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        values = handed_over(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            values = assigned_to(node, {name for h in ast.walk(node) for v in handed_over(h) for name in carried(v)})
        if not values:
            continue
        for value in values:
            found += [f"{name}:{node.lineno}: {text[:60]!r}" for text in literal_texts(value) if not excused(text)]
    return found


def test_no_text_for_the_person_is_written_outside_the_catalog():
    found = [line for folder in SCANNED for path in sorted((ROOT / folder).rglob("*.py")) for line in unmarked(path)]
    assert found == []


def test_the_scan_sees_an_unmarked_reply(tmp_path):
    source = (
        "async def cmd(ctx):\n"
        '    await ctx.reply("Nothing here yet.")\n'
        '    await ctx.reply(_("Nothing here yet."))\n'
        '    return f"Done with {x} now."\n'
        "def build(ctx):\n"
        '    text = f"Started {ctx} again."\n'
        '    text += " The old one is kept."\n'
        "    return text\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(source, encoding="utf-8")
    assert len(unmarked(path)) == 4
