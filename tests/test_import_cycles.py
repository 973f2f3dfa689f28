"""No import circles between jumbokit's modules. Read from the syntax trees of the sources (``import_graph``);
nothing is imported.

Every import of a jumbokit module counts: at module level, under ``if TYPE_CHECKING:`` and inside functions. The
project allows an import inside a function only for an optional or heavy dependency (onnxruntime, aeon, numba,
matplotlib), never to hide a circle between its own modules, and a ``TYPE_CHECKING`` import still says "this
module needs that one" to a reader and to a type checker. A circle is reported with the statements that make it.
(Importing a submodule runs its package's ``__init__`` first; that implicit edge is Python's, not a circle.)
"""
from __future__ import annotations

from import_graph import cycles, graph


def test_the_graph_is_read_from_the_sources():
    edges = graph()
    assert "jumbokit.training.jobs" in edges["jumbokit.timeseries.sweep"]  # module level
    assert "jumbokit.encoders.collapse" in edges["jumbokit.encoders.branch_blocks"]
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_through_others():
    edges = graph()
    report = []
    for component in cycles(edges):
        members = set(component)
        lines = [f"  {m}:{line} imports {t}" for m in component for t, line in sorted(edges[m].items())
                 if t in members]
        report.append(" <-> ".join(component) + "\n" + "\n".join(lines))
    assert not report, "import circles:\n" + "\n".join(report)
