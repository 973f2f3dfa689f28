"""UCR/UEA time-series classification with PatchTST, PatchTST+registers and PatchTST+Jumbo (the paper's sweep).

    tstrain --archive UEA --model patchtst_jumbo            # every UEA set available offline, 12-run sweep
    tstrain --dataset GunPoint,ArrowHead --epochs 20 --lr 1e-3 --dropout 0.1 --baseline minirocket
    tstrain --archive UCR --recipe small-data --baseline minirocket,multirocket,hydra
    tstrain --list                                          # datasets available locally (and in --data-dir)

Runs on one CPU/GPU, or on many with ``torchrun --nproc_per_node N -m jumbokit tstrain ...`` (or ``accelerate
launch``): each process then takes the next unfinished run whenever it is free and trains it whole. The flags and
the sweep settings they resolve to live in :mod:`jumbokit.cli.series`.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from jumbokit.cli.config import parse_flags
from jumbokit.cli.series import build_parser, settings_from_args

__all__ = ["build_parser", "main"]

RESUME_HINT = "run the same command again to resume (finished runs are kept)"  # printed on Ctrl-C


def _default_out(args: argparse.Namespace) -> Path:
    if args.dataset:
        tag = args.dataset[0] + (f"+{len(args.dataset) - 1}" if len(args.dataset) > 1 else "")
    else:
        tag = args.archive or "UCR+UEA"
    recipe = "" if args.recipe == "paper" else f"_{args.recipe}"
    return Path("runs") / f"tstrain_{tag}_p{args.patches}{recipe}"


def _list_datasets(data_dir: str | None) -> dict[str, list[str]]:
    """Print the datasets available locally, per archive, and the user's own in ``data_dir``; returns them
    (``{"UCR": names, "UEA": names, "own": names}``)."""
    from jumbokit.timeseries.data import default_data_dir, local_datasets, user_datasets

    listed = {}
    for archive in ("UCR", "UEA"):
        listed[archive] = names = local_datasets(archive, data_dir)
        print(f"{archive} ({len(names)} local): {', '.join(names) or 'none'}")
    listed["own"] = own = user_datasets(data_dir)
    where = data_dir or default_data_dir()
    print(f"your own in {where} ({len(own)}): {', '.join(own) or 'none'}"
          + (" (run with --dataset NAME --data-dir DIR)" if own else ""))
    return listed


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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run ``tstrain ARGV``; returns its summary: ``{"out", "rows", "ranks", "paths"}`` of the sweep, or
    ``{"datasets"}`` under ``--list``. Bad input raises ``ValueError`` (``jumbokit.cli.run_cli`` prints it in one
    line), before anything is written."""
    from jumbokit.cli.training import setup_threads
    from jumbokit.logs import configure_logging
    from jumbokit.timeseries.baselines import parse_baselines
    from jumbokit.timeseries.sweep import execute_sweep, plan_sweep

    args = parse_flags(build_parser(), argv)[0]  # a --config file's flags as defaults, the command line's winning
    configure_logging()
    if args.list:
        return {"datasets": _list_datasets(args.data_dir)}
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
    return {"out": str(plan.out_dir), "rows": result.rows, "ranks": result.ranks,
            "paths": {name: str(path) for name, path in result.paths.items()}}
