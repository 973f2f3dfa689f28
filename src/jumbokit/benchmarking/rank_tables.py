"""Mean rank of the transformer variants under one front end, from the trunk benchmark's JSON files.

    python benchmarks/timeseries_rank.py benchmarks/results/timeseries_trunk_cpu_seeds3.json \\
        benchmarks/results/timeseries_trunk_h100_seeds3.json --json benchmarks/results/timeseries_trunk_ranks.json

    python benchmarks/timeseries_rank.py benchmarks/results/timeseries_trunk_resnet_auto_variants_seeds3.json \\
        benchmarks/results/timeseries_trunk_levelscale_auto_variants_seeds3.json ... \\
        --front-end "tstrain --recipe small-data-trunk"      # the recipe's runs, from explicit-flag files too

Each input is a JSON written by ``benchmarks/timeseries_trunk.py``. A row is ranked when its file's ``tstrain``
command trains, on that row's set, the runs the ranked command trains there (``--front-end``; default: the first
file's command). Both commands are read by tstrain's own parser and decided per set as a run decides them: the
recipe's flags filled in, ``--trunk-width auto`` by the set's length, ``--normalize auto`` and ``--level-scale
auto`` by its training series' scale spread. So a width-32 run of a short set ranks beside ``auto`` runs, and ``--recipe
small-data-trunk`` beside the explicit flags it stands for; seeds, models, threads and device flags never matter.
A (set, model) row comes from the first file that matches there; a file with no matching row is refused, with the
settings that differ. A set is ranked only when every
model has a row there with at least ``--min-runs`` runs and all of its rows ran on the same device (trunk runs do
not reproduce across machines, so arms are compared where they ran side by side). Rank 1 = highest test
accuracy, ties share the mean rank; ranks are taken on the validation-chosen run ("best") and on the mean of the
runs. Writes JSON and a markdown copy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from ..timeseries.results import rank_values
from ..training.rundir import markdown_table
from .records import result_path, write_result
from .trunk_records import load_rows

MODELS = "patchtst,patchtst_registers,patchtst_jumbo"


def parse_args(argv=None, results_dir: str | os.PathLike | None = None) -> argparse.Namespace:
    """The command line; ``results_dir`` (the calling script's results folder) gives ``--json`` its default,
    without one ``--json`` is required."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", type=Path, help="JSON files of benchmarks/timeseries_trunk.py, first wins")
    p.add_argument("--models", default=MODELS, help="comma-separated, the models to rank (default: %(default)s)")
    p.add_argument("--front-end", metavar="COMMAND",
                   help="the tstrain command whose runs are ranked, e.g. \"tstrain --recipe small-data-trunk\" "
                        "(default: the first input's command)")
    p.add_argument("--min-runs", type=int, default=3, help="runs a row needs to be ranked (default: %(default)s)")
    json_default(p, results_dir, "timeseries_trunk_ranks")
    args = p.parse_args(argv)
    require_files(p, args.inputs, "benchmarks/timeseries_trunk.py")
    if args.min_runs < 1:
        p.error(f"--min-runs expects a run count >= 1, got {args.min_runs}")
    return args


def json_default(parser: argparse.ArgumentParser, results_dir: str | os.PathLike | None, benchmark: str) -> None:
    """Add ``--json``: by default ``<results_dir>/<benchmark>.json``, required where no results folder is given."""
    if results_dir is None:
        parser.add_argument("--json", type=Path, required=True, help="where the JSON goes (a .md copy beside it)")
    else:
        parser.add_argument("--json", type=Path, default=result_path(results_dir, benchmark),
                            help="(default: %(default)s)")


def require_files(parser: argparse.ArgumentParser, paths: list[Path], writer: str) -> None:
    """A usage error (exit 2, nothing written) naming each of ``paths`` that is not a file; ``writer`` is the
    script whose JSON the inputs should be."""
    missing = [str(f) for f in paths if not f.is_file()]
    if missing:
        parser.error(f"expected JSON files of {writer}, not found: {', '.join(missing)}")


def rank_sets(rows: dict[tuple[str, str], dict], models: list[str], min_runs: int) -> tuple[list[dict], list[str]]:
    """Per-set ranks of ``models`` (by best run and by mean) where they can be compared; and why other sets
    were left out."""
    ranked, left_out = [], []
    for d in sorted({d for d, _ in rows}):
        mine = [rows.get((d, m)) for m in models]
        absent = [m for m, r in zip(models, mine) if r is None or r["arm_runs"] < min_runs]
        devices = {r["device"] for r in mine if r is not None}
        if absent:
            left_out.append(f"{d} (fewer than {min_runs} runs of {', '.join(absent)} at the ranked front end)")
        elif len(devices) > 1:
            left_out.append(f"{d} (the models ran on different devices: {'; '.join(sorted(devices))})")
        else:
            ranked.append({"dataset": d, "device": devices.pop(), "sources": sorted({r["source"] for r in mine}),
                           "trunk_width": mine[0]["trunk_width"],
                           "best": {m: r["arm_best"] for m, r in zip(models, mine)},
                           "avg": {m: r["arm_avg"] for m, r in zip(models, mine)},
                           "rank_best": dict(zip(models, rank_values([r["arm_best"] for r in mine]))),
                           "rank_avg": dict(zip(models, rank_values([r["arm_avg"] for r in mine])))})
    return ranked, left_out


def mean_ranks(ranked: list[dict], models: list[str]) -> dict[str, dict[str, float]]:
    """{"rank_best" | "rank_avg": {model: mean rank over the ranked sets}}."""
    return {key: {m: statistics.mean(s[key][m] for s in ranked) for m in models} for key in ("rank_best", "rank_avg")}


def table(ranked: list[dict], models: list[str], means: dict[str, dict[str, float]]) -> str:
    """One line per set (best / mean of the runs, with the two ranks), then the mean ranks (``means``); the device
    column shows a device's name up to its first comma (the JSON keeps the whole label)."""
    header = ["dataset", "device", "trunk width", *models]
    body = [{"dataset": s["dataset"], "device": s["device"].split(",")[0], "trunk width": s["trunk_width"] or "-",
             **{m: f"{s['best'][m]:.1f} / {s['avg'][m]:.1f} (rank {s['rank_best'][m]:g} / {s['rank_avg'][m]:g})"
                for m in models}} for s in ranked]
    body += mean_rank_lines(means, models, {"device": f"{len(ranked)} sets", "trunk width": ""})
    return markdown_table(body, header)


def mean_rank_lines(means: dict[str, dict[str, float]], models: list[str], columns: dict[str, str]) -> list[dict]:
    """The two closing lines of a rank table: the mean rank by the best run and by the mean of runs per model,
    ``columns`` filling the other cells."""
    return [{"dataset": label, **columns, **{m: f"{means[key][m]:.2f}" for m in models}}
            for key, label in (("rank_best", "mean rank, best run"), ("rank_avg", "mean rank, mean of runs"))]


def write_record(path: Path, record: dict, summary: tuple[str, ...], heading: str, text: str) -> None:
    """Print ``text`` and the ``summary`` keys of ``record``, then write ``record`` as JSON to ``path`` and
    ``heading`` + ``text`` as its markdown copy."""
    print(text)
    print(json.dumps({k: record[k] for k in summary}, indent=1))
    write_result(path, record, f"{heading}\n\n{text}\n", quiet=True)


def main(argv=None, results_dir: str | os.PathLike | None = None) -> int:
    """Rank the inputs and write the table; ``results_dir``: the folder ``--json`` defaults to (required without)."""
    args = parse_args(argv, results_dir)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    front, rows = load_rows(args.inputs, args.front_end)
    ranked, left_out = rank_sets(rows, models, args.min_runs)
    if not ranked:
        raise SystemExit(f"no set has rows of every model ({', '.join(models)}) with >= {args.min_runs} runs on one "
                         f"device; left out: {'; '.join(left_out) or 'no rows'}")
    mean_rank = mean_ranks(ranked, models)
    record = {"front_end": front, "models": models, "min_runs": args.min_runs, "sets": ranked,
              "mean_rank_best": mean_rank["rank_best"], "mean_rank_avg": mean_rank["rank_avg"],
              "left_out": left_out, "inputs": [str(p) for p in args.inputs]}
    note = f"\n\nLeft out: {'; '.join(left_out)}." if left_out else ""
    sources = ", ".join(f"`{p.name}`" for p in args.inputs)
    write_record(args.json, record, ("mean_rank_best", "mean_rank_avg", "left_out"),
                 f"# Mean rank of {', '.join(models)}: `{front}`\n\nFrom {sources}; each cell: best run / mean of the "
                 "runs (rank by best / rank by mean), test %.", table(ranked, models, mean_rank) + note)
    return 0
