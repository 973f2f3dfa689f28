"""Result files: ``benchmarks/results/<benchmark>_<variant>.json`` and a markdown copy beside it (``.md``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..training.rundir import atomic_write_json, atomic_write_text

__all__ = ["RESULTS_DIR", "dataset_slug", "result_path", "write_result"]

RESULTS_DIR = Path("benchmarks") / "results"


def result_path(benchmark: str, variant: str = "") -> Path:
    """``benchmarks/results/<benchmark>_<variant>.json`` (``<benchmark>.json`` without a variant), relative to the
    checkout the benchmark runs from."""
    return RESULTS_DIR / (f"{benchmark}_{variant}.json" if variant else f"{benchmark}.json")


def dataset_slug(dataset: str) -> str:
    """The result-file variant of a ``--dataset`` string: ``fashion-mnist[:DIR]`` -> ``fashion_mnist``,
    ``folder:/data/x`` -> ``x``."""
    import re

    from ..data.spec import parse_dataset_spec

    spec = parse_dataset_spec(dataset)
    name = spec.kind if spec.kind in ("digits", "fashion-mnist") else Path(str(spec.path).rstrip("/")).name
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or spec.kind


def write_result(path: str | os.PathLike, record: dict[str, Any], markdown: str, quiet: bool = False) -> Path:
    """Write ``record`` as JSON to ``path`` and ``markdown`` to the same name with ``.md``; both atomically.

    Returns the JSON's path. Unless ``quiet``, says where they went on stdout.
    """
    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"expected a result path ending in .json, got {path}")
    atomic_write_json(path, record)
    atomic_write_text(path.with_suffix(".md"), markdown if markdown.endswith("\n") else markdown + "\n")
    if not quiet:
        print(f"wrote {path} and {path.with_suffix('.md')}")
    return path
