"""The house rules of DESIGN §2, checked on the source: imports point down the floors, never up, no
module pair (or longer loop) imports each other, and a platform SDK is imported only inside its own
adapter package.

The imports are read with `ast` (every `import`/`from` anywhere in a module, including those under
`if TYPE_CHECKING:` and inside functions: a lazy import is still an arrow), so the test needs no
import side effects and catches a circle that only shows at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "platforms", "agent", "tools")

# Floors from the ground up. A unit may import itself, and any unit on a LOWER floor, except where
# NARROWER says otherwise. Units on the same floor do not import each other.
FLOORS: list[tuple[str, ...]] = [
    (
        "gateway.source",
        "gateway.errors",
        "gateway.envvars",
        "gateway.text",
        "gateway.redact",
        "gateway.language",
        "gateway.telemetry",
    ),
    ("gateway.storage", "platforms"),
    ("gateway.db",),
    ("gateway.sessions", "gateway.embeddings", "gateway.schedules"),
    ("gateway.recall", "gateway.config"),
    ("agent",),
    ("tools",),
    ("gateway.commands",),
    ("gateway.runtime",),
    ("gateway.console",),
    ("gateway.service",),
    ("gateway.cli",),
]

# Units whose reach is narrower than "everything below" (DESIGN §2).
NARROWER: dict[str, set[str]] = {
    # the storage floor imports nothing above it
    "gateway.storage": {"gateway.source", "gateway.errors", "gateway.envvars", "gateway.text", "gateway.redact"},
    # platforms/ knows only gateway.source and the adapter contract (and redacts as everyone does)
    "platforms": {
        "gateway.source",
        "gateway.errors",
        "gateway.text",
        "gateway.redact",
        "gateway.language",
        "gateway.telemetry",
    },
    # agent/ and tools/ reach sessions only through the storage face
    "agent": {
        "gateway.source",
        "gateway.errors",
        "gateway.text",
        "gateway.db",
        "gateway.language",
        "gateway.telemetry",
    },
    "tools": {
        "gateway.source",
        "gateway.errors",
        "gateway.envvars",
        "gateway.text",
        "gateway.db",
        "gateway.recall",
        "gateway.schedules",
        "gateway.telemetry",
        "agent",
    },
}

# A platform SDK is imported only inside its adapter package; the storage floor imports no SDK.
SDKS = {"telegram": "platforms.telegram", "lark_oapi": "platforms.feishu", "discord": "platforms.discord"}
NO_SDK_UNITS = {"gateway.storage", "gateway.db", "gateway.source", "gateway.errors", "gateway.redact"}
ANY_SDK = ("telegram", "lark_oapi", "discord", "openai", "aiohttp", "httpx")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imports_of(name: str, path: Path, known: frozenset[str] = frozenset()) -> list[tuple[str, int]]:
    """Every module name `name` imports, with the line: absolute, relative resolved. `from X import
    y` counts as X.y when X.y is a module in `known`, and as X only when some name is not a
    submodule (importing a submodule through its package runs the package's face anyway, as
    every import of a submodule does, so that is not an arrow of its own)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
            if len(submodules) < len(node.names):
                found.append((base, node.lineno))
            found.extend((sub, node.lineno) for sub in submodules)
    return found


def unit_of(name: str) -> str | None:
    for floor in FLOORS:
        for unit in floor:
            if name == unit or name.startswith(unit + "."):
                return unit
    return None


def floor_of(unit: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if unit in floor)


def graph() -> dict[str, dict[str, int]]:
    mods = modules()
    known = frozenset(mods)
    edges: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        edges[name] = {}
        for target, line in imports_of(name, path, known):
            if target in mods and target != name:
                edges[name].setdefault(target, line)
    return edges


def test_every_module_has_a_floor() -> None:
    assert [name for name in modules() if unit_of(name) is None and name not in PACKAGES] == []


def test_imports_point_down_the_floors() -> None:
    wrong = []
    for name, targets in graph().items():
        unit = unit_of(name)
        if unit is None:
            continue
        for target, line in targets.items():
            other = unit_of(target)
            if other is None or other == unit:
                continue
            allowed = NARROWER.get(unit)
            ok = other in allowed if allowed is not None else floor_of(other) < floor_of(unit)
            if not ok:
                wrong.append(f"{name}:{line} imports {target} ({unit} may not import {other})")
    assert wrong == []


def test_no_import_cycles() -> None:
    edges = graph()
    # Tarjan's strongly connected components: any component of two or more modules is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    assert cycles == []


@pytest.mark.parametrize("sdk", sorted(SDKS))
def test_a_platform_sdk_is_imported_only_by_its_adapter(sdk: str) -> None:
    home = SDKS[sdk]
    wrong = [
        f"{name}:{line}"
        for name, path in modules().items()
        for target, line in imports_of(name, path)
        if (target == sdk or target.startswith(sdk + ".")) and not (name == home or name.startswith(home + "."))
    ]
    assert wrong == []


def test_the_storage_floor_imports_no_sdk() -> None:
    wrong = [
        f"{name}:{line} imports {target}"
        for name, path in modules().items()
        if unit_of(name) in NO_SDK_UNITS
        for target, line in imports_of(name, path)
        if target.split(".")[0] in ANY_SDK
    ]
    assert wrong == []


def test_the_checker_sees_a_cycle_and_an_upward_arrow(tmp_path: Path) -> None:
    """The rules above must be able to fail: the same reading applied to a tiny tree."""
    (tmp_path / "a.py").write_text("from b import x\nfrom pkg import sub\n")
    (tmp_path / "b.py").write_text("def f():\n    import a\n")
    tree_a = imports_of("a", tmp_path / "a.py", frozenset({"pkg", "pkg.sub"}))
    tree_b = imports_of("b", tmp_path / "b.py")
    assert ("b", 1) in tree_a and ("a", 2) in tree_b
    assert ("pkg.sub", 2) in tree_a and ("pkg", 2) not in tree_a
    assert floor_of(unit_of("gateway.cli.main") or "") > floor_of(unit_of("gateway.storage.schema") or "")
