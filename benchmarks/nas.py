"""Architecture search on digits, end to end: the searched subnet vs random subnets vs the zoo, and how well
inherited-weight accuracy ranks architectures (Kendall tau).

Needs a trained supernet and a finished search (the README's two commands):

    accelerate launch recipes/nas_supernet.py --out runs/nas_digits/supernet
    python recipes/nas_search.py --checkpoint runs/nas_digits/supernet --flops-of vit_pico_cls
    python benchmarks/nas.py --supernet runs/nas_digits/supernet

Then, with the supervised recipe's defaults (30 epochs):
- retrains the searched best_arch.json from scratch (--seeds);
- retrains --random architectures drawn at random from the same FLOPs window (seed 0 each; median reported);
- trains --tau-archs architectures spread over 0.3-1.0x the supernet's FLOPs standalone and compares their
  test accuracy with their inherited-weight val accuracy (Kendall tau).
Finished runs are reused (--redo retrains). Prints a table and JSON; writes benchmarks/results/nas.json and .md (--json).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

from scipy.stats import kendalltau

from jumbokit import nas
from jumbokit.benchmarking import machine_record, result_path, write_result
from jumbokit.data import build_dataset, make_loader
from jumbokit.encoders import atomic_write
from jumbokit.training import evaluate_classifier

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--supernet", type=Path, default=ROOT / "runs" / "nas_digits" / "supernet")
    p.add_argument("--search", type=Path, default=None, help="search directory (default: the supernet's only one)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--random", type=int, default=5, help="random subnets from the window (default: %(default)s)")
    p.add_argument("--tau-archs", type=int, default=8, help="architectures for Kendall tau (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--redo", action="store_true")
    p.add_argument("--json", type=Path, default=result_path("nas"), help="(default: %(default)s)")
    return p.parse_args(argv)


def retrain(arch_file: Path, out: Path, seed: int, epochs: int, redo: bool) -> float:
    """Test top-1 (%) of a searched / sampled architecture trained from scratch with the supervised recipe."""
    if redo or not (out / "results.csv").exists():
        subprocess.run([sys.executable, str(ROOT / "recipes" / "supervised.py"), "--arch", str(arch_file),
                        "--seed", str(seed), "--epochs", str(epochs), "--out", str(out), "--overwrite",
                        "--no-progress"], check=True, cwd=ROOT)
    with (out / "results.csv").open() as fh:
        return float(next(r for r in csv.DictReader(fh) if r["split"] == "test")["top1"])


def write_arch(path: Path, space: nas.SearchSpace, arch: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps({"arch": arch, "space": space.to_dict()})))
    return path


def main(argv=None) -> dict:
    args = parse_args(argv)
    supernet = nas.load_supernet(args.supernet).eval()
    space = supernet.space
    img, chans, classes = supernet.img_size, supernet.in_chans, supernet.num_classes
    search = args.search or next(iter(sorted(args.supernet.glob("search_*"))), None)
    if search is None or not (search / "best_arch.json").exists():
        raise SystemExit(f"no finished search under {args.supernet}; run recipes/nas_search.py first")
    best = json.loads((search / "best_arch.json").read_text())
    budget = best["budget"]
    work = args.supernet.parent / "bench"

    searched = [retrain(search / "best_arch.json", work / f"searched_s{s}", s, args.epochs, args.redo)
                for s in args.seeds]
    window = nas.random_search(space, lambda a: 0.0, budget, evaluations=args.random, seed=7,
                               flops=lambda a: space.flops(a, img, chans, classes))
    randoms = [retrain(write_arch(work / f"random{i}.json", space, r["arch"]), work / f"random{i}_s0", 0,
                       args.epochs, args.redo) for i, r in enumerate(window.history)]

    val = build_dataset("digits", "val", "eval", img_size=img, in_chans=chans)
    batches = list(make_loader(val, 512))
    largest = space.flops(space.largest(), img, chans, classes)
    tau_rows = []
    for i in range(args.tau_archs):  # FLOPs spread evenly over 0.3-1.0x the supernet's
        target = largest * (0.3 + 0.7 * i / max(1, args.tau_archs - 1))
        found = nas.random_search(space, lambda a: 0.0, target, evaluations=1, seed=100 + i, window=0.9,
                                  flops=lambda a: space.flops(a, img, chans, classes))
        arch = found.history[0]["arch"]
        inherited = evaluate_classifier(supernet.extract(arch).eval(), batches, topk=(1,))["top1"]
        standalone = retrain(write_arch(work / f"tau{i}.json", space, arch), work / f"tau{i}_s0", 0, args.epochs,
                             args.redo)
        tau_rows.append({"arch": i, "MFLOPs": round(found.history[0]["flops"] / 1e6, 2),
                         "inherited_val": round(inherited, 2), "standalone_test": round(standalone, 2)})
    tau = kendalltau([r["inherited_val"] for r in tau_rows], [r["standalone_test"] for r in tau_rows]).statistic

    report = {"budget_mflops": budget / 1e6, "searched": {"arch": best["arch"], "mflops": best["flops"] / 1e6,
                                                          "inherited_val": best["val_top1"], "test": searched},
              "random_test": randoms, "random_median": statistics.median(randoms), "kendall_tau": tau,
              "tau_archs": tau_rows, "epochs": args.epochs, "seeds": args.seeds,
              "machine": machine_record()}
    table = ("| model | MFLOPs | test top-1 (%) |\n|---|---|---|\n"
             f"| searched ({best['arch']['global_tokens']}, dims {'/'.join(map(str, best['arch']['dims']))}) | "
             f"{best['flops'] / 1e6:.1f} | {statistics.mean(searched):.2f} ± "
             f"{statistics.stdev(searched) if len(searched) > 1 else 0:.2f} (seeds {args.seeds}) |\n"
             f"| median of {len(randoms)} random subnets from the window | {budget / 1e6:.1f} | "
             f"{statistics.median(randoms):.2f} ({', '.join(f'{r:.2f}' for r in randoms)}) |\n")
    tau_table = "| arch | MFLOPs | inherited val (%) | standalone test (%) |\n|---|---|---|---|\n" + "".join(
        f"| {r['arch']} | {r['MFLOPs']} | {r['inherited_val']} | {r['standalone_test']} |\n" for r in tau_rows)
    text = f"{table}\nKendall tau (inherited val vs standalone test, {len(tau_rows)} archs): {tau:.2f}\n\n{tau_table}"
    print(text)
    print(json.dumps(report, indent=2))
    write_result(args.json, report, text)
    return report


if __name__ == "__main__":
    main()
