"""Cross-dataset pretraining (`tstrain --pretrain-on`) against no pretraining and pretraining on the target's own
training split, patchtst_jumbo with the small-data recipe, 3 seeds.

    python benchmarks/timeseries_pretrain_pool.py     # ArrowHead, GunPoint, ItalyPowerDemand, PickupGestureWiimoteZ

Each set runs

    tstrain --recipe small-data --model patchtst_jumbo --pretrain-epochs 100 --pretrain-on <every local set> \\
            --threads 2 --cpu --out OUT

so the pool is the other local sets' training splits (the target is always left out) and pretraining takes as
many steps as 100 passes over the target's training split. "without" and "own split" come from ``--reference``
(the small-data benchmark's pretraining arm: the same seeds, recipe and pretraining length). Writes JSON and a
markdown copy.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import time
from pathlib import Path

from jumbokit.timeseries import cli
from jumbokit.timeseries.data import local_datasets
from jumbokit.training.rundir import atomic_write_json, atomic_write_text, markdown_table

SETS = ("ArrowHead", "GunPoint", "ItalyPowerDemand", "PickupGestureWiimoteZ")
MODEL = "patchtst_jumbo"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default=",".join(SETS), help="targets, comma-separated (default: %(default)s)")
    p.add_argument("--pool", default=None, help="pretraining sets (default: every local set)")
    p.add_argument("--out", default="runs/bench_ts_pool", help="(default: %(default)s)")
    p.add_argument("--reference", default="benchmarks/results/timeseries_small.json",
                   help="the small-data benchmark's JSON with its pretraining arm (default: %(default)s)")
    p.add_argument("--json", default="benchmarks/results/timeseries_pretrain_pool.json", help="(default: %(default)s)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    sets = args.datasets.split(",")
    pool = args.pool or ",".join(local_datasets())
    common = ["--recipe", "small-data", "--model", MODEL, "--pretrain-epochs", "100", "--pretrain-on", pool,
              "--threads", "2", "--cpu", "--no-progress", "--out", args.out]
    start = time.perf_counter()
    for name in [*sets, ",".join(sets)]:
        with contextlib.redirect_stdout(io.StringIO()):
            if cli.main(["--dataset", name, *common]) != 0:
                raise SystemExit(f"tstrain failed on {name}")
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    runs = [json.loads(p.read_text()) for p in Path(args.out, "runs").rglob("lr*.json")]
    reference = json.loads(Path(args.reference).read_text())["pretraining"]["per_set"]
    rows = []
    for d in sets:
        pooled = sorted((r["extra"].get("seed", 0), r["test_top1"]) for r in runs if r["dataset"] == d)
        ref = reference[f"{d}/{MODEL}"]
        arms = {"without": [100 * v for v in ref["without"]], "own split": [100 * v for v in ref["with"]],
                "other sets": [acc for _, acc in pooled]}
        mean = {arm: statistics.mean(v) for arm, v in arms.items()}
        row = {"dataset": d}
        row.update({f"{arm} (mean of 3 seeds)": f"{mean[arm]:.1f} ± {statistics.pstdev(v):.1f}"
                    for arm, v in arms.items()})
        row["other sets - without"] = round(mean["other sets"] - mean["without"], 1)
        row["other sets - own split"] = round(mean["other sets"] - mean["own split"], 1)
        row["per seed (other sets)"] = " / ".join(f"{a:.1f}" for a in arms["other sets"])
        rows.append(row)
    table = markdown_table(rows)
    command = "tstrain --dataset NAME " + " ".join(common)
    print(table)
    record = {"command": command, "pool": pool, "rows": rows, "seconds": time.perf_counter() - start}
    atomic_write_json(Path(args.json), record)
    text = f"# Cross-dataset pretraining\n\n`{command}`; 2-core CPU, fp32, test accuracy (%).\n\n{table}\n"
    atomic_write_text(Path(args.json).with_suffix(".md"), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
