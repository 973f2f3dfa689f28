"""Cross-dataset pretraining (`tstrain --pretrain-on`) against no pretraining and pretraining on the target's own
training split: patchtst_jumbo under one recipe, its seeds (3 under the small-data recipes), the same splits.

    python benchmarks/timeseries_pretrain_pool.py     # ArrowHead, GunPoint, ItalyPowerDemand, PickupGestureWiimoteZ
    python benchmarks/timeseries_pretrain_pool.py --recipe small-data-trunk --datasets OSULeaf

Each set runs three arms of

    tstrain --dataset NAME --recipe RECIPE --model patchtst_jumbo --threads T --cpu --out OUT/ARM

"without" as it is, "own split" with ``--pretrain-epochs 100`` and "other sets" with ``--pretrain-epochs 100
--pretrain-on <every local set>`` (the target is always left out of its pool, so its validation and test series
are never read; pretraining takes as many steps as 100 passes over the target's training split). An interrupted
benchmark resumes (finished runs are kept in OUT). Prints a table; writes JSON and a markdown copy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from jumbokit.benchmarking import machine_record, run_tstrain, write_result
from jumbokit.timeseries.data import local_datasets
from jumbokit.timeseries.pretrain import PRETRAIN_DEFAULTS
from jumbokit.timeseries.protocol import RECIPES
from jumbokit.timeseries.results import summarize
from jumbokit.timeseries.store import load_runs
from jumbokit.training.rundir import markdown_table

SETS = ("ArrowHead", "GunPoint", "ItalyPowerDemand", "PickupGestureWiimoteZ")
MODEL = "patchtst_jumbo"
PRETRAIN_EPOCHS = "100"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default=",".join(SETS), help="targets, comma-separated (default: %(default)s)")
    p.add_argument("--pool", default=None, help="pretraining sets, comma-separated (default: every local set)")
    p.add_argument("--recipe", default="small-data", choices=sorted(RECIPES), help="tstrain's recipe (default: %(default)s)")
    p.add_argument("--mask-ratio", type=float, default=PRETRAIN_DEFAULTS["mask_ratio"],
                   help="fraction of patches masked in pretraining (--pretrain-mask-ratio); the two pretraining arms "
                        "of another ratio get their own directories in --out, \"without\" is shared "
                        "(default: %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="torch threads of each run (default: %(default)s)")
    p.add_argument("--out", default="runs/bench_ts_pool", help="sweep directories, one per arm (default: %(default)s)")
    p.add_argument("--json", default="benchmarks/results/timeseries_pretrain_pool.json",
                   help="where the results go; a .md copy beside it (default: %(default)s)")
    p.add_argument("--collect-only", action="store_true",
                   help="tabulate the finished runs in --out without training (default: train what is missing)")
    args = p.parse_args(argv)
    for flag, names in (("--datasets", args.datasets), ("--pool", args.pool or "")):
        unknown = sorted(set(filter(None, names.split(","))) - set(local_datasets()))
        if unknown:
            p.error(f"{flag}: unknown dataset(s) {', '.join(unknown)}; available locally: {', '.join(local_datasets())}")
    if not 0.0 < args.mask_ratio < 1.0:
        p.error(f"--mask-ratio must be in (0, 1), got {args.mask_ratio}")
    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    return args


def arm_flags(pool: str, mask_ratio: float) -> dict[str, list[str]]:
    """tstrain flags of the three arms."""
    pretrain = ["--pretrain-epochs", PRETRAIN_EPOCHS, "--pretrain-mask-ratio", str(mask_ratio)]
    return {"without": [], "own split": pretrain, "other sets": [*pretrain, "--pretrain-on", pool]}


def arm_dir(out: str, arm: str, mask_ratio: float) -> Path:
    """The arm's sweep directory: ``without``, ``own_split``, ``other_sets`` (``..._mask0.6`` at another ratio)."""
    default = arm == "without" or mask_ratio == PRETRAIN_DEFAULTS["mask_ratio"]
    return Path(out, arm.replace(" ", "_") + ("" if default else f"_mask{mask_ratio:g}"))


def arm_commands(args: argparse.Namespace, arms: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each arm's tstrain arguments, but the dataset."""
    return {arm: ["--recipe", args.recipe, "--model", MODEL, *flags, "--threads", str(args.threads), "--cpu",
                  "--no-progress", "--out", str(arm_dir(args.out, arm, args.mask_ratio))] for arm, flags in arms.items()}


def run_arms(datasets: list[str], commands: dict[str, list[str]]) -> None:
    """Train every arm on every set, one tstrain call each (finished runs are skipped)."""
    start = time.perf_counter()
    for name in datasets:
        for arm, common in commands.items():
            run_tstrain(["--dataset", name, *common])
            print(f"{name}, {arm}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


def set_row(records: dict[str, list], dataset: str) -> dict:
    """One table row from each arm's run records (tstrain's job order): best (chosen on validation as tstrain
    chooses) / mean of the runs (the runs) per arm, the validation means and the mean gains."""
    row, means, validation = {"dataset": dataset}, {}, []
    for arm, arm_records in records.items():
        runs = [r for r in arm_records if r.dataset == dataset]
        (summary,) = summarize(runs)
        means[arm] = summary.avg_test_top1
        validation.append(f"{statistics.mean(r.val_top1 for r in runs):.1f}")
        row[f"{arm}: best / mean (runs)"] = (f"{summary.test_top1:.1f} / {means[arm]:.1f} "
                                             f"({', '.join(f'{r.test_top1:.1f}' for r in runs)})")
        row[f"{arm}: wall s per run"] = round(summary.wall_seconds / summary.runs)
    row[f"validation mean: {' / '.join(records)}"] = " / ".join(validation)
    row["other sets - without (mean)"] = round(means["other sets"] - means["without"], 1)
    row["other sets - own split (mean)"] = round(means["other sets"] - means["own split"], 1)
    return row


def write_report(args: argparse.Namespace, commands: dict[str, str], pool: str, rows: list[dict],
                 seconds: float | None) -> None:
    """The JSON record at --json and its markdown copy beside it."""
    record = {"recipe": args.recipe, "mask_ratio": args.mask_ratio, "commands": commands, "pool": pool,
              "threads": args.threads, "machine": machine_record(threads=args.threads, device="cpu"), "rows": rows,
              "seconds": seconds}
    arms = "\n".join(f"- `{command}` ({arm})" for arm, command in commands.items())
    text = (f"# Cross-dataset pretraining, `--recipe {args.recipe}`, mask ratio {args.mask_ratio:g}\n\n{arms}\n\n"
            f"2-core CPU, fp32, {args.threads} thread(s) per run; test accuracy (%), best = the run chosen on "
            f"validation.\n\n{markdown_table(rows)}\n")
    write_result(args.json, record, text)


def main(argv=None) -> int:
    args = parse_args(argv)
    pool = args.pool or ",".join(local_datasets())
    arms = arm_flags(pool, args.mask_ratio)
    folders = {arm: arm_dir(args.out, arm, args.mask_ratio) for arm in arms}
    start = time.perf_counter()
    commands = arm_commands(args, arms)
    datasets = args.datasets.split(",")
    if not args.collect_only:
        run_arms(datasets, commands)
    records = {arm: load_runs(folder) for arm, folder in folders.items()}
    missing = [f"{d} ({arm})" for d in datasets for arm, runs in records.items()
               if not any(r.dataset == d for r in runs)]
    if missing:
        raise SystemExit(f"no finished runs in {args.out} for: {', '.join(missing)}")
    rows = [set_row(records, d) for d in datasets]
    print(markdown_table(rows))
    seconds = None if args.collect_only else time.perf_counter() - start
    write_report(args, {arm: "tstrain --dataset NAME " + " ".join(c) for arm, c in commands.items()}, pool, rows,
                 seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
