"""The shape of config.yaml, derived: every key with its type, default and allowed values comes from
the section dataclasses (gateway.config.sections, the typed `Config` of gateway.config.views) and the
adapters' settings classes (platforms/<name>/settings.py); here is the generic machinery that checks
a parsed document against it (types, ranges, choices, unknown keys with a did-you-mean, `${ENV}`
substitution) and builds the typed sections from the checked values. gateway.config.load runs it.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gateway.config.sections import SETTINGS_CLASSES, UNSET, PlatformAccess
from gateway.config.views import Config
from gateway.envvars import expand_env
from platforms.settings import truthy, value_type


class ConfigError(ValueError):
    """One or more problems in a configuration file; `problems` lists them one per entry."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


# --------------------------------------------------------------------------------------------
# Schema: each section maps key -> Field, derived from the dataclasses that declare the keys, so
# the validator, the typed view and the example file's test cannot disagree about a key.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    kind: str  # str | int | float | bool | list | choice | dict | tristate
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None


_KINDS = {str: "str", int: "int", float: "float", bool: "bool", tuple: "list"}


def _field(cls: type, f: dataclasses.Field, hint: Any) -> Field:
    meta = f.metadata
    default = meta.get("unset", UNSET)
    if default is UNSET:
        default = None if f.default is dataclasses.MISSING else f.default
    choices = tuple(meta.get("choices") or ())
    if choices:
        kind = "choice"
    elif typing.get_origin(hint) is dict:
        kind = "dict"  # read by its own reader (session.reset: gateway.sessions.reset)
    elif {str, bool} <= set(typing.get_args(hint)):
        kind = "tristate"  # auto | true | false
    else:
        kind = _KINDS[value_type(cls, f.name)]
    return Field(kind, default, choices=choices, minimum=meta.get("minimum"), maximum=meta.get("maximum"))


def fields_of(settings_class: type) -> dict[str, Any]:
    """The schema of a settings dataclass (a section of gateway.config.sections, or an adapter's
    platforms/<name>/settings.py): each field is a key, its type and default from the class, its
    range and choices from the field's metadata; a field typed by a dataclass is a section inside
    it, and a field's `key` metadata places it under a dotted key (storage.postgres.dsn)."""
    hints = typing.get_type_hints(settings_class)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(settings_class):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            out[f.name] = fields_of(hint)  # type: ignore[arg-type]
            continue
        *parents, leaf = (f.metadata.get("key") or f.name).split(".")
        place = out
        for parent in parents:
            place = place.setdefault(parent, {})
        place[leaf] = _field(settings_class, f, hint)
    return out


def build(section_class: type, values: Mapping[str, Any]) -> Any:
    """The typed section from its checked values (as `_section` returns them), the inverse of `fields_of`."""
    hints = typing.get_type_hints(section_class)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(section_class):
        if dataclasses.is_dataclass(hints[f.name]):
            kwargs[f.name] = build(hints[f.name], values[f.name])
            continue
        value: Any = values
        for part in (f.metadata.get("key") or f.name).split("."):
            value = value[part]
        kwargs[f.name] = value
    return section_class(**kwargs)


# The top-level keys that are not sections: home (resolved to a Path), platforms (below) and mcp
# (read by tools.mcp.settings, whose dataclasses declare its keys).
_TOP_LEVEL = {"home": Field("str", ""), "platforms": Field("dict"), "mcp": Field("dict")}
SCHEMA: dict[str, Any] = {
    f.name: fields_of(f.metadata["section"]) if "section" in f.metadata else _TOP_LEVEL[f.name]
    for f in dataclasses.fields(Config)
    if "section" in f.metadata or f.name in _TOP_LEVEL
}

# Keys every chat platform section understands (the gateway's access rules and overrides).
COMMON_PLATFORM_KEYS: dict[str, Field] = fields_of(PlatformAccess)

# Adapter-specific keys: declared by each adapter's settings class; handed to the adapter after
# substitution and type checks.
ADAPTER_KEYS: dict[str, dict[str, Any]] = {
    "local": {"enabled": Field("tristate", "auto"), "user": Field("str", ""), "prompt": Field("str", "")},
    **{name: fields_of(cls) for name, cls in SETTINGS_CLASSES.items()},
}


# Names people reach for that mean something else here.
_ALIASES = {"lark": "feishu (set domain: https://open.larksuite.com)", "tg": "telegram", "terminal": "local"}


# --------------------------------------------------------------------------------------------
# checking
# --------------------------------------------------------------------------------------------


def _substitute(value: Any, env: Mapping[str, str], key: str, err: Callable[[str, str], None]) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, env, f"{key}.{k}" if key else str(k), err) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, env, f"{key}[{i}]", err) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def missing(name: str, is_set: bool) -> None:
        state = "is empty" if is_set else "is not set"
        err(key, f"environment variable {name} {state} (write ${{{name}:-}} to allow it empty)")

    return expand_env(value, env, missing)


def _section(data: Any, schema: dict[str, Any], prefix: str, err: Callable[[str, str], None]) -> dict[str, Any]:
    """Check `data` against `schema`: unknown keys, types; return the values with defaults filled."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        err(prefix, f"must be a mapping (got {_kind(data)})")
        data = {}
    for key in data:
        if key not in schema:
            hint = _suggest(str(key), schema)
            where = f"{prefix}.{key}" if prefix else str(key)
            err(
                where,
                "unknown key"
                + (f"; did you mean {hint!r}?" if hint else "")
                + f" (allowed here: {', '.join(k for k in schema)})",
            )
    out: dict[str, Any] = {}
    for key, spec in schema.items():
        where = f"{prefix}.{key}" if prefix else key
        if isinstance(spec, dict):
            out[key] = _section(data.get(key), spec, where, err)
            continue
        if key not in data or data[key] is None:
            out[key] = {} if spec.kind == "dict" else (list(spec.default) if spec.kind == "list" else spec.default)
            continue
        out[key] = _coerce(data[key], spec, where, err)
    return out


Err = Callable[[str, str], None]


def _coerce(value: Any, spec: Field, where: str, err: Err) -> Any:
    """`value` as the key's kind wants it; on a problem, `err` is told and the default returned."""
    return _COERCERS[spec.kind](value, spec, where, err)


def _str(value: Any, spec: Field, where: str, err: Err) -> Any:
    if isinstance(value, (dict, list)):
        err(where, f"must be a string (got {_kind(value)})")
        return spec.default
    return str(value)


def _bool(value: Any, spec: Field, where: str, err: Err) -> Any:
    if isinstance(value, bool):
        return value
    if truthy(value) is not None:
        return truthy(value)
    err(where, f"must be true or false (got {value!r})")
    return spec.default


def _tristate(value: Any, spec: Field, where: str, err: Err) -> Any:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if isinstance(value, bool) or truthy(value) is not None:
        return _bool(value, spec, where, err)
    err(where, f"must be auto, true or false (got {value!r})")
    return spec.default


def _number(value: Any, spec: Field, where: str, err: Err) -> Any:
    whole = spec.kind == "int"
    if isinstance(value, bool):
        err(where, f"must be a number (got {value!r})")
        return spec.default
    try:
        number = int(value) if whole else float(value)
        if whole and isinstance(value, float) and value != int(value):
            raise ValueError
    except (TypeError, ValueError):
        err(where, f"must be {'a whole number' if whole else 'a number'} (got {value!r})")
        return spec.default
    if spec.minimum is not None and number < spec.minimum:
        err(where, f"must be at least {spec.minimum:g} (got {value!r})")
    if spec.maximum is not None and number > spec.maximum:
        err(where, f"must be at most {spec.maximum:g} (got {value!r})")
    return number


def _choice(value: Any, spec: Field, where: str, err: Err) -> Any:
    if isinstance(value, bool) and "off" in spec.choices:
        # YAML reads a bare off/on as a boolean: `streaming: off` means the choice "off"
        value = "off" if not value else ("on" if "on" in spec.choices else spec.default)
    text = str(value).strip()
    if text in spec.choices:
        return text
    lowered = text.lower() if spec.choices[0].islower() else text.upper()
    if lowered in spec.choices:
        return lowered
    hint = _suggest(text, spec.choices)
    err(
        where,
        f"must be one of {', '.join(spec.choices)} (got {value!r})" + (f"; did you mean {hint!r}?" if hint else ""),
    )
    return spec.default


def _list(value: Any, spec: Field, where: str, err: Err) -> Any:
    if isinstance(value, str):  # "a,b" from an env var
        items: list[Any] = [p.strip() for p in value.split(",") if p.strip()]
    elif isinstance(value, list):
        items = value
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    else:
        err(where, f"must be a list of ids (got {_kind(value)})")
        return []
    result = []
    for i, item in enumerate(items):
        if isinstance(item, (dict, list, bool)) or item is None or str(item).strip() == "":
            err(f"{where}[{i}]", f"must be an id (a string or number) (got {item!r})")
            continue
        result.append(str(item).strip())
    return result


def _mapping(value: Any, spec: Field, where: str, err: Err) -> Any:
    if not isinstance(value, dict):
        err(where, f"must be a mapping (got {_kind(value)})")
        return {}
    return value


_COERCERS: dict[str, Callable[[Any, Field, str, Err], Any]] = {
    "str": _str,
    "bool": _bool,
    "tristate": _tristate,
    "int": _number,
    "float": _number,
    "choice": _choice,
    "list": _list,
    "dict": _mapping,
}


def _suggest(word: str, options: Any) -> str | None:
    matches = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)
