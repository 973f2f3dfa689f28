"""``tstrain``: UCR/UEA classification with PatchTST, PatchTST+registers and PatchTST+Jumbo.

    tstrain --archive UEA --model patchtst_jumbo            # every UEA set available offline, 12-run sweep
    tstrain --dataset GunPoint,ArrowHead --epochs 20 --lr 1e-3 --dropout 0.1 --baseline minirocket
    tstrain --archive UCR --recipe small-data --baseline minirocket,multirocket,hydra
    tstrain --list                                          # datasets available locally (and in --data-dir)

Runs on one CPU/GPU, or on many with ``torchrun --nproc_per_node N -m jumbokit tstrain ...`` (or ``accelerate
launch``): each process then takes the next unfinished run whenever it is free and trains it whole.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..logs import configure_logging
from ..training.cli import setup_threads
from .flags import PROTOCOLS, build_parser
from .models import JUMBO_MODELS, JUMBO_MULTIPLIER, JUMBO_MULTIPLIER_MODELS, SERIES_MODELS

if TYPE_CHECKING:
    from .protocol import SweepConfig

__all__ = ["main", "build_parser", "sweep_settings", "SweepSettings"]


def _default_out(args: argparse.Namespace) -> Path:
    if args.dataset:
        tag = args.dataset[0] + (f"+{len(args.dataset) - 1}" if len(args.dataset) > 1 else "")
    else:
        tag = args.archive or "UCR+UEA"
    recipe = "" if args.recipe == "paper" else f"_{args.recipe}"
    return Path("runs") / f"tstrain_{tag}_p{args.patches}{recipe}"


def _list_datasets(data_dir: str | None) -> None:
    """Print the datasets available locally, per archive, and the user's own in ``data_dir``."""
    from .data import default_data_dir, local_datasets, user_datasets

    for archive in ("UCR", "UEA"):
        names = local_datasets(archive, data_dir)
        print(f"{archive} ({len(names)} local): {', '.join(names) or 'none'}")
    own = user_datasets(data_dir)
    where = data_dir or default_data_dir()
    print(f"your own in {where} ({len(own)}): {', '.join(own) or 'none'}"
          + (" (run with --dataset NAME --data-dir DIR)" if own else ""))


def _check_args(args: argparse.Namespace) -> None:
    """ValueError for a model, learning rate or dropout the sweep cannot use."""
    unknown = [m for m in args.model if m not in SERIES_MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; expected one or several of {', '.join(SERIES_MODELS)}")
    if args.jumbo_pool != "segments" and not set(args.model) & set(JUMBO_MODELS):
        raise ValueError(f"--jumbo-pool sets the feature of the Jumbo models ({', '.join(JUMBO_MODELS)}); --model "
                         f"names none of them ({', '.join(args.model)})")
    if args.jumbo_multiplier != JUMBO_MULTIPLIER and not set(args.model) & set(JUMBO_MULTIPLIER_MODELS):
        raise ValueError(f"--jumbo-multiplier sets J of the Jumbo models ({', '.join(JUMBO_MODELS)}) and the "
                         f"registers matched to it (patchtst_registers); --model names none of them "
                         f"({', '.join(args.model)})")
    for value in args.lr or []:
        if value <= 0:
            raise ValueError(f"--lr must be > 0, got {value:g}")
    for value in args.dropout or []:
        if not 0 <= value < 1:
            raise ValueError(f"--dropout must be in [0, 1), got {value:g}")


def _datasets(args: argparse.Namespace) -> tuple[list[str], bool]:
    """(dataset names, skip_short): the named ones, or every local set of the archive(s), too-short ones skipped."""
    from .data import local_datasets

    if args.dataset:
        return args.dataset, False
    archives = [args.archive] if args.archive else ["UCR", "UEA"]
    datasets = [n for a in archives for n in local_datasets(a, args.data_dir)]
    if not datasets:
        raise ValueError(f"no {'/'.join(archives)} dataset is available locally; name one with --dataset "
                         "(it downloads into --data-dir when online)")
    return datasets, True


def _normalize_arg(args: argparse.Namespace, recipe: dict, level_scale: bool | str) -> str:
    """--normalize, else train where the model reads level and scale (they are what per-series normalisation
    removes), else the recipe's."""
    if level_scale and args.normalize in ("instance", "auto"):
        given = "--level-scale" if args.level_scale else f"--recipe {args.recipe} (--level-scale {level_scale})"
        raise ValueError(f"{given} reads each series' level and scale, and --normalize {args.normalize} can "
                         "remove them series by series; leave --normalize out, pass --normalize train, or add "
                         "--level-scale off")
    if args.normalize:
        return args.normalize
    return "train" if level_scale else recipe["normalize"]


def _pool_arg(args: argparse.Namespace) -> str | None:
    """``--pretrain-on`` as a canonical comma list (None when not given); ValueError for names that are not
    available locally or for a pool without ``--pretrain-epochs``."""
    from .data import local_datasets
    from .pool import parse_pool

    names = parse_pool(args.pretrain_on)
    if not names:
        return None
    if not args.pretrain_epochs:
        raise ValueError("--pretrain-on needs --pretrain-epochs N (the pretraining length, in passes over the "
                         "target's training split)")
    available = set(local_datasets(data_dir=args.data_dir))
    missing = [n for n in names if n not in available]
    if missing:
        raise ValueError(f"--pretrain-on: {', '.join(missing)} not available locally; available: "
                         f"{', '.join(sorted(available))}")
    return ",".join(names)


def _trunk_fields(args: argparse.Namespace, recipe: dict) -> dict:
    """trunk, trunk_width, trunk_depth, trunk_diff and trunk_head of the SweepConfig: the flags, else the recipe's;
    with no trunk, SweepConfig's defaults (ValueError for a trunk flag given without a trunk)."""
    trunk = args.trunk if args.trunk is not None else recipe["trunk"]
    if trunk in (None, "none"):
        needs_trunk = {"--diff": (args.diff, "feeds the first difference to"),
                       "--trunk-mix": (args.trunk_mix, "sets how the channels are read by"),
                       "--trunk-head": (args.trunk_head, "adds a second head on"),
                       "--trunk-width": (args.trunk_width is not None, "sets the filters of"),
                       "--trunk-depth": (args.trunk_depth is not None, "sets the blocks of")}
        for flag, (given, what) in needs_trunk.items():
            if given:
                raise ValueError(f"{flag} {what} a convolutional trunk; add --trunk inception or --trunk resnet")
        return dict(trunk=None)
    return dict(trunk=trunk,
                trunk_width=args.trunk_width if args.trunk_width is not None else recipe["trunk_width"],
                trunk_depth=args.trunk_depth if args.trunk_depth is not None else recipe["trunk_depth"],
                trunk_diff=args.diff if args.diff is not None else recipe["trunk_diff"],
                trunk_head=args.trunk_head if args.trunk_head is not None else recipe["trunk_head"])


def _sweep_config(args: argparse.Namespace, recipe: dict, augment: str):
    """The SweepConfig of the flags, the recipe filling what was not given."""
    from .protocol import SweepConfig

    def pick(name: str):
        value = getattr(args, name)
        return value if value is not None else recipe[name]

    steps = args.steps if args.steps is not None else (None if args.epochs is not None else recipe["steps"])
    trunk_fields = _trunk_fields(args, recipe)
    level_scale = pick("level_scale")
    return SweepConfig(patches=args.patches, max_patch_len=pick("max_patch_len"), conv_stem=pick("conv_stem"),
                       **trunk_fields, trunk_mix=args.trunk_mix,
                       token_stats=args.token_stats,
                       level_scale=level_scale, rel_pos_bias=args.rel_pos, length_embed=args.length_embed,
                       epochs=args.epochs, min_steps=args.min_steps, normalize=_normalize_arg(args, recipe, level_scale),
                       branches=args.branches, batch_size=pick("batch_size"), seed=args.seed,
                       protocol=PROTOCOLS[args.protocol], split_seed=args.split_seed,
                       mixed_precision=args.mixed_precision, recipe=args.recipe,
                       steps=steps, augment=augment, mixup_alpha=args.mixup or 0.2,
                       pretrain_epochs=pick("pretrain_epochs"), pretrain_mask_ratio=args.pretrain_mask_ratio,
                       pretrain_lr=args.pretrain_lr, pretrain_on=_pool_arg(args), seeds=pick("seeds"), ema_decay=args.ema,
                       grad_clip=args.grad_clip, label_smoothing=args.label_smoothing, jumbo_pool=args.jumbo_pool,
                       jumbo_multiplier=args.jumbo_multiplier, layer_scale=args.layer_scale, pos_embed=args.pos_embed,
                       layers=args.layers, drop_path=args.drop_path, weight_decay=args.weight_decay,
                       dim=args.dim, unequal_length=args.unequal_length)


def _print_summary(result, ensemble: int) -> None:
    """The final table and the files written, on stdout."""
    from .report import format_summary

    print()
    ens = f" / mean probabilities of the top {ensemble} runs" if ensemble > 1 else ""
    print(f"test top-1 accuracy (%): best run (chosen on validation) / mean over the sweep{ens}; "
          "mean rank best / avg")
    print(format_summary(result.rows, result.ranks, result.models, dataset_seconds=result.dataset_seconds,
                         ranks_all=result.ranks_all, ensemble=ensemble))
    print()
    print("wrote " + ", ".join(str(p) for p in result.paths.values()))


@dataclass(frozen=True)
class SweepSettings:
    """What a ``tstrain`` command line asks for, before any data is read: the sweep's settings, its grid and the
    ensemble size."""

    config: "SweepConfig"
    lrs: tuple[float, ...]
    dropouts: tuple[float, ...]
    ensemble: int


def _settings(args: argparse.Namespace) -> SweepSettings:
    """The settings of parsed flags, the recipe filling what was not given (ValueError for flags it cannot use)."""
    from .augment import parse_augment
    from .protocol import RECIPES

    recipe = RECIPES[args.recipe]
    if args.patches is None:
        args.patches = recipe["patches"]
    names = parse_augment(args.augment if args.augment is not None else recipe["augment"])
    if args.mixup:
        names = parse_augment((*names, "mixup"))
    _check_args(args)
    return SweepSettings(config=_sweep_config(args, recipe, ",".join(names) or "none"),
                         lrs=tuple(args.lr) if args.lr else tuple(recipe["lrs"]),
                         dropouts=tuple(args.dropout) if args.dropout else tuple(recipe["dropouts"]),
                         ensemble=args.ensemble if args.ensemble is not None else recipe["ensemble"])


def sweep_settings(argv: Sequence[str]) -> SweepSettings:
    """The settings of a ``tstrain`` command line (``argv`` without the program name), exactly as ``tstrain`` would
    resolve them, without reading data or training: e.g. to tell whether two recorded commands train the same
    runs."""
    return _settings(build_parser().parse_args(list(argv)))


def _run(args: argparse.Namespace) -> int:
    from .baselines import parse_baselines
    from .sweep import execute_sweep, plan_sweep

    if args.list:
        _list_datasets(args.data_dir)
        return 0
    baselines = parse_baselines(args.baseline)
    settings = _settings(args)
    datasets, skip_short = _datasets(args)
    plan = plan_sweep(datasets, args.model, settings.config, Path(args.out) if args.out else _default_out(args),
                      lrs=settings.lrs, dropouts=settings.dropouts, baseline=baselines, data_dir=args.data_dir,
                      skip_short=skip_short, ensemble=settings.ensemble)
    setup_threads(args)  # after every check: bad input gets one line, nothing else
    result = execute_sweep(plan, progress=not args.no_progress, cpu=args.cpu,
                           runs_per_device=args.runs_per_device)
    if result.paths:
        _print_summary(result, settings.ensemble)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``tstrain``; returns the exit status (0 ok, 2 bad input, 130 interrupted)."""
    args = build_parser().parse_args(argv)
    configure_logging()
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("tstrain: interrupted; run the same command again to resume (finished runs are kept)",
              file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, NotADirectoryError, FloatingPointError, RuntimeError) as err:
        if args.debug:
            raise
        text = " ".join(str(err).split()) or type(err).__name__
        print(f"tstrain: error: {text}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
