"""Linear probe of a frozen encoder (MAE protocol): BatchNorm1d(affine=False) + Linear on the pooled feature.

    jumbokit linear-probe                                            # newest MAE run under runs/, digits
    accelerate launch -m jumbokit linear-probe --checkpoint runs/mae --dataset digits --out runs/probe
    accelerate launch --multi_gpu -m jumbokit linear-probe --checkpoint runs/mae_in1k --no-cache-features

The encoder is loaded with ``jumbokit.load`` from a run directory (or a .safetensors file) and stays frozen
in eval mode. Features are the global-token plug-in's pooled feature (``--feature token``: CLS, the Jumbo
J*D vector, ...) or the mean patch token (``--feature avg``). By default they are extracted once (eval
transform) and the head is trained on the cached tensors, which is fast on a CPU; ``--no-cache-features``
trains through the shared loop on augmented images instead (MAE's ImageNet protocol). Optimizer: LARS
(MAE's linear-probe recipe, lr = blr * global batch / 256) or AdamW. On N processes each embeds 1/N of every split
and every process trains the same head on all gathered features with the global batch (--batch-size x N), so the
same global batch gives the same probe on 1 or N processes. Reports top1 / top5 (percent) on val and test;
writes config.json, metrics.jsonl, results.csv, report.md, summary.json and probe_head.safetensors to --out.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

RECIPE = "linear_probe"
SPLITS = ("train", "val", "test")

logger = logging.getLogger("jumbokit.recipes.linear_probe")


def build_parser() -> argparse.ArgumentParser:
    from jumbokit.cli.config import add_config_arg
    from jumbokit.cli.data import add_data_args
    from jumbokit.cli.training import add_tracker_args
    from jumbokit.training.config import PRECISIONS
    from jumbokit.cli.training import add_threads_arg

    parser = argparse.ArgumentParser(
        description="Linear probe of a frozen (MAE-pretrained) encoder; prints and writes top1/top5 in percent.")
    src = parser.add_argument_group("encoder")
    src.add_argument("--checkpoint", default=None,
                     help="run directory of mae-pretrain (or any jumbokit run / .safetensors file) "
                          "(default: the newest runs/mae_pretrain_* directory)")
    src.add_argument("--feature", default="token", choices=("token", "avg"),
                     help="token: the plug-in's pooled feature (CLS, Jumbo J*D, ...); avg: mean patch token "
                          "(default: %(default)s)")
    src.add_argument("--layer", "--feature-layer", dest="layer", type=int, default=None, metavar="K",
                     help="probe the output of block K (0-based, negative from the end), normed and pooled as the "
                          "last block's (default: the last block)")
    add_data_args(parser, dataset=None)
    probe_defaults = {"dataset": "the checkpoint's pretraining dataset", "img_size": "the checkpoint's"}
    for action in parser._actions:  # argparse has no public access to one flag's help
        if action.dest in probe_defaults:
            action.help = action.help.split(" (default:")[0] + f" (default: {probe_defaults[action.dest]})"
    data = parser.add_argument_group("probe data")
    data.add_argument("--train-split", default="train", choices=("train", "val"),
                      help="split the head trains on (default: %(default)s)")
    data.add_argument("--eval-splits", default="val,test", help="comma-separated splits to report (default: %(default)s)")
    opt = parser.add_argument_group("optimisation")
    opt.add_argument("--optimizer", default="adamw", choices=("lars", "adamw"),
                     help="head optimizer; lars with its --blr is MAE's large-batch ImageNet recipe and moves a "
                          "head too little on a small dataset such as digits (default: %(default)s)")
    opt.add_argument("--blr", type=float, default=None,
                     help="base lr, lr = blr * global batch / 256 (default: 0.1 for LARS as in MAE, 3e-2 for AdamW)")
    opt.add_argument("--lr", type=float, default=None, help="absolute learning rate (default: from --blr)")
    opt.add_argument("--epochs", type=int, default=90, help="passes over the training set (default: %(default)s, as "
                                                            "MAE; raised by --min-steps unless given)")
    opt.add_argument("--min-steps", type=int, default=1000,
                     help="when --epochs is not given, raise the epochs so the head takes at least this many "
                          "optimizer steps; 0 = off (default: %(default)s)")
    opt.add_argument("--warmup-epochs", type=float, default=10.0, help="warm-up epochs (default: %(default)s, as MAE)")
    opt.add_argument("--batch-size", type=int, default=256,
                     help="per-process batch; the global batch (batch x processes) sets the lr and the steps, so "
                          "the same global batch gives the same probe on 1 or N processes; when not given it shrinks "
                          "to a smaller training set (default: %(default)s)")
    opt.add_argument("--weight-decay", type=float, default=0.0, help="weight decay of the matrix (default: 0, as MAE)")
    opt.add_argument("--momentum", type=float, default=0.9, help="LARS momentum (default: %(default)s)")
    opt.add_argument("--cache-features", action=argparse.BooleanOptionalAction, default=True,
                     help="extract features once (eval transform) and train the head on them (default: on)")
    run = parser.add_argument_group("run")
    run.add_argument("--out", default=None, help="run directory (default: <checkpoint>/linear_probe)")
    run.add_argument("--overwrite", action="store_true", help="replace an existing probe in --out (default: off)")
    run.add_argument("--seed", type=int, default=0,
                     help="random seed of the head, data order and subsets (default: %(default)s)")
    run.add_argument("--cpu", action="store_true", help="run on CPU even when a GPU is present (default: off)")
    run.add_argument("--mixed-precision", default="auto", choices=PRECISIONS,
                     help="autocast of the frozen encoder's forward (feature extraction; with --no-cache-features "
                          "the whole training); auto = bf16 on a CUDA GPU, fp32 on a CPU (default: %(default)s)")
    run.add_argument("--no-progress", action="store_true",
                     help="hide progress bars; the summary lines stay (default: bars shown)")
    add_tracker_args(run)
    add_threads_arg(run)
    add_config_arg(parser)
    run.add_argument("--debug", action="store_true", help="print full tracebacks of errors (default: off)")
    return parser


def newest_mae_run(root: Path = Path("runs")) -> Path:
    """The newest finished MAE run under ``root``."""
    from jumbokit.training.rundir import find_latest_run

    found = find_latest_run(root, "mae_pretrain")
    if found is None:
        raise FileNotFoundError(f"no MAE run with a model.safetensors under {root}/; pass --checkpoint DIR "
                                "(run jumbokit mae-pretrain first)")
    return found


def dataset_options(encoder_config: dict[str, Any], info: dict[str, Any], args: argparse.Namespace,
                    dataset: str) -> dict[str, Any]:
    """``DataSettings.build`` overrides that match the encoder (size unless --img-size, its channels) and, on the
    pretraining dataset, its normalisation (unless --mean / --std)."""
    size = encoder_config["img_size"]
    chans = int(encoder_config["in_chans"])
    if args.in_chans is not None and args.in_chans != chans:
        raise ValueError(f"--in-chans {args.in_chans}: the encoder takes {chans}-channel images; drop --in-chans")
    options = dict(img_size=args.img_size or int(size[0] if isinstance(size, (list, tuple)) else size), in_chans=chans)
    if info.get("dataset") == dataset and "mean" in info and args.mean is None and args.std is None:
        options.update(mean=info["mean"], std=info["std"])
    return options


def probe_sets(args: argparse.Namespace, given: set[str], splits: list[str], encoder_config: dict[str, Any],
               info: dict[str, Any], dataset: str) -> tuple[Any, dict[str, Any]]:
    """(the training set, {split: evaluation set}) of the probe, built to match the encoder and checked to share
    their classes: the default splits a dataset lacks are skipped (logged), named ones (--eval-splits) required."""
    from jumbokit.cli.data import data_settings_from_args
    from jumbokit.cli.errors import one_line
    from jumbokit.data import SplitNotFoundError, check_classification_data, check_same_classes

    common = dataset_options(encoder_config, info, args, dataset)
    settings = data_settings_from_args(argparse.Namespace(**{**vars(args), "dataset": dataset}))
    eval_sets = {}
    for split in splits:
        try:
            eval_sets[split] = settings.build(split, "eval", **common)
        except SplitNotFoundError as err:
            if "eval_splits" in given:
                raise
            logger.info(f"no {split} split ({one_line(err)}); skipping it")
    train = settings.build(args.train_split, "eval" if args.cache_features else "supervised", seed=args.seed,
                           max_samples=args.max_train_samples, **common)
    check_classification_data(train, eval_sets, dataset)
    for split_set in eval_sets.values():
        check_same_classes(train, split_set)
    return train, eval_sets


def probe_cached(probe: Any, train: Any, eval_sets: dict[str, Any], args: argparse.Namespace, plan: Any, cfg: Any,
                 run: Any, run_config: dict[str, Any], progress: bool) -> dict[str, Any]:
    """--cache-features: the frozen encoder's features computed once, the head trained on them
    (``ssl.probe_on_features``), each epoch's record in ``metrics.jsonl`` and the trackers."""
    from jumbokit import ssl
    from jumbokit.training import make_accelerator
    from jumbokit.training.loop import tracker_config
    from jumbokit.training.resume import write_start_records

    write_start_records(run, run_config, None)  # config.json, args.yaml, an empty metrics.jsonl
    accelerator = make_accelerator(cfg, run.path)
    if cfg.log_with:
        accelerator.init_trackers(cfg.run_name or run.path.name, config=tracker_config(vars(args)))

    def on_epoch(record: dict[str, Any]) -> None:
        run.append_metrics({"kind": "epoch", **record})
        if cfg.log_with:
            accelerator.log({f"epoch/{k}": v for k, v in record.items() if k != "epoch"}, step=record["epoch"])

    optimizer = ssl.build_probe_optimizer(probe.head, args.optimizer, lr=plan.lr, weight_decay=args.weight_decay,
                                          momentum=args.momentum)
    results = ssl.probe_on_features(
        probe, train, eval_sets, optimizer, accelerator=accelerator, epochs=plan.epochs,
        batch_size=plan.effective_batch, warmup_epochs=args.warmup_epochs, seed=args.seed,
        num_workers=args.num_workers, progress=progress, train_split=args.train_split, on_epoch=on_epoch)
    if cfg.log_with:
        accelerator.end_training()
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import torch

    from jumbokit import ssl
    from jumbokit.cli.config import parse_flags
    from jumbokit.cli.training import check_count_flags, prepare_out_dir, setup_threads
    from jumbokit.logs import configure_logging
    from jumbokit.training import RunDir, TrainConfig, launch_state
    from jumbokit.training.accelerator import resolve_precision, use_cpu
    from jumbokit.training.rundir import read_data_record

    configure_logging()
    parser = build_parser()
    args, given = parse_flags(parser, argv)
    check_count_flags(args)
    setup_threads(args)
    splits = [s.strip() for s in args.eval_splits.split(",") if s.strip()]
    if any(s not in SPLITS for s in splits):
        raise ValueError(f"--eval-splits takes train, val, test; got {args.eval_splits!r}")
    checkpoint = Path(args.checkpoint) if args.checkpoint else newest_mae_run()
    encoder, info = ssl.load_image_encoder(checkpoint), read_data_record(checkpoint)
    dataset = args.dataset or info.get("dataset") or "digits"
    out = Path(args.out) if args.out else (checkpoint if checkpoint.is_dir() else checkpoint.parent) / RECIPE
    prepare_out_dir(out, None, args.overwrite)
    state = launch_state(args.cpu)
    train, eval_sets = probe_sets(args, given, splits, encoder.config, info, dataset)
    plan = ssl.probe_plan(args.batch_size, len(train), state.num_processes, optimizer=args.optimizer, blr=args.blr,
                          lr=args.lr, epochs=args.epochs, min_steps=0 if "epochs" in given else args.min_steps,
                          batch_given="batch_size" in given)
    precision = resolve_precision(args.mixed_precision, use_cpu(args.cpu))
    torch.manual_seed(args.seed)  # the head's initial weights: the same on every process
    probe = ssl.LinearProbe(encoder, num_classes=train.num_classes, feature=args.feature,
                             layer=args.layer).to(state.device)
    run = RunDir(out, enabled=state.is_main_process)
    run_config = {"recipe": RECIPE, "checkpoint": str(checkpoint), "args": vars(args), "lr": plan.lr,
                  "batch_size": plan.batch_size, "effective_batch": plan.effective_batch, "epochs": plan.epochs,
                  "num_processes": state.num_processes, "data": train.info(), "encoder_config": encoder.config,
                  "feature_dim": probe.head.bn.num_features}
    raised = f" (raised from {args.epochs} by --min-steps {args.min_steps})" if plan.epochs > args.epochs else ""
    per_process = f" ({plan.batch_size} x {state.num_processes} processes)" if state.num_processes > 1 else ""
    at_layer = "" if args.layer is None else f" of block {args.layer}"
    logger.info(f"linear probe of {checkpoint} ({encoder.config.get('global_tokens')} tokens, feature "
                f"{args.feature!r}{at_layer}, {probe.head.bn.num_features} dims) on {dataset}: {len(train)} train "
                f"images, "
                f"{args.optimizer} lr {plan.lr:.3g}, batch {plan.effective_batch}{per_process}, {plan.epochs} epochs"
                f"{raised}, {'cached features' if args.cache_features else 'augmented images'}, {precision} autocast")
    cfg = TrainConfig(epochs=plan.epochs, lr=plan.lr, min_lr=0.0, weight_decay=args.weight_decay,
                      optimizer=args.optimizer, momentum=args.momentum, warmup_epochs=args.warmup_epochs,
                      seed=args.seed, mixed_precision=precision, cpu=args.cpu, progress=not args.no_progress,
                      checkpoint_every=0, save_model=False, log_with=args.log_with, run_name=args.run_name)
    if args.cache_features:
        results = probe_cached(probe, train, eval_sets, args, plan, cfg, run, run_config,
                               progress=cfg.progress and state.is_main_process)
    else:
        probe, results = ssl.probe_on_images(probe, train, eval_sets, cfg, out, batch_size=plan.batch_size,
                                             num_workers=args.num_workers, world_size=state.num_processes,
                                             run_config=run_config)
    summary: dict[str, Any] = {}
    if state.is_main_process:
        summary = {"checkpoint": str(checkpoint), "dataset": dataset, "feature": args.feature, "layer": args.layer,
                   "lr": plan.lr, "optimizer": args.optimizer, "epochs": plan.epochs, "batch_size": plan.batch_size,
                   "effective_batch": plan.effective_batch}
        rows, summary = ssl.write_probe_outputs(out, probe.head, results, summary, (
            f"Frozen encoder ({encoder.config.get('global_tokens')} global tokens), feature `{args.feature}`"
            f"{at_layer}, head BatchNorm1d(affine=False) + Linear, {args.optimizer} lr {plan.lr:.3g}, global batch "
            f"{plan.effective_batch}, {plan.epochs} epochs."))
        print(f"linear probe ({args.feature} feature, {args.optimizer})\n{ssl.results_text(rows)}\n"
              f"wrote {out}/results.csv, report.md, probe_head.safetensors")
    state.wait_for_everyone()
    return summary
