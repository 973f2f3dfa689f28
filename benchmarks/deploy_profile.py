"""Where the batch-1 time goes: ONNX Runtime's per-operator profile of ViT-Tiny (12 layers) and its exact
collapsed 6-layer form, beside their analytic FLOPs.

The collapsed model's FLOPs set a floor on its latency ratio (an exact collapse keeps both branches' q/k width);
this script shows how close ONNX Runtime gets to it, operator type by operator type. With
``--transformer-optimizer`` it also runs both graphs through ``onnxruntime.transformers.optimizer`` (model type
``vit``) and reports the fusions it found and the profile of the optimised graphs.

    python benchmarks/deploy_profile.py                       # 224 px, 1 thread, 60 profiled calls per model
    python benchmarks/deploy_profile.py --transformer-optimizer

Prints a table and writes JSON (--json) and a markdown copy beside it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from jumbokit.benchmarking import machine_record, result_path, results_folder, time_interleaved, write_result
from jumbokit.benchmarking.deploy_models import BASELINE, SIX, build_models, ort_session
from jumbokit.encoders.flops import encoder_flops
from jumbokit.export import export_onnx
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

MODELS = (BASELINE, SIX)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads (default: %(default)s)")
    p.add_argument("--img-size", type=int, default=224, help="image side in pixels (default: %(default)s)")
    p.add_argument("--calls", type=int, default=60, help="profiled batch-1 calls per model (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=10, help="unprofiled calls first (default: %(default)s)")
    p.add_argument("--transformer-optimizer", action="store_true",
                   help="also profile the graphs after onnxruntime.transformers.optimizer (model type vit)")
    p.add_argument("--json", type=Path, default=result_path(RESULTS, "deploy_profile"),
                   help="(default: %(default)s)")
    args = p.parse_args(argv)
    for name in ("threads", "calls"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup must be >= 0, got {args.warmup}")
    if args.img_size % 16:
        p.error(f"--img-size must be a multiple of the patch size 16, got {args.img_size}")
    return args


def profile_ops(path: Path, batch: np.ndarray, args) -> dict[str, float]:
    """Microseconds per call spent in each operator type, from ONNX Runtime's own session profiler."""
    session = ort_session(path, args.threads, profile=True)
    feed = {session.get_inputs()[0].name: batch}
    for _ in range(args.warmup + args.calls):
        session.run(None, feed)
    profile_file = session.end_profiling()
    events = json.loads(Path(profile_file).read_text())
    os.remove(profile_file)
    runs = sorted(event["ts"] for event in events if event.get("name") == "model_run")
    first_timed = runs[args.warmup]  # the warm-up calls' operator events are left out
    per_op: collections.Counter = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= first_timed:
            per_op[event["args"]["op_name"]] += event["dur"] / args.calls
    return dict(per_op)


def wall_us(path: Path, batch: np.ndarray, args) -> float:
    """Median wall microseconds of one batch-1 call, profiler off (the time a user sees)."""
    session = ort_session(path, args.threads)
    feed = {session.get_inputs()[0].name: batch}
    timing = time_interleaved({"call": lambda: session.run(None, feed)}, args.calls, warmup=args.warmup)["call"]
    return 1e6 * timing.median


def profile(paths: dict[str, Path], batch: np.ndarray, args) -> list[dict[str, Any]]:
    """The per-operator comparison, closed by the kernels' total and the median wall time of a call."""
    rows = compare({name: profile_ops(paths[name], batch, args) for name in MODELS})
    wall = {name: wall_us(paths[name], batch, args) for name in MODELS}
    rows.append({"op": "wall time of a call (median, profiler off)", "12 layers (us)": round(wall[MODELS[0]]),
                 "collapsed 6 (us)": round(wall[MODELS[1]]), "ratio": round(wall[MODELS[1]] / wall[MODELS[0]], 3)})
    return rows


def optimise(path: Path, out: Path) -> dict[str, int]:
    """Run the ONNX Runtime transformer optimizer over ``path``; the fusions it made, by kind."""
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(str(path), model_type="vit", num_heads=0, hidden_size=0)
    model.save_model_to_file(str(out))
    return {kind: n for kind, n in model.get_fused_operator_statistics().items() if n}


def compare(profiles: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One row per operator type: microseconds per call in each model and collapsed / 12 layers."""
    base, six = profiles[BASELINE], profiles[SIX]
    ops = sorted(set(base) | set(six), key=lambda op: -base.get(op, 0.0))
    rows = [{"op": op, "12 layers (us)": round(base.get(op, 0.0)), "collapsed 6 (us)": round(six.get(op, 0.0)),
             "ratio": round(six.get(op, 0.0) / base[op], 3) if base.get(op) else None} for op in ops]
    total = {"op": "all kernels", "12 layers (us)": round(sum(base.values())), "collapsed 6 (us)": round(sum(six.values()))}
    total["ratio"] = round(total["collapsed 6 (us)"] / total["12 layers (us)"], 3)
    return rows + [total]


def main(argv=None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    built = build_models(args.img_size)
    batch = torch.randn(1, 3, args.img_size, args.img_size, generator=torch.Generator().manual_seed(1)).numpy()
    result: dict[str, Any] = {"benchmark": "deploy_profile", "command": shlex.join(sys.argv), "threads": args.threads,
                              "machine": machine_record(threads=args.threads, device="cpu"),
                              "img_size": args.img_size, "calls": args.calls}
    result["gflops"] = {name: round(encoder_flops(built[name]) / 1e9, 4) for name in MODELS}
    result["flops_ratio"] = round(result["gflops"][SIX] / result["gflops"][BASELINE], 4)
    with tempfile.TemporaryDirectory(prefix="jumbokit_profile_") as tmp:
        paths = {name: export_onnx(built[name], Path(tmp) / f"m{i}.onnx", torch.randn(2, 3, args.img_size,
                                   args.img_size), dynamic_size=False).path for i, name in enumerate(MODELS)}
        result["plain"] = profile(paths, batch, args)
        if args.transformer_optimizer:
            optimised = {name: Path(tmp) / f"o{i}.onnx" for i, name in enumerate(MODELS)}
            result["fusions"] = {name: optimise(paths[name], optimised[name]) for name in MODELS}
            result["optimised"] = profile(optimised, batch, args)
    text = report(result)
    print(text)
    write_result(args.json, result, text)
    return result


def report(result: dict[str, Any]) -> str:
    columns = ["op", "12 layers (us)", "collapsed 6 (us)", "ratio"]
    lines = ["# ONNX Runtime operator profile: ViT-Tiny 12 layers vs collapsed 6 layers (batch 1, fp32)", "",
             f"`{result['command']}`: {result['threads']} thread(s), {result['img_size']} px, "
             f"{result['calls']} profiled calls per model. FLOPs: {result['gflops']} (collapsed / 12 = "
             f"{result['flops_ratio']}).", "", markdown_table(result["plain"][:12] + result["plain"][-2:], columns)]
    if "optimised" in result:
        lines += [f"After onnxruntime.transformers.optimizer (fusions: {result['fusions']}):", "",
                  markdown_table(result["optimised"][:12] + result["optimised"][-2:], columns)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
