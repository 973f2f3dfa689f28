"""Where a tstrain training step spends its time: data, forward, backward, optimizer, and the operators inside.

    python benchmarks/tstrain_step.py --dataset ArrowHead --data-dir $D --model patchtst \\
        --tstrain-args="--recipe fine-tune --init runs/series_encoder_ucr384_patchtst" --batch-sizes 32,16,64

The set, model, recipe and encoder are tstrain's, resolved exactly as ``tstrain`` resolves its flags: the same
data (resampled to the encoder's length under ``--init``, normalised as the recipe says), the same model (the
encoder's weights loaded), the same loss (the recipe's series augmentation and label smoothing inside the forward)
and the same AdamW. For each batch size, ``--steps`` steps are timed after ``--warmup`` (median per phase: data =
the next batch from tstrain's loader, forward = augmentation + model + loss, backward, optimizer = step + zeroing);
the FLOPs of a step (``torch.utils.flop_counter``) give the rate achieved, set against a plain fp32 matmul timed in
the same process. Then ``--profile-steps`` steps at the first batch size run under ``torch.profiler``: each
operator's own CPU time, summed by kind (matmuls, attention, convolutions and pooling of the patch features,
dropout, activations, normalisation, the optimizer's arithmetic, copies and the rest), per step, and what the
operators leave of the step (Python, the autograd engine and dispatch between operators).

Writes JSON and a markdown copy (``benchmarks/results/tstrain_step.json``, or --json).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from typing import Any

import torch

from jumbokit.benchmarking import machine_record, result_path, results_folder, write_result
from jumbokit.benchmarking.steps import gemm_gflops, phase_times
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)

# operator kinds of the profile, first match wins (names as torch.profiler reports them, "aten::" dropped)
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("scaled_dot_product", "_efficient_attention", "_flash_attention", "softmax")),
    ("matmul", ("mm", "addmm", "bmm", "matmul", "linear", "baddbmm")),
    ("convolution + pooling", ("conv", "max_pool", "avg_pool", "adaptive_")),
    ("dropout", ("dropout", "bernoulli")),
    ("activation", ("gelu", "relu", "silu", "tanh")),
    ("normalisation", ("layer_norm", "batch_norm", "group_norm")),
    ("optimizer", ("Optimizer.", "_foreach", "addcdiv", "addcmul", "lerp", "sqrt")),
    ("copies and layout", ("copy_", "_to_copy", "cat", "stack", "clone", "contiguous", "index", "gather", "pad")),
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--dataset", required=True, help="one tstrain set, e.g. ArrowHead")
    p.add_argument("--data-dir", default=None, help="tstrain's --data-dir (default: tstrain's)")
    p.add_argument("--model", default="patchtst", help="one tstrain model (default: %(default)s)")
    p.add_argument("--tstrain-args", default="--recipe fine-tune",
                   help="tstrain flags that set the run, written with '=' (default: %(default)s)")
    p.add_argument("--batch-sizes", default="32",
                   help="comma-separated batch sizes, the first also profiled (default: %(default)s)")
    p.add_argument("--steps", type=int, default=40, help="timed steps per batch size (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default: %(default)s)")
    p.add_argument("--profile-steps", type=int, default=20,
                   help="steps under torch.profiler at the first batch size; 0 = no profile (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    p.add_argument("--gemm", type=int, default=512, help="side of the reference matmul (default: %(default)s)")
    p.add_argument("--json", default=None, help="result file (default: benchmarks/results/tstrain_step.json)")
    return p


def positive_ints(text: str, flag: str) -> list[int]:
    """``"16,32"`` -> [16, 32]; SystemExit naming the flag for anything else."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise SystemExit(f"{flag} expects comma-separated positive integers, e.g. 16,32,64; got {text!r}")
    return values


def tstrain_run(args: argparse.Namespace) -> dict[str, Any]:
    """The data, config, model (encoder loaded), loss and optimizer one tstrain run of ``args.model`` would use."""
    from jumbokit.cli.series import sweep_settings
    from jumbokit.timeseries import run
    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.encoder_pretrain import encoder_state, init_for, init_length, init_paths, load_into
    from jumbokit.training import build_optimizer

    flags = shlex.split(args.tstrain_args)
    owned = sorted({"--dataset", "--model", "--data-dir"} & {f.split("=")[0] for f in flags})
    if owned:
        raise SystemExit(f"--tstrain-args: {', '.join(owned)} belong(s) to this script's own flags")
    try:
        settings = sweep_settings(["--dataset", args.dataset, "--model", args.model, *flags])
    except ValueError as err:
        raise SystemExit(f"--tstrain-args {args.tstrain_args!r}: tstrain refuses them ({err})") from None
    except SystemExit:  # argparse has printed tstrain's own message
        raise SystemExit(f"--tstrain-args {args.tstrain_args!r}: tstrain refuses them (its message above)") from None
    cfg = settings.config
    length = init_length(init_paths(cfg.init, [args.model])) if cfg.init else None
    data = load_dataset(args.dataset, protocol=cfg.protocol, split_seed=cfg.split_seed, data_dir=args.data_dir,
                        length=length, normalize=cfg.normalize, unequal_length=cfg.unequal_length)
    cfg = cfg.for_dataset(data.train.x)
    model = run.new_run_model(data, args.model, cfg, settings.dropouts[0], cfg.seed)
    if cfg.init:
        load_into(model, encoder_state(init_for(cfg.init, args.model)))
    model.train()
    optimizer = build_optimizer(model, run.train_config(cfg, settings.lrs[0], epochs=1, cpu=True))
    return {"data": data, "cfg": cfg, "model": model, "optimizer": optimizer,
            "loss": run.series_loss(cfg, data.num_classes, cfg.seed), "lr": settings.lrs[0],
            "dropout": settings.dropouts[0]}


def step_flops(model: torch.nn.Module, loss_fn, batch) -> tuple[int, int]:
    """(forward FLOPs, backward FLOPs) of one step on ``batch``."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        loss, _ = loss_fn(model, batch)
    forward = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        loss.backward()
    model.zero_grad(set_to_none=True)
    return forward, counter.get_total_flops()


def timed_steps(parts: dict[str, Any], batch_size: int, warmup: int, steps: int) -> dict[str, Any]:
    """Median seconds per phase of ``steps`` steps after ``warmup``, and the step's FLOPs and achieved rate."""
    from jumbokit.timeseries.run import series_loader

    model, optimizer, loss_fn = parts["model"], parts["optimizer"], parts["loss"]
    batches = iter(series_loader(parts["data"].train, batch_size, shuffle=True, seed=0, steps=warmup + steps))
    phases, batch = phase_times(lambda: next(batches), lambda b: loss_fn(model, b)[0], optimizer, warmup, steps)
    forward_flops, backward_flops = step_flops(model, loss_fn, batch)
    medians = {name: statistics.median(values) for name, values in phases.items()}
    compute = medians["forward"] + medians["backward"]
    return {"batch": int(batch[0].shape[0]), "ms_step": 1e3 * sum(medians.values()),
            **{f"ms_{name}": 1e3 * value for name, value in medians.items()},
            "gflop_step": (forward_flops + backward_flops) / 1e9,
            "gflops_forward_backward": (forward_flops + backward_flops) / compute / 1e9}


def kind_of(name: str) -> str:
    """The kind of a profiled operator (see KINDS), "other" when none matches."""
    short = name.removeprefix("aten::")
    for kind, patterns in KINDS:
        if any(short.startswith(p) or p in short for p in patterns):
            return kind
    return "other"


def profile_steps(parts: dict[str, Any], batch_size: int, steps: int) -> dict[str, Any]:
    """Each operator's own CPU time over ``steps`` steps under torch.profiler, summed by kind, in ms per step;
    ``between operators`` is the step's wall time that no operator's own time covers."""
    from torch.profiler import ProfilerActivity, profile

    from jumbokit.timeseries.run import series_loader

    model, optimizer, loss_fn = parts["model"], parts["optimizer"], parts["loss"]
    batches = list(series_loader(parts["data"].train, batch_size, shuffle=True, seed=1, steps=steps))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        for batch in batches:
            loss, _ = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        wall = time.perf_counter() - started
    by_kind: dict[str, float] = {kind: 0.0 for kind, _ in KINDS}
    by_kind["other"] = 0.0
    top = []
    for event in prof.key_averages():
        self_ms = event.self_cpu_time_total / 1e3 / steps
        if self_ms <= 0:
            continue
        by_kind[kind_of(event.key)] += self_ms
        top.append((self_ms, event.key, kind_of(event.key)))
    step_ms = 1e3 * wall / steps
    by_kind["between operators"] = max(0.0, step_ms - sum(by_kind.values()))
    top.sort(reverse=True)
    return {"batch": batch_size, "steps": steps, "ms_step_profiled": step_ms,
            "ms_by_kind": by_kind,
            "top_operators": [{"operator": k, "kind": c, "ms_step": ms} for ms, k, c in top[:15]]}


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    sizes = positive_ints(args.batch_sizes, "--batch-sizes")
    if args.steps < 1 or args.warmup < 0 or args.profile_steps < 0:
        raise SystemExit(f"expected --steps >= 1, --warmup >= 0, --profile-steps >= 0; got {args.steps}, "
                         f"{args.warmup}, {args.profile_steps}")
    torch.set_num_threads(args.threads)
    command = "python benchmarks/tstrain_step.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    parts = tstrain_run(args)
    data, cfg = parts["data"], parts["cfg"]
    rows = []
    for size in sizes:
        rows.append(timed_steps(parts, size, args.warmup, args.steps))
        print(f"batch {size}: {rows[-1]['ms_step']:.1f} ms a step", flush=True)
    gemm = gemm_gflops(args.gemm)
    for row in rows:
        row["of_gemm"] = row["gflops_forward_backward"] / gemm
    profiled = profile_steps(parts, sizes[0], args.profile_steps) if args.profile_steps else None
    params = sum(p.numel() for p in parts["model"].parameters())
    lines = [f"# Where a tstrain step spends its time: {args.model} on {args.dataset}", "", f"`{command}`", "",
             f"{data.name}: {len(data.train)} training series, {data.channels} channel(s) of {data.seq_len} steps, "
             f"{data.num_classes} classes; {args.model} with {params:,} parameters, "
             f"{int(parts['model'].num_patches)} patches; lr {parts['lr']}, dropout {parts['dropout']}, augmentation "
             f"{cfg.augment}; {args.threads} thread(s), fp32. Median ms per step over {args.steps} steps; the "
             f"forward includes the augmentation and the loss. A plain {args.gemm}x{args.gemm} fp32 matmul reaches "
             f"{gemm:.1f} GFLOP/s here.", "",
             markdown_table([{"batch": r["batch"], "ms a step": r["ms_step"], "data": r["ms_data"],
                              "forward": r["ms_forward"], "backward": r["ms_backward"],
                              "optimizer": r["ms_optimizer"], "GFLOP a step": r["gflop_step"],
                              "GFLOP/s (fwd+bwd)": r["gflops_forward_backward"], "of the matmul": r["of_gemm"],
                              "series/s": 1e3 * r["batch"] / r["ms_step"]} for r in rows],
                            formats={"ms a step": ".1f", "data": ".2f", "forward": ".1f", "backward": ".1f",
                                     "optimizer": ".1f", "GFLOP a step": ".2f", "GFLOP/s (fwd+bwd)": ".1f",
                                     "of the matmul": ".2f", "series/s": ".0f"}), ""]
    if profiled:
        total = profiled["ms_step_profiled"]
        lines += [f"Operators' own CPU time by kind, batch {profiled['batch']}, {profiled['steps']} steps under the "
                  f"profiler ({total:.1f} ms a step with its overhead):", "",
                  markdown_table([{"kind": k, "ms a step": v, "share": v / total}
                                  for k, v in sorted(profiled["ms_by_kind"].items(), key=lambda kv: -kv[1])],
                                 formats={"ms a step": ".1f", "share": ".1%"}), "",
                  "The largest operators:", "",
                  markdown_table(profiled["top_operators"], formats={"ms_step": ".2f"}), ""]
    text = "\n".join(lines)
    record = {"benchmark": "tstrain_step", "command": command, "dataset": args.dataset, "model": args.model,
              "tstrain_args": args.tstrain_args, "threads": args.threads, "params": params,
              "train_series": len(data.train), "seq_len": int(data.seq_len), "gemm_gflops": gemm, "rows": rows,
              "profile": profiled, "machine": machine_record(device="cpu")}
    print(text)
    write_result(args.json or result_path(RESULTS, "tstrain_step"), record, text)
    return record


if __name__ == "__main__":
    main()
