"""Deployment speed on CPU: ONNX Runtime vs PyTorch eager, fp32, for the models the papers deploy.

1. Progressive join (the progressive-reparameterization paper): ViT-Tiny (12 layers, CLS) against its collapsed
   6-, 4- and 3-layer forms (2-, 3- and 4-branch training forms at lambda = 1, jumbokit.reparameterize).
   Target: collapsed 6 layers / 12 layers latency at batch 1 <= 0.60 on ONNX Runtime.
2. Jumbo (the Jumbo paper): ViT-Tiny + Jumbo J=6 against ViT-Tiny + 16 registers (+ CLS).
   Target: Jumbo / registers throughput at batch 64 >= 0.95 on ONNX Runtime.
3. ONNX Runtime against PyTorch eager for every model above (latency and throughput ratios).

Latency is milliseconds per image at batch 1, throughput images per second at a large batch; every
(model, runtime) pair is warmed up first, then timed in interleaved rounds (the order reverses every round)
and the median round is reported; a ratio between two models is the median of their per-round ratios (the
per-round values are in the JSON: their spread shows how noisy the machine was). Each runtime's pairs are timed
apart from the other runtime's, after a short pause (a runtime's threads keep spinning for a moment after a call
and would slow the next call). Threads are fixed for both runtimes (ORT intra_op_num_threads,
torch.set_num_threads). Weights are random, norms and biases moved off their initial values (speed does not
depend on them); each ONNX graph is checked against PyTorch at export (max abs difference in the JSON).

    python benchmarks/deploy.py                                   # 224 px, 2 threads, the full measurement
    python benchmarks/deploy.py --img-size 64 --repeats 2 --throughput-batch 8 --json /tmp/deploy.json  # smoke

Prints a table and writes JSON (--json) and a markdown copy beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from jumbokit.encoders.flops import count_params, encoder_flops
from jumbokit.benchmarking import machine_record, result_path, results_folder, time_interleaved, write_result
from jumbokit.benchmarking.deploy_models import BASELINE, JUMBO, REGISTERS, SIX, build_models, ort_session
from jumbokit.export import export_onnx
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2, help="CPU threads of both runtimes (default: %(default)s)")
    p.add_argument("--img-size", type=int, default=224, help="image side in pixels (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=11, help="timed rounds, interleaved (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed calls per pair and batch before timing (default: %(default)s)")
    p.add_argument("--settle", type=float, default=0.2,
                   help="seconds of pause before each timed block, so that the threads of the previous call "
                        "stop spinning (default: %(default)s)")
    p.add_argument("--latency-iters", type=int, default=20, help="batch-1 calls per round (default: %(default)s)")
    p.add_argument("--throughput-batch", type=int, default=64, help="(default: %(default)s)")
    p.add_argument("--throughput-iters", type=int, default=2, help="large-batch calls per round (default: %(default)s)")
    p.add_argument("--opset", type=int, default=None,
                   help="ONNX opset of the exported graphs, e.g. 23 for ONNX's Attention operator (default: the "
                        "exporter's)")
    p.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    p.add_argument("--work-dir", type=Path, default=None, help="where the .onnx files go (default: a temp dir)")
    p.add_argument("--json", type=Path, default=result_path(RESULTS, "deploy"), help="(default: %(default)s)")
    args = p.parse_args(argv)
    for name in ("threads", "img_size", "repeats", "latency_iters", "throughput_batch", "throughput_iters"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.settle < 0:
        p.error(f"--settle must be >= 0 seconds, got {args.settle}")
    if args.img_size % 16:
        p.error(f"--img-size must be a multiple of the patch size 16, got {args.img_size}")
    return args


def runners(models: dict[str, nn.Module], args, work: Path) -> tuple[dict[tuple[str, str], Callable], dict]:
    """(model, runtime) -> a call on a numpy batch; and per model the export record (max abs diff, params)."""
    calls: dict[tuple[str, str], Callable] = {}
    records: dict[str, dict[str, Any]] = {}
    for i, (name, model) in enumerate(models.items()):
        example = torch.randn(2, 3, args.img_size, args.img_size)
        result = export_onnx(model, work / f"model{i}.onnx", example, dynamic_size=False, opset=args.opset)
        session = ort_session(result.path, args.threads)
        input_name = session.get_inputs()[0].name
        calls[(name, "eager")] = lambda x, m=model: m(torch.from_numpy(x))
        calls[(name, "onnxruntime")] = lambda x, s=session, k=input_name: s.run(None, {k: x})
        records[name] = {"layers": len(model.blocks), "params_m": round(count_params(model) / 1e6, 3),
                         "gflops": round(encoder_flops(model) / 1e9, 4),
                         "onnx_max_abs_diff": result.check.max_abs_diff}
        print(f"exported {name}: max abs difference {result.check.max_abs_diff:.2g}", file=sys.stderr, flush=True)
    return calls, records


def time_runtimes(calls: dict[tuple[str, str], Callable], batch, iters: int,
                  args) -> dict[tuple[str, str], list[float]]:
    """Seconds per call of every pair: each runtime's pairs timed as a group of their own (:func:`time_rounds`),
    so that one runtime's worker threads, still spinning after its call, never share the cores with a call
    of the other runtime that is being timed."""
    seconds: dict[tuple[str, str], list[float]] = {}
    for runtime in dict.fromkeys(key[1] for key in calls):
        seconds.update(time_rounds({key: call for key, call in calls.items() if key[1] == runtime}, batch, iters, args))
    return seconds


def time_rounds(calls: dict[tuple[str, str], Callable], batch, iters: int, args) -> dict[tuple[str, str], list[float]]:
    """Seconds per call of every pair, one value per round; rounds interleave the pairs (ABBA order), each
    block after a pause of ``--settle`` (the previous call's spinning worker threads go to sleep first)."""
    timings = time_interleaved({key: lambda c=call: c(batch) for key, call in calls.items()}, args.repeats, iters,
                               warmup=args.warmup, alternate=True, settle=args.settle)
    return {key: list(timing.rounds) for key, timing in timings.items()}


def summarise(latency, throughput, records, args) -> tuple[list[dict], dict[str, Any]]:
    rows = []
    for name, record in records.items():
        row = {"model": name, **record}
        for runtime in ("onnxruntime", "eager"):
            lat = statistics.median(latency[(name, runtime)])
            thr = args.throughput_batch / statistics.median(throughput[(name, runtime)])
            row[f"{runtime}_latency_ms"] = round(1000 * lat, 3)
            row[f"{runtime}_images_per_s"] = round(thr, 2)
        row["ort_vs_eager_latency"] = round(row["onnxruntime_latency_ms"] / row["eager_latency_ms"], 4)
        row["ort_vs_eager_throughput"] = round(row["onnxruntime_images_per_s"] / row["eager_images_per_s"], 4)
        rows.append(row)
    def per_round(a: str, b: str, runtime: str, times: dict, inverse: bool = False) -> list[float]:
        """a's time / b's time in each round (b / a for throughput): pairs measured seconds apart, so drift of
        the machine's speed between rounds cancels in their median."""
        return [tb / ta if inverse else ta / tb for ta, tb in zip(times[(a, runtime)], times[(b, runtime)])]

    ratios: dict[str, Any] = {}
    for runtime, short in (("onnxruntime", "ort"), ("eager", "eager")):
        rounds = {"collapsed6_vs_12_latency": per_round(SIX, BASELINE, runtime, latency),
                  "jumbo_vs_registers_throughput": per_round(JUMBO, REGISTERS, runtime, throughput, inverse=True)}
        for key, values in rounds.items():
            ratios[f"{key}_{short}"] = round(statistics.median(values), 4)
            if runtime == "onnxruntime":
                ratios[f"{key}_{short}_rounds"] = [round(r, 3) for r in values]
    flops = {row["model"]: row["gflops"] for row in rows}
    ratios["collapsed6_vs_12_flops"] = round(flops[SIX] / flops[BASELINE], 4)  # the floor an exact collapse sets
    ratios["targets_met"] = {"collapsed6_vs_12_latency_ort <= 0.60": ratios["collapsed6_vs_12_latency_ort"] <= 0.60,
                             "jumbo_vs_registers_throughput_ort >= 0.95":
                                 ratios["jumbo_vs_registers_throughput_ort"] >= 0.95}
    return rows, ratios


def environment(args) -> dict[str, Any]:
    import onnxruntime

    return {"command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
            "machine": machine_record(threads=args.threads, device="cpu"), "onnxruntime": onnxruntime.__version__,
            "img_size": args.img_size, "repeats": args.repeats, "settle_s": args.settle,
            "latency_iters": args.latency_iters,
            "throughput_batch": args.throughput_batch, "throughput_iters": args.throughput_iters, "dtype": "float32",
            "export": "jumbokit.export (torch.onnx.export dynamo=True), dynamic batch, fixed image size",
            "opset": args.opset or "exporter default",
            "onnxruntime_session": "CPUExecutionProvider, ORT_ENABLE_ALL, sequential, inter_op_num_threads=1"}


COLUMNS = ["model", "layers", "params_m", "gflops", "onnxruntime_latency_ms", "eager_latency_ms", "ort_vs_eager_latency",
           "onnxruntime_images_per_s", "eager_images_per_s", "ort_vs_eager_throughput", "onnx_max_abs_diff"]


def report(rows: list[dict], ratios: dict[str, Any], env: dict[str, Any]) -> str:
    lines = ["# Deployment speed: ONNX Runtime vs PyTorch eager (CPU, fp32)", "",
             f"`{env['command']}`: {env['threads']} threads, {env['img_size']} px, latency at batch 1, throughput "
             f"at batch {env['throughput_batch']}, median of {env['repeats']} interleaved rounds per runtime; torch "
             f"{env['machine']['torch']}, onnxruntime {env['onnxruntime']}, {env['machine']['cores']} CPUs "
             f"({env['machine']['cpu']}).", "",
             markdown_table(rows, COLUMNS, digits=4),
             markdown_table([{"ratio": k, "value": v} for k, v in ratios.items()
                             if k != "targets_met" and not k.endswith("_rounds")])]
    lines += [f"Per round, ONNX Runtime: {k.removesuffix('_rounds')} {v}" for k, v in ratios.items()
              if k.endswith("_rounds")] + [""]
    targets = ratios["targets_met"].items()
    lines += ["Targets: " + ", ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in targets)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    models = build_models(args.img_size, args.seed)
    with tempfile.TemporaryDirectory(prefix="jumbokit_deploy_") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        calls, records = runners(models, args, work)
        gen = torch.Generator().manual_seed(args.seed + 1)
        one = torch.randn(1, 3, args.img_size, args.img_size, generator=gen).numpy()
        many = torch.randn(args.throughput_batch, 3, args.img_size, args.img_size, generator=gen).numpy()
        with torch.inference_mode():
            latency = time_runtimes(calls, one, args.latency_iters, args)
            throughput = time_runtimes(calls, many, args.throughput_iters, args)
    rows, ratios = summarise(latency, throughput, records, args)
    env = environment(args)
    result = {"benchmark": "deploy", "environment": env, "rows": rows, "ratios": ratios}
    text = report(rows, ratios, env)
    print(text)
    write_result(args.json, result, text)
    return result


if __name__ == "__main__":
    main()
