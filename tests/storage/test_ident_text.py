"""`ident_text` gives exactly what it gave when messages were first indexed with it (and the snippet fold
of ASCII text is the general one).

The substring index is contentless: deleting a message repeats the text it was indexed with, so the
function may get faster but its output must never change. The reference here is the first
implementation (one regex with a look-behind and a look-ahead per token), kept as the spec.
"""

from __future__ import annotations

import re
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.corpus import generate
from gateway.storage.fts import MAX_IDENTS_PER_MESSAGE, clean, ident_text, index_text, index_texts, is_identifier

_C = r"[\w.\-/:@#~+=%]"
_REFERENCE = re.compile(rf"(?<!{_C})(?={_C}*?[\d.\-/:@#~+=%_]){_C}*\w")


def reference_ident_text(content: str | None) -> str:
    if not content:
        return ""
    seen: dict[str, None] = {}
    for match in _REFERENCE.finditer(clean(content)):
        token = match.group().lower()
        if is_identifier(token) and token not in seen:
            seen[token] = None
            if len(seen) >= MAX_IDENTS_PER_MESSAGE:
                break
    return "\n".join(seen)


# characters that sit on every edge of the rule: joiners, word characters of other scripts, digits
# that are not ASCII, combining marks, letters whose lower case grows, separators
_EDGES = "._-/:@#~+=%" + "aZ09" + "İßΣ" + "٣५" + "\u0301\u0307" + "²五" + " ,;()[]'\"!?\n\t" + "部署"
edgy = st.text(alphabet=st.sampled_from(_EDGES), max_size=80)
anything = st.text(max_size=200)


@settings(max_examples=600, deadline=None)
@given(st.one_of(edgy, anything))
def test_same_output_as_the_reference(text):
    assert ident_text(text) == reference_ident_text(text)
    assert index_texts(text) == (index_text(text), reference_ident_text(text))


def test_same_output_on_the_bench_corpus_and_the_cap():
    for message in generate(2000, seed=3):
        assert ident_text(message.content) == reference_ident_text(message.content)
    many = " ".join(f"v{i}.{i}" for i in range(MAX_IDENTS_PER_MESSAGE + 50))
    assert ident_text(many) == reference_ident_text(many)
    assert len(ident_text(many).split("\n")) == MAX_IDENTS_PER_MESSAGE


def test_examples():
    assert ident_text("run `make -j4` in src/gateway/runner.py.") == "-j4\nsrc/gateway/runner.py"
    assert ident_text("hello. world-- ok") == ""  # a joiner at the end is not part of the token
    assert ident_text("ERR_004211 and err_004211") == "err_004211"
    assert ident_text(string.ascii_letters) == ""


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=300))
def test_ascii_text_folds_as_the_per_character_fold_does(text):
    """Snippets fold ASCII text with one lower(); it must equal the per-character NFKC fold."""
    import unicodedata

    from gateway.storage.fts import _folded

    pieces = [unicodedata.normalize("NFKC", ch).lower() for ch in text]
    folded, owner = _folded(text)
    assert folded == "".join(pieces)
    assert list(owner) == [i for i, piece in enumerate(pieces) for _ in piece]
