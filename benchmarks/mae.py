"""MAE benchmarks: step speed at mask 0.75 vs 0.0, linear-probe accuracy on digits or Fashion-MNIST, 1 vs 2 processes.

    python benchmarks/mae.py speed                 # ViT-B/16 224 px on a GPU, a digits-size model on a CPU
    python benchmarks/mae.py probe                 # digits: MAE ViT+Jumbo vs ViT (CLS) vs raw-pixel logistic regression
    python benchmarks/mae.py ddp                   # 2 CPU processes (torchrun, gloo DDP) vs 1, same global batch
    python benchmarks/mae.py all --out benchmarks/results

Each part prints a table and writes ``mae_<part>.json`` and ``mae_<part>.md`` to --out; the probe on Fashion-MNIST
writes ``mae_probe_fashion_mnist.json`` / ``.md`` (or --json).

probe: for each model (--models) and pretraining length (--epochs 2,5,10: one MAE run each, with its own full
schedule; the recipe's epoch checkpoints hold the whole training state, not a loadable encoder), a linear probe per
--probe-variants flag set, e.g. ``--feature token`` (the model's pooled global token: the Jumbo token of
vit_pico_jumbo, the CLS token of vit_pico_cls) and ``--feature avg`` (the mean patch token); the same probes of a
randomly initialised encoder of each model; logistic regression on the raw pixels (StandardScaler first) of the
probe's training images, scored on the same val and test splits. --dataset, --seed, --max-train-samples and --cpu
go to every recipe run, so pretraining, probes and the logistic regression see the same training images.

Fashion-MNIST: the project's split, 55,000 train / a fixed 5,000-image val cut / the 10,000 test images, 28 px
padded to 32 px; the recipes' defaults for it (32 px, 4 px patches: 64 tokens; pico models by default). The MAE
flag --blr 1.5e-3 is the recipe's digits rate: its Fashion-MNIST default is MAE's 1.5e-4 (lr 3.75e-5 at batch 64),
which the recipe notes leaves an encoder nearly untrained after a few hundred steps on digits.

    # CPU size: 10,000 training images, 2, 5 and 10 epochs, 2 models x (3 lengths + random init) x 2 features
    python benchmarks/mae.py probe --dataset fashion-mnist --max-train-samples 10000 --epochs 2,5,10 \\
        --models vit_pico_jumbo,vit_pico_cls --probe-variants '--feature token;--feature avg' \\
        --mae-args='--blr 1.5e-3' --cpu
    # full size: all 55,000 training images; for a GPU
    python benchmarks/mae.py probe --dataset fashion-mnist --epochs 20,50,100 \\
        --models vit_pico_jumbo,vit_pico_cls --probe-variants '--feature token;--feature avg' \\
        --mae-args='--blr 1.5e-3'

Time of the CPU size, extrapolated from 1-epoch runs on 1,280 images with 1 thread on a 2-core CPU shared with
other jobs: MAE ~1.0 s a step for vit_pico_jumbo and ~0.5 s for vit_pico_cls (157 steps an epoch at 10,000
images: ~2-3 min and ~1.3 min an epoch, ~1 h for the 17 epochs of both models); each of the 16 probes extracts
features of 25,000 images, ~3-4 min; about 2 h in all. The full size was not timed.

Targets: speed ratio >= 3x (MAE reports 2.8-4.1x); the Jumbo probe beats the CLS probe and a logistic
regression on raw pixels (96.9% on a stratified 75/25 split of digits).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

import torch

from jumbokit.benchmarking import dataset_slug, machine_record, results_folder, time_interleaved, write_result
from jumbokit.benchmarking.steps import mae_step as make_step
from jumbokit.training.rundir import markdown_table as table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

ROOT = Path(__file__).resolve().parents[1]


def write(out: Path, part: str, payload: dict[str, Any], markdown: str) -> None:
    print(markdown)
    write_result(out / f"mae_{part}.json", payload, markdown)


# ------------------------------------------------------------------------------------------------- speed
def time_ratios(model, images: torch.Tensor, ratios: tuple[float, ...], steps: int, warmup: int, rounds: int,
                amp: str) -> dict[float, float]:
    """Seconds per training step for each mask ratio: rounds alternate between the ratios and the fastest
    round counts, so load from other processes on a shared machine biases neither side."""
    step = make_step(model, images, amp)
    timings = time_interleaved({ratio: lambda r=ratio: step(r) for ratio in ratios}, rounds, steps, warmup=warmup,
                               sync=torch.cuda.synchronize if images.is_cuda else None)
    return {ratio: timing.fastest for ratio, timing in timings.items()}


def run_speed(args: argparse.Namespace) -> dict[str, Any]:
    import jumbokit
    from jumbokit.ssl import MaskedAutoencoder

    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        from jumbokit.training import configure_tf32

        configure_tf32(True, device)
    models = args.models or (["vit_base_jumbo", "vit_base_cls"] if cuda else ["vit_pico_jumbo", "vit_pico_cls"])
    img_size = args.img_size or (224 if cuda else 32)
    patch = args.patch_size or (16 if cuda else 4)
    batch = args.batch_size or (128 if cuda else 64)
    decoders = args.decoders or (["512x8", "512x1"] if cuda else ["128x2"])
    amp = args.amp if cuda else "no"
    rows = []
    for name in models:
        for decoder in decoders:
            dim, depth = (int(v) for v in decoder.lower().split("x"))
            torch.manual_seed(0)
            encoder = jumbokit.create_model(name, img_size=img_size, patch_size=patch, in_chans=3, num_classes=0,
                                            pos_embed="sincos")
            model = MaskedAutoencoder(encoder, decoder_dim=dim, decoder_depth=depth,
                                      decoder_num_heads=max(1, dim // 32)).to(device)
            images = torch.randn(batch, 3, img_size, img_size, device=device)
            timings = time_ratios(model, images, (0.75, 0.0), args.steps, args.warmup, args.rounds, amp)
            row = {"model": name, "decoder": decoder, "img": img_size, "patch": patch, "batch": batch, "amp": amp,
                   "ms_step_mask0.75": 1000 * timings[0.75], "ms_step_mask0": 1000 * timings[0.0],
                   "img_s_mask0.75": batch / timings[0.75], "img_s_mask0": batch / timings[0.0],
                   "speedup": timings[0.0] / timings[0.75]}
            rows.append(row)
            print(json.dumps(row))
            del model, images
            if cuda:
                torch.cuda.empty_cache()
    device_name = torch.cuda.get_device_name(0) if cuda else f"CPU ({torch.get_num_threads()} threads)"
    payload = {"part": "speed", "device": device_name, "machine": machine_record(device=device.type), "steps": args.steps,
               "rounds": args.rounds, "rows": rows,
               "target_speedup": 3.0}
    markdown = (f"## MAE training-step speed, mask 0.75 vs 0.0 ({device_name})\n\n"
                f"Step = forward + backward + AdamW step of encoder and decoder (decoder: width x depth); fastest of "
                f"{args.rounds} alternating rounds of {args.steps} steps.\n\n"
                + table(rows))
    write(args.out, "speed", payload, markdown)
    return payload


# ------------------------------------------------------------------------------------------------- probe
def run_cmd(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> float:
    started = time.time()
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        tail = log.read_text()[-2000:]
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")
    return time.time() - started


PROBE_DATASETS = "digits, fashion-mnist or fashion-mnist:DIR"
DATASET_TITLES = {"digits": "Digits", "fashion-mnist": "Fashion-MNIST"}
TOKEN_NAMES = {"jumbo": "Jumbo token", "cls": "CLS token", "registers": "CLS token (registers dropped)",
               "none": "mean patch token"}


def fail(message: str) -> NoReturn:
    """One line on stderr and exit status 2 (bad input), before anything runs or is written."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def dataset_kind(spec: str) -> str:
    """"digits" or "fashion-mnist" for a --dataset the probe supports (its anchors need the images in memory);
    fails on anything else and on Fashion-MNIST files that cannot be found."""
    from jumbokit.data import DataError
    from jumbokit.data.spec import parse_dataset_spec

    try:
        parsed = parse_dataset_spec(spec)
    except DataError:
        parsed = None
    if parsed is None or parsed.kind not in DATASET_TITLES:
        fail(f"--dataset: expected {PROBE_DATASETS}, got {spec!r}")
    if parsed.kind == "fashion-mnist":
        from jumbokit.data.fashion_mnist import find_fashion_mnist

        try:
            find_fashion_mnist(parsed.path)
        except DataError as err:
            fail(f"--dataset {spec}: {err}")
    return parsed.kind


def prepare_probe(args: argparse.Namespace) -> None:
    """Check the probe's inputs before anything runs: finished --checkpoints, the dataset (default: digits, or
    the dataset the --checkpoints runs were pretrained on), --max-train-samples."""
    for run in map(Path, args.checkpoints or ()):
        if not (run / "config.json").is_file() or not (run / "summary.json").is_file():
            fail(f"--checkpoints {run} is not a finished recipes/mae_pretrain.py run directory "
                 "(expected config.json and summary.json)")
    if args.dataset is None and args.checkpoints:
        pretrained_on = {json.loads((Path(run) / "config.json").read_text())["args"]["dataset"]
                         for run in args.checkpoints}
        if len(pretrained_on) > 1:
            fail(f"--checkpoints were pretrained on {', '.join(sorted(pretrained_on))}; pass --dataset to probe on one")
        args.dataset = pretrained_on.pop()
    args.dataset = args.dataset or "digits"
    args.dataset_kind = dataset_kind(args.dataset)
    if args.max_train_samples is not None and args.max_train_samples < 1:
        fail(f"--max-train-samples: expected a positive number of images, got {args.max_train_samples}")


def split_sizes(args: argparse.Namespace) -> dict[str, int]:
    """Images per split the probe trains and scores on (train: the --max-train-samples subset)."""
    from jumbokit.data import DIGITS_SPLIT_SIZES, FASHION_MNIST_SPLIT_SIZES

    sizes = dict(DIGITS_SPLIT_SIZES if args.dataset_kind == "digits" else FASHION_MNIST_SPLIT_SIZES)
    sizes["full_train"] = sizes["train"]
    sizes["train"] = min(args.max_train_samples or sizes["train"], sizes["train"])
    return sizes


def probe_title(args: argparse.Namespace) -> str:
    sizes = split_sizes(args)
    name = DATASET_TITLES[args.dataset_kind]
    if args.dataset_kind == "digits" and sizes["train"] == sizes["full_train"]:
        return f"## {name} linear probe (test split: {sizes['test']} images; val: {sizes['val']})"
    train = (f"{sizes['train']:,} of {sizes['full_train']:,}" if sizes["train"] < sizes["full_train"]
             else f"{sizes['train']:,}")
    return f"## {name} linear probe (train: {train} images; val: {sizes['val']:,}; test: {sizes['test']:,})"


def logistic_regression_baselines(max_train_samples: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Logistic regression on raw 8x8 pixels: a stratified 75/25 split and jumbokit's digits split (its training
    images: the probe's, the seeded subset with ``max_train_samples``)."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from jumbokit.data import build_dataset, digits_split_indices

    bunch = load_digits()
    x, y = bunch.data, bunch.target
    rows = []
    xa, xb, ya, yb = train_test_split(x, y, test_size=0.25, stratify=y, random_state=0)
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(xa, ya)
    rows.append({"method": "logistic regression, raw pixels", "split": "stratified 75/25 (seed 0)",
                 "test_top1": 100 * float(clf.score(xb, yb))})
    idx = digits_split_indices()
    train = np.concatenate([idx["train"]])
    split = f"jumbokit digits test ({len(train)} train)"
    if max_train_samples and max_train_samples < len(train):
        subset = build_dataset("digits", "train", "eval", max_samples=max_train_samples, seed=seed).indices
        split = f"jumbokit digits test ({len(subset)} of {len(train)} train, seed {seed})"
        train = train[subset]
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(x[train], y[train])
    rows.append({"method": "logistic regression, raw pixels", "split": split,
                 "test_top1": 100 * float(clf.score(x[idx["test"]], y[idx["test"]])),
                 "val_top1": 100 * float(clf.score(x[idx["val"]], y[idx["val"]]))})
    return rows


def fashion_mnist_baselines(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Logistic regression on the raw 32 px pixels (StandardScaler first) of the probe's training images, scored
    on the fixed 5,000-image val cut and the 10,000 test images."""
    from jumbokit.benchmarking.anchors import pixel_logistic_regression

    anchor = pixel_logistic_regression(args.dataset, args.max_train_samples, [args.seed], standardize=True)
    sizes = split_sizes(args)
    rows = []
    for fit in anchor["fits"]:
        subset = (f" of {sizes['full_train']:,} (seed {fit['seed']})" if fit["train_images"] < sizes["full_train"]
                  else "")
        rows.append({"method": "logistic regression, raw pixels (StandardScaler)",
                     "split": f"fashion-mnist val / test; train: {fit['train_images']:,}{subset}",
                     "val_top1": fit["val_top1"],
                     "test_top1": fit["test_top1"], "fit_s": round(fit["seconds"], 1),
                     "lbfgs_iterations": fit["iterations"]})
    return rows


def select_on_validation(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per encoder (method and MAE epochs), the probe variant with the best validation accuracy (ties: the first)
    and its test accuracy."""
    best: dict[tuple[str, Any], dict[str, Any]] = {}
    for row in rows:
        key = (row["method"], row.get("epochs"))
        if row.get("val_top1") is not None and (key not in best or row["val_top1"] > best[key]["val_top1"]):
            best[key] = row
    return [{k: row.get(k) for k in ("method", "epochs", "feature", "probe", "val_top1", "test_top1")}
            for row in best.values()]


def feature_name(probe: dict[str, Any], global_tokens: str | None) -> str:
    """What the probe read: the model's pooled global token (Jumbo, CLS) or the mean patch token."""
    if probe.get("feature") == "avg":
        return "mean patch token"
    return TOKEN_NAMES.get(global_tokens, f"{global_tokens} token")


def run_probe(args: argparse.Namespace) -> dict[str, Any]:
    import jumbokit

    if not hasattr(args, "dataset_kind"):
        prepare_probe(args)
    models = args.models or ["vit_pico_jumbo", "vit_pico_cls"]
    work = Path(args.work or tempfile.mkdtemp(prefix="mae_bench_"))
    work.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    data_flags = ["--dataset", args.dataset, "--seed", str(args.seed), *(["--cpu"] if args.cpu else []),
                  *(["--max-train-samples", str(args.max_train_samples)] if args.max_train_samples else [])]
    mae_flags = [*data_flags, "--epochs", "|".join(map(str, args.epochs)), *args.mae_args]  # for the page
    probe_flags = [*data_flags, *args.probe_args]
    rows: list[dict[str, Any]] = []

    def probe(checkpoint: Path, out: Path, variant: str, log: Path) -> dict[str, Any]:
        run_cmd([python, "recipes/linear_probe.py", "--checkpoint", str(checkpoint), "--out", str(out),
                 "--no-progress", *probe_flags, *variant.split()], log)
        return json.loads((out / "summary.json").read_text())

    # either pretrain each model for each length here, or probe finished MAE runs (--checkpoints) with every variant
    runs = ([(Path(c), json.loads((Path(c) / "config.json").read_text())["args"]["model"], None)
             for c in args.checkpoints] if args.checkpoints
            else [(work / f"mae_{n}_e{e}", n, e) for n in models for e in args.epochs])
    for position, (run, name, epochs) in enumerate(runs):
        if epochs is None:
            config, wall = json.loads((run / "config.json").read_text()), None
        else:
            cmd = [python, "recipes/mae_pretrain.py", "--model", name, "--out", str(run), "--overwrite",
                   "--no-progress", *data_flags, "--epochs", str(epochs), *args.mae_args]
            wall = round(run_cmd(cmd, work / f"{run.name}.log"), 1)
            config = json.loads((run / "config.json").read_text())
        tokens = config.get("model_config", {}).get("encoder", {}).get("global_tokens")
        summary = json.loads((run / "summary.json").read_text())
        for index, variant in enumerate(args.probe_variants):
            probe_dir = work / f"probe{position}_{run.name}_{index}"  # position: two runs may share a name
            result = probe(run, probe_dir, variant, work / f"{probe_dir.name}.log")
            rows.append({"method": f"MAE {name}", "feature": feature_name(result, tokens),
                         "probe": variant or "(defaults)", "epochs": config["args"]["epochs"],
                         "probe_epochs": result.get("epochs"), "val_top1": result.get("val_top1"),
                         "test_top1": result.get("test_top1"), "pretrain_s": round(summary["train_time_s"], 1),
                         "wall_s": wall, "final_mae_loss": summary.get("train_loss")})
            print(json.dumps(rows[-1]), flush=True)
        if args.random_init and all(other != name for _, other, _ in runs[position + 1:]):
            # the same architecture, not pretrained: what MAE adds over random features (once per model, after
            # its last MAE run)
            from jumbokit.encoders import build_model, load_config

            torch.manual_seed(args.seed)
            encoder = build_model(load_config(run))
            rand_dir = work / f"random_{name}"
            jumbokit.save(encoder, rand_dir)
            for index, variant in enumerate(args.probe_variants):
                out = rand_dir / ("probe" if index == 0 else f"probe_{index}")
                result = probe(rand_dir, out, variant, work / f"probe_random_{name}_{index}.log")
                rows.append({"method": f"random-init {name}", "feature": feature_name(result, tokens),
                             "probe": variant or "(defaults)", "epochs": 0, "val_top1": result.get("val_top1"),
                             "test_top1": result.get("test_top1")})
                print(json.dumps(rows[-1]), flush=True)
    baselines = (logistic_regression_baselines(args.max_train_samples, args.seed) if args.dataset_kind == "digits"
                 else fashion_mnist_baselines(args))
    selected = select_on_validation(rows)
    sizes = split_sizes(args)
    payload = {"part": "probe", "machine": machine_record(), "dataset": args.dataset,
               "split_sizes": {k: sizes[k] for k in ("train", "val", "test")},
               "max_train_samples": args.max_train_samples, "seed": args.seed, "mae_args": args.mae_args,
               "probe_args": args.probe_args, "probe_variants": args.probe_variants,
               "epochs": args.epochs[0] if len(args.epochs) == 1 else args.epochs, "rows": rows,
               "selected_on_val": selected, "baselines": baselines, "work": str(work)}
    sources = (f"MAE runs: {', '.join(args.checkpoints)}" if args.checkpoints
               else f"MAE flags: `{' '.join(mae_flags)}`")
    markdown = (f"{probe_title(args)}\n\n"
                f"{sources}; probe flags: `{' '.join(probe_flags)}`; "
                f"device: {payload['machine']['device']}\n\n" + table(rows) + "\n"
                + ("Probe flags chosen on validation, per encoder:\n\n" + table(selected) + "\n"
                   if len(args.probe_variants) > 1 else "")
                + table(baselines))
    print(markdown)
    write_result(probe_path(args), payload, markdown)
    return payload


def probe_path(args: argparse.Namespace) -> Path:
    """--json, else ``mae_probe.json`` (digits) or ``mae_probe_fashion_mnist.json`` in --out."""
    if args.json is not None:
        return args.json
    return args.out / ("mae_probe.json" if args.dataset_kind == "digits"
                       else f"mae_probe_{dataset_slug(args.dataset)}.json")


# ------------------------------------------------------------------------------------------------- ddp
def run_ddp(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work or tempfile.mkdtemp(prefix="mae_ddp_"))
    work.mkdir(parents=True, exist_ok=True)
    global_batch = args.batch_size or 64
    common = ["recipes/mae_pretrain.py", "--no-progress", "--overwrite", "--epochs", str(args.epochs[0]),
              "--vis-every", "0", "--log-every", "1", *args.mae_args]
    # `accelerate launch --cpu --num_processes 2` starts ONE process (accelerate 1.x uses its simple launcher
    # for --cpu); torchrun starts real CPU workers and the recipe's --cpu makes Accelerate use gloo DDP
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    curves = {}
    timings = {}
    for procs in (1, 2):
        out = work / f"procs{procs}"
        cmd = [*launch, "--nproc_per_node", str(procs), *common, "--cpu",
               "--batch-size", str(global_batch // procs), "--out", str(out)]
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // (2 * procs)))}
        timings[procs] = run_cmd(cmd, work / f"procs{procs}.log", env=env)
        recorded = json.loads((out / "config.json").read_text())
        if recorded.get("num_processes") != procs:
            raise RuntimeError(f"asked for {procs} processes, the run recorded {recorded.get('num_processes')}")
        metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
        curves[procs] = {"train": [(m["step"], m["loss"]) for m in metrics if m.get("kind") == "train"],
                         "epoch": [(m["epoch"], m["train_loss"], m.get("val_loss")) for m in metrics
                                   if m.get("kind") == "epoch"]}
    rows = []
    for (e1, l1, v1), (e2, l2, v2) in zip(curves[1]["epoch"], curves[2]["epoch"]):
        rows.append({"epoch": e1, "train_loss_1proc": l1, "train_loss_2proc": l2, "val_loss_1proc": v1,
                     "val_loss_2proc": v2, "rel_diff_train": abs(l1 - l2) / max(abs(l1), 1e-12)})
    steps1, steps2 = dict(curves[1]["train"]), dict(curves[2]["train"])
    common_steps = sorted(set(steps1) & set(steps2))
    diffs = [abs(steps1[s] - steps2[s]) / max(abs(steps1[s]), 1e-12) for s in common_steps]
    payload = {"part": "ddp", "machine": machine_record(device="cpu"), "global_batch": global_batch,
               "epochs": args.epochs[0], "mae_args": args.mae_args, "rows": rows,
               "step_curves": {str(k): v["train"] for k, v in curves.items()},
               "mean_rel_step_diff": sum(diffs) / max(len(diffs), 1), "wall_s": timings}
    markdown = (f"## 1 vs 2 CPU processes, global batch {global_batch}\n\n"
                f"`torchrun --nproc_per_node N recipes/mae_pretrain.py --cpu --batch-size {global_batch}/N "
                f"{' '.join(args.mae_args)}`; mean relative difference of per-step losses: "
                f"{payload['mean_rel_step_diff']:.3%} over {len(diffs)} steps (masks and crops are drawn per "
                f"process, so the curves agree in trend, not bit for bit)\n\n" + table(rows))
    write(args.out, "ddp", payload, markdown)
    return payload


def epochs_list(text: str) -> list[int]:
    """``20`` or ``2,5,10``: MAE pretraining lengths."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of epochs or a comma-separated list such as 2,5,10, "
                                         f"got {text!r}")
    return list(dict.fromkeys(values))


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and each option's default unless it has none or its help names it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is None or action.default is False or action.default == "" or "default" in text:
            return text
        return super()._get_help_string(action)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("part", choices=("speed", "probe", "ddp", "all"))
    parser.add_argument("--out", type=Path, default=RESULTS, help="where JSON/markdown go")
    parser.add_argument("--models", type=lambda s: [m for m in s.split(",") if m], default=None,
                        help="comma-separated zoo names (default: speed: vit_base_* on GPU, vit_pico_* on CPU; "
                             "probe: vit_pico_jumbo,vit_pico_cls)")
    parser.add_argument("--img-size", type=int, default=None, help="speed: input side (default: 224 GPU, 32 CPU)")
    parser.add_argument("--patch-size", type=int, default=None, help="speed: patch side (default: 16 GPU, 4 CPU)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="speed: batch (default: 128 GPU, 64 CPU); ddp: global batch (default: 64)")
    parser.add_argument("--decoders", type=lambda s: [d for d in s.split(",") if d], default=None,
                        help="speed: decoder width x depth list, e.g. 512x8,512x1 (default: 512x8,512x1 GPU, "
                             "128x2 CPU)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round and mask ratio")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds (the fastest counts)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per mask ratio first")
    parser.add_argument("--amp", default="bf16", choices=("no", "bf16", "fp16"), help="autocast on GPU")
    parser.add_argument("--cpu", action="store_true",
                        help="speed: time on CPU even with a GPU; probe: pass --cpu to every recipe run")
    parser.add_argument("--epochs", type=epochs_list, default=[20], metavar="E[,E...]",
                        help="MAE epochs; probe: a comma-separated list of pretraining lengths, one MAE run per "
                             "model and length (each with its own full schedule), e.g. 2,5,10; ddp: one number "
                             "(default: 20)")
    parser.add_argument("--dataset", default=None, metavar="SPEC",
                        help=f"probe: {PROBE_DATASETS} (the IDX files in DIR), for the MAE runs, every probe and "
                             "the logistic regression (default: digits; with --checkpoints the dataset they were "
                             "pretrained on)")
    parser.add_argument("--max-train-samples", type=int, default=None, metavar="N",
                        help="probe: pretrain, probe and fit the logistic regression on the same seeded subset "
                             "(--seed) of N training images (default: all)")
    parser.add_argument("--mae-args", default="",
                        help="extra flags for recipes/mae_pretrain.py, quoted, with '=' when one flag alone: "
                             "--mae-args='--blr 1.5e-3'")
    parser.add_argument("--probe-args", default="", help="extra flags for recipes/linear_probe.py (as --mae-args)")
    parser.add_argument("--probe-variants", default="",
                        help="';'-separated linear-probe flag sets, one result row each, e.g. "
                             "'--feature token;--feature avg' (default: the recipe's defaults, --feature token)")
    parser.add_argument("--checkpoints", type=lambda s: [c for c in s.split(",") if c], default=None,
                        help="probe: comma-separated finished MAE run directories to probe instead of pretraining")
    parser.add_argument("--random-init", action=argparse.BooleanOptionalAction, default=True,
                        help="probe: also probe a randomly initialised encoder of each model with every variant")
    parser.add_argument("--work", default=None, help="folder for the runs (default: a temp folder)")
    parser.add_argument("--json", type=Path, default=None,
                        help="probe: result file (default: --out/mae_probe.json for digits, "
                             "--out/mae_probe_fashion_mnist.json for Fashion-MNIST; a .md copy beside it)")
    parser.add_argument("--seed", type=int, default=0,
                        help="probe: seed of the MAE runs, the probes, the training subset and the random-init "
                             "encoders")
    args = parser.parse_args(argv)
    args.mae_args = args.mae_args.split()
    args.probe_args = args.probe_args.split()
    args.probe_variants = [v.strip() for v in args.probe_variants.split(";")] or [""]
    parts = ("speed", "probe", "ddp") if args.part == "all" else (args.part,)
    # bad input ends here, before any part runs or writes
    if "ddp" in parts and len(args.epochs) > 1:
        fail(f"--epochs: ddp takes one number, got {','.join(map(str, args.epochs))}")
    if args.json is not None and args.json.suffix != ".json":
        fail(f"--json: expected a file name ending in .json, got {args.json}")
    if "probe" in parts:
        prepare_probe(args)
    for part in parts:
        {"speed": run_speed, "probe": run_probe, "ddp": run_ddp}[part](args)


if __name__ == "__main__":
    main()
