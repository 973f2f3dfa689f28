"""The full-resolution convolutional trunk (or a change to the trunk recipe) on the local UCR/UEA sets, against
the recipe it changes, aeon's ROCKET classifiers (same splits) and published ResNet / InceptionTime numbers
(reference columns).

    python benchmarks/timeseries_trunk.py                                   # every local set, patchtst_jumbo
    python benchmarks/timeseries_trunk.py --datasets OSULeaf --seeds 3 --models patchtst,patchtst_jumbo
    python benchmarks/timeseries_trunk.py --models patchtst_jumbo_rocket --trunk-args "" \\
        --out runs/bench_ts_hybrid --json benchmarks/results/timeseries_hybrid.json     # the ROCKET hybrid
    python benchmarks/timeseries_trunk.py --recipe small-data-trunk --seeds 3 --out runs/bench_ts_recipe_trunk \\
        --json benchmarks/results/timeseries_recipe_trunk.json       # the trunk recipe as it is, PLAID included
    python benchmarks/timeseries_trunk.py --seeds 3 --gpu 10 --out runs/gpu_trunk       # on a GPU, 10 runs at once
    python benchmarks/timeseries_trunk.py --seeds 3 --collect-only --out runs/gpu_trunk --device "H100"

With ``--gpu K`` the sweep runs on the default device (a GPU where there is one) with K runs at a time
(``tstrain --runs-per-device K``) and in one ``tstrain`` call. ``--collect-only`` trains nothing: it tabulates the
finished runs in ``--out``, also of a sweep that was stopped part way (each row says how many runs it holds).

Each set runs through the command the docs show,

    tstrain --recipe small-data --conv-stem 0 --trunk inception --trunk-width 16 --trunk-depth 3 --diff \\
            --seeds 1 --model patchtst_jumbo --threads 2 --cpu --out OUT

one set at a time into the same sweep directory (finished runs are reused when the benchmark is run again).
``--recipe small-data-trunk`` runs that recipe instead, its front end built in (``--trunk-args`` then adds to
it and is empty by default).
A hybrid (``patchtst_jumbo_rocket``) is compared with the recipe's run of the transformer it extends, the
trunk alone (``series_cnn``) with the recipe's patchtst_jumbo.
The arm is compared with the runs of its recipe as it is: under small-data, the recipe without the trunk, from
``--reference`` (the small-data benchmark's JSON); under small-data-trunk, the trunk recipe's runs, taken from
``--recipe-runs`` (JSON files of this benchmark; a row counts when its command, decided on that set, is the
recipe's, as ``benchmarks/timeseries_rank.py`` matches them), so an ablation such as ``--trunk-args "--dropout
0.2"`` sits beside the recipe it changes. The three ROCKET classifiers come from ``--reference`` (same
seed-protocol splits); ResNet (Fawaz et al.) and InceptionTime are published numbers on the full official test
sets, not ours and not on the same half split. The arm's mean validation accuracy and its ensemble (the mean
probabilities of as many runs, best on validation, as the recipe ensembles: tstrain's score) come from the runs
stored in ``--out``. ``--pool`` adds the runs of further sweeps of the same arm that differ only in their seeds
(``--trunk-args "... --seed 3"``), so the row is chosen, averaged and ensembled over all of them:

    python benchmarks/timeseries_trunk.py --datasets OSULeaf --seeds 3 --recipe small-data-trunk --collect-only \\
        --out runs/gpu_recipe --pool runs/gpu_recipe_s3

Writes JSON and a markdown copy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from jumbokit.benchmarking import machine_record, result_path, results_folder, run_tstrain, write_result
from jumbokit.timeseries import store
from jumbokit.timeseries.data import ClassificationData, load_dataset, local_datasets
from jumbokit.timeseries.models import HYBRID_MODELS, REFERENCE_MODELS
from jumbokit.timeseries.protocol import RECIPES, SweepConfig
from jumbokit.timeseries.results import SummaryRow, ensemble_scores, summarize
from jumbokit.timeseries.run import RunResult
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

# Published test accuracy (%), full official test sets. ResNet: hfawaz/dl-4-tsc results/results-ucr-128.csv
# (UCRArchive_2018, mean of 5 iterations) and results/results-mts.csv (mean of 10); InceptionTime (ensemble
# of 5): hfawaz/InceptionTime results-InceptionTime-128.csv, multivariate from results-mts.csv at commit 0d623a3
# (since removed from the repository).
RESNET = {"ACSF1": 91.6, "ArrowHead": 83.8, "GunPoint": 99.1, "ItalyPowerDemand": 96.2, "OSULeaf": 98.0,
          "PLAID": 94.0, "PickupGestureWiimoteZ": 70.4, "JapaneseVowels": 99.2,
          "Coffee": 100.0, "PigCVP": 91.8, "Trace": 100.0}
INCEPTIONTIME = {"ACSF1": 92.0, "ArrowHead": 84.6, "GunPoint": 100.0, "ItalyPowerDemand": 96.5, "OSULeaf": 94.2,
                 "PLAID": 94.4, "PickupGestureWiimoteZ": 76.0, "BasicMotions": 100.0, "JapaneseVowels": 99.2,
                 "Coffee": 100.0, "PigCVP": 96.2, "Trace": 100.0}
BASELINES = ("minirocket", "multirocket", "hydra")
COMPARED_WITH = {**HYBRID_MODELS, **{m: "patchtst_jumbo" for m in REFERENCE_MODELS}}  # model -> the recipe's model
SMALL_DATA_TRUNK_ARGS = "--conv-stem 0 --trunk inception --trunk-width 16 --trunk-depth 3 --diff"  # small-data's arm
# The runs of `tstrain --recipe small-data-trunk` as it is (the trunk head included), 3 seeds, in the files that
# benchmarks/results/timeseries_trunk_recipe_ranks.json ranks: Jumbo on all 9 sets and PatchTST and registers on 7
# on the CPU, first, so a CPU arm meets CPU runs; PatchTST and registers on ACSF1 and PLAID from one H100 (the rank
# table takes all three models there from the H100 file).
RECIPE_TRUNK_RUNS = [f"benchmarks/results/timeseries_trunk_{name}.json" for name in (
    "trunkhead_seeds3", "trunkhead_plaid_seeds3", "trunkhead_variants_seeds3", "trunkhead_long_h100_seeds3")]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default=None, help="comma-separated (default: every local UCR/UEA set)")
    p.add_argument("--models", default="patchtst_jumbo", help="comma-separated (default: %(default)s)")
    p.add_argument("--seeds", type=int, default=1, help="runs per set and model (default: %(default)s)")
    p.add_argument("--recipe", choices=("small-data", "small-data-trunk"), default="small-data",
                   help="the tstrain recipe the arm runs under (default: %(default)s)")
    p.add_argument("--trunk-args", default=None,
                   help=f"the front-end flags of the arm (default: {SMALL_DATA_TRUNK_ARGS} under small-data, "
                        "none under small-data-trunk)")
    p.add_argument("--threads", type=int, default=2, help="(default: %(default)s)")
    p.add_argument("--out", default="runs/bench_ts_trunk", help="sweep directory (default: %(default)s)")
    p.add_argument("--reference", nargs="+", default=["benchmarks/results/timeseries_small.json"], metavar="JSON",
                   help="the small-data benchmark's JSON (the recipe without the trunk and the baselines), and for "
                        "sets it lacks the JSON of benchmarks/timeseries_rocket.py (default: %(default)s)")
    p.add_argument("--recipe-runs", nargs="+", default=RECIPE_TRUNK_RUNS, metavar="JSON",
                   help="under --recipe small-data-trunk: JSON files of this benchmark holding the recipe's own "
                        "runs, the comparison column (default: the files of the recipe's rank table, "
                        "benchmarks/results/timeseries_trunk_recipe_ranks.json)")
    p.add_argument("--json", default=str(result_path(RESULTS, "timeseries_trunk")), help="(default: %(default)s)")
    p.add_argument("--gpu", type=int, default=0, metavar="K",
                   help="train on the default device (a GPU where there is one), K runs at a time (default: CPU)")
    p.add_argument("--collect-only", action="store_true",
                   help="train nothing: tabulate the finished runs in --out (a partial sweep too)")
    p.add_argument("--pool", nargs="+", default=[], metavar="DIR",
                   help="more sweep directories of the same arm with other seeds (--trunk-args '... --seed K'): "
                        "their finished runs are tabulated with --out's as one sweep (default: none)")
    p.add_argument("--device", default=None,
                   help="what the runs in --out ran on, for the record (default: this machine's device)")
    p.add_argument("--torch", default=None,
                   help="the torch version the runs in --out ran with, for the record (default: this machine's)")
    args = p.parse_args(argv)
    if args.trunk_args is None:
        args.trunk_args = SMALL_DATA_TRUNK_ARGS if args.recipe == "small-data" else ""
    if args.gpu < 0:
        p.error(f"--gpu expects runs per device >= 1 (or 0 for CPU), got {args.gpu}")
    missing_ref = [f for f in args.reference if not Path(f).is_file()]
    if missing_ref:
        p.error(f"--reference expects JSON files of the small-data or ROCKET benchmark, not found: "
                f"{', '.join(missing_ref)}")
    missing = [f for f in args.recipe_runs if not Path(f).is_file()]
    if args.recipe == "small-data-trunk" and missing:
        p.error(f"--recipe-runs expects JSON files of this benchmark, not found: {', '.join(missing)}")
    return args


def reference_rows(paths: list[Path]) -> dict[tuple[str, str], dict]:
    """(dataset, model) -> {"best", "avg", "ens", "seconds", "source"} in percent from the small-data (or ROCKET)
    benchmark's JSON files; a later file's row replaces an earlier one's."""
    out = {}
    for path in paths:
        for r in json.loads(path.read_text())["summary"]:
            out[(r["dataset"], r["model"])] = {"best": 100 * r["best_test_acc"], "avg": 100 * r["avg_test_acc"],
                                               "ens": 100 * r["ens_test_acc"],
                                               "seconds": r["wall_seconds"] / max(1, r["runs"]), "source": path.name}
    return out


def recipe_rows(args: argparse.Namespace, ref: dict) -> dict[tuple[str, str], dict]:
    """(dataset, model) -> {"best", "avg", "seconds", "source"} of the arm's recipe as it is (see the module
    docstring); under small-data that is ``ref``, the small-data benchmark's rows."""
    if args.recipe == "small-data":
        return ref
    from jumbokit.benchmarking.trunk_records import load_rows  # one rule for "the same runs"

    _, rows = load_rows([Path(f) for f in args.recipe_runs], f"tstrain --recipe {args.recipe}")
    return {key: {"best": r["arm_best"], "avg": r["arm_avg"], "seconds": r.get("arm_seconds"), "source": r["source"]}
            for key, r in rows.items()}


def finished_runs(records: list[RunResult]) -> dict[tuple[str, str], tuple[SummaryRow, list[float], list[float]]]:
    """(dataset, model) -> the summary row of the finished runs (selection as tstrain's), the runs' test and
    validation accuracies in seed order."""
    tests: dict[tuple[str, str], list[float]] = {}
    vals: dict[tuple[str, str], list[float]] = {}
    for r in records:
        tests.setdefault((r.dataset, r.model), []).append(r.test_top1)
        vals.setdefault((r.dataset, r.model), []).append(r.val_top1)
    return {(row.dataset, row.model): (row, tests[(row.dataset, row.model)], vals[(row.dataset, row.model)])
            for row in summarize(records)}


def arm_ensemble(data: ClassificationData, runs: list[tuple[Path, RunResult]], k: int) -> float | None:
    """Test accuracy (%) of the mean probabilities of the ``k`` runs best on validation (tstrain's ensemble), from
    the runs' stored probabilities; None where one is missing or does not fit ``data``'s validation and test
    halves."""
    sizes = {"val": len(data.val.y), "test": len(data.test.y)}
    probas = [store.load_proba(store.proba_path(path)) for path, _ in runs]
    if not all(p is not None and all(half in p and len(p[half]) == n for half, n in sizes.items()) for p in probas):
        return None
    return ensemble_scores([r for _, r in runs], probas, k, data.val.y, data.test.y)["test_top1"]


def load_sweeps(out: Path, pool: list[str]) -> list[tuple[Path, SweepConfig | None]]:
    """``out`` and the ``--pool`` sweeps with their stored settings, checked to be one arm: the same settings but
    the seeds, and no run (set, model, lr, dropout, seed) stored twice (SystemExit naming the difference
    otherwise). Seeds a sweep declared but never finished do not count, so a stopped sweep's seeds may be run
    again into another directory."""
    sweeps = [(d, store.read_sweep_file(d)) for d in [out, *map(Path, pool)]]
    if not pool:
        return sweeps
    seen: dict[tuple, Path] = {}
    for d, cfg in sweeps:
        if cfg is None:
            raise SystemExit(f"--pool expects tstrain sweep directories; {d} holds no sweep.json")
        settings, base = (asdict(replace(c, seed=0, seeds=1)) for c in (cfg, sweeps[0][1]))
        diff = sorted(k for k in settings if settings[k] != base[k])
        if diff:
            raise SystemExit(f"--pool expects sweeps of the arm in {out} with other seeds; {d} differs in "
                             + ", ".join(f"{k}: {settings[k]!r} there vs {base[k]!r}" for k in diff))
        for key in finished_run_keys(d, cfg):
            if key in seen:
                raise SystemExit(f"--pool expects sweeps with other seeds; {d} and {seen[key]} both hold "
                                 "{} {} {} seed {}".format(*key))
            seen[key] = d
    return sweeps


def finished_run_keys(folder: Path, cfg: SweepConfig) -> list[tuple[str, str, str, int]]:
    """(set, model, settings stem, seed) of each run stored in a sweep directory; the seed is the sweep's
    ``--seed`` plus the file's ``_s<k>`` offset."""
    keys = []
    for path in store.run_paths(folder):
        k, stem = store.job_order(path)
        keys.append((path.parent.parent.name, path.parent.name, stem, cfg.seed + k))
    return keys


def pooled_seeds(sweeps: list[tuple[Path, SweepConfig | None]]) -> list[int]:
    """The seeds of the runs stored in the sweeps, sorted."""
    return sorted({key[-1] for d, cfg in sweeps if cfg is not None for key in finished_run_keys(d, cfg)})


def collect(sweeps: list[tuple[Path, SweepConfig | None]], sets: list[str], models: list[str], ensemble: int,
            recipe: dict, ref: dict) -> list[dict]:
    """One row per set and model with finished runs in the sweeps (the first is ``--out``): the arm's runs (and
    the ensemble of ``ensemble`` of them) beside the recipe's (``recipe``) and the references (``ref``)."""
    cfg = sweeps[0][1] or SweepConfig()
    loaded = [(path, run) for d, _ in sweeps for path in store.run_paths(d)
              if (run := store.load_run(path)) is not None]
    summary = finished_runs([run for _, run in loaded])
    splits = {d: load_dataset(d, protocol=cfg.protocol, split_seed=cfg.split_seed, download=False, normalize="none")
              for d in sets if any((d, m) in summary for m in models)}
    rows = []
    for d in sets:
        for m in models:
            if (d, m) not in summary:
                continue
            (arm, tests, vals), base = summary[(d, m)], recipe.get((d, COMPARED_WITH.get(m, m)), {})
            mine = [(path, run) for path, run in loaded if (run.dataset, run.model) == (d, m)]
            rows.append({
                "dataset": d, "model": m, "arm_best": arm.test_top1, "arm_avg": arm.avg_test_top1,
                "arm_runs": arm.runs, "arm_tests": tests, "arm_seconds": arm.wall_seconds / arm.runs,
                "arm_val_avg": statistics.mean(vals), "arm_ens": arm_ensemble(splits[d], mine, ensemble),
                "recipe_best": base.get("best"),
                "recipe_avg": base.get("avg"), "recipe_seconds": base.get("seconds"),
                "recipe_source": base.get("source"),
                **{b: ref.get((d, b), {}).get("best") for b in BASELINES},
                "resnet_published": RESNET.get(d), "inceptiontime_published": INCEPTIONTIME.get(d),
            })
    return rows


def table(rows: list[dict], recipe: str) -> str:
    def f(v):
        return "-" if v is None else f"{v:.1f}"

    def runs(r):
        return " (" + ", ".join(f(t) for t in r["arm_tests"]) + ")"

    header = ["dataset", "model", "arm: best / mean of runs (the runs)", "arm: validation mean / ensemble",
              f"{recipe}: best / mean of runs", "minirocket", "multirocket", "hydra", "ResNet (published)",
              "InceptionTime (published)", "wall s per run: arm / recipe"]
    body = [[r["dataset"], r["model"], f"{f(r['arm_best'])} / {f(r['arm_avg'])}{runs(r)}",
             f"{f(r['arm_val_avg'])} / {f(r['arm_ens'])}",
             f"{f(r['recipe_best'])} / {f(r['recipe_avg'])}", f(r["minirocket"]), f(r["multirocket"]), f(r["hydra"]),
             f(r["resnet_published"]), f(r["inceptiontime_published"]),
             f"{r['arm_seconds']:.0f} / {'-' if r['recipe_seconds'] is None else round(r['recipe_seconds'])}"]
            for r in rows]
    keys = ("arm_best", "arm_avg", "arm_val_avg", "arm_ens", "recipe_best", "recipe_avg", *BASELINES)
    for m in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == m]
        mean = {k: statistics.mean(r[k] for r in mine) if all(r[k] is not None for r in mine) else None
                for k in keys}
        body.append(["mean", m, f"{f(mean['arm_best'])} / {f(mean['arm_avg'])}",
                     f"{f(mean['arm_val_avg'])} / {f(mean['arm_ens'])}",
                     f"{f(mean['recipe_best'])} / {f(mean['recipe_avg'])}", *(f(mean[b]) for b in BASELINES),
                     "", "", ""])
    return markdown_table([dict(zip(header, line)) for line in body], header)


def device_flags(args: argparse.Namespace) -> list[str]:
    """``--cpu`` (one run at a time), or a pool of ``--gpu`` runs on the default device."""
    return ["--cpu"] if args.gpu == 0 else ["--runs-per-device", str(args.gpu)]


def device_label(args: argparse.Namespace) -> str:
    if args.device:
        return args.device
    if args.gpu and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} (fp32), {args.gpu} runs at a time"
    return "cpu (fp32)"


def train(args: argparse.Namespace, sets: list[str], common: list[str]) -> None:
    """The sweep: one set at a time on CPU (a line per set), all sets in one pool on a GPU."""
    if args.gpu:
        run_tstrain(["--dataset", ",".join(sets), *common])
        return
    for name in sets:
        t0 = time.perf_counter()
        run_tstrain(["--dataset", name, *common])
        print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    run_tstrain(["--dataset", ",".join(sets), *common])


def markdown(args: argparse.Namespace, record: dict, sets: list[str], models: list[str], text: str) -> str:
    """The markdown copy of ``record``: title, device and command, the table, then notes on
    missing rows, pooled sweeps and where the recipe's runs come from."""
    front = " ".join([f"--recipe {args.recipe}"] * (args.recipe != "small-data") + args.trunk_args.split())
    title = f"{', '.join(models)} with `{front}`" if front else ", ".join(models)
    rows = record["rows"]
    present = {(r["dataset"], r["model"]) for r in rows}
    missing = [f"{d} {m}" for d in sets for m in models if (d, m) not in present]
    note = f"\n\nNot finished (no runs): {', '.join(missing)}." if missing else ""
    if args.pool:
        seeds = record["run_seeds"]
        note += (f"\n\nPooled sweeps (the same arm, run with `--seed K`): {', '.join(record['sweeps'])}; seeds "
                 f"{seeds[0]}-{seeds[-1]} where finished (the runs column lists them in that order).")
    sources = sorted({r["recipe_source"] for r in rows if r["recipe_source"]})
    note += (f"\n\nThe recipe's runs: {', '.join(sources)} (their own device and threads, so wall times compare "
             "only where those match)." if sources else "")
    return (f"# {title} vs the {args.recipe} recipe\n\n{record['device']}, {args.threads} threads. "
            f"`{record['command']}`\n\n{text}{note}\n")


def main(argv=None) -> int:
    args = parse_args(argv)
    sets = args.datasets.split(",") if args.datasets else local_datasets()
    models = args.models.split(",")
    common = ["--recipe", args.recipe, *args.trunk_args.split(), "--seeds", str(args.seeds), "--model",
              ",".join(models), "--threads", str(args.threads), *device_flags(args), "--no-progress",
              "--out", args.out]
    start = time.perf_counter()
    if not args.collect_only:
        train(args, sets, common)
    ref = reference_rows([Path(f) for f in args.reference])
    sweeps = load_sweeps(Path(args.out), args.pool)
    rows = collect(sweeps, sets, models, RECIPES[args.recipe]["ensemble"], recipe_rows(args, ref), ref)
    if not rows:
        raise SystemExit(f"no finished runs of {', '.join(models)} on {', '.join(sets)} in {args.out}")
    text = table(rows, f"recipe {args.recipe}")
    command = f"tstrain --recipe {args.recipe} " + " ".join(common[2:-3])  # without --no-progress --out DIR
    record = {"command": command, "datasets": sets, "rows": rows, "sweeps": [str(d) for d, _ in sweeps],
              "run_seeds": pooled_seeds(sweeps), "device": device_label(args), "threads": args.threads,
              "machine": machine_record(threads=args.threads, device=device_label(args)),
              "benchmark_seconds": None if args.collect_only else time.perf_counter() - start}
    if args.torch:
        record["machine"]["torch"] = args.torch
    print(text)
    print(json.dumps(record, indent=1))
    write_result(args.json, record, markdown(args, record, sets, models, text), quiet=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
