"""`mcp__<server>__<tool>` names the model accepts, stable across restarts, and back."""

from __future__ import annotations

import re

from tools.mcp.naming import FunctionNames, function_name

ACCEPTED = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def test_plain_names_and_replaced_characters():
    assert function_name("orders", "cancel_order") == "mcp__orders__cancel_order"
    assert function_name("my.files", "read file/v2") == "mcp__my_files__read_file_v2"
    assert function_name("票务", "查询") == "mcp________"  # every character outside the set becomes "_"


def test_long_names_are_cut_with_a_stable_hash():
    long_a = function_name("server", "a" * 80)
    long_b = function_name("server", "a" * 79 + "b")
    assert len(long_a) == 64 and ACCEPTED.match(long_a) and long_a != long_b
    assert long_a == function_name("server", "a" * 80)  # the same after a restart
    assert long_a.startswith("mcp__server__aaaa") and re.search(r"_[0-9a-f]{8}$", long_a)


def test_names_that_sanitise_alike_are_told_apart_and_resolve_back():
    names = FunctionNames()
    first, second = names.add("s", "a.b"), names.add("s", "a_b")
    assert first == "mcp__s__a_b" and second != first and ACCEPTED.match(second)
    assert names.resolve(first) == ("s", "a.b") and names.resolve(second) == ("s", "a_b")
    assert names.add("s", "a.b") == first and names.name_of("s", "a_b") == second
    names.drop_server("s")
    assert names.resolve(first) is None and names.name_of("s", "a.b") is None
