"""The package layout holds: imports point one way (the encoder core at the bottom; heads, data and training on
it; the subsystems on those; recipes and command-line front doors on top), with no circles between parts. Read
from the syntax trees of the sources; nothing is imported."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path


SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "jumbokit"

LIBRARY = {"encoders", "heads", "data", "training", "ssl", "adaptation", "timeseries", "nas", "export", "logs",
           "pretrained", "hub", "inference"}
# Which parts of jumbokit each part may import ("jumbokit" = the top-level package: the zoo facade and the
# registry of named time-series models). Modules named ``cli`` are front doors and may import any library part.
ALLOWED: dict[str, set[str]] = {
    "encoders": set(),
    "logs": set(),
    "heads": {"encoders"},
    "data": {"encoders", "logs"},
    "training": {"encoders", "logs"},
    "ssl": {"encoders", "heads", "data", "training", "logs"},
    "timeseries": {"encoders", "heads", "data", "training", "logs", "ssl"},  # ssl: MAE pretraining of series
    "adaptation": {"jumbokit", "encoders", "heads", "data", "training", "logs"},
    "nas": {"jumbokit", "encoders", "heads", "data", "training", "logs"},
    "export": {"jumbokit", "encoders", "logs", "nas"},  # nas: exporting an extracted subnet
    "hub": {"encoders", "data", "training", "logs"},  # the Hugging Face Hub: push a run, fetch a snapshot
    "pretrained": {"encoders", "data", "hub"},  # jumbokit.load: a saved model with its data config
    "inference": {"encoders", "data", "training", "pretrained", "timeseries"},  # trained classifiers in use, per modality
    "timm_models": {"encoders", "data"},  # the zoo's image models in timm's registry
    "jumbokit": {"encoders", "timeseries", "pretrained", "hub", "timm_models"},
    "recipes": {"jumbokit"} | LIBRARY,
    "benchmarking": {"jumbokit", "recipes"} | LIBRARY,  # benchmark support and rank statistics, over the rest
    "cli": {"jumbokit", "recipes"} | LIBRARY,
    "__main__": {"cli"},
}
FRONT_DOOR = ALLOWED["cli"]


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((".".join(parts), path))
    return out


def _part(module: str) -> str:
    """The part of jumbokit a dotted module name belongs to ("jumbokit" for the top-level package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "jumbokit"


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    """Every jumbokit module ``module`` imports, at module level or inside functions, with its line."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            names = [".".join(base + ([node.module] if node.module else []))]
        else:
            continue
        found += [(name, node.lineno) for name in names if name == "jumbokit" or name.startswith("jumbokit.")]
    return found


def _part_graph() -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part) -> the import statements behind that edge."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, path in _modules():
        for target, line in _imports(module, path):
            if _part(module) != _part(target):
                edges[(_part(module), _part(target))].append(f"{module}:{line} imports {target}")
    return edges


def test_every_part_of_the_package_has_a_row_in_the_table():
    parts = {_part(module) for module, _ in _modules()}
    assert parts <= set(ALLOWED), f"add a row to ALLOWED for {sorted(parts - set(ALLOWED))}"


def test_imports_follow_the_design_direction():
    wrong = []
    for module, path in _modules():
        allowed = FRONT_DOOR if module.rsplit(".", 1)[-1] == "cli" else ALLOWED.get(_part(module), set())
        for target, line in _imports(module, path):
            if _part(target) != _part(module) and _part(target) not in allowed:
                wrong.append(f"{module}:{line} imports {target}")
    assert not wrong, "imports against the design direction:\n" + "\n".join(wrong)


def test_no_import_cycles_between_parts():
    edges = _part_graph()
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    cycles: list[str] = []
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt in path:
                loop = path[path.index(nxt):] + [nxt]
                cycles.append(" -> ".join(loop) + f"  (e.g. {edges[(node, nxt)][0]})")
            elif nxt not in done:
                visit(nxt, path + [nxt])
        done.add(node)

    for node in sorted(graph):
        if node not in done:
            visit(node, [node])
    assert not cycles, "import cycles between parts of jumbokit:\n" + "\n".join(cycles)

