"""Supervised Fashion-MNIST: CLS vs registers vs Jumbo at pico and nano size, several seeds, with anchors.

Each run is ``jumbokit supervised --dataset fashion-mnist`` (the recipe's defaults: AdamW lr 1e-3, batch 32,
label smoothing 0.1, no flip) called in this process, on the official split: 55,000 training images, a fixed
5,000-image validation cut, the 10,000 test images, padded to 32 px. Plain models cut 32 px into 4 px patches
(--patch-size 4: 64 patch tokens). Per size the three global-token kinds:

- ``vit_<size>_cls``: one CLS token;
- ``vit_<size>_reg<R>``: CLS + R registers, R the count whose layer costs what a Jumbo layer costs at this token
  count (the Jumbo paper's Proposition 1, ``jumbokit.encoders.flops.matching_registers``: R = 17 for pico, 18 for
  nano at 64 patches); the name is registered in this process from ``vit_<size>_reg16`` with R registers;
- ``vit_<size>_jumbo``: the Jumbo token (J = 6).

``--multistage`` adds the multi-stage ``vit_res_<size>`` (an 8x8 grid of 4 px patches reduced to 2x2) beside the
plain ``vit_<size>_cls`` at 8 px patches, whose FLOPs it matches (47 vs 47 MFLOPs at pico, 82 vs 82 at nano);
the plain models at 64 patches cost about four times more. Differences, paired by seed: Jumbo minus registers
and minus CLS per size (the target: +1.0 point each), and ViT-Res minus its twin. The table gives every
model's counted FLOPs (``encoder_flops``: matrix multiplies; Proposition 1 matches the layers with an FFN of
2D, the zoo's FFN is 4D, so the registers model counts 5% below Jumbo at 64 patches).

Anchors, as labelled rows: logistic regression on the pixels (scikit-learn, computed here on the same training
images, val and test) and ResNet-18's published 94.9% (the Fashion-MNIST repository's benchmark table: with
flips, translation and rotation; not run here).

    python benchmarks/fashion_mnist_supervised.py                    # full size, 18 runs: for a GPU
    python benchmarks/fashion_mnist_supervised.py --sizes pico --max-train-samples 5000 --epochs 10   # CPU size
    python benchmarks/fashion_mnist_supervised.py --multistage --models vit_pico_jumbo --seeds 0

Resumable: a run whose directory (``--runs``/<setting>/<model>_p<patch>_s<seed>) holds results.csv is read, not
retrained; an interrupted one continues from its last checkpoint. Writes JSON and a markdown copy
(``benchmarks/results/fashion_mnist_supervised_<setting>.json`` and ``.md``, or --json) and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shlex
import statistics
import sys
import time
from pathlib import Path

import jumbokit
from jumbokit.benchmarking import machine_record, result_path, results_folder, stats, write_result
from jumbokit.benchmarking.anchors import pixel_logistic_regression
from jumbokit.encoders.flops import count_params, encoder_flops, matching_registers
from jumbokit.encoders.zoo import model_config, register_model, small_image_patch_size
from jumbokit.training.rundir import atomic_write_json, list_checkpoints, markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

IMG_SIZE = 32
SIZES = ("pico", "nano")
RESNET18_PUBLISHED = 94.9  # github.com/zalandoresearch/fashion-mnist, benchmark table (ResNet18, with augmentation)
REGISTERS_NAME = re.compile(r"^(vit_[a-z]+)_reg(\d+)$")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=",".join(SIZES), help="comma-separated, of pico, nano (default: %(default)s)")
    p.add_argument("--models", default=None, metavar="SPECS",
                   help="comma-separated NAME or NAME:PATCH instead of the default models of --sizes, e.g. "
                        "vit_pico_cls,vit_pico_reg17:4 (default: CLS, matched registers and Jumbo per size)")
    p.add_argument("--multistage", action="store_true",
                   help="add vit_res_<size> and its FLOP twin vit_<size>_cls at 8 px patches (default: off)")
    p.add_argument("--patch-size", type=int, default=4,
                   help="patch side of the plain models, in pixels of the 32 px image (default: %(default)s)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="(default: %(default)s)")
    p.add_argument("--epochs", type=int, default=30, help="epochs per run (default: %(default)s, the recipe's)")
    p.add_argument("--max-train-samples", type=int, default=None, metavar="N",
                   help="train on a seeded subset of N training images, the same N for the anchor "
                        "(default: all 55,000)")
    p.add_argument("--dataset", default="fashion-mnist",
                   help="fashion-mnist or fashion-mnist:DIR (the IDX files in DIR) (default: %(default)s)")
    p.add_argument("--supervised-args", default="",
                   help="more flags for every run, written with '=': --supervised-args='--cpu' (default: none)")
    p.add_argument("--runs", type=Path, default=Path("runs") / "bench_fashion_mnist",
                   help="parent of the run directories (default: %(default)s)")
    p.add_argument("--json", type=Path, default=None,
                   help="result file (default: benchmarks/results/fashion_mnist_supervised_<setting>.json)")
    return p


def setting_name(args: argparse.Namespace) -> str:
    """``e<epochs>_n<train images>``: the folder of the runs and the result file's variant."""
    return f"e{args.epochs}_n{args.max_train_samples or 'all'}"


def register_matched(name: str) -> None:
    """Register ``vit_<size>_reg<R>`` (R registers, otherwise ``vit_<size>_reg16``) unless the zoo has it."""
    match = REGISTERS_NAME.match(name)
    if name in jumbokit.list_models() or not match:
        return
    base = model_config(f"{match.group(1)}_reg16")
    register_model(name, description=f"{match.group(1)} + CLS + {match.group(2)} registers",
                   **{**base, "num_registers": int(match.group(2))})


def default_specs(sizes: list[str], patch: int, multistage: bool) -> list[tuple[str, int]]:
    """(model, patch) per size: CLS, the registers matching Jumbo's FLOPs (Proposition 1), Jumbo; with
    ``multistage`` also vit_res_<size> and the plain CLS model at 8 px patches."""
    specs = []
    num_patches = (IMG_SIZE // patch) ** 2
    for size in sizes:
        jumbo = model_config(f"vit_{size}_jumbo")
        r = max(1, round(matching_registers(jumbo["dim"], num_patches, jumbo["jumbo_multiplier"])))
        specs += [(f"vit_{size}_cls", patch), (f"vit_{size}_reg{r}", patch), (f"vit_{size}_jumbo", patch)]
        if multistage:
            specs += [(f"vit_res_{size}", small_image_patch_size(f"vit_res_{size}", IMG_SIZE)),
                      (f"vit_{size}_cls", IMG_SIZE // 4)]
    return list(dict.fromkeys(specs))


def parse_specs(text: str, patch: int) -> list[tuple[str, int]]:
    """``NAME[:PATCH]`` entries; multi-stage models default to their own 8x8 grid."""
    specs = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, size = item.partition(":")
        register_matched(name)
        if name not in jumbokit.list_models():
            raise SystemExit(f"--models: unknown model {name!r}; see jumbokit.list_models('vit_*')")
        if size and not size.isdigit():
            raise SystemExit(f"--models: expected NAME or NAME:PATCH with a whole patch side, got {item!r}")
        multistage = model_config(name).get("encoder") == "multistage"
        specs.append((name, int(size) if size else small_image_patch_size(name, IMG_SIZE) if multistage else patch))
    return specs


def size_of(name: str) -> str:
    """``pico`` of vit_pico_cls and of vit_res_pico."""
    parts = name.split("_")
    return parts[2] if parts[1] == "res" else parts[1]


def run_key(name: str, patch: int) -> str:
    return f"{name}_p{patch}"


def train_run(name: str, patch: int, seed: int, args: argparse.Namespace, folder: Path, walls: dict) -> dict:
    """One supervised run (skipped when finished, resumed when interrupted); its val / test top-1 and times."""
    from jumbokit.recipes.supervised import main as supervised_main

    out = folder / f"{run_key(name, patch)}_s{seed}"
    results = out / "results.csv"
    if not results.exists():
        argv = ["--dataset", args.dataset, "--model", name, "--patch-size", str(patch), "--seed", str(seed),
                "--epochs", str(args.epochs), "--out", str(out), "--no-progress", *shlex.split(args.supervised_args)]
        if args.max_train_samples:
            argv += ["--max-train-samples", str(args.max_train_samples)]
        argv += ["--resume"] if list_checkpoints(out / "checkpoints") else ["--overwrite"]
        print(f"training {name} (patch {patch}) seed {seed} -> {out}", flush=True)
        started = time.perf_counter()
        supervised_main(argv)
        walls[out.name] = time.perf_counter() - started
        atomic_write_json(folder / "wall_seconds.json", walls)
    with results.open() as fh:
        rows = {r["split"]: r for r in csv.DictReader(fh)}
    return {"seed": seed, "val_top1": float(rows["val"]["top1"]), "test_top1": float(rows["test"]["top1"]),
            "train_seconds": float(rows["test"]["train_time_s"]), "wall_seconds": walls.get(out.name)}


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def fmt(values: list[float]) -> str:
    mean, std = mean_std(values)
    return f"{mean:.2f} ± {std:.2f}" if len(values) > 1 else f"{mean:.2f}"


def logistic_anchor(args: argparse.Namespace, folder: Path) -> dict:
    """Logistic regression on the pixels of the runs' training images (per seed's subset with
    --max-train-samples), scored on val and test; cached in the setting's folder."""
    return pixel_logistic_regression(args.dataset, args.max_train_samples, args.seeds,
                                     cache=folder / "logistic_regression.json")


def paired(size: str, a: dict, b: dict, target: float | None) -> dict | None:
    """a's test top-1 minus b's, paired by seed: mean ± std of the per-seed differences (None: no common seed);
    where a target applies, the paired test against it (``stats.paired_test``): ``target_met`` only when it clears
    the target beyond the noise, its ``target_p`` and ``target_verdict``."""
    theirs = {r["seed"]: r["test_top1"] for r in b["runs"]}
    diffs = [r["test_top1"] - theirs[r["seed"]] for r in a["runs"] if r["seed"] in theirs]
    if not diffs:
        return None
    mean, std = mean_std(diffs)
    test = None if target is None else stats.paired_test(diffs, target=target)
    return {"size": size, "difference": f"{a['model']} (patch {a['patch']}) - {b['model']} (patch {b['patch']})",
            "seeds": len(diffs), "mean": mean, "std": std, "per_seed": diffs,
            "target_met": None if test is None else test.met, "target_p": None if test is None else test.p,
            "target_verdict": None if test is None else test.verdict}


def differences(entries: dict, sizes: list[str]) -> list[dict]:
    """Per size and plain patch size that ran: Jumbo - registers and Jumbo - CLS (target +1.0 each); then the
    multi-stage model - its FLOP twin (the CLS model at 8 px patches) where both ran."""
    rows = []
    for size in sizes:
        plain = [e for e in entries.values() if e["size"] == size and not e["multistage"]]
        pairs = []
        for patch in sorted({e["patch"] for e in plain}):
            by_kind = {e["global_tokens"]: e for e in plain if e["patch"] == patch}
            pairs += [(by_kind.get("jumbo"), by_kind.get(other), 1.0) for other in ("registers", "cls")]
        pairs.append((entries.get(run_key(f"vit_res_{size}", small_image_patch_size(f"vit_res_{size}", IMG_SIZE))),
                      entries.get(run_key(f"vit_{size}_cls", IMG_SIZE // 4)), None))
        rows += [row for a, b, target in pairs if a and b and (row := paired(size, a, b, target))]
    return rows


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    sizes = [s for s in args.sizes.split(",") if s]
    if unknown := sorted(set(sizes) - set(SIZES)):
        raise SystemExit(f"--sizes: expected some of {', '.join(SIZES)}, got {', '.join(unknown)}")
    for spec in default_specs(sizes, args.patch_size, args.multistage):
        register_matched(spec[0])
    specs = (parse_specs(args.models, args.patch_size) if args.models
             else default_specs(sizes, args.patch_size, args.multistage))
    folder = args.runs / setting_name(args)
    folder.mkdir(parents=True, exist_ok=True)
    walls_file = folder / "wall_seconds.json"
    walls = json.loads(walls_file.read_text()) if walls_file.exists() else {}
    command = "python benchmarks/fashion_mnist_supervised.py " + shlex.join(sys.argv[1:] if argv is None else argv)

    entries = {}
    for name, patch in specs:
        model = jumbokit.create_model(name, img_size=IMG_SIZE, patch_size=patch, in_chans=1, num_classes=10)
        config = model_config(name)
        runs = [train_run(name, patch, seed, args, folder, walls) for seed in args.seeds]
        entries[run_key(name, patch)] = {
            "model": name, "patch": patch, "size": size_of(name),
            "multistage": config.get("encoder") == "multistage", "global_tokens": config.get("global_tokens"),
            "num_registers": config.get("num_registers", 0), "mflops": encoder_flops(model) / 1e6,
            "params_m": count_params(model) / 1e6, "runs": runs}
    anchor = logistic_anchor(args, folder)
    diffs = differences(entries, sizes)

    rows = []
    for e in entries.values():
        jumbo = entries.get(run_key(f"vit_{e['size']}_jumbo", e["patch"]))
        walls_known = [r["wall_seconds"] for r in e["runs"] if r["wall_seconds"] is not None]
        rows.append({"model": e["model"], "patch": e["patch"], "MFLOPs": f"{e['mflops']:.1f}",
                     "FLOPs / Jumbo's": f"{e['mflops'] / jumbo['mflops']:.3f}" if jumbo else "",
                     "params (M)": f"{e['params_m']:.2f}", "seeds": len(e["runs"]),
                     "val top-1 (%)": fmt([r["val_top1"] for r in e["runs"]]),
                     "test top-1 (%)": fmt([r["test_top1"] for r in e["runs"]]),
                     "train s": f"{statistics.mean(r['train_seconds'] for r in e['runs']):.0f}",
                     "wall s": f"{statistics.mean(walls_known):.0f}" if walls_known else ""})
    rows.append({"model": "logistic regression on pixels (computed here)", "seeds": len(anchor["fits"]),
                 "val top-1 (%)": fmt([f["val_top1"] for f in anchor["fits"]]),
                 "test top-1 (%)": fmt([f["test_top1"] for f in anchor["fits"]])})
    rows.append({"model": "ResNet-18 (published, with augmentation)", "test top-1 (%)": f"{RESNET18_PUBLISHED:.1f}"})
    table = markdown_table(rows)
    diff_table = markdown_table([{"size": d["size"], "difference (test top-1, points)": d["difference"],
                                  "seeds": d["seeds"], "mean ± std over seeds": f"{d['mean']:+.2f} ± {d['std']:.2f}",
                                  "target >= +1.0": d.get("target_verdict") or ""}
                                 for d in diffs])
    plain = [e for e in entries.values() if not e["multistage"]]
    best = max(plain, key=lambda e: mean_std([r["test_top1"] for r in e["runs"]])[0]) if plain else None
    best_mean = mean_std([r["test_top1"] for r in best["runs"]])[0] if best else None
    train_text = f"{args.max_train_samples} of the 55,000" if args.max_train_samples else "all 55,000"
    note = (f"# Supervised Fashion-MNIST ({setting_name(args)})\n\n`{command}`\n\n"
            f"{args.epochs} epochs on {train_text} training images, 5,000 val, 10,000 test (32 px, padded); "
            f"seeds {args.seeds}; mean ± std over seeds. FLOPs: counted matrix multiplies per image. train s: the "
            "training epochs; wall s: the whole run as measured when it ran (empty for runs of an earlier "
            "version of this file). The logistic regression is fitted on the same training images (one fit per "
            "seed's subset); ResNet-18 is the published number of the Fashion-MNIST repository's benchmark "
            "table, not run here.\n\n")
    text = note + table + "\n## Differences (paired by seed)\n\n" + (diff_table or "no pairs run\n")
    if best is not None:
        text += (f"\nBest plain ViT: {best['model']} (patch {best['patch']}), {best_mean:.2f}% test "
                 f"(target >= 92.0: {'met' if best_mean >= 92.0 else 'missed'}).\n")
    record = {"benchmark": "fashion_mnist_supervised", "command": command, "setting": setting_name(args),
              "epochs": args.epochs, "max_train_samples": args.max_train_samples, "seeds": args.seeds,
              "supervised_args": args.supervised_args,
              "machine": machine_record(device="cpu" if "--cpu" in shlex.split(args.supervised_args) else None),
              "models": entries,
              "differences": diffs, "anchors": {"logistic_regression": anchor,
                                                "resnet18_published": {"test_top1": RESNET18_PUBLISHED,
                                                                       "source": "github.com/zalandoresearch/"
                                                                                 "fashion-mnist benchmark table"}},
              "best_plain": None if best is None else {"model": best["model"], "patch": best["patch"],
                                                       "test_top1": best_mean}}
    print(text)
    write_result(args.json or result_path(RESULTS, "fashion_mnist_supervised", setting_name(args)), record, text)
    return record


if __name__ == "__main__":
    main()
