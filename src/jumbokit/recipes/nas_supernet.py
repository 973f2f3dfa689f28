"""Train a weight-sharing ViT-Res supernet with multi-architecture sampling (seed 002, Sec. 2.3).

    accelerate launch recipes/nas_supernet.py                          # the digits space on 32 px digits
    accelerate launch recipes/nas_supernet.py --space vit_resnas_tiny --dataset folder:/data/imagenet \\
        --img-size 224 --epochs 120 --batch-size 128 --num-archs 16

Every step splits the batch into --num-archs sub-batches, each trained as its own sampled architecture in
one forward / backward pass (masked channels, masked LayerNorm). The width warm-up opens the choices from
the largest network during the first --warmup fraction of training; skippable blocks are removed only after
it. The run directory follows the other recipes (config.json, metrics.jsonl, checkpoints/, model.safetensors,
report.md); the validation metric is the largest and the smallest network's accuracy. Search it with
recipes/nas_search.py.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

from jumbokit import nas
from jumbokit.data import build_dataset, make_loader
from jumbokit.encoders.flops import count_params
from jumbokit.training import (
    RunDir,
    add_common_args,
    classification_loss,
    default_out_dir,
    evaluate_classifier,
    fit,
    launch_state,
    markdown_table,
    prepare_out_dir,
    run_cli,
    setup_threads,
    train_config_from_args,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    add_common_args(parser, model=None, epochs=30, batch_size=64, lr=1e-3, weight_decay=0.05, warmup_epochs=1.0,
                    grad_clip=1.0)
    nas_args = parser.add_argument_group("supernet")
    nas_args.add_argument("--space", default="digits", choices=sorted(nas.SPACES),
                          help="search space (default: %(default)s)")
    nas_args.add_argument("--num-archs", type=int, default=16,
                          help="architectures per batch, N_a (seed: 16; default: %(default)s)")
    nas_args.add_argument("--warmup", type=float, default=0.25,
                          help="fraction of training over which the width choices open (seed: 0.25)")
    nas_args.add_argument("--label-smoothing", type=float, default=0.1, help="(default: %(default)s)")
    return parser


class SupernetLoss:
    """Cross-entropy of the supernet with this step's N_a sampled architectures (one per sub-batch)."""

    def __init__(self, sampler: nas.MultiArchSampler, label_smoothing: float) -> None:
        self.sampler = sampler
        self.archs = [sampler.space.largest()]
        self.inner = classification_loss(nn.CrossEntropyLoss(label_smoothing=label_smoothing), forward=self.forward)

    def on_step(self, step: int, total_steps: int) -> None:
        self.archs = self.sampler.sample(step, total_steps)

    def forward(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return model(x, self.archs[: x.shape[0]])

    def __call__(self, model: nn.Module, batch):
        return self.inner(model, batch)


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    setup_threads(args)
    if args.num_archs < 1 or args.num_archs > args.batch_size:
        raise ValueError(f"--num-archs must be in [1, --batch-size={args.batch_size}], got {args.num_archs}")
    state = launch_state(args.cpu)
    progress = not args.no_progress and state.is_main_process
    torch.manual_seed(args.seed)
    space = nas.search_space(args.space)
    out = Path(args.out) if args.out else default_out_dir("nas_supernet", args.space, args.dataset)
    prepare_out_dir(out, args.resume, args.overwrite)

    img_size = args.img_size or (space.img_size if args.dataset == "digits" else None)
    common = dict(img_size=img_size, in_chans=args.in_chans, progress=progress, skip_corrupt=args.skip_corrupt)
    train = build_dataset(args.dataset, "train", "supervised", max_samples=args.max_train_samples, seed=args.seed,
                          **common)
    val = build_dataset(args.dataset, "val", "eval", **common)
    supernet = nas.Supernet(space, train.num_classes, train.img_size, train.in_chans)
    loss_fn = SupernetLoss(nas.MultiArchSampler(space, args.num_archs, args.warmup, args.seed), args.label_smoothing)
    train_loader = make_loader(train, args.batch_size, num_workers=args.num_workers, seed=args.seed,
                               world_size=state.num_processes)
    val_loader = make_loader(val, 256, num_workers=args.num_workers)
    probes = {"largest": space.largest(), "smallest": space.smallest()}

    def eval_fn(model: nn.Module) -> dict:
        return {f"val_{name}_acc1": evaluate_classifier(model, val_loader, forward=lambda m, x, a=arch: m(x, a))["acc1"]
                for name, arch in probes.items()}

    if progress:
        print(f"supernet of space {args.space!r}: {count_params(supernet) / 1e6:.2f}M params, "
              f"{args.num_archs} architectures per batch, warm-up {args.warmup:.0%} | train {len(train)}, "
              f"val {len(val)} | out {out}")
    started = time.time()
    result = fit(supernet, train_loader, loss_fn, train_config_from_args(args), out_dir=out, eval_fn=eval_fn,
                 run_config={"recipe": "nas_supernet", "space": space.to_dict(), "args": vars(args),
                             "data": {k: v for k, v in train.info().items() if k not in ("split", "task")}})
    train_time = time.time() - started
    if not result.accelerator.is_main_process:
        return {}
    rows = []
    for name, arch in probes.items():
        metrics = evaluate_classifier(result.model, val_loader, forward=lambda m, x, a=arch: m(x, a))
        flops = space.flops(arch, train.img_size, train.in_chans, train.num_classes)
        rows.append({"subnet": name, "MFLOPs": round(flops / 1e6, 2), "val_acc1": round(100 * metrics["acc1"], 2)})
    RunDir(out).write_report(
        f"# Supernet: space {args.space} on {args.dataset}\n\n"
        f"- {count_params(supernet) / 1e6:.2f}M parameters; {args.epochs} epochs, batch {args.batch_size}, "
        f"{args.num_archs} architectures per batch, width warm-up over {args.warmup:.0%} of training\n"
        f"- training time: {train_time:.0f} s ({result.accelerator.device})\n\n"
        f"## Inherited-weight accuracy\n\n{markdown_table(rows, list(rows[0]))}\n"
        f"Search it: `python recipes/nas_search.py --supernet {out} --flops-of vit_pico_cls`\n")
    print(f"done in {train_time:.0f} s: " + ", ".join(f"{r['subnet']} val {r['val_acc1']}%" for r in rows)
          + f"  -> {out}")
    return {"rows": rows, "out": str(out), "train_time_s": train_time}
