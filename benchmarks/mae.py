"""MAE benchmarks: step speed at mask 0.75 vs 0.0, digits linear-probe accuracy, 1 vs 2 processes.

    python benchmarks/mae.py speed                 # ViT-B/16 224 px on a GPU, a digits-size model on a CPU
    python benchmarks/mae.py probe                 # MAE-pretrained ViT+Jumbo vs ViT (CLS) vs raw-pixel logistic regression
    python benchmarks/mae.py ddp                   # 2 CPU processes (torchrun, gloo DDP) vs 1, same global batch
    python benchmarks/mae.py all --out benchmarks/results

Each part prints a table and writes ``mae_<part>.json`` and ``mae_<part>.md`` to --out.
Targets: speed ratio >= 3x (MAE reports 2.8-4.1x); the Jumbo probe beats the CLS probe and a logistic
regression on raw pixels (96.9% on a stratified 75/25 split).
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
from typing import Any

import torch

from jumbokit.benchmarking import RESULTS_DIR, machine_record, time_interleaved, write_result
from jumbokit.training.rundir import markdown_table as table

ROOT = Path(__file__).resolve().parents[1]


def write(out: Path, part: str, payload: dict[str, Any], markdown: str) -> None:
    print(markdown)
    write_result(out / f"mae_{part}.json", payload, markdown)


# ------------------------------------------------------------------------------------------------- speed
def make_step(model, images: torch.Tensor, amp: str):
    """One MAE training step (forward, backward, AdamW step) as a function of the mask ratio."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.05)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    device_type = "cuda" if images.is_cuda else "cpu"

    def step(ratio: float) -> None:
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = model(images, mask_ratio=ratio).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


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


def logistic_regression_baselines() -> list[dict[str, Any]]:
    """Logistic regression on raw 8x8 pixels: a stratified 75/25 split and jumbokit's digits split."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from jumbokit.data import digits_split_indices

    bunch = load_digits()
    x, y = bunch.data, bunch.target
    rows = []
    xa, xb, ya, yb = train_test_split(x, y, test_size=0.25, stratify=y, random_state=0)
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(xa, ya)
    rows.append({"method": "logistic regression, raw pixels", "split": "stratified 75/25 (seed 0)",
                 "test_top1": 100 * float(clf.score(xb, yb))})
    idx = digits_split_indices()
    train = np.concatenate([idx["train"]])
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(x[train], y[train])
    rows.append({"method": "logistic regression, raw pixels", "split": "jumbokit digits test (1257 train)",
                 "test_top1": 100 * float(clf.score(x[idx["test"]], y[idx["test"]])),
                 "val_top1": 100 * float(clf.score(x[idx["val"]], y[idx["val"]]))})
    return rows


def select_on_validation(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per encoder (method and MAE epochs), the probe variant with the best validation accuracy (ties: the first)
    and its test accuracy."""
    best: dict[tuple[str, Any], dict[str, Any]] = {}
    for row in rows:
        key = (row["method"], row.get("epochs"))
        if row.get("val_top1") is not None and (key not in best or row["val_top1"] > best[key]["val_top1"]):
            best[key] = row
    return [{k: row.get(k) for k in ("method", "epochs", "probe", "val_top1", "test_top1")} for row in best.values()]


def run_probe(args: argparse.Namespace) -> dict[str, Any]:
    import jumbokit

    models = args.models or ["vit_pico_jumbo", "vit_pico_cls"]
    for run in map(Path, args.checkpoints or ()):  # before anything is written
        if not (run / "config.json").is_file() or not (run / "summary.json").is_file():
            raise SystemExit(f"error: --checkpoints {run} is not a finished recipes/mae_pretrain.py run directory "
                             "(expected config.json and summary.json)")
    work = Path(args.work or tempfile.mkdtemp(prefix="mae_bench_"))
    work.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    rows: list[dict[str, Any]] = []
    # either pretrain each model here, or probe finished MAE runs (--checkpoints) with every variant
    runs = [(Path(c), None) for c in args.checkpoints] if args.checkpoints else [(work / f"mae_{n}", n) for n in models]
    for position, (run, name) in enumerate(runs):
        if name is None:
            config = json.loads((run / "config.json").read_text())
            name, wall = config["args"]["model"], None
        else:
            cmd = [python, "recipes/mae_pretrain.py", "--model", name, "--out", str(run), "--overwrite",
                   "--no-progress", "--epochs", str(args.epochs), *args.mae_args]
            wall = round(run_cmd(cmd, work / f"mae_{name}.log"), 1)
            config = json.loads((run / "config.json").read_text())
        summary = json.loads((run / "summary.json").read_text())
        for index, variant in enumerate(args.probe_variants):
            probe_dir = work / f"probe{position}_{run.name}_{index}"  # position: two runs may share a name
            run_cmd([python, "recipes/linear_probe.py", "--checkpoint", str(run), "--out", str(probe_dir),
                     "--no-progress", *args.probe_args, *variant.split()], work / f"{probe_dir.name}.log")
            probe = json.loads((probe_dir / "summary.json").read_text())
            rows.append({"method": f"MAE {name}", "probe": variant or "(defaults)",
                         "epochs": config["args"]["epochs"], "probe_epochs": probe.get("epochs"),
                         "val_top1": probe.get("val_top1"), "test_top1": probe.get("test_top1"),
                         "pretrain_s": round(summary["train_time_s"], 1), "wall_s": wall,
                         "final_mae_loss": summary.get("train_loss")})
            print(json.dumps(rows[-1]))
        if args.random_init:
            # the same architecture, not pretrained: what MAE adds over random features
            from jumbokit.encoders import build_model, load_config

            torch.manual_seed(args.seed)
            encoder = build_model(load_config(run))
            rand_dir = work / f"random_{name}"
            jumbokit.save(encoder, rand_dir)
            variant = args.probe_variants[0]
            run_cmd([python, "recipes/linear_probe.py", "--checkpoint", str(rand_dir), "--dataset", "digits",
                     "--out", str(rand_dir / "probe"), "--no-progress", *args.probe_args, *variant.split()],
                    work / f"probe_random_{name}.log")
            probe = json.loads((rand_dir / "probe" / "summary.json").read_text())
            rows.append({"method": f"random-init {name}", "probe": variant or "(defaults)", "epochs": 0,
                         "val_top1": probe.get("val_top1"), "test_top1": probe.get("test_top1")})
            print(json.dumps(rows[-1]))
    baselines = logistic_regression_baselines()
    selected = select_on_validation(rows)
    payload = {"part": "probe", "machine": machine_record(), "mae_args": args.mae_args, "probe_args": args.probe_args,
               "epochs": args.epochs, "rows": rows, "selected_on_val": selected, "baselines": baselines,
               "work": str(work)}
    sources = (f"MAE runs: {', '.join(args.checkpoints)}" if args.checkpoints
               else f"MAE flags: `--epochs {args.epochs} {' '.join(args.mae_args)}`")
    markdown = ("## Digits linear probe (test split: 360 images; val: 180)\n\n"
                f"{sources}; probe flags: `{' '.join(args.probe_args) or '(defaults)'}`; "
                f"device: {payload['machine']['device']}\n\n" + table(rows) + "\n"
                + ("Probe flags chosen on validation, per encoder:\n\n" + table(selected) + "\n"
                   if len(args.probe_variants) > 1 else "")
                + table(baselines))
    write(args.out, "probe", payload, markdown)
    return payload


# ------------------------------------------------------------------------------------------------- ddp
def run_ddp(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work or tempfile.mkdtemp(prefix="mae_ddp_"))
    work.mkdir(parents=True, exist_ok=True)
    global_batch = args.batch_size or 64
    common = ["recipes/mae_pretrain.py", "--no-progress", "--overwrite", "--epochs", str(args.epochs),
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
    payload = {"part": "ddp", "machine": machine_record(device="cpu"), "global_batch": global_batch, "epochs": args.epochs,
               "mae_args": args.mae_args, "rows": rows, "step_curves": {str(k): v["train"] for k, v in curves.items()},
               "mean_rel_step_diff": sum(diffs) / max(len(diffs), 1), "wall_s": timings}
    markdown = (f"## 1 vs 2 CPU processes, global batch {global_batch}\n\n"
                f"`torchrun --nproc_per_node N recipes/mae_pretrain.py --cpu --batch-size {global_batch}/N "
                f"{' '.join(args.mae_args)}`; mean relative difference of per-step losses: "
                f"{payload['mean_rel_step_diff']:.3%} over {len(diffs)} steps (masks and crops are drawn per "
                f"process, so the curves agree in trend, not bit for bit)\n\n" + table(rows))
    write(args.out, "ddp", payload, markdown)
    return payload


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("part", choices=("speed", "probe", "ddp", "all"))
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="where JSON/markdown go")
    parser.add_argument("--models", type=lambda s: [m for m in s.split(",") if m], default=None,
                        help="comma-separated zoo names (default: vit_base_* on GPU, vit_pico_* on CPU)")
    parser.add_argument("--img-size", type=int, default=None)
    parser.add_argument("--patch-size", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--decoders", type=lambda s: [d for d in s.split(",") if d], default=None,
                        help="decoder width x depth list for speed, e.g. 512x8,512x1")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round and mask ratio")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds (the fastest counts)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per mask ratio first")
    parser.add_argument("--amp", default="bf16", choices=("no", "bf16", "fp16"), help="autocast on GPU")
    parser.add_argument("--cpu", action="store_true", help="time on CPU even with a GPU")
    parser.add_argument("--epochs", type=int, default=20, help="MAE epochs for probe / ddp")
    parser.add_argument("--mae-args", default="", help="extra flags for recipes/mae_pretrain.py (quoted)")
    parser.add_argument("--probe-args", default="", help="extra flags for recipes/linear_probe.py (quoted)")
    parser.add_argument("--probe-variants", default="",
                        help="';'-separated linear-probe flag sets, one result row each (default: the recipe's defaults)")
    parser.add_argument("--checkpoints", type=lambda s: [c for c in s.split(",") if c], default=None,
                        help="probe: comma-separated finished MAE run directories to probe instead of pretraining")
    parser.add_argument("--random-init", action=argparse.BooleanOptionalAction, default=True,
                        help="also probe a randomly initialised encoder of each model")
    parser.add_argument("--work", default=None, help="folder for the runs (default: a temp folder)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.mae_args = args.mae_args.split()
    args.probe_args = args.probe_args.split()
    args.probe_variants = [v.strip() for v in args.probe_variants.split(";")] or [""]
    parts = ("speed", "probe", "ddp") if args.part == "all" else (args.part,)
    for part in parts:
        {"speed": run_speed, "probe": run_probe, "ddp": run_ddp}[part](args)


if __name__ == "__main__":
    main()
