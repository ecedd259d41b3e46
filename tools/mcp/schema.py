"""An MCP tool's input schema made acceptable to OpenAI-style function APIs, never dropped.

MCP servers publish full JSON Schema (pydantic models give `$ref`/`$defs`, `Optional[X]` gives
`anyOf: [X, {"type": "null"}]`); OpenAI-compatible endpoints differ in what they refuse (Gemini's
and several local servers' compat layers reject `$ref`, type unions and keywords they do not know).
The safe subset: references inlined (a recursive one becomes a plain `object`), `anyOf`/`oneOf`
with a null branch folded into the other branch with `"nullable": true` (a `type: [X, "null"]` list
too), other `anyOf`/`oneOf` kept as `anyOf`, `allOf` of objects merged, `const` written as a one-value `enum`, and any
keyword outside the list below dropped. The root is always `{"type": "object", "properties": ...}`.
`simplify` returns what it changed, one line each, so the log can say why a tool looks different.
"""

from __future__ import annotations

import copy
from typing import Any

# Keywords every OpenAI-style function API takes.
_KEPT = {
    "type",
    "properties",
    "required",
    "items",
    "enum",
    "description",
    "title",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
    "format",
    "additionalProperties",
    "anyOf",
    "nullable",
}
_MAX_DEPTH = 32  # deeper than any real argument schema; stops a pathological one


def simplify(schema: Any) -> tuple[dict[str, Any], list[str]]:
    """(a schema the API accepts, the changes made: empty when the schema was already fine)."""
    changes: list[str] = []
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}, [
            f"the schema was not an object ({type(schema).__name__}): replaced"
        ]
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    out = _node(copy.deepcopy(schema), defs, (), "", changes, 0)
    if out.get("type") != "object":
        changes.append(f"the root was {out.get('type') or 'untyped'}, not an object: wrapped as an object")
        out = {"type": "object", "properties": {}} if not out.get("properties") else {**out, "type": "object"}
    out.setdefault("properties", {})
    return out, changes


def _node(
    node: Any, defs: dict[str, Any], seen: tuple[str, ...], path: str, changes: list[str], depth: int
) -> dict[str, Any]:
    """One schema node simplified: a `$ref` resolved, the keywords the APIs refuse rewritten, then
    its kept keywords with their children simplified in turn."""
    where = path or "the root"
    if not isinstance(node, dict):
        changes.append(f"{where}: a non-object schema ({node!r}) became an unconstrained value")
        return {}
    if depth > _MAX_DEPTH:
        changes.append(f"{where}: nested deeper than {_MAX_DEPTH} levels: cut to an object")
        return {"type": "object"}
    if isinstance(node.get("$ref"), str):
        return _ref(node, defs, seen, path, changes, depth)
    node = _normalised(dict(node), defs, seen, path, changes, depth)
    return _kept(node, defs, seen, path, changes, depth)


def _ref(
    node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...], path: str, changes: list[str], depth: int
) -> dict[str, Any]:
    """A `$ref` inlined from the definitions; a recursive or unresolvable one becomes an object."""
    where = path or "the root"
    ref = node["$ref"]
    name = ref.rsplit("/", 1)[-1]
    if name in seen or name not in defs:
        why = "recursive" if name in seen else "unresolvable"
        changes.append(f"{where}: {why} $ref {ref} became a plain object")
        return {"type": "object", **({"description": node["description"]} if "description" in node else {})}
    changes.append(f"{where}: inlined $ref {ref}")
    target = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
    return _node(target, defs, (*seen, name), path, changes, depth + 1)


def _normalised(
    node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...], path: str, changes: list[str], depth: int
) -> dict[str, Any]:
    """`const`, `anyOf`/`oneOf`, `allOf` and a list of types rewritten into what the APIs take."""
    where = path or "the root"
    if "const" in node:
        node.setdefault("enum", [node.pop("const")])
        changes.append(f"{where}: const became a one-value enum")
    for key in ("anyOf", "oneOf"):
        if key in node:
            node = _union(node, key, defs, seen, path, changes, depth)
    if "allOf" in node:
        node = _all_of(node, defs, seen, path, changes, depth)
    if isinstance(node.get("type"), list):
        node = _type_list(node, where, changes)
    return node


def _kept(
    node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...], path: str, changes: list[str], depth: int
) -> dict[str, Any]:
    """The node's supported keywords, its sub-schemas simplified; the others dropped and named."""
    out: dict[str, Any] = {}
    dropped = []
    for key, value in node.items():
        if key not in _KEPT:
            if key not in ("$defs", "definitions", "$schema") or path:
                dropped.append(key)
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {
                name: _node(sub, defs, seen, f"{path}.{name}" if path else name, changes, depth + 1)
                for name, sub in value.items()
            }
        elif key == "items" and isinstance(value, dict):
            out[key] = _node(value, defs, seen, f"{path}[]", changes, depth + 1)
        elif key == "additionalProperties" and isinstance(value, dict):
            out[key] = _node(value, defs, seen, f"{path}.*", changes, depth + 1)
        elif key == "anyOf":
            out[key] = [_node(b, defs, seen, path, changes, depth + 1) for b in value]
        else:
            out[key] = value
    if dropped:
        changes.append(f"{path or 'the root'}: dropped unsupported keyword(s) {', '.join(sorted(dropped))}")
    return out


def _union(
    node: dict[str, Any],
    key: str,
    defs: dict[str, Any],
    seen: tuple[str, ...],
    path: str,
    changes: list[str],
    depth: int,
) -> dict[str, Any]:
    where = path or "the root"
    branches = node.pop(key)
    if not isinstance(branches, list):
        changes.append(f"{where}: a malformed {key} was dropped")
        return node
    rest = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
    if len(rest) == len(branches):
        if key == "oneOf":
            changes.append(f"{where}: oneOf became anyOf")
        return {**node, "anyOf": branches}
    if len(rest) != 1:
        changes.append(f"{where}: {key} with null became a nullable anyOf")
        return {**node, "anyOf": rest, "nullable": True}
    changes.append(f"{where}: {key} with null became nullable")
    inner = _node(rest[0], defs, seen, path, changes, depth + 1)
    return {**inner, **node, "nullable": True}


def _type_list(node: dict[str, Any], where: str, changes: list[str]) -> dict[str, Any]:
    """`type: [X, "null"]` -> `type: X, nullable: true`; a list of several real types -> anyOf."""
    types = [t for t in node["type"] if t != "null"]
    nullable = len(types) != len(node["type"])
    out = {k: v for k, v in node.items() if k != "type"}
    if nullable:
        out["nullable"] = True
    if len(types) == 1:
        changes.append(f"{where}: a type list became {types[0]}" + (" (nullable)" if nullable else ""))
        return {"type": types[0], **out}
    changes.append(f"{where}: a type list became anyOf")
    return {**out, "anyOf": [{"type": t} for t in types]}


def _all_of(
    node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...], path: str, changes: list[str], depth: int
) -> dict[str, Any]:
    where = path or "the root"
    parts = [_node(p, defs, seen, path, changes, depth + 1) for p in node.pop("allOf") or []]
    merged: dict[str, Any] = dict(node)
    for part in parts:
        for key, value in part.items():
            if key == "properties":
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required":
                merged["required"] = sorted({*merged.get("required", []), *value})
            else:
                merged.setdefault(key, value)
    changes.append(f"{where}: allOf merged into one schema")
    return merged
