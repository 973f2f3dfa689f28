"""Supervised training of any zoo classifier (from scratch or from a checkpoint) on an image dataset.

    python recipes/supervised.py --dataset digits --model vit_tiny_jumbo --out runs/sup
    accelerate launch recipes/supervised.py --dataset folder:/data/imagenet --model vit_small_jumbo \\
        --img-size 224 --epochs 300 --batch-size 128 --lr 1e-3 --mixup 0.8 --cutmix 1.0 --randaugment rand-m9-mstd0.5

Options: the Jumbo paper's token-drop schedule (``--token-drop 0.9 0.1``: the fraction of patch tokens dropped
falls linearly over training, through the encoder's ``keep``), label smoothing, mixup / cutmix, RandAugment,
progressive-join branches (``--branches 2``). Writes the run directory: config.json (with the dataset's
normalisation and class names), metrics.jsonl, checkpoints/, model.safetensors + model_config.json, report.md,
results.csv, curves.png; prints the final val / test metrics.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
from accelerate.utils import extract_model_from_parallel
from torch import nn

import jumbokit
from jumbokit.encoders.flops import count_params
from jumbokit.data import SplitNotFoundError, build_dataset, make_loader, make_mixup
from jumbokit.encoders import load_config, random_keep
from jumbokit.encoders.zoo import small_image_patch_size
from jumbokit.training import (
    RunDir,
    atomic_save_figure,
    add_common_args,
    check_count_flags,
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

DEFAULT_MODEL = "vit_tiny_jumbo"
DEFAULT_EPOCHS = 30


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Train a jumbokit classifier with the shared Accelerate loop (works with accelerate launch).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    add_common_args(parser, model=None, epochs=DEFAULT_EPOCHS, batch_size=32, lr=1e-3, weight_decay=0.05,
                    warmup_epochs=1.0, grad_clip=1.0)
    model = parser.add_argument_group("model")
    model.add_argument("--model", default=None,
                       help=f"zoo name (default: {DEFAULT_MODEL}; with --init the checkpoint's architecture)")
    model.add_argument("--init", default=None,
                       help="start from saved weights (run dir or .safetensors); the head is replaced when the "
                            "number of classes differs")
    model.add_argument("--arch", default=None,
                       help="retrain a searched architecture from scratch: the best_arch.json of "
                            "recipes/nas_search.py (its space fixes the patch grid)")
    model.add_argument("--patch-size", type=int, default=None,
                       help="patch size (default for images <= 64 px: a 4x4 grid for plain models, e.g. 8 at 32 "
                            "px, and an 8x8 grid for multi-stage ones; else the model's)")
    model.add_argument("--drop-path", type=float, default=0.0, help="stochastic depth rate (default: %(default)s)")
    model.add_argument("--branches", type=int, default=1,
                       help="progressive-join branches per block (> 1 trains the multi-branch form)")
    model.add_argument("--join-schedule", default="linear", help="join schedule for --branches (default: %(default)s)")
    model.add_argument("--join-warmup-steps", type=int, default=None,
                       help="steps until branches are fully joined (default: half of the training steps, "
                            "then a post-join phase at lambda=1)")
    model.add_argument("--diversity-weight", type=float, default=0.0,
                       help="weight of the branch-diversity regulariser for --branches (seed: 0.05; default: 0)")

    reg = parser.add_argument_group("regularisation")
    reg.add_argument("--token-drop", type=float, nargs=2, metavar=("START", "END"), default=None,
                     help="drop this fraction of patch tokens, falling linearly from START to END over training "
                          "(e.g. 0.9 0.1); evaluation keeps all tokens")
    reg.add_argument("--label-smoothing", type=float, default=0.1, help="(default: %(default)s)")
    reg.add_argument("--mixup", type=float, default=0.0, help="mixup alpha, 0 = off (default: %(default)s)")
    reg.add_argument("--cutmix", type=float, default=0.0, help="cutmix alpha, 0 = off (default: %(default)s)")
    reg.add_argument("--randaugment", default=None, help="timm RandAugment string, e.g. rand-m9-mstd0.5")
    parser.add_argument("--eval-batch-size", type=int, default=256, help="(default: %(default)s)")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    return parser


class TokenDropLoss:
    """``loss_fn`` for ``fit``: classification loss with an optional linearly decaying token-drop rate.

    ``fit`` calls ``on_step(step, total_steps)`` before every optimizer step; the drop rate at progress
    p = step / total_steps is ``start + (end - start) * p`` and K = round(N * (1 - rate)) patches are kept
    (a random subset per sample)."""

    def __init__(self, base: nn.Module | None, mixup, token_drop: tuple[float, float] | None):
        self.token_drop = token_drop
        self.progress = 0.0
        self.inner = classification_loss(criterion=base, mixup=mixup, forward=self.forward)

    def on_step(self, step: int, total_steps: int) -> None:
        self.progress = step / max(1, total_steps)

    def drop_rate(self) -> float:
        if self.token_drop is None:
            return 0.0
        start, end = self.token_drop
        return start + (end - start) * self.progress

    def forward(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        rate = self.drop_rate()
        if rate <= 0:
            return model(x)
        n = _num_patches(model, x)
        kept = max(1, min(n, round(n * (1.0 - rate))))
        keep, _ = random_keep(x.shape[0], n, kept, device=x.device)
        return model(x, keep=keep)

    def __call__(self, model: nn.Module, batch):
        loss, logs = self.inner(model, batch)
        if self.token_drop is not None:
            logs["token_drop"] = self.drop_rate()
        return loss, logs


def _num_patches(model: nn.Module, x: torch.Tensor) -> int:
    """Patch tokens of input ``x`` (B, C, H, W) (the input may differ from the configured img_size)."""
    tokenizer = getattr(extract_model_from_parallel(model), "patch_embed", None)
    if not hasattr(tokenizer, "grid_for"):
        return int(extract_model_from_parallel(model).num_patches)
    grid_h, grid_w = tokenizer.grid_for(x.shape[-2], x.shape[-1])
    return grid_h * grid_w


def _searched_model(path: str, num_classes: int, img_size: int, in_chans: int, drop_path: float) -> nn.Module:
    import json

    from jumbokit.encoders import build_model
    from jumbokit.nas import SearchSpace

    try:
        payload = json.loads(Path(path).read_text())
        space, arch = SearchSpace.from_dict(payload["space"]), payload["arch"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"--arch {path}: expected the best_arch.json of recipes/nas_search.py ({err})") from None
    config = space.config(arch, img_size, in_chans, num_classes)
    return build_model({**config, "drop_path_rate": drop_path})


def _build_splits(args, img_size: int | None, in_chans: int | None, progress: bool):
    common = dict(img_size=img_size, in_chans=in_chans, skip_corrupt=args.skip_corrupt, progress=progress)
    train = build_dataset(args.dataset, "train", "supervised", randaugment=args.randaugment,
                          max_samples=args.max_train_samples, seed=args.seed, **common)
    evals = {}
    for split in ("val", "test"):
        try:
            evals[split] = build_dataset(args.dataset, split, "eval", **common)
        except SplitNotFoundError as err:
            print(f"note: no {split} split ({err}); skipping it", file=sys.stderr)
    return train, evals


def _build_model(args, num_classes: int, img_size: int, in_chans: int) -> tuple[nn.Module, str]:
    if args.init is not None:
        overrides = {"drop_path_rate": args.drop_path} if args.drop_path else {}
        model = jumbokit.load(args.init, **overrides)
        if getattr(model, "num_classes", num_classes) != num_classes:
            model.reset_classifier(num_classes)
        return model, f"init:{args.init}"
    if args.arch is not None:
        return _searched_model(args.arch, num_classes, img_size, in_chans, args.drop_path), f"arch:{args.arch}"
    name = args.model or DEFAULT_MODEL
    patch = args.patch_size or small_image_patch_size(name, img_size)
    kwargs = dict(img_size=img_size, in_chans=in_chans, num_classes=num_classes, drop_path_rate=args.drop_path)
    if patch is not None:
        kwargs["patch_size"] = patch
    if args.branches > 1:
        kwargs.update(branches=args.branches, join_schedule=args.join_schedule,
                      diversity_weight=args.diversity_weight)
        if args.join_warmup_steps is not None:
            kwargs["join_warmup_steps"] = args.join_warmup_steps
    return jumbokit.create_model(name, **kwargs), name


def _checkpoint_channels(args) -> int | None:
    if args.init is None:
        return None
    config = load_config(args.init)
    chans = config.get("in_chans")
    if args.in_chans is not None and chans is not None and args.in_chans != chans:
        raise ValueError(f"--init {args.init} expects {chans}-channel images, got --in-chans {args.in_chans}; "
                         f"drop --in-chans (images are converted)")
    return chans


def _plot_curves(history: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] for r in history]
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
    ax[0].plot(epochs, [r["train_loss"] for r in history], marker="o")
    ax[0].set(xlabel="epoch", ylabel="train loss", title="training loss")
    if "val_acc1" in history[0]:
        ax[1].plot(epochs, [100 * r["val_acc1"] for r in history], marker="o", color="tab:green")
    ax[1].set(xlabel="epoch", ylabel="val top-1 (%)", title="validation accuracy")
    for a in ax:
        a.grid(alpha=0.3)
    fig.tight_layout()
    atomic_save_figure(path, fig, dpi=110)


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    setup_threads(args)
    check_count_flags(args)
    state = launch_state(args.cpu)
    progress = not args.no_progress and state.is_main_process
    if sum(x is not None for x in (args.init, args.model, args.arch)) > 1:
        raise ValueError("pass one of --model (new model), --init (architecture from the checkpoint) or --arch "
                         "(a searched architecture)")
    if args.branches < 1:
        raise ValueError(f"--branches must be >= 1, got {args.branches}")
    if args.branches > 1 and args.init is not None:
        raise ValueError("--branches builds a new multi-branch model; it cannot be combined with --init")
    if args.token_drop is not None and not all(0.0 <= r < 1.0 for r in args.token_drop):
        raise ValueError(f"--token-drop rates must be in [0, 1), got {args.token_drop}")
    if (args.mixup > 0 or args.cutmix > 0) and args.batch_size % 2:
        raise ValueError(f"mixup/cutmix need an even --batch-size, got {args.batch_size}")

    torch.manual_seed(args.seed)
    out = Path(args.out) if args.out else default_out_dir("supervised", args.model or DEFAULT_MODEL, args.dataset)
    prepare_out_dir(out, args.resume, args.overwrite)

    in_chans = _checkpoint_channels(args) or args.in_chans
    train, evals = _build_splits(args, args.img_size, in_chans, progress)
    model, model_name = _build_model(args, train.num_classes, train.img_size, train.in_chans)
    train_loader = make_loader(train, args.batch_size, num_workers=args.num_workers, seed=args.seed,
                               world_size=state.num_processes)
    eval_loaders = {s: make_loader(d, args.eval_batch_size, num_workers=args.num_workers) for s, d in evals.items()}
    if args.branches > 1 and args.join_warmup_steps is None:
        total_steps = math.ceil(len(train_loader) / max(1, args.grad_accum)) * args.epochs
        model.join_warmup_steps = max(1, total_steps // 2)

    mixup = make_mixup(train.num_classes, mixup=args.mixup, cutmix=args.cutmix, label_smoothing=args.label_smoothing)
    criterion = None if mixup is not None else nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    loss_fn = TokenDropLoss(criterion, mixup, tuple(args.token_drop) if args.token_drop else None)
    eval_fn = None
    if "val" in eval_loaders:
        def eval_fn(m: nn.Module) -> dict:
            return evaluate_classifier(m, eval_loaders["val"], prefix="val_")

    cfg = train_config_from_args(args)
    n_params = count_params(model)
    if progress:
        print(f"model {model_name}: {n_params / 1e6:.2f}M params, {train.in_chans}x{train.img_size}px, "
              f"{train.num_classes} classes | data {args.dataset}: train {len(train)}"
              + "".join(f", {s} {len(d)}" for s, d in evals.items())
              + (f" ({train.channel_note})" if train.channel_note else "") + f" | out {out}")
    started = time.time()
    result = fit(
        model, train_loader, loss_fn, cfg, out_dir=out, eval_fn=eval_fn,
        run_config={
            "recipe": "supervised",
            "model_name": model_name,
            "args": vars(args),
            "data": {k: v for k, v in train.info().items() if k not in ("split", "task", "num_samples")},
            "num_params": n_params,
        },
    )
    train_time = time.time() - started
    if not result.accelerator.is_main_process:
        return {}

    trained = result.model
    rows = []
    for split, loader in eval_loaders.items():
        metrics = evaluate_classifier(trained, loader, progress=progress, desc=f"eval {split}")
        rows.append({"model": model_name, "dataset": args.dataset, "split": split, **metrics})
    collapse_note = ""
    if hasattr(trained, "reparameterize") and trained.join_lambda < 1.0:
        collapse_note = (f"\nThe branches were not fully joined (lambda {trained.join_lambda:.3f} < 1), so no collapsed "
                         "model was written; use a shorter --join-warmup-steps.\n")
    elif hasattr(trained, "reparameterize"):
        plain = trained.reparameterize()
        jumbokit.save(plain, out / "reparameterized")
        for split, loader in eval_loaders.items():
            metrics = evaluate_classifier(plain, loader)
            rows.append({"model": f"{model_name} (reparameterized)", "dataset": args.dataset, "split": split,
                         **metrics})
        collapse_note = "\nThe joined model was collapsed to a plain encoder in `reparameterized/`.\n"

    run = RunDir(out)
    columns = ["model", "dataset", "split", "acc1", "acc5", "loss", "n"]
    run.write_results_csv([{**r, "train_time_s": round(train_time, 1)} for r in rows],
                          fieldnames=columns + ["train_time_s"])
    if result.history:
        _plot_curves(result.history, out / "curves.png")
    epoch_cols = [c for c in ("epoch", "train_loss", "val_acc1", "val_loss", "lr", "epoch_time_s")
                  if result.history and c in result.history[0]]
    run.write_report(
        f"# Supervised run: {model_name} on {args.dataset}\n\n"
        f"- parameters: {n_params / 1e6:.2f}M; input {train.in_chans}x{train.img_size}x{train.img_size}; "
        f"{train.num_classes} classes\n"
        f"- epochs {cfg.epochs}, batch {args.batch_size} x {result.accelerator.num_processes} process(es), "
        f"lr {cfg.lr}, weight decay {cfg.weight_decay}, label smoothing {args.label_smoothing}"
        + (f", token drop {args.token_drop[0]} -> {args.token_drop[1]}" if args.token_drop else "")
        + (f", mixup {args.mixup} / cutmix {args.cutmix}" if mixup else "") + "\n"
        f"- training time: {train_time:.0f} s ({result.accelerator.device})\n"
        f"- normalisation: mean {list(train.mean)}, std {list(train.std)}\n\n"
        f"## Final metrics\n\n{markdown_table(rows, columns)}{collapse_note}\n"
        f"## Per epoch\n\n{markdown_table(result.history, epoch_cols)}\n![curves](curves.png)\n"
    )
    summary = "  ".join(f"{r['split']} acc1 {100 * r['acc1']:.2f}%" for r in rows if "reparam" not in r["model"])
    print(f"done in {train_time:.0f} s: {summary}  -> {out}")
    return {"rows": rows, "train_time_s": train_time, "out": str(out)}
