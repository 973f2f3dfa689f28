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
import shlex
import statistics
from dataclasses import asdict, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..timeseries.normalize import resolve_normalization
from ..timeseries.results import rank_values
from ..training.rundir import markdown_table
from .records import write_result

MODELS = "patchtst,patchtst_registers,patchtst_jumbo"
RUN_FLAGS = {"--seeds": 1, "--model": 1, "--threads": 1, "--runs-per-device": 1, "--cpu": 0}  # flag -> values
NOT_SETTINGS = ("recipe", "seed", "seeds")  # SweepConfig fields that do not change a run's model or data


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", type=Path, help="JSON files of benchmarks/timeseries_trunk.py, first wins")
    p.add_argument("--models", default=MODELS, help="comma-separated, the models to rank (default: %(default)s)")
    p.add_argument("--front-end", metavar="COMMAND",
                   help="the tstrain command whose runs are ranked, e.g. \"tstrain --recipe small-data-trunk\" "
                        "(default: the first input's command)")
    p.add_argument("--min-runs", type=int, default=3, help="runs a row needs to be ranked (default: %(default)s)")
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/timeseries_trunk_ranks.json"),
                   help="(default: %(default)s)")
    args = p.parse_args(argv)
    require_files(p, args.inputs, "benchmarks/timeseries_trunk.py")
    if args.min_runs < 1:
        p.error(f"--min-runs expects a run count >= 1, got {args.min_runs}")
    return args


def require_files(parser: argparse.ArgumentParser, paths: list[Path], writer: str) -> None:
    """A usage error (exit 2, nothing written) naming each of ``paths`` that is not a file; ``writer`` is the
    script whose JSON the inputs should be."""
    missing = [str(f) for f in paths if not f.is_file()]
    if missing:
        parser.error(f"expected JSON files of {writer}, not found: {', '.join(missing)}")


def front_end(command: str) -> str:
    """The tstrain command without the flags that do not change a run's model or data (seeds, models,
    threads, device): the front end's text, for titles."""
    words, kept, skip = command.split(), [], 0
    for word in words:
        if skip:
            skip -= 1
        elif word in RUN_FLAGS:
            skip = RUN_FLAGS[word]
        else:
            kept.append(word)
    return " ".join(kept)


def settings_of(command: str, source: str) -> dict[str, Any]:
    """The run settings a recorded ``tstrain`` command resolves to (tstrain's own parser and recipe rules), less
    what does not change a run's model or data (recipe name, seeds); "auto" values stay undecided."""
    from ..timeseries.flags import sweep_settings

    words = shlex.split(command)
    try:
        settings = sweep_settings(words[1:] if words[:1] == ["tstrain"] else words)
    except (SystemExit, ValueError) as err:
        why = "tstrain's message is above" if isinstance(err, SystemExit) else str(err)
        raise SystemExit(f"{source}: expected a command tstrain accepts ({why}), got: {command}")
    return {"config": settings.config, "lrs": settings.lrs, "dropouts": settings.dropouts}


@lru_cache(maxsize=None)
def training_series(dataset: str, protocol: str, split_seed: int) -> np.ndarray:
    """The training split of a local UCR/UEA set as loaded, before normalisation (n, C, L): what the "auto"
    settings read (its scale spread is the same after standardising with training statistics)."""
    from ..timeseries.data import DatasetNotFoundError, load_dataset

    try:
        return load_dataset(dataset, protocol=protocol, split_seed=split_seed, normalize="none").train.x
    except DatasetNotFoundError as err:
        raise SystemExit(f"a row of {dataset!r} has settings decided by the set ('auto'), and the set cannot be read "
                         f"here: {err}")


def settings_on(settings: dict[str, Any], dataset: str | None) -> dict[str, Any]:
    """``settings`` decided for one set as its runs decide them: ``--normalize auto`` and ``--level-scale auto``
    (with the augmentations it drops) by the training series' scale spread, ``--trunk-width auto`` by the set's
    length. Reads the set only where something is "auto"; with no set (None), "auto" values stay as they are."""
    cfg = settings["config"]
    model = cfg.model
    auto = cfg.normalize == "auto" or model.level_scale == "auto" or (model.trunk and model.trunk_width == "auto")
    if dataset is not None and auto:
        train_x = training_series(dataset, cfg.protocol, cfg.split_seed)
        on_set = cfg.for_dataset(train_x)
        cfg = replace(on_set, normalize=resolve_normalization(train_x, cfg.normalize),
                      model=replace(on_set.model, trunk_width=cfg.trunk_width_for(train_x.shape[-1])))
    # the series-model options beside the sweep's (no name is shared), so a difference names the option itself
    decided = {k: v for k, v in asdict(cfg).items() if k not in NOT_SETTINGS and k != "model"}
    return {**decided, **asdict(cfg.model), "lrs": settings["lrs"], "dropouts": settings["dropouts"]}


def differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The settings where ``a`` and ``b`` differ, as "name: a vs b" (or "the same")."""
    diff = [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return "; ".join(diff) or "the same"


def load_records(paths: list[Path]) -> list[tuple[Path, dict]]:
    """(path, record) of each input, SystemExit for one that is not a JSON of benchmarks/timeseries_trunk.py."""
    records = []
    for path in paths:
        try:
            record = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise SystemExit(f"{path}: expected a JSON of benchmarks/timeseries_trunk.py, got unreadable text ({err})")
        if not isinstance(record, dict) or "rows" not in record or "command" not in record:
            raise SystemExit(f"{path}: expected a JSON of benchmarks/timeseries_trunk.py (with 'rows' and 'command')")
        records.append((path, record))
    return records


def load_rows(paths: list[Path], command: str | None = None) -> tuple[str, dict[tuple[str, str], dict]]:
    """(the ranked front end, (set, model) -> row with its "device", "source" and "trunk_width"): each row from the
    first file whose settings, decided on that set, are those of ``command`` there (default: the first file's
    command). SystemExit for a file none of whose rows (or, with no rows, whose settings) match."""
    records = load_records(paths)
    ranked = settings_of(command, "--front-end") if command else settings_of(records[0][1]["command"], str(paths[0]))
    command = command or records[0][1]["command"]
    ranked_on: dict[str, dict[str, Any]] = {}  # set -> the ranked settings decided there
    rows: dict[tuple[str, str], dict] = {}
    for path, record in records:
        mine = settings_of(record["command"], str(path))
        matched = 0
        for row in record["rows"]:
            dataset = row["dataset"]
            if dataset not in ranked_on:
                ranked_on[dataset] = settings_on(ranked, dataset)
            decided = settings_on(mine, dataset)
            if decided != ranked_on[dataset]:
                continue
            matched += 1
            width = str(decided["trunk_width"]) if decided["trunk"] else None
            rows.setdefault((dataset, row["model"]), {**row, "device": record["device"], "source": path.name,
                                                      "trunk_width": width})
        if not matched:
            on = record["rows"][0]["dataset"] if record["rows"] else None
            why = differences(settings_on(ranked, on), settings_on(mine, on))
            raise SystemExit(f"the inputs come from different front ends, expected one: {path} differs from "
                             f"`{front_end(command)}`{f' on {on}' if on else ''} ({why})")
    return front_end(command), rows


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


def main(argv=None) -> int:
    args = parse_args(argv)
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
