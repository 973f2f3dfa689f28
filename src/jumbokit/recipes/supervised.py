"""Supervised training of any zoo classifier (from scratch or from a checkpoint) on an image dataset.

    jumbokit supervised --dataset digits --model vit_tiny_jumbo --out runs/sup
    jumbokit supervised --dataset folder:/data/digits28 --model vit_pico_cls   # small files: defaults from the data
    accelerate launch -m jumbokit supervised --dataset folder:/data/imagenet --model vit_small_jumbo \\
        --img-size 224 --epochs 300 --batch-size 128 --lr 1e-3 --mixup 0.8 --cutmix 1.0 --randaugment rand-m9-mstd0.5

Options: the Jumbo paper's token-drop schedule (--token-drop 0.9 0.1: the fraction of patch tokens dropped
falls linearly over training), label smoothing, mixup / cutmix, RandAugment, progressive-join branches
(--branches 2). Writes the run directory: config.json (flags, and the data record: size, channels,
normalisation, classes), metrics.jsonl, checkpoints/, model.safetensors + model_config.json, report.md,
results.csv (top1 / top5 in percent), curves.png; prints the final val / test top-1.
"""
from __future__ import annotations

import argparse
import logging

import torch
from torch import nn

import jumbokit

DEFAULT_MODEL = "vit_tiny_jumbo"
logger = logging.getLogger("jumbokit.recipes.supervised")


def build_parser() -> argparse.ArgumentParser:
    from jumbokit.cli.training import add_common_args

    parser = argparse.ArgumentParser(
        description="Train a jumbokit classifier with the shared Accelerate loop (works with accelerate launch).",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    add_common_args(parser, model=None, epochs=30, batch_size=32, lr=1e-3, weight_decay=0.05, warmup_epochs=1.0,
                    grad_clip=1.0)
    model = parser.add_argument_group("model")
    model.add_argument("--model", default=None,
                       help=f"zoo name (default: {DEFAULT_MODEL}; with --checkpoint the checkpoint's architecture)")
    model.add_argument("--checkpoint", default=None, metavar="PATH",
                       help="fine-tune saved weights (run directory or .safetensors); the head is replaced when "
                            "the number of classes differs (default: train from scratch)")
    model.add_argument("--arch", default=None, metavar="JSON",
                       help="train a searched architecture from scratch: best_arch.json of jumbokit nas-search "
                            "(its space fixes the patch grid) (default: off)")
    model.add_argument("--patch-size", type=int, default=None,
                       help="patch side (default for images <= 64 px: a 4x4 grid for plain models, e.g. 8 at 32 "
                            "px, an 8x8 grid for multi-stage ones; else the model's)")
    model.add_argument("--drop-path", type=float, default=0.0, help="stochastic depth rate (default: %(default)s)")
    model.add_argument("--branches", type=int, default=1,
                       help="progressive-join branches per block, > 1 trains the multi-branch form "
                            "(default: %(default)s)")
    model.add_argument("--join-schedule", default="linear",
                       help="join schedule of --branches: linear, cosine, exp, sqrt (default: %(default)s)")
    model.add_argument("--join-warmup-steps", type=int, default=None,
                       help="steps until the branches are joined (default: half the training steps, then a "
                            "post-join phase at lambda 1)")
    model.add_argument("--diversity-weight", type=float, default=0.0,
                       help="weight of the branch-diversity regulariser of --branches; the "
                            "progressive-reparameterization paper uses 0.05 (default: %(default)s)")
    reg = parser.add_argument_group("regularisation")
    reg.add_argument("--token-drop", type=float, nargs=2, metavar=("START", "END"), default=None,
                     help="drop this fraction of patch tokens, falling linearly from START to END over training, "
                          "e.g. 0.9 0.1; evaluation keeps every token (default: off)")
    reg.add_argument("--label-smoothing", type=float, default=0.1,
                     help="label smoothing of the cross-entropy targets (default: %(default)s)")
    reg.add_argument("--mixup", type=float, default=0.0, metavar="ALPHA",
                     help="mixup alpha, 0 = off (default: %(default)s)")
    reg.add_argument("--cutmix", type=float, default=0.0, metavar="ALPHA",
                     help="cutmix alpha, 0 = off (default: %(default)s)")
    parser.add_argument("--eval-batch-size", type=int, default=256,
                        help="batch of the evaluation passes (default: %(default)s)")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors (default: off)")
    return parser


def check_flags(args: argparse.Namespace) -> None:
    """One-line errors for contradictory or out-of-range flags, before any work or file."""
    from jumbokit.cli.training import check_count_flags

    check_count_flags(args)
    if sum(x is not None for x in (args.checkpoint, args.model, args.arch)) > 1:
        raise ValueError("pass one of --model (new model), --checkpoint (architecture from the checkpoint) or "
                         "--arch (a searched architecture)")
    if args.branches < 1:
        raise ValueError(f"--branches must be >= 1, got {args.branches}")
    if args.branches > 1 and args.checkpoint is not None:
        raise ValueError("--branches builds a new multi-branch model; it cannot be combined with --checkpoint")
    if args.token_drop is not None and not all(0.0 <= r < 1.0 for r in args.token_drop):
        raise ValueError(f"--token-drop rates must be in [0, 1), got {args.token_drop}")
    if (args.mixup > 0 or args.cutmix > 0) and args.batch_size % 2:
        raise ValueError(f"mixup/cutmix need an even --batch-size, got {args.batch_size}")


def checkpoint_channels(args: argparse.Namespace) -> int | None:
    """The channels the ``--checkpoint`` model takes (None without one); refuses a different ``--in-chans``."""
    from jumbokit.encoders import load_config

    if args.checkpoint is None:
        return None
    chans = load_config(args.checkpoint).get("in_chans")
    if args.in_chans is not None and chans is not None and args.in_chans != chans:
        raise ValueError(f"--checkpoint {args.checkpoint} expects {chans}-channel images, got --in-chans "
                         f"{args.in_chans}; drop --in-chans (images are converted)")
    return chans


def build_model(args: argparse.Namespace, num_classes: int, img_size: int, in_chans: int) -> tuple[nn.Module, str]:
    """(model, display name) from --checkpoint, --arch or --model (+ patch size and branch flags)."""
    from jumbokit.encoders.zoo import small_image_patch_size

    if args.checkpoint is not None:
        model = jumbokit.load(args.checkpoint, **({"drop_path_rate": args.drop_path} if args.drop_path else {}))
        if getattr(model, "num_classes", num_classes) != num_classes:
            model.reset_classifier(num_classes)
        return model, f"checkpoint:{args.checkpoint}"
    if args.arch is not None:
        from jumbokit.nas.arch_file import load_searched_model

        return load_searched_model(args.arch, num_classes, img_size, in_chans, args.drop_path), f"arch:{args.arch}"
    name = args.model or DEFAULT_MODEL
    kwargs = dict(img_size=img_size, in_chans=in_chans, num_classes=num_classes, drop_path_rate=args.drop_path)
    patch = args.patch_size or small_image_patch_size(name, img_size)
    kwargs.update({"patch_size": patch} if patch is not None else {})
    if args.branches > 1:
        kwargs.update(branches=args.branches, join_schedule=args.join_schedule, diversity_weight=args.diversity_weight)
        kwargs.update({"join_warmup_steps": args.join_warmup_steps} if args.join_warmup_steps is not None else {})
    return jumbokit.create_model(name, **kwargs), name


def main(argv: list[str] | None = None) -> dict:
    from jumbokit.cli.data import data_settings_from_args
    from jumbokit.cli.resume import parse_run_args
    from jumbokit.cli.training import default_out_dir, prepare_out_dir, setup_threads, train_config_from_args
    from jumbokit.data import check_classification_data, make_loader, make_mixup
    from jumbokit.data.loader import fit_batch_size
    from jumbokit.data.data_config import data_config_from_record
    from jumbokit.encoders.flops import count_params
    from jumbokit.logs import configure_logging
    from jumbokit.training import RunDir, fit, launch_state
    from jumbokit.training.report import (classification_report, collapse_branches, evaluate_splits, plot_curves,
                                          summary_text)
    from jumbokit.training.token_drop import TokenDropLoss

    configure_logging()
    parsed = parse_run_args(build_parser(), argv,
                            lambda a: default_out_dir("supervised", a.model or DEFAULT_MODEL, a.dataset))
    args, out = parsed.args, parsed.out
    setup_threads(args)
    check_flags(args)
    data = data_settings_from_args(args)
    state = launch_state(args.cpu)
    progress = not args.no_progress and state.is_main_process
    torch.manual_seed(args.seed)
    train = data.build("train", "supervised", seed=args.seed, progress=progress,
                       in_chans=checkpoint_channels(args) or args.in_chans)
    evals = data.build_evals(train)
    check_classification_data(train, evals, args.dataset)
    args.batch_size = fit_batch_size(args.batch_size, len(train), "batch_size" in parsed.given, state.num_processes)
    if (args.mixup > 0 or args.cutmix > 0) and args.batch_size % 2 and args.batch_size > 1:
        args.batch_size -= 1  # mixup pairs the samples of a batch
    model, name = build_model(args, train.num_classes, train.img_size, train.in_chans)
    model.pretrained_cfg = data_config_from_record(train.info())  # saved beside the weights
    prepare_out_dir(out, args.resume, args.overwrite)
    loader = make_loader(train, args.batch_size, num_workers=args.num_workers, seed=args.seed,
                         world_size=state.num_processes)
    eval_loaders = {s: make_loader(d, args.eval_batch_size, num_workers=args.num_workers) for s, d in evals.items()}
    mixup = make_mixup(train.num_classes, mixup=args.mixup, cutmix=args.cutmix, label_smoothing=args.label_smoothing)
    criterion = None if mixup is not None else nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    loss_fn = TokenDropLoss(criterion, mixup, args.token_drop)
    cfg, n_params = train_config_from_args(args), count_params(model)
    logger.info(f"model {name}: {n_params / 1e6:.2f}M params, {train.num_classes} classes | data {args.dataset}: "
                f"train {len(train)}" + "".join(f", {s} {len(d)}" for s, d in evals.items())
                + (f" ({train.channel_note})" if train.channel_note else "") + f" | out {out}")
    logger.info(f"data: {train.choices.describe()} {list(train.mean)} / {list(train.std)}")
    if train.holdout is not None:
        logger.info(f"held out of {args.dataset}'s images (stratified, split seed {train.holdout.seed}, stored in "
                    "the run): " + ", ".join(f"{s} {100 * getattr(train.holdout, s):g}% ({len(evals[s])})"
                                             for s in train.holdout.carved if s in evals))

    def on_plan(plan) -> None:  # the join's default length: half the steps, counted after the loader is sharded
        if args.branches > 1 and args.join_warmup_steps is None:
            model.join_warmup_steps = max(1, plan.total_steps // 2)

    record = {k: v for k, v in train.info().items() if k not in ("split", "task", "num_samples")}
    result = fit(model, loader, loss_fn, cfg, out_dir=out, on_plan=on_plan,  # val: on every process, gathered
                 eval_loaders={"val": eval_loaders["val"]} if "val" in eval_loaders else None,
                 run_config={"recipe": "supervised", "model_name": name, "args": vars(args), "data": record,
                             "num_params": n_params}, resume_record=parsed.resume_record)
    if not result.accelerator.is_main_process:
        return {}
    rows = evaluate_splits(result.model, name, args.dataset, eval_loaders, progress)
    extra, note = collapse_branches(result.model, name, args.dataset, eval_loaders, out)
    train_time = sum(r.get("epoch_time_s", 0.0) for r in result.history)
    run = RunDir(out)
    run.write_results_csv([{**r, "train_time_s": round(train_time, 1)} for r in rows + extra])
    curves = plot_curves(result.history, out / "curves.png")
    facts = [f"parameters: {n_params / 1e6:.2f}M; input {train.in_chans}x{train.img_size}x{train.img_size}; "
             f"{train.num_classes} classes",
             f"epochs {cfg.epochs}, batch {args.batch_size} x {result.accelerator.num_processes} process(es), "
             f"lr {cfg.lr}, weight decay {cfg.weight_decay}, label smoothing {args.label_smoothing}"
             + (f", token drop {args.token_drop[0]} -> {args.token_drop[1]}" if args.token_drop else "")
             + (f", mixup {args.mixup} / cutmix {args.cutmix}" if mixup else ""),
             f"data: {train.choices.describe()} {list(train.mean)} / {list(train.std)}",
             f"training time: {train_time:.0f} s ({result.accelerator.device})"]
    run.write_report(classification_report(f"Supervised run: {name} on {args.dataset}", facts, rows + extra,
                                           result.history, note, curves.name if curves else None))
    print(f"done in {train_time:.0f} s: {summary_text(rows, name)}  -> {out}")
    return {"rows": rows + extra, "train_time_s": train_time, "out": str(out)}
