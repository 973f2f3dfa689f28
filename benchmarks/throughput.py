"""Inference throughput, side by side in one run (interleaved repeats, median).

1. jumbokit ViT vs timm's VisionTransformer with the identical configuration (ViT-Tiny width, 16 registers
   + CLS, no_embed_class, 128 px): ratio = jumbokit / timm images per second.
2. Jumbo (J=6) vs registers (R=16) at D=128 and D=192: throughput ratio, parameters, peak memory.

    python benchmarks/throughput.py                       # CPU, fp32, batch 64, 128 px
    python benchmarks/throughput.py --device cuda --compile --bf16 --batch-size 512
    python benchmarks/throughput.py --device cuda --tf32 --batch-size 256 --img-size 224   # fp32 on TF32 cores

Prints a table and JSON (also written to --json, and a markdown copy beside it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from jumbokit.benchmarking import machine_record, result_path, results_folder, steps, time_interleaved, write_result
from jumbokit.encoders import from_timm
from jumbokit.encoders.flops import count_params, encoder_flops
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--img-size", type=int, default=128)
    p.add_argument("--repeats", type=int, default=7, help="timed rounds per model, interleaved (default: 7)")
    p.add_argument("--iters", type=int, default=3, help="forward passes per timed round (default: 3)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--compile", action="store_true", help="torch.compile every model")
    p.add_argument("--bf16", action="store_true", help="autocast to bfloat16 (slow on most CPUs)")
    p.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=False,
                   help="CUDA: fp32 matmuls on TF32 tensor cores (jumbokit.training.configure_tf32; default: off, "
                        "plain fp32)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--skip-memory", action="store_true", help="skip the per-model peak-memory subprocesses")
    p.add_argument("--json", type=Path, default=result_path(RESULTS, "throughput"), help="(default: %(default)s)")
    p.add_argument("--_memory-child", dest="memory_child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def vit_pair(args) -> dict[str, torch.nn.Module]:
    """timm ViT-Tiny+16 registers and the jumbokit model converted from it (identical weights)."""
    import timm

    ref = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=args.img_size, reg_tokens=16,
                            no_embed_class=True, num_classes=1000)
    return {"timm ViT-Tiny+R16": ref, "jumbokit ViT-Tiny+R16": from_timm(ref)}


def jumbo_vs_registers(args, dim: int) -> dict[str, torch.nn.Module]:
    return steps.jumbo_vs_registers(args.img_size, dim)


def build(name: str, args) -> torch.nn.Module:
    for group in (vit_pair(args), jumbo_vs_registers(args, 128), jumbo_vs_registers(args, 192)):
        if name in group:
            return group[name]
    raise KeyError(name)


def prepare(model: torch.nn.Module, args) -> torch.nn.Module:
    model = model.eval().to(args.device)
    if args.compile:
        model = torch.compile(model)
    return model


def autocast(args):
    if args.bf16:
        return torch.autocast(device_type=torch.device(args.device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def sync(args) -> None:
    if torch.device(args.device).type == "cuda":
        torch.cuda.synchronize()


def time_group(models: dict[str, torch.nn.Module], args) -> dict[str, list[float]]:
    """Images per second for each model, one value per round; rounds interleaved so drift hits all models alike,
    the order alternating every round (ABBA) because the first model of a round measurably runs faster here."""
    x = torch.randn(args.batch_size, 3, args.img_size, args.img_size, device=args.device)
    with torch.inference_mode(), autocast(args):
        timings = time_interleaved({name: lambda m=model: m(x) for name, model in models.items()}, args.repeats,
                                   args.iters, warmup=args.warmup, alternate=True,
                                   sync=lambda: sync(args))
    return {name: [args.batch_size / seconds for seconds in t.rounds] for name, t in timings.items()}


def peak_memory_mib(name: str, args) -> float:
    """Peak memory of one inference batch above the loaded model, measured in a fresh process."""
    if torch.device(args.device).type == "cuda":
        model = prepare(build(name, args), args)
        x = torch.randn(args.batch_size, 3, args.img_size, args.img_size, device=args.device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.inference_mode(), autocast(args):
            model(x)
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    cmd = [sys.executable, __file__, "--_memory-child", name, "--batch-size", str(args.batch_size),
           "--img-size", str(args.img_size)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return float(out.stdout.strip().splitlines()[-1])


def memory_child(args) -> None:
    import psutil

    model = build(args.memory_child, args).eval()
    x = torch.randn(args.batch_size, 3, args.img_size, args.img_size)
    base = psutil.Process().memory_info().rss
    with torch.inference_mode():
        model(x)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    print((peak - base) / 2**20)


def summarise(group: str, rates: dict[str, list[float]], models: dict[str, torch.nn.Module], args) -> list[dict]:
    rows = []
    names = list(rates)
    reference = statistics.median(rates[names[0]])
    for name in names:
        model = models[name]
        core = model if hasattr(model, "config") else None
        rows.append({
            "group": group,
            "model": name,
            "images_per_s": round(statistics.median(rates[name]), 2),
            "ratio_vs_first": round(statistics.median(rates[name]) / reference, 4),
            "spread_pct": round(100 * (max(rates[name]) - min(rates[name])) / statistics.median(rates[name]), 1),
            "params_m": round(count_params(model) / 1e6, 3),
            "gflops_per_image": round(encoder_flops(core) / 1e9, 3) if core is not None else None,
            "peak_mem_mib": None if args.skip_memory else round(peak_memory_mib(name, args), 1),
        })
    return rows


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.memory_child:
        memory_child(args)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    from jumbokit.training import configure_tf32

    configure_tf32(args.tf32, args.device)
    torch.manual_seed(0)
    groups = {
        "jumbokit vs timm": vit_pair(args),
        "Jumbo vs registers, D=128": jumbo_vs_registers(args, 128),
        "Jumbo vs registers, D=192": jumbo_vs_registers(args, 192),
    }
    rows = []
    for group, models in groups.items():
        prepared = {name: prepare(m, args) for name, m in models.items()}
        rates = time_group(prepared, args)
        rows += summarise(group, rates, models, args)
    result = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("json", "memory_child")},
        "machine": machine_record(device=args.device),
        "rows": rows,
    }
    header = f"{'group':28} {'model':26} {'img/s':>9} {'ratio':>7} {'spread%':>8} {'params M':>9} {'GFLOPs':>7} {'peak MiB':>9}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['group']:28} {r['model']:26} {r['images_per_s']:9.1f} {r['ratio_vs_first']:7.3f} "
              f"{r['spread_pct']:8.1f} {r['params_m']:9.2f} {r['gflops_per_image'] or float('nan'):7.3f} "
              f"{r['peak_mem_mib'] if r['peak_mem_mib'] is not None else float('nan'):9.1f}")
    print(json.dumps(result))
    write_result(args.json, result, f"# Inference throughput ({result['machine']['device']}, batch {args.batch_size}, "
                 f"{args.img_size} px)\n\n{markdown_table(rows)}")


if __name__ == "__main__":
    main()
