"""Train a weight-sharing ViT-Res supernet with multi-architecture sampling (the ViT-ResNAS paper, Sec. 2.3).

    accelerate launch recipes/nas_supernet.py                          # the digits space on 32 px digits
    accelerate launch recipes/nas_supernet.py --space vit_resnas_tiny --dataset folder:/data/imagenet \\
        --img-size 224 --epochs 120 --batch-size 128 --num-archs 16

Every step splits the batch into --num-archs sub-batches, each trained as its own sampled architecture in
one forward / backward pass (masked channels, masked LayerNorm). The width warm-up opens the choices from
the largest network during the first --warmup fraction of training; skippable blocks are removed only after
it. The run directory follows the other recipes (config.json, metrics.jsonl, checkpoints/, model.safetensors,
report.md); the validation metrics are the largest and the smallest network's top-1 (%), val_largest_top1 and
val_smallest_top1. Search it with `jumbokit nas-search --checkpoint RUN`.
"""
from __future__ import annotations

import argparse
import logging
import time
from functools import partial

import torch

from jumbokit import nas
from jumbokit.cli.training import add_common_args, default_out_dir

logger = logging.getLogger(__name__)


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
                          help="architectures per batch, N_a (default: %(default)s, as in the paper)")
    nas_args.add_argument("--warmup", type=float, default=0.25,
                          help="fraction of training over which the width choices open (default: %(default)s, as in "
                               "the paper)")
    nas_args.add_argument("--label-smoothing", type=float, default=0.1,
                          help="label smoothing of the cross-entropy (default: %(default)s)")
    parser.add_argument("--debug", action="store_true", help="print the full traceback of errors (default: off)")
    return parser


def _subnet_forward(supernet, images: torch.Tensor, arch: dict) -> torch.Tensor:
    """Logits of the supernet's ``arch`` (the per-epoch evaluation of a probe architecture)."""
    return supernet(images, arch)


def main(argv: list[str] | None = None) -> dict:
    from jumbokit.cli.resume import parse_run_args

    parsed = parse_run_args(build_parser(), argv, lambda a: default_out_dir("nas_supernet", a.space, a.dataset))
    args = parsed.args  # on --resume: the flags the run was started with
    from jumbokit.cli.data import data_settings_from_args
    from jumbokit.data import check_same_classes, make_loader
    from jumbokit.encoders.flops import count_params
    from jumbokit.logs import configure_logging
    from jumbokit.nas.report import supernet_rows, write_supernet_report
    from jumbokit.cli.training import prepare_out_dir, setup_threads, train_config_from_args
    from jumbokit.training import fit, launch_state

    if args.num_archs < 1 or args.num_archs > args.batch_size:
        raise ValueError(f"--num-archs must be in [1, --batch-size={args.batch_size}], got {args.num_archs}")
    configure_logging()
    setup_threads(args)
    state = launch_state(args.cpu)
    progress = not args.no_progress and state.is_main_process
    torch.manual_seed(args.seed)
    space = nas.search_space(args.space)
    out = prepare_out_dir(parsed.out, args.resume, args.overwrite)
    img_size = args.img_size or (space.img_size if args.dataset == "digits" else None)
    data = data_settings_from_args(args)
    train = data.build("train", "supervised", seed=args.seed, progress=progress, img_size=img_size)
    val = data.build("val", "eval", like=train, progress=progress)
    check_same_classes(train, val)
    supernet = nas.Supernet(space, train.num_classes, train.img_size, train.in_chans)
    loss_fn = nas.SupernetLoss(nas.MultiArchSampler(space, args.num_archs, args.warmup, args.seed), args.label_smoothing)
    train_loader = make_loader(train, args.batch_size, num_workers=args.num_workers, seed=args.seed,
                               world_size=state.num_processes)
    val_loader = make_loader(val, 256, num_workers=args.num_workers)
    probes = {"largest": space.largest(), "smallest": space.smallest()}
    logger.info("supernet of space %r: %.2fM params, %d architectures per batch, warm-up %.0f%% | train %d, val %d "
                "| out %s", args.space, count_params(supernet) / 1e6, args.num_archs, 100 * args.warmup, len(train),
                len(val), out)
    cfg = train_config_from_args(args)
    started = time.time()
    result = fit(supernet, train_loader, loss_fn, cfg, out_dir=out, accelerator=nas.supernet_accelerator(cfg, out),
                 eval_loaders={f"val_{name}": val_loader for name in probes},  # on every process, gathered
                 eval_forward={f"val_{name}": partial(_subnet_forward, arch=arch) for name, arch in probes.items()},
                 run_config={"recipe": "nas_supernet", "space": space.to_dict(), "args": vars(args),
                             "data": {k: v for k, v in train.info().items() if k not in ("split", "task")}},
                 resume_record=parsed.resume_record)
    train_time = time.time() - started
    if not result.accelerator.is_main_process:
        return {}
    rows = supernet_rows(result.model, val_loader, probes, train.img_size, train.in_chans, train.num_classes)
    write_supernet_report(out, rows, [
        f"Supernet: space {args.space} on {args.dataset}",
        f"{count_params(supernet) / 1e6:.2f}M parameters; {args.epochs} epochs, batch {args.batch_size}, "
        f"{args.num_archs} architectures per batch, width warm-up over {args.warmup:.0%} of training",
        f"training time: {train_time:.0f} s ({result.accelerator.device})"])
    print(f"done in {train_time:.0f} s: " + ", ".join(f"{r['subnet']} val_top1 {r['val_top1']:.2f}%" for r in rows)
          + f"  -> {out}")
    return {"rows": rows, "out": str(out), "train_time_s": train_time}
