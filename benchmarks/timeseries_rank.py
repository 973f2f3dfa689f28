"""Mean rank of the transformer variants under one front end, from the trunk benchmark's JSON files.

    python benchmarks/timeseries_rank.py benchmarks/results/timeseries_trunk_cpu_seeds3.json \\
        benchmarks/results/timeseries_trunk_h100_seeds3.json --json benchmarks/results/timeseries_trunk_ranks.json

Each input is a JSON written by ``benchmarks/timeseries_trunk.py``. All files must come from the same front end:
their ``tstrain`` commands may differ only in seeds, models, threads and device flags, and in ``--trunk-width``
where it resolves to the same width on a set: ``--trunk-width auto`` is the width ``auto_trunk_width`` gives
that set's length, so width-32 runs of a short set rank beside ``auto`` runs. The first file's width is the
one ranked; a (set, model) row comes from the first file whose width matches it there. A set is ranked only when every
model has a row there with at least ``--min-runs`` runs and all of its rows ran on the same device (trunk runs do
not reproduce across machines, so arms are compared where they ran side by side). Rank 1 = highest test
accuracy, ties share the mean rank; ranks are taken on the validation-chosen run ("best") and on the mean of the
runs. Writes JSON and a markdown copy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from functools import lru_cache
from pathlib import Path

from jumbokit.timeseries.protocol import auto_trunk_width
from jumbokit.timeseries.results import rank_values
from jumbokit.training.rundir import atomic_write_json, atomic_write_text, markdown_table

MODELS = "patchtst,patchtst_registers,patchtst_jumbo"
RUN_FLAGS = {"--seeds": 1, "--model": 1, "--threads": 1, "--runs-per-device": 1, "--cpu": 0}  # flag -> values


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", type=Path, help="JSON files of benchmarks/timeseries_trunk.py, first wins")
    p.add_argument("--models", default=MODELS, help="comma-separated, the models to rank (default: %(default)s)")
    p.add_argument("--min-runs", type=int, default=3, help="runs a row needs to be ranked (default: %(default)s)")
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/timeseries_trunk_ranks.json"),
                   help="(default: %(default)s)")
    args = p.parse_args(argv)
    missing = [str(f) for f in args.inputs if not f.is_file()]
    if missing:
        p.error(f"expected JSON files of benchmarks/timeseries_trunk.py, not found: {', '.join(missing)}")
    if args.min_runs < 1:
        p.error(f"--min-runs expects a run count >= 1, got {args.min_runs}")
    return args


def front_end(command: str) -> str:
    """The tstrain command without the flags that do not change a run's model or data (seeds, models,
    threads, device): two files with the same front end may be ranked together."""
    words, kept, skip = command.split(), [], 0
    for word in words:
        if skip:
            skip -= 1
        elif word in RUN_FLAGS:
            skip = RUN_FLAGS[word]
        else:
            kept.append(word)
    return " ".join(kept)


def split_width(front: str) -> tuple[str, str | None]:
    """(the front end with its ``--trunk-width`` value left out, that value or None)."""
    words = front.split()
    at = words.index("--trunk-width") if "--trunk-width" in words else len(words)
    if at + 1 >= len(words):
        return front, None
    return " ".join(words[:at] + ["--trunk-width", "W"] + words[at + 2:]), words[at + 1]


@lru_cache(maxsize=None)
def series_length(dataset: str) -> int:
    """The padded length of a local UCR/UEA set (what ``--trunk-width auto`` reads)."""
    from jumbokit.timeseries.data import load_dataset

    return load_dataset(dataset, normalize="none").seq_len


def width_on(width: str | None, dataset: str) -> str | None:
    """A file's ``--trunk-width`` as filters on ``dataset`` ("auto" resolved by the set's length)."""
    return str(auto_trunk_width(series_length(dataset))) if width == "auto" else width


def load_rows(paths: list[Path]) -> tuple[str, dict[tuple[str, str], dict]]:
    """(the first file's front end, (set, model) -> row with its "device", "source" and "trunk_width"): each row
    from the first file whose trunk width on that set is the first file's."""
    fronts: dict[str, str] = {}
    candidates: list[tuple[str | None, dict]] = []
    for path in paths:
        try:
            record = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise SystemExit(f"{path}: expected a JSON of benchmarks/timeseries_trunk.py, got unreadable text ({err})")
        if not isinstance(record, dict) or "rows" not in record or "command" not in record:
            raise SystemExit(f"{path}: expected a JSON of benchmarks/timeseries_trunk.py (with 'rows' and 'command')")
        fronts[str(path)] = front_end(record["command"])
        width = split_width(fronts[str(path)])[1]
        candidates += [(width, {**row, "device": record["device"], "source": path.name}) for row in record["rows"]]
    if len({split_width(f)[0] for f in fronts.values()}) > 1:
        listing = "; ".join(f"{p}: {f}" for p, f in fronts.items())
        raise SystemExit(f"the inputs come from different front ends, expected one: {listing}")
    ranked_width = split_width(next(iter(fronts.values())))[1]
    rows: dict[tuple[str, str], dict] = {}
    for width, row in candidates:
        on_set = width_on(width, row["dataset"])
        if on_set == width_on(ranked_width, row["dataset"]):
            rows.setdefault((row["dataset"], row["model"]), {**row, "trunk_width": on_set})
    return next(iter(fronts.values())), rows


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
    for key, label in (("rank_best", "mean rank, best run"), ("rank_avg", "mean rank, mean of runs")):
        body.append({"dataset": label, "device": f"{len(ranked)} sets", "trunk width": "",
                     **{m: f"{means[key][m]:.2f}" for m in models}})
    return markdown_table(body, header)


def main(argv=None) -> int:
    args = parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    front, rows = load_rows(args.inputs)
    ranked, left_out = rank_sets(rows, models, args.min_runs)
    if not ranked:
        raise SystemExit(f"no set has rows of every model ({', '.join(models)}) with >= {args.min_runs} runs on one "
                         f"device; left out: {'; '.join(left_out) or 'no rows'}")
    mean_rank = mean_ranks(ranked, models)
    record = {"front_end": front, "models": models, "min_runs": args.min_runs, "sets": ranked,
              "mean_rank_best": mean_rank["rank_best"], "mean_rank_avg": mean_rank["rank_avg"],
              "left_out": left_out, "inputs": [str(p) for p in args.inputs]}
    text = table(ranked, models, mean_rank)
    note = f"\n\nLeft out: {'; '.join(left_out)}." if left_out else ""
    print(text + note)
    print(json.dumps({k: record[k] for k in ("mean_rank_best", "mean_rank_avg", "left_out")}, indent=1))
    atomic_write_json(args.json, record)
    sources = ", ".join(f"`{p.name}`" for p in args.inputs)
    atomic_write_text(args.json.with_suffix(".md"),
                      f"# Mean rank of {', '.join(models)}: `{front}`\n\nFrom {sources}; each cell: best run / mean "
                      f"of the runs (rank by best / rank by mean), test %.\n\n{text}{note}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
