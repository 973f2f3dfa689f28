"""Multi-stage ViT-Res vs plain ViT at equal FLOPs on the digits images (32 px), side by side.

For each pair (vit_res_pico vs vit_pico_cls, vit_res_nano vs vit_nano_cls) this trains both models with the
supervised recipe's defaults (30 epochs, batch 32, AdamW lr 1e-3, label smoothing 0.1; plain models cut
32 px into a 4x4 grid of 8 px patches, multi-stage models into an 8x8 grid of 4 px patches that the two
reductions bring to 2x2) for several seeds, and measures CPU inference throughput of the pair in one
process (interleaved rounds, median), so the ratio is taken on the same machine state.

    python benchmarks/multistage.py                       # 3 seeds, both pairs (about 25 min on 2 cores)
    python benchmarks/multistage.py --seeds 0 --pairs pico

Finished training runs are reused (runs/bench_multistage/<model>_s<seed>/results.csv; --redo retrains).
Prints a table and JSON; writes benchmarks/results/multistage.json and .md (--json).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import jumbokit
from jumbokit.benchmarking import machine_record, result_path, results_folder, time_interleaved, write_result
from jumbokit.encoders.flops import count_params
from jumbokit.encoders.zoo import small_image_patch_size
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

ROOT = Path(__file__).resolve().parents[1]
PAIRS = {"pico": ("vit_pico_cls", "vit_res_pico"), "nano": ("vit_nano_cls", "vit_res_nano")}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "bench_multistage")
    p.add_argument("--redo", action="store_true", help="retrain runs that already have results")
    p.add_argument("--batch-size", type=int, default=256, help="throughput batch (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=7, help="interleaved timed rounds (default: %(default)s)")
    p.add_argument("--json", type=Path, default=result_path(RESULTS, "multistage"), help="(default: %(default)s)")
    return p.parse_args(argv)


def build(name: str) -> torch.nn.Module:
    return jumbokit.create_model(name, img_size=32, patch_size=small_image_patch_size(name, 32), in_chans=1,
                                 num_classes=10)


def counted_flops(model: torch.nn.Module) -> int:
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model.eval()(torch.randn(1, 1, 32, 32))
    return counter.get_total_flops()


def train(name: str, seed: int, args) -> dict:
    out = args.runs / f"{name}_s{seed}"
    results = out / "results.csv"
    if args.redo or not results.exists():
        cmd = [sys.executable, str(ROOT / "recipes" / "supervised.py"), "--dataset", "digits", "--model", name,
               "--seed", str(seed), "--epochs", str(args.epochs), "--out", str(out), "--overwrite", "--no-progress"]
        print(f"training {name} seed {seed} ...", flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
    with results.open() as fh:
        rows = {r["split"]: r for r in csv.DictReader(fh)}
    return {"model": name, "seed": seed, "test_acc1": float(rows["test"]["top1"]),
            "val_acc1": float(rows["val"]["top1"]), "train_time_s": float(rows["test"]["train_time_s"])}


@torch.no_grad()
def throughput(models: dict[str, torch.nn.Module], batch: int, repeats: int) -> dict[str, float]:
    x = torch.randn(batch, 1, 32, 32)
    timings = time_interleaved({name: lambda m=m.eval(): m(x) for name, m in models.items()}, repeats)
    return {n: batch / t.median for n, t in timings.items()}


def mean_std(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(0)
    report = {"seeds": args.seeds, "epochs": args.epochs, "machine": machine_record(device="cpu"), "pairs": {}}
    rows = []
    for pair in args.pairs:
        plain, multi = PAIRS[pair]
        models = {n: build(n) for n in (plain, multi)}
        speed = throughput(models, args.batch_size, args.repeats)
        runs = {n: [train(n, s, args) for s in args.seeds] for n in (plain, multi)}
        entry = {}
        for name in (plain, multi):
            accs = [r["test_acc1"] for r in runs[name]]
            entry[name] = {
                "mflops": counted_flops(models[name]) / 1e6, "params_m": count_params(models[name]) / 1e6,
                "test_acc1": accs, "test_acc1_mean": statistics.mean(accs),
                "test_acc1_std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                "images_per_s": speed[name], "speed_vs_plain": speed[name] / speed[plain],
                "train_time_s": statistics.mean(r["train_time_s"] for r in runs[name]),
            }
            rows.append({"model": name, "patch": small_image_patch_size(name, 32), "MFLOPs": f"{entry[name]['mflops']:.1f}",
                         "params (M)": f"{entry[name]['params_m']:.2f}", "test top-1 (%)": mean_std(accs),
                         "CPU img/s": f"{speed[name]:.0f}", "speed vs plain": f"{entry[name]['speed_vs_plain']:.2f}x",
                         "train s": f"{entry[name]['train_time_s']:.0f}"})
        report["pairs"][pair] = entry
    table = markdown_table(rows)
    print(table)
    print(json.dumps(report, indent=2))
    note = (f"digits 32 px, supervised recipe defaults, {args.epochs} epochs, seeds {args.seeds}; throughput: "
            f"batch {args.batch_size}, fp32, {torch.get_num_threads()} CPU threads, median of {args.repeats} "
            "interleaved rounds\n\n")
    write_result(args.json, report, note + table)
    return report


if __name__ == "__main__":
    main()
