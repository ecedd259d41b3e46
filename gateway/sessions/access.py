"""Who may talk to the agent, where: per-platform allowlists, group policies, require-mention.

Rules (DESIGN.md §6), checked in this order for every inbound message:

1. A platform whose adapter says its user is the operator (`PlatformAdapter.operator_is_admin`: the
   local terminal, typed into by the machine's owner) is always allowed, and its user is an admin.
2. Admins (`platforms.<name>.admins`) are allowed everywhere a group policy does not disable groups.
3. Direct chats: the person must be in `allowed_users` (or it holds "*"). An empty list lets nobody in:
   a chat platform configured with a token only answers no one (default deny).
4. Groups, channels, threads, forums: `group_policy` picks the chats —
   `open` any chat, `allowlist` only chats in `group_allowlist`, `blacklist` every chat but those in
   `group_blacklist`, `admin_only` only admins may talk, `disabled` no group chat at all — and the person
   must still pass `allowed_users` (except under `admin_only`, where being an admin is the test).
5. In a group with `require_mention` (default), only messages that mention the bot, reply to it, or are
   /commands are for the bot; the rest are ignored silently (people talk to each other there).

The ids compared are the platform user id and, when the platform gives one, the cross-app id
(Feishu union_id); either listed is enough.

Titles are private like the sessions they name: `title_refusal` words a taken title so that only
a person who may see the session holding it learns that it exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from gateway.errors import TitleTaken
from gateway.source import Platform, SessionSource

if TYPE_CHECKING:
    from gateway.db import StorageFace

GROUP_POLICIES = ("open", "allowlist", "blacklist", "admin_only", "disabled")


class AccessConfigError(ValueError):
    """A platform's access section is malformed (the message names the key)."""


def _ids(value: Any, key: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, (str, int)):
        value = [value]
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise AccessConfigError(f"{key} must be a list of ids, got {type(value).__name__}")
    return frozenset(str(v).strip() for v in value if str(v).strip())


@dataclass(frozen=True)
class PlatformAccess:
    allowed_users: frozenset[str] = frozenset()
    admins: frozenset[str] = frozenset()
    group_policy: str = "open"
    group_allowlist: frozenset[str] = frozenset()
    group_blacklist: frozenset[str] = frozenset()
    require_mention: bool = True

    @property
    def anyone(self) -> bool:
        return "*" in self.allowed_users

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None, name: str = "platform") -> "PlatformAccess":
        section = section or {}
        if not isinstance(section, Mapping):
            raise AccessConfigError(f"platforms.{name} must be a mapping")
        policy = str(section.get("group_policy") or "open")
        if policy not in GROUP_POLICIES:
            raise AccessConfigError(
                f"platforms.{name}.group_policy must be one of {', '.join(GROUP_POLICIES)}, got {policy!r}"
            )
        mention = section.get("require_mention", True)
        if not isinstance(mention, bool):
            raise AccessConfigError(f"platforms.{name}.require_mention must be true or false, got {mention!r}")
        return cls(
            allowed_users=_ids(section.get("allowed_users"), f"platforms.{name}.allowed_users"),
            admins=_ids(section.get("admins"), f"platforms.{name}.admins"),
            group_policy=policy,
            group_allowlist=_ids(section.get("group_allowlist"), f"platforms.{name}.group_allowlist"),
            group_blacklist=_ids(section.get("group_blacklist"), f"platforms.{name}.group_blacklist"),
            require_mention=mention,
        )


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # why (for logs, and the refusal shown in a DM)
    is_admin: bool = False
    addressed: bool = True  # False: a group message not meant for the bot (ignore silently)


def _person_ids(source: SessionSource) -> set[str]:
    return {i for i in (source.user_id, source.user_id_alt) if i}


# Without the adapters at hand (a check from a tool or a test), the terminal is the operator's.
OPERATOR_PLATFORMS = frozenset({Platform.LOCAL.value})


@dataclass
class AccessControl:
    platforms: dict[str, PlatformAccess] = field(default_factory=dict)
    # Platforms whose user is the operator: allowed, admin, and no access keys of their own.
    operators: frozenset[str] = OPERATOR_PLATFORMS

    @classmethod
    def from_config(
        cls, platforms: Mapping[str, Any] | None, operators: Iterable[str] = OPERATOR_PLATFORMS
    ) -> "AccessControl":
        """From the `platforms` section of config.yaml (every sub-section may carry access keys);
        `operators` name the platforms whose adapter has `operator_is_admin`."""
        chosen = frozenset(operators)
        out: dict[str, PlatformAccess] = {}
        for name, section in (platforms or {}).items():
            if name in chosen or not isinstance(section, Mapping):
                continue
            out[str(name)] = PlatformAccess.from_config(section, str(name))
        return cls(out, chosen)

    def for_platform(self, platform: Platform | str) -> PlatformAccess:
        return self.platforms.get(str(getattr(platform, "value", platform)), PlatformAccess())

    def is_admin(self, source: SessionSource) -> bool:
        if source.platform.value in self.operators:
            return True
        return bool(_person_ids(source) & self.for_platform(source.platform).admins)

    def single_owner(self) -> bool:
        """One person owns this deployment: nothing but the local terminal is open, or exactly one
        person id is allowed (or admin) across every platform and no platform admits anyone ("*")."""
        people: set[str] = set()
        for access in self.platforms.values():
            if access.anyone:
                return False
            people |= access.allowed_users | access.admins
        return len(people) <= 1

    def check(
        self,
        source: SessionSource,
        *,
        mentioned: bool = False,
        reply_to_bot: bool = False,
        is_command: bool = False,
    ) -> Decision:
        if source.platform.value in self.operators:
            return Decision(True, "local terminal", is_admin=True)
        access = self.for_platform(source.platform)
        ids = _person_ids(source)
        admin = bool(ids & access.admins)
        user_ok = admin or access.anyone or bool(ids & access.allowed_users)

        if source.chat_type == "dm":
            if not ids:
                return Decision(False, "the message carries no user id")
            if not user_ok:
                return Decision(False, "not in allowed_users", is_admin=False)
            return Decision(True, "admin" if admin else "allowed user", is_admin=admin)

        # groups, channels, threads, forums
        policy = access.group_policy
        if policy == "disabled":
            return Decision(False, "group chats are disabled on this platform", admin)
        if policy == "allowlist" and not admin and source.chat_id not in access.group_allowlist:
            return Decision(False, "chat not in group_allowlist", admin)
        if policy == "blacklist" and not admin and source.chat_id in access.group_blacklist:
            return Decision(False, "chat in group_blacklist", admin)
        if policy == "admin_only" and not admin:
            return Decision(False, "only admins may talk to the bot in groups here", admin)
        if not user_ok:
            return Decision(False, "not in allowed_users", admin)
        if access.require_mention and not (mentioned or reply_to_bot or is_command):
            return Decision(False, "not addressed to the bot", admin, addressed=False)
        return Decision(True, f"group policy {policy}", is_admin=admin)


def may_see_session(
    session: Mapping[str, Any],
    participants: Iterable[str],
    source: SessionSource,
    *,
    is_admin: bool,
    single_owner: bool,
) -> bool:
    """Privacy rule for /resume and /search: a person reaches only sessions they took part in
    (started or wrote in), unless they are an admin or the deployment has a single owner."""
    if is_admin or single_owner:
        return True
    ids = _person_ids(source)
    if not ids:
        return False
    if session.get("user_id") in ids:
        return True
    return bool(ids & set(participants))


TITLE_UNUSABLE = "That title can't be used here; pick another."


def title_refusal(
    db: "StorageFace",
    taken: TitleTaken,
    source: SessionSource,
    *,
    is_admin: bool,
    single_owner: bool,
    resume_hint: bool = False,
) -> str:
    """The reply to a title the database refused. A person who may see the session that has it is
    told so (and, with `resume_hint`, how to go back to it); anyone else gets a neutral refusal that
    does not reveal that such a conversation exists. (Reads the DB: call it off the event loop.)"""
    holder = db.get_session(taken.holder) if taken.holder else None
    if holder is None or not may_see_session(
        holder, db.session_participants(holder["id"]), source, is_admin=is_admin, single_owner=single_owner
    ):
        return TITLE_UNUSABLE
    text = f"Another conversation is already titled “{taken.title}”. Pick a different title"
    return text + (f", or /resume {taken.title}." if resume_hint else ".")
