"""PatchTST family with the small-data recipe vs aeon's MiniRocket, MultiRocket and Hydra on the local UCR/UEA sets.

    python benchmarks/timeseries_small.py                   # every local set (9 with aeon 1.6), ~130 min on 2 cores
    python benchmarks/timeseries_small.py --datasets ArrowHead,GunPoint --skip-pretrain   # a quick look

Accuracy and cost come from the command the README shows:

    tstrain --recipe small-data --baseline minirocket,multirocket,hydra --threads 2 --cpu --out OUT/main

run one dataset at a time into the same sweep directory (so the benchmark can pause between sets while
another job holds ``--lock``), then once more over all sets, which only reads the finished runs and writes
the reports. Per set: validation-selected best-run test accuracy of each transformer, the accuracy of the
ensemble of its top runs, the three baselines (the paper's protocol: official test split 50/50 into validation
and test), ranks, and wall time per model (its runs, including evaluation) and per baseline (fit + predict,
numba compilation excluded).

Pretraining with vs without: ``patchtst_jumbo`` with the recipe (3 seeds) on the smallest sets, without
(the main sweep's runs) and with ``--pretrain-epochs`` (masked-patch reconstruction on the training split).

Longer training (``--long-sets``, default none): the recipe with ``--steps --long-steps`` on the sets where
the recipe's steps leave the training loss high, against the main sweep's runs.

Writes ``benchmark.json`` and ``benchmark.md`` into ``--out`` and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from jumbokit.benchmarking import machine_record, run_tstrain, write_result
from jumbokit.timeseries.data import local_datasets
from jumbokit.timeseries.models import PATCHTST_MODELS
from jumbokit.timeseries.baselines import ROCKET_CLASSIFIERS
from jumbokit.timeseries.protocol import steps_text
from jumbokit.training.rundir import atomic_write_text

PRETRAIN_SETS = ("ArrowHead", "GunPoint", "ItalyPowerDemand", "PickupGestureWiimoteZ")


def compare_arm(name: str, sets: list[str], base_runs: list[dict], base_rows: dict, arm_dir: Path,
                models: list[str]) -> tuple[list[str], dict]:
    """Per set and model: the main sweep's runs vs an arm's runs (mean ± std, best run on validation, ensemble)."""
    res = json.loads((arm_dir / "results.json").read_text())
    arm_rows = {(r["dataset"], r["model"]): r for r in res["summary"]}
    lines = ["| dataset | model | without: mean ± std (test %) | with: mean ± std | difference | best run with "
             "(without) | ensemble with (without) | wall s with (without) |", "|---|---|---|---|---|---|---|---|"]
    diffs, table = [], {}
    for d in sets:
        for m in models:
            accs = {"without": [r["test_top1"] for r in base_runs if r["dataset"] == d and r["model"] == m],
                    "with": [r["test_top1"] for r in res["runs"] if r["dataset"] == d and r["model"] == m]}
            if not accs["with"] or not accs["without"]:
                continue
            mean = {arm: statistics.mean(v) for arm, v in accs.items()}
            std = {arm: statistics.pstdev(v) for arm, v in accs.items()}
            diffs.append(mean["with"] - mean["without"])
            with_row, without_row = arm_rows[(d, m)], base_rows[(d, m)]
            table[f"{d}/{m}"] = {**accs, "best": {"with": with_row["test_top1"],
                                                   "without": without_row["test_top1"]},
                                 "ensemble": {"with": with_row.get("ens_test_top1"),
                                              "without": without_row.get("ens_test_top1")},
                                 "pretrain_seconds": with_row.get("pretrain_seconds"),
                                 "wall_seconds": {"with": with_row.get("wall_seconds"),
                                                  "without": without_row.get("wall_seconds")}}
            lines.append(f"| {d} | {m} | {pct(mean['without'])} ± {std['without']:.1f} | {pct(mean['with'])} ± "
                         f"{std['with']:.1f} | {diffs[-1]:+.1f} | {pct(with_row['test_top1'])} "
                         f"({pct(without_row['test_top1'])}) | {pct(with_row.get('ens_test_top1'))} "
                         f"({pct(without_row.get('ens_test_top1'))}) | {with_row.get('wall_seconds', 0.0):.0f} "
                         f"({without_row.get('wall_seconds', 0.0):.0f}) |")
    mean_diff = statistics.mean(diffs) if diffs else 0.0
    lines += [f"| mean | | | | {mean_diff:+.1f} | | | |", ""]
    return lines, {"arm": name, "sets": sets, "per_set": table, "mean_difference": mean_diff}


def wait_for(lock: Path | None, log) -> float:
    """Sleep while ``lock`` exists (another job is timing); returns the seconds waited."""
    waited = 0.0
    while lock is not None and lock.exists():
        if waited == 0:
            log(f"{lock} exists: waiting")
        time.sleep(30)
        waited += 30
    return waited


def run_in_chunks(datasets: list[str], common: list[str], lock: Path | None, log) -> dict:
    """One tstrain call per dataset (pausing for the lock between them), then one over all of them."""
    contended = {}
    for name in datasets:
        wait_for(lock, log)
        start = time.perf_counter()
        run_tstrain(["--dataset", name, *common])
        contended[name] = bool(lock is not None and lock.exists())
        log(f"  {name}: {time.perf_counter() - start:.0f} s" + (" (the lock appeared meanwhile)"
                                                                 if contended[name] else ""))
    printed = run_tstrain(["--dataset", ",".join(datasets), *common])
    return {"printed": printed, "lock_seen_after": contended}


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def mean_or_none(values) -> float | None:
    """The mean, or None where a value is missing (no ensemble with ``--ensemble 1``) or there are none."""
    values = list(values)
    return None if not values or any(v is None for v in values) else statistics.mean(values)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default=None, help="comma-separated (default: every local UCR/UEA set)")
    parser.add_argument("--out", default="runs/bench_timeseries_small",
                        help="sweep directory; finished runs in it are reused (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads per run (default: %(default)s)")
    parser.add_argument("--pretrain-sets", default=",".join(PRETRAIN_SETS),
                        help="comma-separated sets of the pretraining study (default: %(default)s)")
    parser.add_argument("--pretrain-epochs", type=int, default=100,
                        help="masked-patch pretraining epochs in the pretraining study (default: %(default)s)")
    parser.add_argument("--skip-pretrain", action="store_true", help="leave out the pretraining study")
    parser.add_argument("--long-sets", default="", help="comma-separated sets for the longer-training arm (default: "
                                                        "none), e.g. ACSF1,OSULeaf")
    parser.add_argument("--long-steps", type=int, default=3000, help="steps per run of the longer-training arm")
    parser.add_argument("--tstrain-args", default="", help="extra tstrain flags for every sweep, e.g. '--steps 5' "
                                                           "(a smoke test; the README numbers use none)")
    parser.add_argument("--lock", default="/tmp/cpu.lock", help="pause between sets while this file exists ('' = never)")
    parser.add_argument("--results", default="benchmarks/results/timeseries_small",
                        help="also copy benchmark.json/.md to this path stem ('' = no)")
    return parser


def check_args(args: argparse.Namespace, datasets: list[str]) -> None:
    """SystemExit naming a study set outside the benchmark's sets, or a bad --threads or --long-steps."""
    for flag, names in (("--pretrain-sets", args.pretrain_sets), ("--long-sets", args.long_sets)):
        unknown = [d for d in names.split(",") if d and d not in datasets]
        if unknown and (flag == "--long-sets" or args.datasets is None):
            raise SystemExit(f"{flag}: {', '.join(unknown)} not among the benchmark's sets ({', '.join(datasets)})")
    for flag, value in (("--threads", args.threads), ("--long-steps", args.long_steps)):
        if value < 1:
            raise SystemExit(f"{flag} must be >= 1, got {value}")


def accuracy_lines(datasets: list[str], models: list[str], by: dict, results: dict, ensemble: int) -> list[str]:
    """The accuracy table: best run / ensemble of the top ``ensemble`` runs per transformer, one fit per baseline,
    means and ranks."""
    lines = ["## Accuracy (test top-1 %, the paper's split)", "",
             f"Best run chosen on validation / ensemble of the top {ensemble} runs (mean probabilities). "
             "Baselines: one fit each; * = zero-padded to equal length.", "",
             "| dataset | " + " | ".join(models) + " | " + " | ".join(ROCKET_CLASSIFIERS) + " |",
             "|---|" + "---|" * (len(models) + len(ROCKET_CLASSIFIERS))]
    for d in datasets:
        cells = [f"{pct(by[(d, m)]['test_top1'])} / {pct(by[(d, m)].get('ens_test_top1'))}" for m in models]
        cells += [pct(by[(d, b)]["test_top1"]) + ("*" if by[(d, b)].get("padded") else "") if (d, b) in by
                  else "-" for b in ROCKET_CLASSIFIERS]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    means = {m: {key: mean_or_none(by[(d, m)].get(key) for d in datasets if (d, m) in by)
                 for key in ("test_top1", "ens_test_top1")} for m in models + list(ROCKET_CLASSIFIERS)
             if any((d, m) in by for d in datasets)}
    lines.append("| mean | " + " | ".join(f"{pct(means[m]['test_top1'])} / {pct(means[m]['ens_test_top1'])}"
                                          for m in models)
                 + " | " + " | ".join(pct(means[b]["test_top1"]) if b in means else "-" for b in ROCKET_CLASSIFIERS) + " |")
    ra, rt = results["ranks_all"], results["ranks"]
    lines.append("| mean rank, all 6 (best / ens) | " + " | ".join(
        f"{ra[m]['best']:.2f} / " + ("-" if ra[m].get("ens") is None else f"{ra[m]['ens']:.2f}")
        for m in models + list(ROCKET_CLASSIFIERS) if m in ra) + " |")
    lines.append("| mean rank, 3 transformers (best / avg) | " + " | ".join(
        f"{rt[m]['best']:.2f} / {rt[m]['avg']:.2f}" for m in models) + " |" + " |" * len(ROCKET_CLASSIFIERS))
    return lines + [""]


def target_lines(datasets: list[str], models: list[str], by: dict, ranks: dict) -> tuple[list[str], dict]:
    """The two targets (Jumbo within 1 point of MiniRocket; Jumbo's best rank of the transformers): lines, verdicts."""
    mr_sets = [d for d in datasets if (d, "minirocket") in by]
    jumbo = statistics.mean(by[(d, "patchtst_jumbo")]["test_top1"] for d in mr_sets)
    jumbo_ens = mean_or_none(by[(d, "patchtst_jumbo")].get("ens_test_top1") for d in mr_sets)
    rocket = statistics.mean(by[(d, "minirocket")]["test_top1"] for d in mr_sets)
    best_transformer = min(models, key=lambda m: ranks[m]["best"])
    targets = {
        "within_1_point_of_minirocket": {"jumbo_best_run": jumbo, "jumbo_ensemble": jumbo_ens, "minirocket": rocket,
                                         "sets": mr_sets, "met_best_run": jumbo >= rocket - 1,
                                         "met_ensemble": None if jumbo_ens is None else jumbo_ens >= rocket - 1},
        "jumbo_best_rank_of_transformers": {"ranks": {m: ranks[m]["best"] for m in models},
                                            "met": ranks["patchtst_jumbo"]["best"] <= min(ranks[m]["best"]
                                                                                          for m in models)},
    }
    gap = rocket - jumbo
    ens_verdict = ("not run (--ensemble 1)" if jumbo_ens is None else "met" if rocket - jumbo_ens <= 1
                   else f"missed by {rocket - jumbo_ens - 1:.1f} beyond the 1-point margin")
    rank_text = ", ".join(f"{m} {ranks[m]['best']:.2f}" for m in models)
    lines = [f"PatchTST+Jumbo mean over the {len(mr_sets)} sets MiniRocket runs: best run {jumbo:.1f}, "
             f"ensemble {pct(jumbo_ens)} vs MiniRocket {rocket:.1f} (target: within 1 point): "
             f"best run {'met' if gap <= 1 else f'missed by {gap - 1:.1f} beyond the 1-point margin'}, ensemble "
             f"{ens_verdict}.",
             f"Best mean rank (best run) among the transformers: {best_transformer} ({rank_text}): "
             f"{'met' if targets['jumbo_best_rank_of_transformers']['met'] else 'missed'}.", ""]
    return lines, targets


def cost_lines(datasets: list[str], models: list[str], by: dict, runs_per_model: int) -> list[str]:
    """Wall seconds per set and model (a transformer's whole sweep; a baseline's fit + predict)."""
    names = models + list(ROCKET_CLASSIFIERS)
    lines = ["## Cost (wall seconds per set, 2-core CPU, fp32)", "",
             f"Transformers: all {runs_per_model} runs of the sweep (training + evaluation); baselines: one fit + "
             "predict on the full train/test split.", "",
             "| dataset | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for d in datasets:
        lines.append(f"| {d} | " + " | ".join(f"{by[(d, m)].get('wall_seconds', by[(d, m)]['train_seconds']):.0f}"
                                              if (d, m) in by else "-" for m in names) + " |")
    lines.append("| total | " + " | ".join(f"{sum(by[(d, m)].get('wall_seconds', 0.0) for d in datasets if (d, m) in by):.0f}"
                                          for m in names) + " |")
    return lines + [""]


def pretrain_study(args: argparse.Namespace, datasets: list[str], out: Path, results: dict, by: dict,
                   lock: Path | None, log) -> tuple[list[str], dict]:
    """patchtst_jumbo with vs without masked-patch pretraining on the training split: lines, report entry."""
    sets = [d for d in args.pretrain_sets.split(",") if d in datasets]
    arm_args = ["--recipe", "small-data", "--model", "patchtst_jumbo", "--pretrain-epochs",
                str(args.pretrain_epochs), "--threads", str(args.threads), "--cpu", "--no-progress", "--out",
                str(out / "pretrain"), *args.tstrain_args.split()]
    log(f"pretraining study: tstrain {' '.join(arm_args)} (without: the main sweep's runs)")
    run_in_chunks(sets, arm_args, lock, log)
    lines = [f"## Pretraining (patchtst_jumbo, small-data recipe, {results['sweep'].get('seeds', 1)} seeds; "
             f"masked-patch reconstruction for {args.pretrain_epochs} epochs of the training split first)", ""]
    arm_lines, arm = compare_arm("pretraining", sets, results["runs"], by, out / "pretrain", ["patchtst_jumbo"])
    return lines + arm_lines, {**arm, "epochs": args.pretrain_epochs, "command": "tstrain " + " ".join(arm_args)}


def longer_training_study(args: argparse.Namespace, long_sets: list[str], out: Path, results: dict, by: dict,
                          lock: Path | None, log) -> tuple[list[str], dict]:
    """The recipe with ``--steps --long-steps`` vs the main sweep's runs: lines, report entry."""
    arm_args = ["--recipe", "small-data", "--steps", str(args.long_steps), "--threads", str(args.threads),
                "--cpu", "--no-progress", "--out", str(out / f"steps{args.long_steps}"),
                *args.tstrain_args.split()]
    log(f"longer training: tstrain {' '.join(arm_args)}")
    run_in_chunks(long_sets, arm_args, lock, log)
    lines = [f"## Longer training ({steps_text(args.long_steps)} instead of the recipe's "
             f"{steps_text(results['sweep']['steps'])}, small-data recipe otherwise, "
             f"{results['sweep'].get('seeds', 1)} seeds)", ""]
    arm_lines, arm = compare_arm("steps", long_sets, results["runs"], by, out / f"steps{args.long_steps}",
                                 list(PATCHTST_MODELS))
    return lines + arm_lines, {**arm, "steps": args.long_steps, "command": "tstrain " + " ".join(arm_args)}


def header_lines(args: argparse.Namespace, report: dict, results: dict, lock_seen: dict) -> list[str]:
    """The report's title and the line saying what ran, how long, and whether another job's lock appeared."""
    header = ["# Small UCR/UEA sets: PatchTST family (small-data recipe) vs MiniRocket, MultiRocket, Hydra", "",
              f"CPU only ({args.threads} threads, fp32, {report['machine']['cores']} cores); {report['command']}; "
              f"sweep per set and model: lr {', '.join(f'{v:g}' for v in results['lrs'])} x dropout "
              f"{', '.join(f'{v:g}' for v in results['dropouts'])} x {results['sweep'].get('seeds', 1)} seeds, "
              f"{steps_text(results['sweep']['steps'])}. Main sweep and baselines as recorded: "
              f"{report['recorded_seconds'] / 60:.0f} min of runs; this invocation: "
              f"{report['benchmark_seconds'] / 60:.0f} min (finished runs are reused).", ""]
    if any(lock_seen.values()):
        header += ["Another job's timing lock appeared while these sets ran (their wall times may be inflated): "
                   + ", ".join(d for d, v in lock_seen.items() if v), ""]
    return header


def write_report(out: Path, results_stem: str, report: dict, text: str) -> None:
    """benchmark.json/.md into ``out``, and a copy to ``results_stem``.json/.md unless it is ''."""
    first = write_result((out / "benchmark").with_suffix(".json"), report, text, quiet=True)
    if results_stem:  # the same stamped files, not a second stamp taken a moment later
        for suffix in (".json", ".md"):
            atomic_write_text(Path(results_stem).with_suffix(suffix), first.with_suffix(suffix).read_text())


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    datasets = args.datasets.split(",") if args.datasets else local_datasets("UCR") + local_datasets("UEA")
    check_args(args, datasets)
    torch.set_num_threads(args.threads)
    lock = Path(args.lock) if args.lock else None
    out = Path(args.out)
    log = lambda msg: print(msg, flush=True)  # noqa: E731

    report: dict = {"datasets": datasets, "machine": machine_record(threads=args.threads, device="cpu"),
                    "device": "cpu (fp32)", "threads": args.threads}
    started = time.perf_counter()
    common = ["--recipe", "small-data", "--baseline", ",".join(ROCKET_CLASSIFIERS), "--threads", str(args.threads), "--cpu",
              "--no-progress", "--out", str(out / "main"), *args.tstrain_args.split()]
    report["command"] = "tstrain " + " ".join(common)
    log(f"main sweep: {report['command']} on {', '.join(datasets)}")
    main_run = run_in_chunks(datasets, common, lock, log)
    results = json.loads((out / "main" / "results.json").read_text())
    rows = results["summary"]
    by = {(r["dataset"], r["model"]): r for r in rows}
    models = list(PATCHTST_MODELS)
    report.update(main=results["sweep"], lrs=results["lrs"], dropouts=results["dropouts"],
                  ensemble=results.get("ensemble", 1),  # results.json leaves out an ensemble of 1
                  ranks=results["ranks"], ranks_all=results["ranks_all"], summary=rows,
                  lock_seen=main_run["lock_seen_after"], tstrain_output=main_run["printed"])

    lines = accuracy_lines(datasets, models, by, results, report["ensemble"])
    more_lines, report["targets"] = target_lines(datasets, models, by, results["ranks"])
    lines += more_lines + cost_lines(datasets, models, by, rows[0]["runs"])
    if not args.skip_pretrain:
        more_lines, report["pretraining"] = pretrain_study(args, datasets, out, results, by, lock, log)
        lines += more_lines
    long_sets = [d for d in args.long_sets.split(",") if d in datasets]
    if long_sets:
        more_lines, report["longer_training"] = longer_training_study(args, long_sets, out, results, by, lock, log)
        lines += more_lines

    report["benchmark_seconds"] = time.perf_counter() - started
    # finished runs are reused when the benchmark is run again, so this invocation's time can be seconds
    report["recorded_seconds"] = sum(r.get("wall_seconds", 0.0) for r in rows)
    text = "\n".join(header_lines(args, report, results, main_run["lock_seen_after"]) + lines)
    write_report(out, args.results, report, text)
    print(main_run["printed"])
    print(text)
    print(json.dumps({k: report[k] for k in ("targets", "recorded_seconds", "benchmark_seconds")}, indent=2,
                     default=float))
    print(f"wrote {out / 'benchmark.json'}, {out / 'benchmark.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
