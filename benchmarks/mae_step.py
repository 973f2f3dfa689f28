"""Where an MAE training step of the main job spends its time: data / forward / backward / optimizer.

    python benchmarks/mae_step.py                       # the main job's step (digits, vit_pico_jumbo, batch 64)
    python benchmarks/mae_step.py --threads 1 --label "1 thread"
    python benchmarks/mae_step.py --model vit_pico_cls --append

The model, data, transform, loader and optimizer are those of ``accelerate launch recipes/mae_pretrain.py`` with its
defaults. Each phase is timed over ``--steps`` steps after ``--warmup`` steps (median and p90 per step). FLOPs of a
step come from ``torch.utils.flop_counter.FlopCounterMode`` (forward and backward); the achieved rate is set against
a plain fp32 matmul (``--gemm`` square) timed in the same process with the same threads. Rows are written to
``benchmarks/results/mae_step.{json,md}`` (``--append`` adds to the rows already there).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import torch

from jumbokit.benchmarking import machine_record, results_folder, write_result
from jumbokit.benchmarking.steps import gemm_gflops, phase_times
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

def step_flops(model: torch.nn.Module, images: torch.Tensor) -> tuple[int, int]:
    """(forward FLOPs, backward FLOPs) of one MAE step on ``images``."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        loss = model(images).loss
    forward = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        loss.backward()
    model.zero_grad(set_to_none=True)
    return forward, counter.get_total_flops()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from jumbokit.recipes import mae_pretrain

    from jumbokit.data import make_loader
    from jumbokit.cli.data import data_settings_from_args
    from jumbokit.ssl import build_image_mae
    from jumbokit.training import TrainConfig, build_optimizer

    recipe = mae_pretrain.build_parser().parse_args(["--model", args.model, "--batch-size", str(args.batch_size)])
    mae_pretrain.resolve_recipe_defaults(recipe)
    train = data_settings_from_args(recipe).build("train", "mae", seed=recipe.seed)
    torch.manual_seed(recipe.seed)
    model = build_image_mae(recipe.model, train.img_size, train.in_chans, patch_size=recipe.patch_size or 4,
                            depth=recipe.depth, pos_embed=recipe.pos_embed, decoder_dim=recipe.decoder_dim,
                            decoder_depth=recipe.decoder_depth, decoder_heads=recipe.decoder_heads,
                            mask_ratio=recipe.mask_ratio).train()
    optimizer = build_optimizer(model, TrainConfig(lr=1e-4, weight_decay=recipe.weight_decay,
                                                   betas=tuple(recipe.betas)))
    loader = make_loader(train, args.batch_size, seed=recipe.seed)

    batches, epoch = iter(()), 0

    def next_batch():
        nonlocal batches, epoch
        batch = next(batches, None)
        if batch is None:
            loader.sampler.set_epoch(epoch)
            epoch += 1
            batches = iter(loader)
            batch = next(batches)
        return batch

    phases, batch = phase_times(next_batch, lambda b: model(b[0]).loss, optimizer, args.warmup, args.steps)

    forward_flops, backward_flops = step_flops(model, batch[0])
    gemm = gemm_gflops(args.gemm)
    medians = {name: statistics.median(v) for name, v in phases.items()}
    step_s = sum(medians.values())
    row: dict[str, Any] = {
        "label": args.label, "model": args.model, "batch": args.batch_size, "threads": torch.get_num_threads(),
        "s_step": round(step_s, 4), "img_s": round(args.batch_size / step_s, 1),
        **{f"s_{name}": round(m, 4) for name, m in medians.items()},
        "p90_step_s": round(statistics.quantiles([sum(x) for x in zip(*phases.values())], n=10)[-1], 4),
        "gflop_step": round((forward_flops + backward_flops) / 1e9, 2),
        "gflops_fwd": round(forward_flops / medians["forward"] / 1e9, 1),
        "gflops_bwd": round(backward_flops / medians["backward"] / 1e9, 1),
        "gflops_gemm": round(gemm, 1),
    }
    row["compute_vs_gemm"] = round((forward_flops + backward_flops)
                                   / (medians["forward"] + medians["backward"]) / 1e9 / gemm, 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--model", default="vit_pico_jumbo", help="zoo encoder (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=64, help="(default: %(default)s)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: what the recipes choose, see jumbokit.training.threads)")
    parser.add_argument("--gemm", type=int, default=1024, help="side of the reference matmul (default: %(default)s)")
    parser.add_argument("--label", default="", help="row label, e.g. before / after")
    parser.add_argument("--append", action="store_true", help="add to the rows already in the results files")
    parser.add_argument("--out", default=str(RESULTS), help="results folder (default: %(default)s)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    else:
        try:
            from jumbokit.training.threads import configure_threads
            configure_threads()
        except ImportError:  # a tree without the thread policy: torch's default
            pass
    row = measure(args)
    row["machine"] = machine_record(device="cpu")

    out = Path(args.out)
    json_path = out / "mae_step.json"
    rows = json.loads(json_path.read_text())["rows"] if args.append and json_path.exists() else []
    rows.append(row)
    columns = ["label", "model", "threads", "s_step", "img_s", "s_data", "s_forward", "s_backward", "s_optimizer",
               "gflop_step", "gflops_fwd", "gflops_bwd", "gflops_gemm", "compute_vs_gemm"]
    lines = ["# MAE step of the main job: data / forward / backward / optimizer (CPU, fp32)", "",
             "Median seconds per step; GFLOP/s achieved by forward and backward vs a plain fp32 "
             f"{args.gemm}x{args.gemm} matmul in the same process.", "",
             markdown_table(rows, columns)]
    markdown = "\n".join(lines)
    print(json.dumps(row))
    print(markdown)
    write_result(json_path, {"rows": rows}, markdown)


if __name__ == "__main__":
    main()
