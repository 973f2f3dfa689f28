"""UCR/UEA time-series classification with PatchTST, PatchTST+registers and PatchTST+Jumbo (the paper's sweep).

    tstrain --archive UEA --model patchtst_jumbo            # every UEA set available offline, 12-run sweep
    tstrain --dataset GunPoint,ArrowHead --epochs 20 --lr 1e-3 --dropout 0.1 --baseline minirocket
    tstrain --archive UCR --recipe small-data --baseline minirocket,multirocket,hydra
    tstrain --list                                          # datasets available locally (and in --data-dir)

Runs on one CPU/GPU, or on many with ``torchrun --nproc_per_node N -m jumbokit tstrain ...`` (or ``accelerate
launch``): each process then takes the next unfinished run whenever it is free and trains it whole. The flags and
the sweep settings they resolve to live in :mod:`jumbokit.timeseries.flags`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from jumbokit.timeseries.flags import build_parser, settings_from_args

__all__ = ["build_parser", "main"]


def _default_out(args: argparse.Namespace) -> Path:
    if args.dataset:
        tag = args.dataset[0] + (f"+{len(args.dataset) - 1}" if len(args.dataset) > 1 else "")
    else:
        tag = args.archive or "UCR+UEA"
    recipe = "" if args.recipe == "paper" else f"_{args.recipe}"
    return Path("runs") / f"tstrain_{tag}_p{args.patches}{recipe}"


def _list_datasets(data_dir: str | None) -> None:
    """Print the datasets available locally, per archive, and the user's own in ``data_dir``."""
    from jumbokit.timeseries.data import default_data_dir, local_datasets, user_datasets

    for archive in ("UCR", "UEA"):
        names = local_datasets(archive, data_dir)
        print(f"{archive} ({len(names)} local): {', '.join(names) or 'none'}")
    own = user_datasets(data_dir)
    where = data_dir or default_data_dir()
    print(f"your own in {where} ({len(own)}): {', '.join(own) or 'none'}"
          + (" (run with --dataset NAME --data-dir DIR)" if own else ""))


def _datasets(args: argparse.Namespace) -> tuple[list[str], bool]:
    """(dataset names, skip_short): the named ones, or every local set of the archive(s), too-short ones skipped."""
    from jumbokit.timeseries.data import local_datasets

    if args.dataset:
        return args.dataset, False
    archives = [args.archive] if args.archive else ["UCR", "UEA"]
    datasets = [n for a in archives for n in local_datasets(a, args.data_dir)]
    if not datasets:
        raise ValueError(f"no {'/'.join(archives)} dataset is available locally; name one with --dataset "
                         "(it downloads into --data-dir when online)")
    return datasets, True


def _print_summary(result, ensemble: int) -> None:
    """The final table and the files written, on stdout."""
    from jumbokit.timeseries.report import format_summary

    print()
    ens = f" / mean probabilities of the top {ensemble} runs" if ensemble > 1 else ""
    print(f"test top-1 accuracy (%): best run (chosen on validation) / mean over the sweep{ens}; "
          "mean rank best / avg")
    print(format_summary(result.rows, result.ranks, result.models, dataset_seconds=result.dataset_seconds,
                         ranks_all=result.ranks_all, ensemble=ensemble))
    print()
    print("wrote " + ", ".join(str(p) for p in result.paths.values()))


def _run(args: argparse.Namespace) -> int:
    from jumbokit.timeseries.baselines import parse_baselines
    from jumbokit.timeseries.sweep import execute_sweep, plan_sweep
    from jumbokit.training.cli import setup_threads

    if args.list:
        _list_datasets(args.data_dir)
        return 0
    baselines = parse_baselines(args.baseline)
    settings = settings_from_args(args)
    datasets, skip_short = _datasets(args)
    plan = plan_sweep(datasets, args.model, settings.config, Path(args.out) if args.out else _default_out(args),
                      lrs=settings.lrs, dropouts=settings.dropouts, baseline=baselines, data_dir=args.data_dir,
                      skip_short=skip_short, ensemble=settings.ensemble, fuse=args.fuse)
    setup_threads(args)  # after every check: bad input gets one line, nothing else
    result = execute_sweep(plan, progress=not args.no_progress, cpu=args.cpu,
                           runs_per_device=args.runs_per_device)
    if result.paths:
        _print_summary(result, settings.ensemble)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``tstrain``; returns the exit status (0 ok, 2 bad input, 130 interrupted)."""
    from jumbokit.logs import configure_logging
    from jumbokit.training.cli import parse_flags

    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging()
    try:
        if args.config is not None:  # the file's flags as defaults, the command line's winning
            args = parse_flags(parser, argv)[0]
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
