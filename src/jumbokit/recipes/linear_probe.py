"""Linear probe of a frozen encoder (MAE protocol): BatchNorm1d(affine=False) + Linear on the pooled feature.

    python recipes/linear_probe.py                                   # newest MAE run under runs/, digits
    accelerate launch recipes/linear_probe.py --checkpoint runs/mae --dataset digits --out runs/probe
    accelerate launch --multi_gpu recipes/linear_probe.py --checkpoint runs/mae_in1k \
        --dataset folder:/data/imagenet --no-cache-features --batch-size 1024 --epochs 90

The encoder is loaded with ``jumbokit.load`` from a run directory (or a .safetensors file) and stays frozen
in eval mode. Features are the global-token plug-in's pooled feature (``--feature token``: CLS, the Jumbo
J*D vector, ...) or the mean patch token (``--feature avg``). By default they are extracted once (eval
transform) and the head is trained on the cached tensors, which is fast on a CPU; ``--no-cache-features``
trains through the shared loop on augmented images instead (MAE's ImageNet protocol). Optimizer: LARS
(timm's, MAE's linear-probe recipe, lr = blr * batch / 256) or AdamW. Reports top-1 / top-5 on val and test;
writes config.json, metrics.jsonl, results.csv, report.md and probe_head.safetensors to --out.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

RECIPE = "linear_probe"


def build_parser() -> argparse.ArgumentParser:
    from jumbokit.training.threads import add_threads_arg

    parser = argparse.ArgumentParser(
        description="Linear probe of a frozen (MAE-pretrained) encoder; prints and writes top-1/top-5.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    src = parser.add_argument_group("encoder")
    src.add_argument("--checkpoint", default=None,
                     help="run directory of recipes/mae_pretrain.py (or any jumbokit run / .safetensors file); "
                          "default: the newest runs/mae_pretrain_* directory")
    src.add_argument("--feature", default="token", choices=("token", "avg"),
                     help="token: the plug-in's pooled feature (CLS, Jumbo J*D, ...); avg: mean patch token")
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", default=None,
                      help="digits | folder:PATH | hf:NAME[:split] (default: the checkpoint's pretraining dataset)")
    data.add_argument("--train-split", default="train", choices=("train", "val"), help="split the head trains on")
    data.add_argument("--eval-splits", default="val,test", help="comma-separated splits to report")
    data.add_argument("--num-workers", type=int, default=None, help="DataLoader workers")
    data.add_argument("--skip-corrupt", action="store_true", help="skip unreadable image files (reported)")
    data.add_argument("--max-train-samples", type=int, default=None, help="seeded subset of the training split")
    opt = parser.add_argument_group("optimisation")
    opt.add_argument("--optimizer", default="adamw", choices=("lars", "adamw"),
                     help="head optimizer; lars with the default --blr is MAE's large-batch ImageNet recipe and "
                          "moves a head too little on a small dataset such as digits")
    opt.add_argument("--blr", type=float, default=None,
                     help="base lr, lr = blr * batch / 256 (default: 0.1 for LARS as in MAE, 3e-2 for AdamW)")
    opt.add_argument("--lr", type=float, default=None, help="absolute learning rate (overrides --blr)")
    opt.add_argument("--epochs", type=int, default=90, help="(MAE: 90)")
    opt.add_argument("--min-steps", type=int, default=1000,
                     help="raise --epochs so the head takes at least this many optimizer steps: 90 epochs of "
                          "digits at batch 256 are only 360 steps (ImageNet-sized sets are unaffected; 0 = off)")
    opt.add_argument("--warmup-epochs", type=float, default=10.0, help="(MAE: 10)")
    opt.add_argument("--batch-size", type=int, default=256, help="per-process batch (MAE: 16384 in total)")
    opt.add_argument("--weight-decay", type=float, default=0.0, help="(MAE: 0)")
    opt.add_argument("--momentum", type=float, default=0.9, help="LARS momentum")
    opt.add_argument("--cache-features", action=argparse.BooleanOptionalAction, default=True,
                     help="extract features once (eval transform) and train the head on them")
    run = parser.add_argument_group("run")
    run.add_argument("--out", default=None, help="run directory (default: <checkpoint>/linear_probe)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--cpu", action="store_true", help="run on CPU even when a GPU is present")
    run.add_argument("--mixed-precision", default="no", choices=("no", "fp16", "bf16"))
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_threads_arg(run)
    run.add_argument("--debug", action="store_true", help="print tracebacks of errors")
    return parser


def newest_mae_run(root: Path = Path("runs")) -> Path:
    runs = [p for p in root.glob("mae_pretrain_*") if (p / "model.safetensors").exists()] if root.is_dir() else []
    if not runs:
        raise FileNotFoundError(f"no MAE run with a model.safetensors under {root}/; pass --checkpoint DIR "
                                "(run recipes/mae_pretrain.py first)")
    return max(runs, key=lambda p: (p / "model.safetensors").stat().st_mtime)


def checkpoint_data_info(checkpoint: Path) -> dict[str, Any] | None:
    """The pretraining run's data record (dataset, mean/std, img_size, in_chans), when there is one."""
    folder = checkpoint if checkpoint.is_dir() else checkpoint.parent
    config = folder / "config.json"
    if not config.exists():
        return None
    return json.loads(config.read_text()).get("data")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from accelerate import PartialState

    import jumbokit
    from jumbokit.data import build_dataset, make_loader, steps_per_epoch
    from jumbokit.ssl import (
        LinearProbe,
        build_probe_optimizer,
        evaluate_head,
        extract_features,
        train_head_on_features,
    )
    from jumbokit.training import (
        RunDir,
        TrainConfig,
        check_count_flags,
        classification_loss,
        epochs_for_min_steps,
        evaluate_classifier,
        fit,
        make_accelerator,
        markdown_table,
        setup_threads,
    )

    args = build_parser().parse_args(argv)
    setup_threads(args)
    check_count_flags(args)
    checkpoint = Path(args.checkpoint) if args.checkpoint else newest_mae_run()
    if not checkpoint.exists():
        raise FileNotFoundError(f"--checkpoint {checkpoint} does not exist (expected a run directory of "
                                "recipes/mae_pretrain.py or a .safetensors file)")
    encoder = jumbokit.load(checkpoint)
    if encoder.config.get("tokenizer") != "image":
        raise ValueError(f"{checkpoint} holds a {encoder.config.get('tokenizer')} encoder; the linear probe "
                         "needs an image encoder")
    info = checkpoint_data_info(checkpoint) or {}
    dataset = args.dataset or info.get("dataset") or "digits"
    in_chans = int(encoder.config["in_chans"])
    img_size = encoder.config["img_size"]
    img_size = int(img_size[0] if isinstance(img_size, (list, tuple)) else img_size)
    same_data = info.get("dataset") == dataset
    norm = dict(mean=info["mean"], std=info["std"]) if same_data and "mean" in info else {}
    splits = [s.strip() for s in args.eval_splits.split(",") if s.strip()]
    for split in splits:
        if split not in ("train", "val", "test"):
            raise ValueError(f"--eval-splits takes train, val, test; got {split!r}")
    out = Path(args.out) if args.out else (checkpoint if checkpoint.is_dir() else checkpoint.parent) / RECIPE

    state = PartialState(cpu=args.cpu)
    main_process = state.is_main_process
    progress = not args.no_progress and main_process
    world = state.num_processes
    blr = args.blr if args.blr is not None else (0.1 if args.optimizer == "lars" else 3e-2)
    lr = args.lr if args.lr is not None else blr * args.batch_size * world / 256

    eval_sets = {split: build_dataset(dataset, split, task="eval", img_size=img_size, in_chans=in_chans,
                                      skip_corrupt=args.skip_corrupt, **norm) for split in splits}
    train_task = "eval" if args.cache_features else "supervised"
    train = build_dataset(dataset, args.train_split, task=train_task, img_size=img_size, in_chans=in_chans,
                          skip_corrupt=args.skip_corrupt, max_samples=args.max_train_samples, seed=args.seed,
                          **norm)
    if args.batch_size > len(train):
        raise ValueError(f"--batch-size {args.batch_size} is larger than the {len(train)} training samples of "
                         f"{dataset}; pass --batch-size <= {len(train)}")
    # cached: every process trains the head on all features; images: the processes share each epoch
    per_step = args.batch_size if args.cache_features else args.batch_size * world
    epochs = epochs_for_min_steps(args.epochs, args.min_steps, steps_per_epoch(len(train), per_step))
    probe = LinearProbe(encoder, num_classes=train.num_classes, feature=args.feature)
    device = state.device
    probe.to(device)
    run = RunDir(out, enabled=main_process)
    run_config = {
        "recipe": RECIPE, "checkpoint": str(checkpoint), "args": vars(args), "lr": lr, "data": train.info(),
        "encoder_config": encoder.config, "feature_dim": probe.head.bn.num_features, "epochs": epochs,
    }
    if main_process:
        print(f"linear probe of {checkpoint} ({encoder.config.get('global_tokens')} tokens, feature "
              f"{args.feature!r}, {probe.head.bn.num_features} dims) on {dataset}: {len(train)} train images, "
              f"{args.optimizer} lr {lr:.3g}, {epochs} epochs"
              f"{f' (raised from {args.epochs} by --min-steps {args.min_steps})' if epochs > args.epochs else ''}, "
              f"{'cached features' if args.cache_features else 'augmented images'}")

    started = time.time()
    results: dict[str, dict[str, float]] = {}
    if args.cache_features:
        torch.manual_seed(args.seed)
        loader = lambda ds: make_loader(ds, 256, train=False, num_workers=args.num_workers)  # noqa: E731
        train_feats, train_labels = extract_features(encoder, loader(train), args.feature, device,
                                                     progress=progress, desc=f"features {args.train_split}")
        cached = {split: extract_features(encoder, loader(ds), args.feature, device, progress=progress,
                                          desc=f"features {split}") for split, ds in eval_sets.items()}
        feature_time = time.time() - started
        optimizer = build_probe_optimizer(probe.head, args.optimizer, lr=lr, weight_decay=args.weight_decay,
                                          momentum=args.momentum)
        if main_process:
            run.write_config(run_config)
            run.write_text(RunDir.METRICS, "")
        train_head_on_features(
            probe.head, train_feats, train_labels, optimizer, epochs=epochs, batch_size=args.batch_size,
            warmup_epochs=args.warmup_epochs, seed=args.seed, eval_sets=cached,
            eval_every=max(1, epochs // 10), progress=progress,
            on_epoch=lambda record: run.append_metrics({"kind": "epoch", **record}),
        )
        for split, (feats, labels) in cached.items():
            results[split] = evaluate_head(probe.head, feats, labels)
        results[args.train_split + " (fit)"] = evaluate_head(probe.head, train_feats, train_labels)
        timing = {"feature_time_s": round(feature_time, 2), "head_time_s": round(time.time() - started - feature_time, 2)}
    else:
        cfg = TrainConfig(epochs=epochs, lr=lr, min_lr=0.0, weight_decay=args.weight_decay, optimizer=args.optimizer,
                          momentum=args.momentum, warmup_epochs=args.warmup_epochs, seed=args.seed,
                          mixed_precision=args.mixed_precision, cpu=args.cpu, progress=not args.no_progress,
                          checkpoint_every=0, save_model=False)
        accelerator = make_accelerator(cfg, out)
        matrices = [p for p in probe.head.parameters() if p.ndim > 1]
        vectors = [p for p in probe.head.parameters() if p.ndim <= 1]
        # weight decay on the matrix only; LARS (build_lars) adapts the matrix and steps the bias plainly
        groups = [{"params": matrices, "weight_decay": args.weight_decay}, {"params": vectors, "weight_decay": 0.0}]
        train_loader = make_loader(train, args.batch_size, seed=args.seed, num_workers=args.num_workers,
                                   world_size=world)
        eval_loaders = {split: make_loader(ds, args.batch_size, train=False, num_workers=args.num_workers)
                        for split, ds in eval_sets.items()}
        first_split = splits[0] if splits else None

        def eval_fn(net) -> dict[str, float]:
            if first_split is None:
                return {}
            metrics = evaluate_classifier(net, eval_loaders[first_split], prefix=f"{first_split}_")
            return {k: v for k, v in metrics.items() if not k.endswith("_n")}

        result = fit(probe, train_loader, classification_loss(), cfg, out_dir=out, eval_fn=eval_fn,
                     accelerator=accelerator, params=groups, run_config=run_config)
        probe = result.model
        for split, loader in eval_loaders.items():
            metrics = evaluate_classifier(probe, loader)
            results[split] = {"top1": 100 * metrics["acc1"], "top5": 100 * metrics.get("acc5", 1.0),
                              "loss": metrics["loss"]}
        timing = {"train_time_s": round(time.time() - started, 2)}

    summary: dict[str, Any] = {}
    if main_process:
        from safetensors.torch import save_file

        tensors = {k: v.detach().contiguous().cpu() for k, v in probe.head.state_dict().items()}
        tmp = out / ".probe_head.safetensors.tmp"
        save_file(tensors, str(tmp), metadata={"feature": args.feature, "checkpoint": str(checkpoint)})
        tmp.replace(out / "probe_head.safetensors")
        rows = [{"split": split, "top1": m["top1"], "top5": m["top5"], "loss": m["loss"]} for split, m in results.items()]
        run.write_results_csv(rows)
        summary = {"checkpoint": str(checkpoint), "dataset": dataset, "feature": args.feature,
                   "global_tokens": encoder.config.get("global_tokens"), "optimizer": args.optimizer, "lr": lr,
                   "epochs": epochs, **timing,
                   **{f"{split}_top1": m["top1"] for split, m in results.items() if " " not in split}}
        run.update_config(summary=summary)
        report = [f"# Linear probe of `{checkpoint}` on {dataset}", "",
                  f"Frozen encoder ({encoder.config.get('global_tokens')} global tokens), feature `{args.feature}` "
                  f"({probe.head.bn.num_features} dims), head BatchNorm1d(affine=False) + Linear, "
                  f"{args.optimizer} lr {lr:.3g}, {epochs} epochs"
                  f"{', cached features' if args.cache_features else ''}.", "",
                  "## Accuracy (%)", "", markdown_table(rows, digits=4), ""]
        run.write_report("\n".join(report))
        print(f"\nlinear probe ({args.feature} feature, {args.optimizer}), accuracy %:")
        print(f"{'split':<14}{'top-1':>8}{'top-5':>8}{'loss':>9}")
        for row in rows:
            print(f"{row['split']:<14}{row['top1']:>8.2f}{row['top5']:>8.2f}{row['loss']:>9.4f}")
        print(f"wrote {out}/results.csv, report.md, probe_head.safetensors")
    state.wait_for_everyone()
    return summary
