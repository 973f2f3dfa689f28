"""Mean rank of the transformer variants pooled over seed draws: each set of each rank table counts once.

    python benchmarks/timeseries_rank_pool.py benchmarks/results/timeseries_trunk_recipe_ranks.json \\
        benchmarks/results/timeseries_trunk_trunkhead_ranks_short4_seeds3to5.json \\
        benchmarks/results/timeseries_trunk_trunkhead_ranks_acsf1_seeds3to5.json \\
        --json benchmarks/results/timeseries_trunk_recipe_ranks_pooled.json

Each input is a JSON written by ``benchmarks/timeseries_rank.py``, one seed draw of some sets (e.g. seeds 0-2 on
all nine, seeds 3-5 on four). A set ranked in several tables counts once per table, so a set run with more draws
weighs more; the mean rank is over all (set, draw) pairs. The tables must rank the same models under one front end
(read by tstrain's parser, as ``timeseries_rank.py`` reads them; seeds never matter), and a set must not come from
the same source files twice (the same draw counted twice is refused). Writes JSON and a markdown copy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from timeseries_rank import (differences, mean_rank_lines, mean_ranks, require_files, settings_of, settings_on,
                             write_record)

from jumbokit.training.rundir import markdown_table


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", type=Path, help="JSON files of benchmarks/timeseries_rank.py")
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/timeseries_trunk_ranks_pooled.json"),
                   help="(default: %(default)s)")
    args = p.parse_args(argv)
    require_files(p, args.inputs, "benchmarks/timeseries_rank.py")
    return args


def load_tables(paths: list[Path]) -> list[dict]:
    """The rank tables, checked: each has sets and models, all rank the same models under one front end."""
    tables = []
    for path in paths:
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise SystemExit(f"{path}: expected a JSON of benchmarks/timeseries_rank.py, could not read it ({err})")
        if not isinstance(record, dict) or not {"front_end", "models", "sets"} <= set(record):
            raise SystemExit(f"{path}: expected a JSON of benchmarks/timeseries_rank.py (front_end, models, sets)")
        tables.append({**record, "name": path.name})
    first = tables[0]
    reference = settings_on(settings_of(first["front_end"], first["name"]), None)
    for table in tables[1:]:
        if table["models"] != first["models"]:
            raise SystemExit(f"{table['name']} ranks {', '.join(table['models'])}, {first['name']} "
                             f"{', '.join(first['models'])}: expected the same models")
        settings = settings_on(settings_of(table["front_end"], table["name"]), None)
        if settings != reference:
            raise SystemExit(f"{table['name']} ranks another front end than {first['name']} "
                             f"({differences(settings, reference)})")
    return tables


def set_draws(tables: list[dict]) -> list[dict]:
    """One entry per (table, set): its ranks by the chosen run and by the mean of runs; SystemExit for a set that
    two tables take from the same source files."""
    draws, seen = [], {}
    for table in tables:
        for s in table["sets"]:
            key = (s["dataset"], tuple(sorted(s["sources"])))
            if key in seen:
                raise SystemExit(f"{s['dataset']} from {', '.join(s['sources'])} is in both {seen[key]} and "
                                 f"{table['name']}: expected each draw once")
            seen[key] = table["name"]
            draws.append({"dataset": s["dataset"], "table": table["name"], "device": s["device"],
                          "rank_best": s["rank_best"], "rank_avg": s["rank_avg"]})
    return draws


def pooled_table(draws: list[dict], models: list[str], means: dict[str, dict[str, float]]) -> str:
    """One line per (set, draw) with its two ranks per model, then the pooled mean ranks."""
    header = ["dataset", "rank table", "device", *models]
    body = [{"dataset": d["dataset"], "rank table": d["table"], "device": d["device"].split(",")[0],
             **{m: f"{d['rank_best'][m]:g} / {d['rank_avg'][m]:g}" for m in models}} for d in draws]
    body += mean_rank_lines(means, models, {"rank table": f"{len(draws)} set-draws", "device": ""})
    return markdown_table(body, header)


def main(argv=None) -> int:
    args = parse_args(argv)
    tables = load_tables(args.inputs)
    models = tables[0]["models"]
    draws = set_draws(tables)
    means = mean_ranks(draws, models)
    record = {"front_end": tables[0]["front_end"], "models": models, "draws": draws,
              "mean_rank_best": means["rank_best"], "mean_rank_avg": means["rank_avg"],
              "inputs": [str(p) for p in args.inputs]}
    sources = ", ".join(f"`{p.name}`" for p in args.inputs)
    write_record(args.json, record, ("mean_rank_best", "mean_rank_avg"),
                 f"# Mean rank of {', '.join(models)} pooled over seed draws: `{record['front_end']}`\n\nFrom "
                 f"{sources}; each cell: rank by the best run / by the mean of the runs.",
                 pooled_table(draws, models, means))
    return 0


if __name__ == "__main__":
    sys.exit(main())
