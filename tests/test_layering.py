"""The package's import graph: no two modules import each other (lazy imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import benchfill

ROOT = Path(benchfill.__file__).parent
# Removed by issue 11's first part (the probe worker pool goes); delete the entry when that lands.
KNOWN: set[frozenset[str]] = set()


def _imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("benchfill"):
                deps.add(node.module)
                deps.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("benchfill"))
        graph[name] = deps
    return graph


def test_no_two_modules_import_each_other():
    graph = _imports()
    assert "benchfill.config" in graph and "benchfill.benchmarks" in graph
    pairs = {
        frozenset({a, b})
        for a in graph
        for b in graph[a]
        # a package and its own submodules are one unit (benchfill.sim re-exports benchfill.sim.world)
        if b in graph and b != a and a in graph[b] and not (b.startswith(a + ".") or a.startswith(b + "."))
    }
    assert pairs - KNOWN == set()
