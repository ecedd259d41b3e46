"""Input schemas made acceptable to OpenAI-style function APIs: never dropped, changes named."""

from __future__ import annotations

from tools.mcp.schema import simplify


def test_a_plain_schema_is_unchanged():
    schema = {"type": "object", "properties": {"q": {"type": "string", "description": "query"}}, "required": ["q"]}
    assert simplify(schema) == (schema, [])


def test_refs_are_inlined_and_defs_removed():
    schema = {
        "type": "object",
        "properties": {"order": {"$ref": "#/$defs/Order", "description": "the order"}},
        "$defs": {"Order": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
    }
    out, changes = simplify(schema)
    assert out == {
        "type": "object",
        "properties": {
            "order": {
                "type": "object",
                "properties": {"id": {"type": "integer"}},
                "required": ["id"],
                "description": "the order",
            }
        },
    }
    assert changes == ["order: inlined $ref #/$defs/Order"]


def test_a_recursive_ref_becomes_a_plain_object():
    schema = {
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/Node"}},
        "$defs": {
            "Node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}
        },
    }
    out, changes = simplify(schema)
    assert out["properties"]["tree"]["properties"]["children"]["items"] == {"type": "object"}
    assert "tree.children[]: recursive $ref #/$defs/Node became a plain object" in changes


def test_anyof_and_oneof_with_null_become_nullable():
    schema = {
        "type": "object",
        "properties": {
            "n": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "s": {"oneOf": [{"type": "null"}, {"type": "string", "maxLength": 5}]},
            "t": {"type": ["string", "null"]},
            "u": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        },
    }
    out, changes = simplify(schema)
    props = out["properties"]
    assert props["n"] == {"type": "integer", "default": None, "nullable": True}
    assert props["s"] == {"type": "string", "maxLength": 5, "nullable": True}
    assert props["t"] == {"type": "string", "nullable": True}
    assert props["u"] == {"anyOf": [{"type": "string"}, {"type": "integer"}], "nullable": True}
    assert len(changes) == 4 and "n: anyOf with null became nullable" in changes


def test_unsupported_keywords_are_dropped_and_named():
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "mode": {"const": "fast", "examples": ["fast"], "type": "string"},
            "x": {"not": {"type": "null"}},
        },
        "patternProperties": {"^a": {"type": "string"}},
    }
    out, changes = simplify(schema)
    assert out == {"type": "object", "properties": {"mode": {"enum": ["fast"], "type": "string"}, "x": {}}}
    assert "mode: dropped unsupported keyword(s) examples" in changes
    assert "the root: dropped unsupported keyword(s) patternProperties" in changes
    assert "x: dropped unsupported keyword(s) not" in changes


def test_allof_is_merged_and_the_root_is_always_an_object():
    schema = {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "integer"}}},
        ]
    }
    out, changes = simplify(schema)
    assert out == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "required": ["a"],
    }
    assert changes == ["the root: allOf merged into one schema"]
    assert simplify({}) == (
        {"type": "object", "properties": {}},
        ["the root was untyped, not an object: wrapped as an object"],
    )
    assert simplify(None)[0] == {"type": "object", "properties": {}}
