"""No import circles between jumbokit's modules. Read from the syntax trees of the sources; nothing is imported.

Every import of a jumbokit module counts: at module level, under ``if TYPE_CHECKING:`` and inside functions. The
project allows an import inside a function only for an optional or heavy dependency (onnxruntime, aeon, numba,
matplotlib), never to hide a circle between its own modules, and a ``TYPE_CHECKING`` import still says "this
module needs that one" to a reader and to a type checker. A circle is reported with the statements that make it.
(Importing a submodule runs its package's ``__init__`` first; that implicit edge is Python's, not a circle.)
"""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "jumbokit"


def _modules() -> dict[str, Path]:
    """Dotted name -> source file of every jumbokit module (a package by its ``__init__``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imported(module: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """The jumbokit modules ``module`` imports (``from pkg import submodule`` names the submodule), each with the
    line of its first import."""
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


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read_from_the_sources():
    known = _modules()
    graph = {m: _imported(m, p, known) for m, p in known.items()}
    assert "jumbokit.training.jobs" in graph["jumbokit.timeseries.sweep"]  # module level
    assert "jumbokit.encoders.collapse" in graph["jumbokit.encoders.branch_blocks"]
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_through_others():
    known = _modules()
    graph = {m: _imported(m, p, known) for m, p in known.items()}
    report = []
    for component in _cycles(graph):
        members = set(component)
        lines = [f"  {m}:{line} imports {t}" for m in component for t, line in sorted(graph[m].items())
                 if t in members]
        report.append(" <-> ".join(component) + "\n" + "\n".join(lines))
    assert not report, "import circles:\n" + "\n".join(report)
