"""Pretrain one series encoder across many sets' training splits, once, for tstrain --init to start from.

    jumbokit series-pretrain --dataset GunPoint,ArrowHead,OSULeaf --steps 2000 --out runs/series_encoder
    jumbokit series-pretrain --archive UCR --exclude ItalyPowerDemand --out runs/series_encoder_ucr
    tstrain --dataset ItalyPowerDemand --model patchtst_jumbo --recipe fine-tune --init runs/series_encoder

Only the TRAINING split of each named set is read: every channel of every series becomes one univariate series,
its observed steps resampled to --length and standardised on their own, and a PatchTST-family encoder (no head,
the small-data front end: 16 patches, convolutional patch features of width 32) learns to reconstruct masked
patches. The output folder holds the encoder (``model.safetensors`` + ``model_config.json``: ``jumbokit.load`` it)
and ``corpus.json``, the record of its corpus, settings and cost. The library side is
:mod:`jumbokit.timeseries.encoder_pretrain`.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from jumbokit.cli.training import add_threads_arg
    from jumbokit.timeseries.encoder_pretrain import DEFAULT_LENGTH
    from jumbokit.timeseries.models import PATCHTST_MODELS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", default=None, metavar="NAMES",
                        help="the sets whose training splits make the corpus, comma-separated")
    source.add_argument("--archive", choices=("UCR", "UEA"), default=None,
                        help="every set of this archive available locally (and in --data-dir)")
    p.add_argument("--exclude", default=None, metavar="NAMES",
                   help="sets left out of the corpus altogether, comma-separated (e.g. those you will evaluate on; "
                        "their training splits are the only part ever read in any case) (default: none)")
    p.add_argument("--data-dir", default=None, help="where the sets are (tstrain's --data-dir) (default: the cache)")
    p.add_argument("--model", choices=PATCHTST_MODELS, default="patchtst_jumbo",
                   help="the encoder's architecture (default: %(default)s)")
    p.add_argument("--length", type=int, default=DEFAULT_LENGTH,
                   help="steps every series is resampled to; tstrain --init resamples every set to it "
                        "(default: %(default)s)")
    p.add_argument("--dim", type=int, default=None, help="token width D (default: the models' 128)")
    p.add_argument("--steps", type=int, default=2000, help="optimizer steps (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=64, help="series per step (default: %(default)s)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak AdamW learning rate (default: %(default)s)")
    p.add_argument("--mask-ratio", type=float, default=0.4,
                   help="fraction of each series' patches masked (default: %(default)s, PatchTST's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the corpus order, initialisation and masks "
                                                       "(default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("runs") / "series_encoder",
                   help="output folder, refused when it holds an encoder already (default: %(default)s)")
    p.add_argument("--cpu", action="store_true", help="train on CPU even when a GPU is present")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_threads_arg(p)
    return p


def _corpus_names(args: argparse.Namespace) -> list[str]:
    from jumbokit.timeseries.data import local_datasets
    from jumbokit.timeseries.pool import parse_pool

    names = parse_pool(args.dataset) if args.dataset else local_datasets(args.archive, args.data_dir)
    excluded = set(parse_pool(args.exclude))
    unknown = sorted(excluded - set(names))
    if unknown:
        raise ValueError(f"--exclude names sets that are not in the corpus: {', '.join(unknown)}; expected some of "
                         f"{', '.join(names)}")
    names = [n for n in names if n not in excluded]
    if not names:
        raise ValueError("no set is left for the corpus; name one or more with --dataset (or fewer with --exclude)")
    return names


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run ``jumbokit series-pretrain ARGV``; returns {"out", "record"}. Bad input raises ValueError before anything
    is written."""
    from jumbokit.cli.training import setup_threads
    from jumbokit.logs import configure_logging
    from jumbokit.timeseries.encoder_pretrain import CORPUS_FILE, pretrain_encoder, save_encoder

    args = build_parser().parse_args(argv)
    configure_logging()
    for name, value, low in (("--length", args.length, 16), ("--steps", args.steps, 1), ("--batch-size",
                             args.batch_size, 1)):
        if value < low:
            raise ValueError(f"{name} must be at least {low}, got {value}")
    if not 0 < args.mask_ratio < 1:
        raise ValueError(f"--mask-ratio must be in (0, 1), got {args.mask_ratio}")
    if (args.out / CORPUS_FILE).exists():
        raise ValueError(f"{args.out} holds an encoder already ({CORPUS_FILE}); pass another --out")
    names = _corpus_names(args)
    setup_threads(args)
    start = time.perf_counter()
    encoder, record = pretrain_encoder(names, model=args.model, length=args.length, steps=args.steps,
                                       batch_size=args.batch_size, lr=args.lr, mask_ratio=args.mask_ratio,
                                       seed=args.seed, data_dir=args.data_dir, progress=not args.no_progress,
                                       cpu=args.cpu, dim=args.dim)
    record["excluded"] = sorted(set(n.strip() for n in (args.exclude or "").split(",") if n.strip()))
    path = save_encoder(encoder, args.out, record)
    print(f"\n{args.model} encoder: {record['series']:,} series of {record['length']} steps from the training splits "
          f"of {len(record['sets'])} set(s), {record['steps']} steps of {record['batch_size']}, final masked-patch "
          f"loss {record['final_loss']:.4f}, {record['cpu_seconds']:.0f} CPU s ({time.perf_counter() - start:.0f} s)")
    print(f"wrote {path} and {args.out / CORPUS_FILE}; fine-tune with: tstrain --dataset NAME --model {args.model} "
          f"--recipe fine-tune --init {args.out}"
          + (f" --dim {args.dim}" if args.dim else "") + " (add --frozen for a ridge head on its frozen features)")
    return {"out": str(args.out), "record": record}
