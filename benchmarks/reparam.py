"""Progressive-join branches: exactness of the collapse, and the speed of the collapsed encoders.

1. Exactness: max |multi-branch (lambda = 1) - collapsed| over logits and features, for every global-token
   plug-in (none, cls, registers, jumbo), both tokenizers (image 224 px, series) and n = 2, 3, 4, at the
   ViT-Tiny width (D=192, 12 layers, 3 heads), fp32, with all norms / biases / LayerScales moved off
   their initial values so that every fold is exercised.
2. Speed on CPU, fp32: ViT-Tiny (12 layers, CLS, 224 px) against its collapsed 6-, 4- and 3-layer forms
   (n = 2, 3, 4) and against plain 6/4/3-layer ViT-Tiny encoders (the same widths without the wider q/k):
   latency at batch 1 and throughput at batch 64, rounds interleaved, medians, with analytic FLOPs.
3. Accuracy (trainings, one at a time; opt-in): digits through ``recipes/supervised.py`` -- a 12-layer ViT
   vs 2-branch progressive join collapsed to 6 layers vs a plain 6-layer ViT trained the same way --
   and one bundled UCR set -- PatchTST 6 layers vs 2-branch join collapsed to 3 vs plain 3 layers.

    python benchmarks/reparam.py                       # exactness + speed, 1 CPU thread
    python benchmarks/reparam.py --sections speed --threads 2 --repeats 9
    python benchmarks/reparam.py --sections digits,ucr --seeds 0 1 2 --device cuda

Prints a table and JSON (also written to --json, and a markdown copy next to it).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from tqdm import tqdm

import jumbokit
from jumbokit.encoders import Encoder
from jumbokit.encoders.branches import build_branched_encoder
from jumbokit.encoders.flops import count_params
from jumbokit.benchmarking import machine_record, result_path, results_folder, time_interleaved, write_result

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

TINY = dict(dim=192, depth=12, num_heads=3, mlp_ratio=4.0)
IMAGE = dict(tokenizer="image", img_size=224, patch_size=16, in_chans=3)
SERIES = dict(tokenizer="series", seq_len=336, patch_len=16, stride=8, in_chans=3)
KINDS = {
    "none": dict(global_tokens="none"),
    "cls": dict(global_tokens="cls"),
    "registers": dict(global_tokens="registers", num_registers=16),
    "jumbo": dict(global_tokens="jumbo", jumbo_multiplier=6),
}
BRANCHES = (2, 3, 4)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default="exact,speed",
                   help="comma list of: exact, speed, digits, ucr (default: exact,speed)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    p.add_argument("--repeats", type=int, default=7, help="timed rounds per model, interleaved (default: 7)")
    p.add_argument("--latency-iters", type=int, default=10, help="batch-1 forwards per round (default: 10)")
    p.add_argument("--throughput-batch", type=int, default=64)
    p.add_argument("--throughput-repeats", type=int, default=3, help="timed batch-64 rounds (default: 3)")
    p.add_argument("--img-size", type=int, default=224)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=result_path(RESULTS, "reparam"), help="(default: %(default)s)")
    acc = p.add_argument_group("accuracy sections (digits, ucr)")
    acc.add_argument("--device", default="cpu", help="cpu or cuda for the trainings (default: cpu)")
    acc.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds (default: 0)")
    acc.add_argument("--digits-epochs", type=int, default=30)
    acc.add_argument("--digits-model", default="vit_tiny_cls", help="12-layer zoo model (default: vit_tiny_cls)")
    acc.add_argument("--digits-patch", type=int, default=4, help="patch size at 32 px (default: 4 -> 64 patches)")
    acc.add_argument("--ucr-dataset", default="GunPoint", help="a bundled UCR set (default: GunPoint)")
    acc.add_argument("--ucr-epochs", type=int, default=100, help="(default: 100, the PatchTST protocol's)")
    acc.add_argument("--ucr-lr", type=float, default=1e-3)
    acc.add_argument("--join-fraction", type=float, default=1 / 3,
                     help="fraction of the training steps used for the join warm-up; the rest is the "
                          "post-join phase at lambda=1 (default: 1/3)")
    acc.add_argument("--join-schedule", default="linear")
    acc.add_argument("--work-dir", type=Path, default=Path("runs/reparam_benchmark"),
                     help="run directories of the trainings (default: runs/reparam_benchmark)")
    args = p.parse_args(argv)
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = set(args.sections) - {"exact", "speed", "digits", "ucr"}
    if bad:
        p.error(f"unknown section(s) {sorted(bad)}; expected exact, speed, digits, ucr")
    if not 0.0 < args.join_fraction <= 1.0:
        p.error(f"--join-fraction must be in (0, 1], got {args.join_fraction}")
    if args.threads < 1 or args.repeats < 1 or args.throughput_batch < 1:
        p.error("--threads, --repeats and --throughput-batch must be >= 1")
    return args


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------


def perturb_like_trained(model: nn.Module, generator: torch.Generator) -> None:
    """Norm scales ~ 1 + N(0, 0.1), shifts / biases / LayerScales ~ N(0, 0.05), weights kept (std 0.02)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("weight") and ("norm" in name.split(".")[-2] or param.ndim == 1):
                param.copy_(1.0 + 0.1 * noise)
            elif name.endswith("bias") or name.endswith("gamma"):
                param.add_(0.05 * noise)
            elif "token" in name or "pos_embed" in name:
                param.add_(0.02 * noise)


def example_input(tokenizer: str, batch: int, img_size: int, generator: torch.Generator) -> torch.Tensor:
    if tokenizer == "image":
        return torch.randn(batch, 3, img_size, img_size, generator=generator)
    return torch.randn(batch, SERIES["in_chans"], SERIES["seq_len"], generator=generator)


def attention_widths(model: nn.Module) -> list[tuple[int, int]]:
    """(qk width, value width) of each block's attention."""
    widths = []
    for block in model.blocks:
        qkv = block.attn.qkv.weight.shape[0]
        v = block.attn.proj.weight.shape[1]
        widths.append(((qkv - v) // 2, v))
    return widths


def forward_flops(model: nn.Module, x: torch.Tensor) -> int:
    """Matmul FLOPs of one forward (2 per multiply-add). The fused CPU attention kernel is not seen by
    torch's counter, so q k^T and attn v are added analytically: 2 T^2 (qk width + value width) per block
    (the useful work: zero padding of narrower value heads for the fused kernel is not counted)."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    total = counter.get_total_flops()
    # an unfused attention path shows up as bmm (the encoders use no other bmm): counted analytically below
    ops = {str(op): n for op, n in counter.get_flop_counts().get("Global", {}).items()}
    total -= sum(n for op, n in ops.items() if "bmm" in op or "baddbmm" in op)
    tokens = model.num_patches + model.num_global_tokens
    sequences = x.shape[0] * (x.shape[1] if model.config["tokenizer"] == "series" else 1)
    for qk, v in attention_widths(model):
        total += sequences * 2 * tokens * tokens * (qk + v)
    return total


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# 1. exactness
# --------------------------------------------------------------------------------------------------


def exactness(args) -> list[dict]:
    results = []
    jobs = [(kind, tok, n) for kind in KINDS for tok in ("image", "series") for n in BRANCHES]
    for kind, tokenizer, n in tqdm(jobs, desc="exactness", file=sys.stderr):
        gen = torch.Generator().manual_seed(args.seed + n)
        base = IMAGE if tokenizer == "image" else SERIES
        config = dict(base, **TINY, **KINDS[kind], init_values=1e-1, num_classes=10)
        if tokenizer == "image":
            config["img_size"] = args.img_size
        torch.manual_seed(args.seed + n)
        model = build_branched_encoder(config, branches=n)
        perturb_like_trained(model, gen)
        model.eval().set_join(1.0)
        plain = jumbokit.reparameterize(model).eval()
        x = example_input(tokenizer, 2, args.img_size, gen)
        with torch.no_grad():
            a, b = model.forward_features(x), plain.forward_features(x)
            logits_a, logits_b = model.forward_head(a), plain.forward_head(b)
        diff = max((logits_a - logits_b).abs().max().item(), (a.feature - b.feature).abs().max().item(),
                   (a.patches - b.patches).abs().max().item())
        qk, v = attention_widths(plain)[0]
        results.append(dict(
            global_tokens=kind, tokenizer=tokenizer, branches=n, collapsed_depth=len(plain.blocks),
            max_abs_diff=diff, output_scale=logits_a.abs().max().item(), qk_width=qk, v_width=v,
            qk_form="concat" if qk == n * TINY["dim"] else "product", ok=diff <= 1e-5,
        ))
    return results


# --------------------------------------------------------------------------------------------------
# 2. speed
# --------------------------------------------------------------------------------------------------


def speed_models(args) -> dict[str, nn.Module]:
    gen = torch.Generator().manual_seed(args.seed)
    config = dict(IMAGE, **TINY, **KINDS["cls"], img_size=args.img_size, num_classes=1000)
    models: dict[str, nn.Module] = {"ViT-Tiny 12 layers": Encoder(**config)}
    for n in BRANCHES:
        branched = build_branched_encoder(config, branches=n)
        perturb_like_trained(branched, gen)
        branched.set_join(1.0)
        models[f"collapsed {12 // n} layers (n={n})"] = jumbokit.reparameterize(branched)
    for n in BRANCHES:
        models[f"plain {12 // n} layers"] = Encoder(**{**config, "depth": 12 // n})
    return {name: m.eval() for name, m in models.items()}


def time_models(models: dict[str, nn.Module], x: torch.Tensor, rounds: int, iters: int) -> dict[str, list[float]]:
    """Seconds per forward, one value per round; rounds interleaved across models."""
    with torch.inference_mode():
        timings = time_interleaved({name: lambda m=model: m(x) for name, model in models.items()}, rounds, iters)
    return {name: list(t.rounds) for name, t in timings.items()}


def speed(args) -> list[dict]:
    models = speed_models(args)
    gen = torch.Generator().manual_seed(args.seed)
    x1 = example_input("image", 1, args.img_size, gen)
    xb = example_input("image", args.throughput_batch, args.img_size, gen)
    print("timing latency at batch 1 and throughput at batch", args.throughput_batch, file=sys.stderr)
    lat = time_models(models, x1, args.repeats, args.latency_iters)
    thr = time_models(models, xb, args.throughput_repeats, 1)
    ref_name = "ViT-Tiny 12 layers"
    ref_flops = forward_flops(models[ref_name], x1)
    ref_lat = statistics.median(lat[ref_name])
    ref_thr = args.throughput_batch / statistics.median(thr[ref_name])
    rows = []
    for name, model in models.items():
        f = forward_flops(model, x1)
        latency = statistics.median(lat[name])
        throughput = args.throughput_batch / statistics.median(thr[name])
        qk, v = attention_widths(model)[0]
        rows.append(dict(
            model=name, layers=len(model.blocks), qk_width=qk, v_width=v, params=count_params(model), gflops=f / 1e9,
            flops_ratio=f / ref_flops, latency_ms=latency * 1e3, latency_ratio=latency / ref_lat,
            latency_ms_rounds=[t * 1e3 for t in lat[name]], throughput_img_s=throughput,
            throughput_ratio=throughput / ref_thr,
        ))
    return rows


# --------------------------------------------------------------------------------------------------
# 3. accuracy
# --------------------------------------------------------------------------------------------------


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def accuracy_digits(args) -> dict:
    """A 12-layer ViT (32 px) on digits: 12 layers vs joined-then-collapsed 6 vs plain 6."""
    from jumbokit.recipes import supervised as recipe

    batch = 64
    from jumbokit.data import build_dataset

    train_size = len(build_dataset("digits", "train", "supervised", img_size=32))
    steps = args.digits_epochs * math.ceil(train_size / batch)
    warmup = max(1, round(args.join_fraction * steps))
    work = args.work_dir / "digits"
    plain6 = work / f"plain6_init_{args.digits_model}_p{args.digits_patch}"
    if not (plain6 / "model.safetensors").exists():
        jumbokit.save(jumbokit.create_model(args.digits_model, depth=6, img_size=32, patch_size=args.digits_patch,
                                            in_chans=1, num_classes=10), plain6)
    model = ["--model", args.digits_model, "--patch-size", str(args.digits_patch)]
    variants = {
        "12 layers": model,
        "2 branches joined -> 6 layers": [*model, "--branches", "2", "--join-warmup-steps", str(warmup),
                                          "--join-schedule", args.join_schedule],
        "plain 6 layers": ["--init", str(plain6)],
    }
    runs = []
    for seed in args.seeds:
        for name, extra in variants.items():
            out = work / f"{'_'.join(name.replace('->', '').split())}_seed{seed}"
            argv = ["--dataset", "digits", "--epochs", str(args.digits_epochs), "--batch-size", str(batch),
                    "--seed", str(seed), "--out", str(out), "--overwrite", "--no-progress", *extra]
            if args.device == "cpu":
                argv.append("--cpu")
            print(f"[digits] {name}, seed {seed}", file=sys.stderr)
            result = recipe.main(argv)
            for row in result["rows"]:
                collapsed = "reparameterized" in row["model"]
                runs.append(dict(variant=name + (" (collapsed)" if collapsed else ""), seed=seed,
                                 split=row["split"], acc1=row["top1"] / 100, train_time_s=result["train_time_s"]))
    return dict(dataset=f"digits ({args.digits_model}, patch {args.digits_patch})", epochs=args.digits_epochs,
                steps=steps, join_warmup_steps=warmup, runs=runs, summary=_summarise(runs))


def _summarise(runs: list[dict]) -> list[dict]:
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in runs):
        row = dict(variant=variant)
        for split in ("val", "test"):
            values = [r["acc1"] for r in runs if r["variant"] == variant and r["split"] == split]
            if values:
                row[f"{split}_mean"], row[f"{split}_std"] = _mean_std(values)
                row["seeds"] = len(values)
        rows.append(row)
    return rows


def accuracy_ucr(args) -> dict:
    """PatchTST (D=128, 16 heads, 8 patches) on a bundled UCR set: 6 layers vs joined-then-collapsed 3 vs plain 3."""
    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.protocol import SweepConfig
    from jumbokit.timeseries.run import evaluate, series_loader, train_config
    from jumbokit.training import classification_loss, fit

    data = load_dataset(args.ucr_dataset)
    cfg = SweepConfig(epochs=args.ucr_epochs, batch_size=256)
    steps_per_epoch = math.ceil(len(data.train.y) / cfg.batch_size)
    steps = args.ucr_epochs * steps_per_epoch
    warmup = max(1, round(args.join_fraction * steps))
    common = dict(num_classes=data.num_classes, in_chans=data.channels, seq_len=data.seq_len, patches=cfg.model.patches)
    variants = {
        "PatchTST 6 layers": dict(depth=6),
        "2 branches joined -> 3 layers": dict(depth=6, branches=2, join_warmup_steps=warmup,
                                              join_schedule=args.join_schedule),
        "plain 3 layers": dict(depth=3),
    }
    runs = []
    for seed in args.seeds:
        for name, options in variants.items():
            print(f"[ucr {args.ucr_dataset}] {name}, seed {seed}", file=sys.stderr)
            torch.manual_seed(seed)
            model = jumbokit.create_model("patchtst", **common, **options)
            run_cfg = SweepConfig(epochs=args.ucr_epochs, batch_size=cfg.batch_size, seed=seed)
            tcfg = train_config(run_cfg, args.ucr_lr, args.ucr_epochs, cpu=args.device == "cpu")
            start = time.perf_counter()
            loader = series_loader(data.train, cfg.batch_size, shuffle=True, seed=seed)
            model = fit(model, loader, classification_loss(), tcfg).model.cpu()
            seconds = time.perf_counter() - start
            evaluated = {name: model}
            if hasattr(model, "reparameterize"):
                evaluated[name + " (collapsed)"] = model.reparameterize()
            for variant, m in evaluated.items():
                for split_name, split in (("val", data.val), ("test", data.test)):
                    acc, _ = evaluate(m, split)
                    runs.append(dict(variant=variant, seed=seed, split=split_name, acc1=acc, train_time_s=seconds))
    return dict(dataset=args.ucr_dataset, epochs=args.ucr_epochs, steps=steps, join_warmup_steps=warmup,
                lr=args.ucr_lr, runs=runs, summary=_summarise(runs))


def accuracy_table(section: dict) -> str:
    return markdown_table(
        ["model", "seeds", "val top-1 (%)", "test top-1 (%)"],
        [[r["variant"], r.get("seeds", 0), f"{100 * r.get('val_mean', float('nan')):.2f} +- "
          f"{100 * r.get('val_std', 0):.2f}", f"{100 * r.get('test_mean', float('nan')):.2f} +- "
          f"{100 * r.get('test_std', 0):.2f}"] for r in section["summary"]],
    )


# --------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    report: dict = {
        "machine": machine_record(threads=args.threads, device="cpu"), "dtype": "float32",
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    md: list[str] = []
    if "exact" in args.sections:
        rows = exactness(args)
        report["exactness"] = rows
        table = markdown_table(
            ["global tokens", "tokenizer", "n", "layers", "q/k form", "q/k width", "v width", "max abs diff",
             "<= 1e-5"],
            [[r["global_tokens"], r["tokenizer"], r["branches"], r["collapsed_depth"], r["qk_form"], r["qk_width"],
              r["v_width"], f"{r['max_abs_diff']:.2e}", "yes" if r["ok"] else "NO"] for r in rows],
        )
        md += ["## Exactness (multi-branch at lambda=1 vs collapsed, fp32)", "", table, ""]
    if "speed" in args.sections:
        rows = speed(args)
        report["speed"] = rows
        table = markdown_table(
            ["model", "layers", "q/k width", "params (M)", "GFLOPs", "FLOPs ratio", "latency b=1 (ms)",
             "latency ratio", f"throughput b={args.throughput_batch} (img/s)", "throughput ratio"],
            [[r["model"], r["layers"], r["qk_width"], f"{r['params'] / 1e6:.2f}", f"{r['gflops']:.3f}",
              f"{r['flops_ratio']:.3f}", f"{r['latency_ms']:.2f}", f"{r['latency_ratio']:.3f}",
              f"{r['throughput_img_s']:.1f}", f"{r['throughput_ratio']:.3f}"] for r in rows],
        )
        md += [f"## CPU speed, fp32, {args.threads} thread(s), {args.img_size} px, medians of interleaved rounds",
               "", table, ""]
    for section, run in (("digits", accuracy_digits), ("ucr", accuracy_ucr)):
        if section in args.sections:
            result = run(args)
            report[f"accuracy_{section}"] = result
            md += [f"## Accuracy: {result['dataset']} ({result['epochs']} epochs, {result['steps']} steps, join "
                   f"warm-up {result['join_warmup_steps']} steps, seeds {args.seeds})", "",
                   accuracy_table(result), ""]
    text = json.dumps(report, indent=2)
    print(text)
    print()
    print("\n".join(md))
    write_result(args.json, report, "\n".join(md))
    if "exactness" in report and not all(r["ok"] for r in report["exactness"]):
        print("exactness target missed (max abs diff > 1e-5)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
