"""The language chinwag writes its own texts in (DESIGN §17): gettext catalogs, chosen per person.

Every text the daemon writes itself is a msgid in English, looked up in a compiled gettext catalog
(`gateway/locale/<lang>/LC_MESSAGES/chinwag.mo`, extracted and compiled with Babel; see the README).
The `.mo` files are committed beside their `.po`: `pip install -e .` from a clean clone must speak
Chinese with no build step, and tests/i18n checks each `.mo` says exactly what its `.po` says.

Which language: the person's own `/language` choice, else the platform's hint (carried on
`SessionSource.language`), else `platforms.<name>.language`, else `gateway.language` (`auto`: the
hint, else English); `resolve` is that order. The runner enters `speaking(language)` around the
work it does for one message (an ambient scope, as the storage fence is), so a handler deep in a
command writes `_("Stopped.")` without a language parameter threaded through every call; code
holding a language names it: `gettext(language, msgid, ...)`.

Placeholders are named (`{count}`), filled after the lookup, so a translation may move them. This
module sits on the ground floor: platforms (menus, cards) import it as they import gateway.source.
"""

from __future__ import annotations

import contextlib
import contextvars
import gettext as _gettext
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any, Iterator

DOMAIN = "chinwag"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
AUTO = "auto"


class Language(str, Enum):
    EN = "en"
    ZH = "zh"  # Simplified Chinese
    ZH_TW = "zh-TW"  # Traditional Chinese, in Taiwan's words (資料庫, 搜尋, 使用者)
    JA = "ja"

    def __str__(self) -> str:
        return self.value

    @property
    def label(self) -> str:
        """The language's name in itself (what /language lists)."""
        return {"en": "English", "zh": "简体中文", "zh-TW": "繁體中文", "ja": "日本語"}[self.value]

    @property
    def tag(self) -> str:
        """The BCP 47 tag (HTML `lang`, `hreflang`): the script for Chinese, which the catalog fixes."""
        return {"en": "en", "zh": "zh-Hans", "zh-TW": "zh-Hant-TW", "ja": "ja"}[self.value]

    @property
    def catalog_dir(self) -> str:
        """The catalog's folder under LOCALE_DIR, in gettext's spelling (`zh_TW`)."""
        return self.value.replace("-", "_")


DEFAULT = Language.EN
CHOICES = (*(language.value for language in Language), AUTO)  # what config and /language accept
TRADITIONAL = {"hant", "tw", "hk", "mo"}  # the script or regions that write Chinese in Traditional


def parse_language(tag: str | None) -> Language | None:
    """A platform's language tag -> one of ours: `zh-hans`, `zh-CN`, `zh_SG`, `zh` -> ZH; `zh-hant`,
    `zh-TW`, `zh_HK.UTF-8` -> ZH_TW; `ja-JP` -> JA; `en-US` -> EN; a language we have no catalog for (or none) ->
    None, so the next rule in the order decides."""
    if not tag:
        return None
    subtags = tag.strip().split(".", 1)[0].split("@", 1)[0].replace("_", "-").lower().split("-")
    if subtags[0] == "zh":
        return Language.ZH_TW if TRADITIONAL & set(subtags[1:]) else Language.ZH
    try:
        return Language(subtags[0])
    except ValueError:
        return None


def from_accept_language(header: str | None) -> Language | None:
    """The browser's first language we have a catalog for, by its `Accept-Language` weights
    (`zh-CN,zh;q=0.9,en;q=0.8` -> ZH); None when it names none of ours (or nothing)."""
    weighted: list[tuple[float, int, Language]] = []
    for position, part in enumerate((header or "").split(",")):
        tag, _sep, params = part.strip().partition(";")
        weight = 1.0
        if params.strip().startswith("q="):
            try:
                weight = float(params.strip()[2:])
            except ValueError:
                continue
        language = parse_language(tag)
        if language is not None and weight > 0:
            weighted.append((-weight, position, language))
    return min(weighted)[2] if weighted else None


def resolve(chosen: str | None, hint: str | None, platform_default: str | None, gateway_default: str) -> Language:
    """The language of a reply, in the order of the module doc. `chosen`/`platform_default`/
    `gateway_default` are config-style values (`en`, `zh`, `auto`, or None when not set)."""
    if chosen and chosen != AUTO:
        return Language(chosen)
    hinted = parse_language(hint)
    if hinted is not None:
        return hinted
    for setting in (platform_default, gateway_default):
        if setting and setting != AUTO:
            return Language(setting)
    return DEFAULT


@cache
def catalog(language: Language | None) -> _gettext.NullTranslations:
    """The compiled catalog of `language` (English, or None, is the msgids themselves)."""
    if language is None or language is Language.EN:
        return _gettext.NullTranslations()
    return _gettext.translation(DOMAIN, LOCALE_DIR, languages=[language.catalog_dir])


_current: contextvars.ContextVar[Language] = contextvars.ContextVar("chinwag_language", default=DEFAULT)


@contextlib.contextmanager
def speaking(language: Language | None) -> Iterator[None]:
    """Texts written inside (and in tasks started inside) are in `language` (None: the default)."""
    token = _current.set(language or DEFAULT)
    try:
        yield
    finally:
        _current.reset(token)


def current() -> Language:
    return _current.get()


def gettext(language: Language | None, msgid: str, /, **named: Any) -> str:
    """`msgid` in `language`, its `{placeholders}` filled from `named`."""
    text = catalog(language).gettext(msgid)
    return text.format(**named) if named else text


def ngettext(language: Language | None, singular: str, plural: str, n: int, /, **named: Any) -> str:
    """The form for `n` (English: one/other; Chinese: one form), `{n}` and `named` filled."""
    return catalog(language).ngettext(singular, plural, n).format(n=n, **named)


def _(msgid: str, /, **named: Any) -> str:
    """`gettext` in the current language (the `speaking` scope)."""
    return gettext(_current.get(), msgid, **named)


def n_(singular: str, plural: str, n: int, /, **named: Any) -> str:
    """`ngettext` in the current language."""
    return ngettext(_current.get(), singular, plural, n, **named)


def N_(msgid: str) -> str:
    """Marks a msgid for extraction where it is defined; it is translated where it is used."""
    return msgid
