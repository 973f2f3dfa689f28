"""PatchTST vs PatchTST+registers vs PatchTST+Jumbo (and MiniRocket) on the bundled UCR/UEA sets.

    python benchmarks/timeseries.py                       # full 12-run sweep, 100 epochs, five bundled sets
    python benchmarks/timeseries.py --epochs 5 --lr 1e-3 --dropout 0.1   # a quick look
    python benchmarks/timeseries.py --speed-only

Accuracy: the paper's protocol through ``tstrain``'s sweep (validation-selected best run and sweep mean on
the test half, MiniRocket on the same test half and on the full official test set), mean ranks, wall time
per dataset. Speed: training-step time (forward + backward + AdamW step) of each model at batch 256 on each
dataset's shapes, the fastest of interleaved rounds of timed steps, and PatchTST+Jumbo's speed relative to PatchTST's.
Writes ``benchmark.json`` and ``benchmark.md`` (plus the sweep's reports) into ``--out`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from jumbokit.benchmarking import machine_record, time_interleaved
from jumbokit.benchmarking.steps import train_step
from jumbokit.timeseries.data import load_dataset
from jumbokit.timeseries.normalize import NORMALIZATIONS
from jumbokit.timeseries.models import PATCHTST_MODELS
from jumbokit.timeseries.models.config import SeriesModelConfig
from jumbokit.timeseries.protocol import SWEEP_DROPOUTS, SWEEP_LRS, SweepConfig
from jumbokit.timeseries.report import format_summary
from jumbokit.timeseries.run import build_series_model
from jumbokit.timeseries.sweep import run_sweep
from jumbokit.training.rundir import atomic_write_text

DATASETS = ("ArrowHead", "GunPoint", "ItalyPowerDemand", "BasicMotions", "JapaneseVowels")
MINIROCKET_REFERENCE = {"ArrowHead": 0.863, "GunPoint": 0.993, "ItalyPowerDemand": 0.963, "BasicMotions": 1.000}


def measure_speed(datasets, patches: int, batch_size: int, steps: int, warmup: int, rounds: int,
                  compile: bool = False) -> dict:
    """{dataset: {model: ms per step}}: the fastest of ``rounds`` rounds interleaved across models (fairer on a
    shared machine), each the mean of ``steps`` steps, after ``warmup`` steps of each model.

    compile: time ``torch.compile``-d models (the warm-up steps absorb the compilation)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out = {}
    for name in datasets:
        data = load_dataset(name)
        idx = torch.arange(batch_size) % len(data.train)
        x = torch.from_numpy(data.train.x)[idx].to(device)
        y = torch.from_numpy(data.train.y)[idx].to(device)
        models = {}
        for m in PATCHTST_MODELS:
            torch.manual_seed(0)
            models[m] = build_series_model(m, data, patches, dropout=0.1).to(device)
            if compile:
                models[m] = torch.compile(models[m])
        timings = time_interleaved({m: train_step(models[m], x, y) for m in PATCHTST_MODELS}, rounds, steps,
                                   warmup=warmup, sync=torch.cuda.synchronize if device.type == "cuda" else None)
        out[name] = {m: 1000 * t.fastest for m, t in timings.items()}
        out[name]["tokens"] = {m: int(models[m].num_patches + models[m].num_global_tokens) for m in PATCHTST_MODELS}
    return {"device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(0),
            "batch_size": batch_size, "compile": compile, "per_dataset": out}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated (default: the five bundled)")
    parser.add_argument("--patches", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=None, help="default: the protocol's 100")
    parser.add_argument("--normalize", choices=NORMALIZATIONS, default="train",
                        help="series normalisation (default: train-split channel statistics)")
    parser.add_argument("--min-steps", type=int, default=0,
                        help="at least this many optimizer steps per run (default: 0, the protocol's epochs)")
    parser.add_argument("--lr", default=None, help="comma-separated learning rates (default: the sweep's)")
    parser.add_argument("--dropout", default=None, help="comma-separated dropouts (default: the sweep's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/bench_timeseries", help="sweep + benchmark output directory")
    parser.add_argument("--no-baseline", action="store_true", help="skip MiniRocket")
    parser.add_argument("--speed-only", action="store_true", help="only the step-time measurement")
    parser.add_argument("--skip-speed", action="store_true", help="only the accuracy sweep")
    parser.add_argument("--speed-steps", type=int, default=20)
    parser.add_argument("--speed-rounds", type=int, default=3)
    parser.add_argument("--speed-warmup", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="time torch.compile-d models in the speed part")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    datasets = [d for d in args.datasets.split(",") if d]
    out = Path(args.out)
    report: dict = {"datasets": datasets, "patches": args.patches, "machine": machine_record()}
    lines = []
    if not args.speed_only:
        cfg = SweepConfig(model=SeriesModelConfig(patches=args.patches), epochs=args.epochs, seed=args.seed,
                          min_steps=args.min_steps, normalize=args.normalize)
        lrs = tuple(float(v) for v in args.lr.split(",")) if args.lr else SWEEP_LRS
        dropouts = tuple(float(v) for v in args.dropout.split(",")) if args.dropout else SWEEP_DROPOUTS
        start = time.perf_counter()
        result = run_sweep(datasets, list(PATCHTST_MODELS), cfg, out, lrs=lrs, dropouts=dropouts,
                           baseline=None if args.no_baseline else "minirocket", progress=not args.no_progress)
        report["sweep_seconds_this_call"] = time.perf_counter() - start
        rows, ranks = result.rows, result.ranks
        report.update(sweep=cfg.identity(), lrs=list(lrs), dropouts=list(dropouts),
                      summary=[r.to_dict() for r in rows], ranks=ranks, dataset_seconds=result.dataset_seconds,
                      baselines=result.baselines)
        table = format_summary(rows, ranks, list(PATCHTST_MODELS), markdown=True,
                               dataset_seconds=result.dataset_seconds)
        lines += ["## Accuracy (test %, best/avg)", "", table, ""]
        by = {(r.dataset, r.model): r for r in rows}
        mr = [d for d in datasets if (d, "minirocket") in by]
        if mr:
            jumbo = sum(by[(d, "patchtst_jumbo")].test_top1 for d in mr) / len(mr)
            rocket = sum(by[(d, "minirocket")].test_top1 for d in mr) / len(mr)
            full = {d: result.baselines[d]["full_test_top1"] for d in mr}
            report["minirocket_full_test"] = full
            report["target_jumbo_vs_minirocket"] = {"jumbo_mean_best": jumbo, "minirocket_mean": rocket,
                                                    "datasets": mr, "met": jumbo >= rocket}
            verdict = "met" if jumbo >= rocket else f"missed by {rocket - jumbo:.1f} points"
            reference = ", ".join(f"{d} {100 * v:.1f}" for d, v in MINIROCKET_REFERENCE.items())
            lines += ["MiniRocket on the full official test sets: "
                      + ", ".join(f"{d} {v:.1f}" for d, v in full.items()) + f" (reference: {reference})", "",
                      f"PatchTST+Jumbo mean best accuracy on the MiniRocket sets: {jumbo:.1f} vs MiniRocket "
                      f"{rocket:.1f} -> {verdict}", ""]
        best_rank = min(ranks, key=lambda m: ranks[m]["best"])
        report["target_jumbo_best_rank"] = {"ranks": ranks, "met": ranks["patchtst_jumbo"]["best"] <= min(
            ranks[m]["best"] for m in ranks)}
        lines += [f"Best mean rank (best run): {best_rank}; PatchTST+Jumbo {ranks['patchtst_jumbo']['best']:.2f} "
                  f"(avg-run rank {ranks['patchtst_jumbo']['avg']:.2f})", ""]
    if not args.skip_speed:
        speed = measure_speed(datasets, args.patches, 256, args.speed_steps, args.speed_warmup, args.speed_rounds,
                              compile=args.compile)
        report["speed"] = speed
        compiled = ", torch.compile" if args.compile else ""
        lines += [f"## Training step time (ms, batch 256, {speed['device']}{compiled})", "",
                  "| dataset | tokens (cls/reg/jumbo) | patchtst | patchtst_registers | patchtst_jumbo "
                  "| jumbo speed vs patchtst |",
                  "|---|---|---|---|---|---|"]
        ratios = []
        for d, t in speed["per_dataset"].items():
            ratio = t["patchtst"] / t["patchtst_jumbo"]
            ratios.append(ratio)
            tok = "/".join(str(t["tokens"][m]) for m in PATCHTST_MODELS)
            lines.append(f"| {d} | {tok} | {t['patchtst']:.2f} | {t['patchtst_registers']:.2f} | "
                         f"{t['patchtst_jumbo']:.2f} | {ratio:.2f}x |")
        geo = statistics.geometric_mean(ratios)
        report["target_jumbo_speed"] = {"geomean_ratio": geo, "min_ratio": min(ratios), "met": min(ratios) >= 0.95}
        lines += ["", f"PatchTST+Jumbo step speed relative to PatchTST: geometric mean {geo:.2f}x, "
                      f"worst {min(ratios):.2f}x (target >= 0.95x)", ""]
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "benchmark.json", json.dumps(report, indent=2, default=float) + "\n")
    atomic_write_text(out / "benchmark.md", "# Time-series benchmark\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out / 'benchmark.json'}, {out / 'benchmark.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
