"""Late fusion of two sets of finished runs: every run of the first model on a dataset paired with every run of
the second, the pair's mean class probabilities scored on the test half, beside each model's own runs.

The reference for ``tstrain --trunk-head`` (one model whose trunk head and transformer head are trained together
and averaged): what averaging the trunk alone (``series_cnn``) and the Jumbo transformer, trained separately, so
at twice the training, reaches on the same sets. Nothing is trained; the runs' stored probabilities are read.

    python benchmarks/timeseries_fusion.py --first runs/bench_ts_cnn:series_cnn \\
        --second runs/bench_ts_recipe_s3:patchtst_jumbo --json benchmarks/results/timeseries_fusion.json

Each side takes one or more ``SWEEP_DIR:MODEL`` (the runs of all its directories pooled, per dataset); a set
counts where both sides have runs whose probabilities fit its validation and test halves (the split of the
first directory's ``sweep.json``). The mean over all pairs is the number to compare with one model's mean of
runs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import statistics
import sys
from pathlib import Path

import numpy as np

from ..timeseries import store
from ..timeseries.data import ClassificationData, load_dataset
from ..timeseries.results import scores
from .records import write_result


def side(spec: str) -> tuple[Path, str]:
    """``SWEEP_DIR:MODEL`` -> (directory, model); the directory must hold a sweep."""
    folder, sep, model = spec.rpartition(":")
    if not sep or not folder or not model:
        raise argparse.ArgumentTypeError(f"expected SWEEP_DIR:MODEL (e.g. runs/bench_ts_cnn:series_cnn), got {spec!r}")
    if not (Path(folder) / "sweep.json").is_file():
        raise argparse.ArgumentTypeError(f"{folder!r} holds no sweep.json: expected a tstrain output directory")
    return Path(folder), model


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--first", type=side, nargs="+", required=True, metavar="DIR:MODEL",
                   help="the first model's runs (directories pooled)")
    p.add_argument("--second", type=side, nargs="+", required=True, metavar="DIR:MODEL",
                   help="the second model's runs (directories pooled)")
    p.add_argument("--json", type=Path, default=None, help="also write the record here (and a .md table beside it)")
    return p.parse_args(argv)


def side_probas(specs: list[tuple[Path, str]], data: ClassificationData) -> list[dict[str, np.ndarray]]:
    """The stored {"val", "test"} probabilities of the side's runs on ``data``'s set that fit its halves."""
    sizes = {"val": len(data.val.y), "test": len(data.test.y)}
    found = []
    for folder, model in specs:
        for path in sorted((folder / "runs" / data.name / model).glob("*.json"), key=store.job_order):
            proba = store.load_proba(store.proba_path(path))
            if proba is not None and all(h in proba and len(proba[h]) == n for h, n in sizes.items()):
                found.append(proba)
    return found


def fuse(first: list[dict], second: list[dict], data: ClassificationData) -> dict:
    """Test accuracy (%) of each side's runs and of every fused pair."""
    def test_acc(proba: np.ndarray) -> float:
        return 100.0 * scores(proba, data.test.y)[0]

    return {"first": [test_acc(p["test"]) for p in first], "second": [test_acc(p["test"]) for p in second],
            "pairs": [test_acc((a["test"] + b["test"]) / 2) for a, b in itertools.product(first, second)]}


def table(rows: list[dict], first: str, second: str) -> str:
    head = f"| dataset | {first}: mean (runs) | {second}: mean (runs) | fused: mean of pairs (pairs) |"
    lines = [head, "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dataset']} | {statistics.mean(r['first']):.1f} ({len(r['first'])}) | "
                     f"{statistics.mean(r['second']):.1f} ({len(r['second'])}) | "
                     f"{statistics.mean(r['pairs']):.1f} ({len(r['pairs'])}) |")
    if rows:
        means = [statistics.mean(statistics.mean(r[k]) for r in rows) for k in ("first", "second", "pairs")]
        lines.append(f"| mean of {len(rows)} | {means[0]:.2f} | {means[1]:.2f} | {means[2]:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING)
    args = parse_args(argv)
    cfg = store.read_sweep_file(args.first[0][0])
    sides = (args.first, args.second)
    names = sorted(set.intersection(*({p.parent.name for folder, model in specs
                                        for p in (folder / "runs").glob(f"*/{model}")} for specs in sides)))
    rows = []
    for name in names:
        data = load_dataset(name, protocol=cfg.protocol, split_seed=cfg.split_seed, download=False, normalize="none")
        first, second = side_probas(args.first, data), side_probas(args.second, data)
        if first and second:
            rows.append({"dataset": name, **fuse(first, second, data)})
    if not rows:
        print("no dataset has runs on both sides", file=sys.stderr)
        return 1
    labels = [" + ".join(sorted({m for _, m in specs})) for specs in sides]
    record = {"first": [f"{f}:{m}" for f, m in args.first], "second": [f"{f}:{m}" for f, m in args.second],
              "rows": rows}
    text = table(rows, *labels)
    print(json.dumps(record, indent=1))
    print(text)
    if args.json:
        write_result(args.json, record, text, quiet=True)
    return 0
