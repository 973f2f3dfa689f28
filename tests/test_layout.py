"""The package layout holds: imports point one way (the encoder core at the bottom; heads, data and training on
it; the subsystems on those; the command line, the front doors and benchmark support on top), with no circles
between parts and no exemption for any module. Read from the syntax trees of the sources (``import_graph``);
nothing is imported."""
from __future__ import annotations

from collections import defaultdict

from import_graph import cycles, graph, part

LIBRARY = {"encoders", "heads", "data", "training", "ssl", "adaptation", "timeseries", "nas", "export", "logs",
           "pretrained", "hub", "inference"}
# Which parts of jumbokit each part may import ("jumbokit" = the top-level package: the zoo facade and the
# registry of named time-series models).
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
    # the Hugging Face Hub: push a run, fetch a snapshot (timeseries: the files a fused series model travels with)
    "hub": {"encoders", "data", "training", "logs", "timeseries"},
    "pretrained": {"encoders", "data", "hub"},  # jumbokit.load: a saved model with its data config
    "inference": {"encoders", "data", "training", "pretrained", "timeseries"},  # trained classifiers in use, per modality
    "timm_models": {"encoders", "data"},  # the zoo's image models in timm's registry
    "jumbokit": {"encoders", "timeseries", "pretrained", "hub", "timm_models"},
    # the command line: dispatch (front doors loaded by name), shared flags, config files, the resume diff
    "cli": {"jumbokit"} | LIBRARY,
    "recipes": {"jumbokit", "cli"} | LIBRARY,  # the front doors, one module each
    "benchmarking": {"jumbokit", "cli", "recipes"} | LIBRARY,  # benchmark support and rank statistics, over the rest
    "__main__": {"cli"},
}


def _part_graph() -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part) -> the import statements behind that edge."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, targets in sorted(graph().items()):
        for target, line in sorted(targets.items(), key=lambda item: item[1]):
            if part(module) != part(target):
                edges[(part(module), part(target))].append(f"{module}:{line} imports {target}")
    return edges


def test_every_part_of_the_package_has_a_row_in_the_table():
    parts = {part(module) for module in graph()}
    assert parts <= set(ALLOWED), f"add a row to ALLOWED for {sorted(parts - set(ALLOWED))}"


def test_imports_follow_the_design_direction():
    wrong = [line for (a, b), lines in sorted(_part_graph().items()) if b not in ALLOWED.get(a, set())
             for line in lines]
    assert not wrong, "imports against the design direction:\n" + "\n".join(wrong)


def test_no_import_cycles_between_parts():
    edges = _part_graph()
    parts: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        parts[a].add(b)
    report = []
    for component in cycles(parts):
        members = set(component)
        examples = [f"  {edges[(a, b)][0]}" for a in component for b in sorted(parts[a]) if b in members]
        report.append(" <-> ".join(component) + "\n" + "\n".join(examples))
    assert not report, "import cycles between parts of jumbokit:\n" + "\n".join(report)
