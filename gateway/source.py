"""Who is talking, where: `SessionSource`, and the rule that maps it to a session key.

The key decides which messages share one conversation (DESIGN.md §3). A bad key is worse than an
error: a missing user id silently merging a whole group into one session leaks one person's
conversation to another. So every part is validated and a missing part raises.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Platform(str, Enum):
    LOCAL = "local"
    TELEGRAM = "telegram"
    FEISHU = "feishu"
    DISCORD = "discord"

    def __str__(self) -> str:  # f"{Platform.TELEGRAM}" -> "telegram"
        return self.value


CHAT_TYPES = ("dm", "group", "channel", "thread", "forum")

# Platform ids are digits (Telegram, Discord, may be negative), "oc_…/ou_…/on_…" (Feishu), or a
# local user name. Anything with ':' or whitespace would make keys ambiguous, so it is refused.
_SAFE_PART = re.compile(r"[A-Za-z0-9_\-.@+=/]{1,200}")


class InvalidSessionSource(ValueError):
    """A source that cannot be turned into an unambiguous session key."""


@dataclass(frozen=True)
class SessionSource:
    platform: Platform
    chat_id: str
    chat_type: str
    user_id: str | None = None
    user_name: str | None = None
    thread_id: str | None = None
    chat_name: str | None = None
    user_id_alt: str | None = None  # a stable cross-app id (Feishu union_id); preferred when known
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # the platform's hint of the person's language (Telegram language_code, Discord locale), as sent
    language: str | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "platform", Platform(self.platform))
        except ValueError:
            raise InvalidSessionSource(f"unknown platform {self.platform!r}") from None
        for name in ("chat_id", "user_id", "thread_id", "user_id_alt"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                object.__setattr__(self, name, str(value))
            if getattr(self, name) == "":
                object.__setattr__(self, name, None)
        if self.chat_type not in CHAT_TYPES:
            raise InvalidSessionSource(f"chat_type must be one of {', '.join(CHAT_TYPES)}, got {self.chat_type!r}")

    @property
    def person_id(self) -> str | None:
        """The id that identifies the person: the alternate (union) id when known."""
        return self.user_id_alt or self.user_id

    @property
    def is_private(self) -> bool:
        return self.chat_type == "dm"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["platform"] = self.platform.value
        for optional in ("extra", "language"):
            if not data[optional]:
                data.pop(optional)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SessionSource":
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def _part(name: str, value: str | None) -> str:
    if value is None:
        raise InvalidSessionSource(f"{name} is required for this chat and is missing")
    if not _SAFE_PART.fullmatch(value):
        raise InvalidSessionSource(f"{name} {value[:40]!r} contains characters not allowed in a key")
    return value


def build_session_key(
    source: SessionSource,
    group_sessions_per_user: bool = True,
    thread_sessions_per_user: bool = False,
) -> str:
    """Map a source to its session key (DESIGN.md §3).

    - DM: ``agent:main:{platform}:dm:{chat_id}[:{thread_id}]``
    - others: ``agent:main:{platform}:{chat_type}:{chat_id}[:{thread_id}][:{person}]``, where the
      person is appended in a plain group/channel when ``group_sessions_per_user`` and in a
      thread/topic when ``thread_sessions_per_user``.
    """
    platform = source.platform.value
    chat_id = _part("chat_id", source.chat_id)
    parts = ["agent", "main", platform, source.chat_type, chat_id]
    thread_id = _part("thread_id", source.thread_id) if source.thread_id is not None else None
    if source.chat_type == "dm":
        if thread_id:
            parts.append(thread_id)
        return ":".join(parts)

    in_thread = thread_id is not None or source.chat_type == "thread"
    if thread_id:
        parts.append(thread_id)
    per_user = thread_sessions_per_user if in_thread else group_sessions_per_user
    if per_user:
        parts.append(_part("user_id", source.person_id))
    return ":".join(parts)
