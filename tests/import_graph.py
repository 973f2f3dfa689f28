"""jumbokit's import graph, read from the syntax trees of its sources (nothing is imported): the one reader behind
the layout test (which part may import which) and the import-circle test.

Every import of a jumbokit module counts: at module level, under ``if TYPE_CHECKING:`` and inside functions.
``from pkg import name`` names the submodule ``pkg.name`` where there is one, else ``pkg``.
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "jumbokit"


@lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    """Dotted name -> source file of every jumbokit module (a package by its ``__init__``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def part(module: str) -> str:
    """The part of jumbokit a dotted module name belongs to ("jumbokit" for the top-level package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "jumbokit"


def imported(module: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """The jumbokit modules ``module`` imports, each with the line of its first import."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]

    def owner(name: str) -> str:  # the module a dotted name lives in
        while name not in known and "." in name:
            name = name.rpartition(".")[0]
        return name

    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [owner(alias.name) for alias in node.names if alias.name.split(".")[0] == "jumbokit"]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            if source.split(".")[0] != "jumbokit":
                continue
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else owner(source) for a in node.names]
        else:
            continue
        for target in targets:
            if target != module:
                found.setdefault(target, node.lineno)
    return found


@lru_cache(maxsize=None)
def graph() -> dict[str, dict[str, int]]:
    """Module -> {imported module: line} for every jumbokit module."""
    known = modules()
    return {module: imported(module, path, known) for module, path in known.items()}


def cycles(edges: dict[str, dict[str, int]] | dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found
