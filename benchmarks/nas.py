"""Architecture search end to end on the supernet's dataset (digits, Fashion-MNIST, ...): the searched subnet vs
random subnets at equal FLOPs, and how well inherited-weight accuracy ranks architectures (Kendall tau).

Needs a trained supernet and a finished search. The dataset, the training subset (--max-train-samples), the
image size and channels and any augmentation / normalisation flags are the supernet's (its config.json): every
retrain (`jumbokit supervised --arch`, in a subprocess) and the inherited-weight evaluation use them.

Digits (the README's commands; ~25 min on the 2-core CPU, 16 trainings of 60-100 s):

    jumbokit nas-supernet --out runs/nas_digits/supernet
    jumbokit nas-search --checkpoint runs/nas_digits/supernet --flops-of vit_pico_cls
    python benchmarks/nas.py --supernet runs/nas_digits/supernet

Fashion-MNIST at the CPU size (10,000 training images, 5 epochs everywhere, a reduced search of 150 candidates;
3 seeds + 8 random + 8 tau architectures = 19 retrains; writes benchmarks/results/nas_fashion_mnist.json):

    jumbokit nas-supernet --dataset fashion-mnist --max-train-samples 10000 --epochs 5 \\
        --out runs/nas_fashion/supernet
    jumbokit nas-search --checkpoint runs/nas_fashion/supernet --flops-of vit_pico_cls \\
        --population 50 --iterations 5 --parents 10 --mutations 10 --crossovers 10 --max-eval-samples 1000
    python benchmarks/nas.py --supernet runs/nas_fashion/supernet --epochs 5 --random 8 --tau-archs 8

Fashion-MNIST at full size, for a GPU (55,000 training images, 30 epochs, the paper's search settings):

    accelerate launch -m jumbokit nas-supernet --dataset fashion-mnist --out runs/nas_fashion/supernet
    jumbokit nas-search --checkpoint runs/nas_fashion/supernet --flops-of vit_pico_cls
    python benchmarks/nas.py --supernet runs/nas_fashion/supernet --random 8 --tau-archs 8

Time per step on Fashion-MNIST, 1 CPU thread of a 2-core machine busy with other jobs. Measured at a tiny size:
- supernet, 500 images, 1 epoch: 8 s of training (16 ms an image, 16 architectures a batch) + 48 s of validation
  (the largest and smallest subnet on the 5,000 val images) per epoch; 115 s the whole command;
- search: 1.7 s a candidate on 1,000 val images, + 12 s start-up;
- one retrain, 500 images, 1 epoch: 3.4 s of training at 46 MFLOPs (6.8 ms an image); 39-76 s the whole run
  (26-88 MFLOPs; 53 s at 46), most of it evaluating 20,000 images (val each epoch, then val and test);
- inherited-weight evaluation: 10 s an architecture (5,000 val images).
Extrapolated from these (linear in images x epochs and in FLOPs; not measured):
- CPU size: supernet ~18 min (2.7 min training + 0.8 min validation an epoch); search ~5 min; a retrain ~7 min at
  46 MFLOPs, ~9 min for the average tau architecture; 19 retrains ~2.5 h; in all ~3 h;
  measured since: supernet 843 s (100-120 s an epoch), search 5 min, and with `--epochs 3 --seeds 0` 17 retrains
  of 122-268 s: 1 h 16 min in all (benchmarks/results/nas_fashion_mnist.md);
- full size on this CPU: supernet ~8 h, search (3,500 candidates on 5,000 images) ~8 h, a retrain ~3 h, the
  benchmark ~70 h: use a GPU;
- full size on one GPU (no GPU measurement; a guess: these models are launch-bound there, so time follows steps):
  supernet 25,800 steps, ~15-30 min; search ~20-30 min; a retrain 51,600 steps at batch 32, ~10 min as the
  supervised Fashion-MNIST benchmark estimates; 19 retrains ~3 h; in all ~4 h.

What it does, then:
- retrains the searched best_arch.json from scratch (--seeds);
- retrains --random architectures drawn at random from the same FLOPs window (seed 0 each; median reported);
- trains --tau-archs architectures spread over 0.3-1.0x the supernet's FLOPs standalone and compares their
  test accuracy with their inherited-weight val accuracy (Kendall tau).
With --max-train-samples the subset is drawn with each retrain's seed (seed 0: the supernet's subset when the
supernet ran with seed 0). Finished runs are reused when their flags and architecture match (--redo retrains).
Prints a table and JSON; writes benchmarks/results/nas.json for digits, nas_<dataset>.json for other data
(--json), and .md beside it.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the supernet's data flags (nas-supernet's dests) that every retrain repeats; img_size / in_chans come from the
# supernet itself
DATA_FLAGS = ("dataset", "max_train_samples", "skip_corrupt", "no_aug", "scale", "ratio", "hflip", "randaugment",
              "mean", "std", "crop_pct", "interpolation")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--supernet", type=Path, default=ROOT / "runs" / "nas_digits" / "supernet",
                   help="run directory of `jumbokit nas-supernet` (default: %(default)s)")
    p.add_argument("--search", type=Path, default=None, help="search directory (default: the supernet's first "
                                                             "search_* folder)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--random", type=int, default=5, help="random subnets from the window (default: %(default)s)")
    p.add_argument("--tau-archs", type=int, default=8, help="architectures for Kendall tau (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=30, help="epochs of every retrain (default: %(default)s)")
    p.add_argument("--supervised-args", default="", metavar="FLAGS",
                   help="more flags for every retrain, e.g. --supervised-args='--cpu --threads 2' (default: none)")
    p.add_argument("--device", default=None,
                   help="device of the inherited-weight evaluation (default: cuda when available, else cpu)")
    p.add_argument("--work", type=Path, default=None,
                   help="folder of the retrain runs (default: bench beside a supernet folder named 'supernet', as "
                        "in the commands above, else SUPERNET/bench)")
    p.add_argument("--redo", action="store_true", help="retrain finished runs (default: reuse matching ones)")
    p.add_argument("--json", type=Path, default=None,
                   help="result file (default: benchmarks/results/nas.json for digits, nas_<dataset>.json else)")
    return p.parse_args(argv)


def fail(message: str) -> None:
    print(f"nas.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def load_supernet_run(path: Path):
    """(supernet, its run directory, its flags, its data record); a folder that is not a supernet run exits 2."""
    from jumbokit import nas
    from jumbokit.training.rundir import read_data_record

    if not path.exists():
        fail(f"--supernet {path} does not exist; pass the run directory of `jumbokit nas-supernet`")
    run = path if path.is_dir() else path.parent
    try:
        supernet = nas.load_supernet(path)
    except (OSError, ValueError, KeyError, TypeError) as err:
        reason = err.args[0] if err.args and isinstance(err.args[0], str) else repr(err)
        fail(f"--supernet {path} is not a nas-supernet run ({reason.splitlines()[0]})")
    try:
        flags = json.loads((run / "config.json").read_text()).get("args") or {}
    except (OSError, ValueError, AttributeError):
        flags = {}
    return supernet.eval(), run, flags, read_data_record(run)


def data_flags(flags: dict, dataset: str, img_size: int, in_chans: int) -> list[str]:
    """The supervised recipe's flags for the supernet's data: dataset, subset, geometry, augmentation."""
    out = ["--img-size", str(img_size), "--in-chans", str(in_chans)]
    for dest in DATA_FLAGS:
        value = dataset if dest == "dataset" else flags.get(dest)
        flag = "--" + dest.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value not in (None, False):
            out += [flag, *map(str, value if isinstance(value, (list, tuple)) else [value])]
    return out


class Retrainer:
    """Trains architecture files from scratch with the supervised recipe and reads their test top-1 (%)."""

    RECORD = "bench.json"  # the flags and architecture a finished run was trained with

    def __init__(self, flags: list[str], epochs: int, redo: bool):
        self.flags, self.epochs, self.redo = flags, epochs, redo
        self.wall_s: dict[str, float] = {}  # run name -> seconds, for the runs trained here

    def __call__(self, arch_file: Path, out: Path, seed: int) -> float:
        argv = ["--arch", str(arch_file), "--seed", str(seed), "--epochs", str(self.epochs), *self.flags]
        record = {"argv": argv, "arch": json.loads(arch_file.read_text())["arch"]}
        done = out / "results.csv"
        if self.redo or not done.exists() or self._record(out) != record:
            started = time.perf_counter()
            cmd = [sys.executable, str(ROOT / "recipes" / "supervised.py"), *argv, "--out", str(out), "--overwrite",
                   "--no-progress"]
            if subprocess.run(cmd, cwd=ROOT).returncode != 0:
                raise SystemExit(f"nas.py: the retrain failed: {shlex.join(cmd)}")
            self.wall_s[out.name] = round(time.perf_counter() - started, 1)
            (out / self.RECORD).write_text(json.dumps(record))
        with done.open() as fh:
            return float(next(r for r in csv.DictReader(fh) if r["split"] == "test")["top1"])

    def _record(self, out: Path):
        try:
            return json.loads((out / self.RECORD).read_text())
        except (OSError, ValueError):
            return None


def write_arch(path: Path, space, arch: dict) -> Path:
    from jumbokit.encoders import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps({"arch": arch, "space": space.to_dict()})))
    return path


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch
    from scipy.stats import kendalltau

    from jumbokit import nas
    from jumbokit.benchmarking import dataset_slug, machine_record, result_path, results_folder, write_result
    from jumbokit.data import build_dataset, make_loader
    from jumbokit.training import evaluate_classifier

    supernet, run, flags, record = load_supernet_run(args.supernet)
    space = supernet.space
    img, chans, classes = supernet.img_size, supernet.in_chans, supernet.num_classes
    dataset = flags.get("dataset") or record.get("dataset") or "digits"
    max_train = flags.get("max_train_samples")
    search = args.search or next(iter(sorted(run.glob("search_*"))), None)
    if search is None or not (search / "best_arch.json").exists():
        fail(f"no finished search under {run} (no search_*/best_arch.json); run `jumbokit nas-search "
             f"--checkpoint {run} --flops-of vit_pico_cls` first, or pass --search")
    best = json.loads((search / "best_arch.json").read_text())
    budget = best["budget"]
    work = args.work or (run.parent / "bench" if run.name == "supernet" else run / "bench")
    out_json = args.json or result_path(results_folder(__file__), "nas", "" if dataset == "digits" else dataset_slug(dataset))
    retrain = Retrainer(data_flags(flags, dataset, img, chans) + shlex.split(args.supervised_args), args.epochs,
                        args.redo)
    print(f"supernet {run} ({space.name} space, {img} px, {chans} channel(s), {classes} classes) on {dataset}"
          + (f", {max_train} training images" if max_train else "") + f"; search {search}; retrains in {work}",
          flush=True)

    searched = [retrain(search / "best_arch.json", work / f"searched_s{s}", s) for s in args.seeds]
    window = nas.random_search(space, lambda a: 0.0, budget, evaluations=args.random, seed=7,
                               flops=lambda a: space.flops(a, img, chans, classes))
    randoms = [retrain(write_arch(work / f"random{i}.json", space, r["arch"]), work / f"random{i}_s0", 0)
               for i, r in enumerate(window.history)]

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    supernet = supernet.to(device)
    val = build_dataset(dataset, "val", "eval", img_size=img, in_chans=chans, mean=record.get("mean"),
                        std=record.get("std"), crop_pct=record.get("crop_pct"),
                        interpolation=record.get("interpolation"), progress=False)
    if val.num_classes != classes:
        fail(f"the supernet predicts {classes} classes but {dataset}'s val split has {val.num_classes}")
    batches = list(make_loader(val, 512, train=False))
    largest = space.flops(space.largest(), img, chans, classes)
    tau_rows, eval_s = [], 0.0
    for i in range(args.tau_archs):  # FLOPs spread evenly over 0.3-1.0x the supernet's
        target = largest * (0.3 + 0.7 * i / max(1, args.tau_archs - 1))
        found = nas.random_search(space, lambda a: 0.0, target, evaluations=1, seed=100 + i, window=0.9,
                                  flops=lambda a: space.flops(a, img, chans, classes))
        arch = found.history[0]["arch"]
        started = time.perf_counter()
        with torch.no_grad():
            inherited = evaluate_classifier(supernet.extract(arch).eval(), batches, topk=(1,), device=device)["top1"]
        eval_s += time.perf_counter() - started
        standalone = retrain(write_arch(work / f"tau{i}.json", space, arch), work / f"tau{i}_s0", 0)
        tau_rows.append({"arch": i, "MFLOPs": round(found.history[0]["flops"] / 1e6, 2),
                         "inherited_val": round(inherited, 2), "standalone_test": round(standalone, 2)})
    tau = float("nan")
    if len(tau_rows) > 1:
        tau = float(kendalltau([r["inherited_val"] for r in tau_rows],
                               [r["standalone_test"] for r in tau_rows]).statistic)
    tau_value = None if math.isnan(tau) else tau  # undefined with < 2 architectures or all-equal accuracies

    report = {"dataset": dataset, "max_train_samples": max_train, "img_size": img, "in_chans": chans,
              "supernet": str(run), "search": str(search), "budget_mflops": budget / 1e6,
              "searched": {"arch": best["arch"], "mflops": best["flops"] / 1e6, "inherited_val": best["val_top1"],
                           "test": searched},
              "random_test": randoms, "random_median": statistics.median(randoms) if randoms else None,
              "kendall_tau": tau_value, "tau_archs": tau_rows, "epochs": args.epochs, "seeds": args.seeds,
              "retrain_flags": retrain.flags, "retrain_wall_s": retrain.wall_s,
              "inherited_eval_s": round(eval_s, 1), "machine": machine_record()}
    subset = f"{max_train} training images" if max_train else "all training images"
    epochs = f"{args.epochs} epoch" + ("s" if args.epochs != 1 else "")
    table = (f"Architecture search on {dataset} ({subset}, {img} px; retrains {epochs})\n\n"
             "| model | MFLOPs | test top-1 (%) |\n|---|---|---|\n"
             f"| searched ({best['arch']['global_tokens']}, dims {'/'.join(map(str, best['arch']['dims']))}) | "
             f"{best['flops'] / 1e6:.1f} | {statistics.mean(searched):.2f} ± "
             f"{statistics.stdev(searched) if len(searched) > 1 else 0:.2f} (seeds {args.seeds}) |\n")
    if randoms:
        table += (f"| median of {len(randoms)} random subnets from the window | {budget / 1e6:.1f} | "
                  f"{statistics.median(randoms):.2f} ({', '.join(f'{r:.2f}' for r in randoms)}) |\n")
    tau_table = "| arch | MFLOPs | inherited val (%) | standalone test (%) |\n|---|---|---|---|\n" + "".join(
        f"| {r['arch']} | {r['MFLOPs']} | {r['inherited_val']} | {r['standalone_test']} |\n" for r in tau_rows)
    tau_text = "n/a (fewer than 2 architectures, or all accuracies equal)" if tau_value is None else f"{tau:.2f}"
    text = (f"{table}\nKendall tau (inherited val vs standalone test, {len(tau_rows)} archs): {tau_text}\n\n"
            f"{tau_table}")
    print(text)
    print(json.dumps(report, indent=2))
    write_result(out_json, report, text)
    return report


if __name__ == "__main__":
    main()
