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

Whether the mean ranks differ beyond chance is tested on the same draws, by each reading: Friedman's test over all
models, the Nemenyi critical difference (two mean ranks closer than it do not differ at the 5% level, as in the
critical-difference diagrams of the UCR/UEA literature), and per pair of models the draws each ranks ahead with a
two-sided sign test on them (ties left out), with the number of set-draws that test would need to find the
observed share of leads with 80% power (normal approximation). The critical-difference diagram of each reading
(aeon's, Nemenyi at 5%: models joined by a bar do not differ) is written beside the JSON as ``*_cd_best.png`` and
``*_cd_mean.png`` when three or more models are ranked.

Beside the ranks, each set's test accuracy averaged over its draws (the chosen run's and the mean of runs'), and
the mean of those over the sets, each set once: the expected accuracy of a seed draw, less noisy than any one draw
where a set has several. ``--sets`` pools only the named sets.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from ..training.rundir import atomic_save_figure, markdown_table
from . import stats
from .rank_tables import json_default, mean_rank_lines, mean_ranks, require_files, write_record
from .trunk_records import differences, settings_of, settings_on

READINGS = {"rank_best": "best run", "rank_avg": "mean of runs"}


def parse_args(argv=None, results_dir: str | os.PathLike | None = None) -> argparse.Namespace:
    """The command line; ``results_dir`` (the calling script's results folder) gives ``--json`` its default,
    without one ``--json`` is required."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", type=Path, help="JSON files of benchmarks/timeseries_rank.py")
    json_default(p, results_dir, "timeseries_trunk_ranks_pooled")
    p.add_argument("--sets", default=None,
                   help="comma-separated set names: pool only these (default: every set of every table)")
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
                          "rank_best": s["rank_best"], "rank_avg": s["rank_avg"], "best": s["best"], "avg": s["avg"]})
    return draws


def only_sets(draws: list[dict], names: str | None) -> list[dict]:
    """The draws of the comma-separated set ``names`` (all for None); SystemExit naming a set no table ranks."""
    if names is None:
        return draws
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    ranked = sorted({d["dataset"] for d in draws})
    missing = [n for n in wanted if n not in ranked]
    if missing or not wanted:
        raise SystemExit(f"--sets: expected names of ranked sets ({', '.join(ranked)}), got {names!r}")
    return [d for d in draws if d["dataset"] in wanted]


def accuracy_by_set(draws: list[dict], models: list[str]) -> dict:
    """Per set (in order of first draw): its number of draws and each model's test accuracy by the chosen run
    ("best") and by the mean of runs ("avg"), averaged over those draws; then both averaged over the sets."""
    sets = []
    for name in dict.fromkeys(d["dataset"] for d in draws):
        mine = [d for d in draws if d["dataset"] == name]
        means = {key: {m: float(np.mean([d[key][m] for d in mine])) for m in models} for key in ("best", "avg")}
        sets.append({"dataset": name, "draws": len(mine), **means})
    overall = {key: {m: float(np.mean([s[key][m] for s in sets])) for m in models} for key in ("best", "avg")}
    return {"sets": sets, "mean_best": overall["best"], "mean_avg": overall["avg"]}


def accuracy_table(accuracy: dict, models: list[str]) -> str:
    """One line per set (accuracy by the chosen run / by the mean of runs, averaged over its draws), then the mean
    over the sets."""
    def cells(best: dict[str, float], avg: dict[str, float]) -> dict[str, str]:
        return {m: f"{best[m]:.2f} / {avg[m]:.2f}" for m in models}

    body = [{"dataset": s["dataset"], "draws": str(s["draws"]), **cells(s["best"], s["avg"])} for s in accuracy["sets"]]
    body.append({"dataset": f"mean over {len(accuracy['sets'])} sets", "draws": "",
                 **cells(accuracy["mean_best"], accuracy["mean_avg"])})
    return markdown_table(body, ["dataset", "draws", *models])


def pooled_table(draws: list[dict], models: list[str], means: dict[str, dict[str, float]]) -> str:
    """One line per (set, draw) with its two ranks per model, then the pooled mean ranks."""
    header = ["dataset", "rank table", "device", *models]
    body = [{"dataset": d["dataset"], "rank table": d["table"], "device": d["device"].split(",")[0],
             **{m: f"{d['rank_best'][m]:g} / {d['rank_avg'][m]:g}" for m in models}} for d in draws]
    body += mean_rank_lines(means, models, {"rank table": f"{len(draws)} set-draws", "device": ""})
    return markdown_table(body, header)


def rank_matrix(draws: list[dict], models: list[str], key: str) -> np.ndarray:
    """(draws, models) ranks ``key`` ("rank_best" or "rank_avg") of every (set, draw) pair."""
    return np.array([[d[key][m] for m in models] for d in draws], dtype=float)


def significance(draws: list[dict], models: list[str], key: str) -> dict:
    """Friedman's test (three or more models; None for two, where the sign test is the test), the Nemenyi
    critical difference (alpha 0.05) and pairwise sign tests on the ranks ``key`` ("rank_best" or "rank_avg") of
    the (set, draw) pairs."""
    ranks = rank_matrix(draws, models, key)
    count, k = ranks.shape
    friedman = stats.friedman(ranks)
    pairs = [sign_test(ranks[:, i], ranks[:, j], models[i], models[j]) for i in range(k) for j in range(i + 1, k)]
    return {"friedman_chi2": None if friedman is None else round(friedman[0], 3),
            "friedman_p": None if friedman is None else round(friedman[1], 4),
            "nemenyi_cd": round(stats.nemenyi_cd(k, count), 3), "pairs": pairs}


def sign_test(a_ranks: np.ndarray, b_ranks: np.ndarray, a: str, b: str) -> dict:
    """How often model a ranks ahead of b and b of a over the draws (ties left out), with the two-sided sign
    test's p-value and the draws it would need for 80% power."""
    ahead, behind, p = stats.sign_test(a_ranks, b_ranks)
    return {"a": a, "b": b, "a_ahead": ahead, "b_ahead": behind, "ties": len(a_ranks) - ahead - behind,
            "sign_test_p": round(p, 4), "draws_needed": stats.draws_needed(ahead, behind, len(a_ranks))}


def significance_table(tests: dict[str, dict]) -> str:
    """One line per reading and pair of models: who ranks ahead how often, and the tests' p-values."""
    body = []
    for key, test in tests.items():
        for pair in test["pairs"]:
            body.append({"reading": READINGS[key], "pair (a vs b)": f"{pair['a']} vs {pair['b']}",
                         "a ahead / b ahead / ties": f"{pair['a_ahead']} / {pair['b_ahead']} / {pair['ties']}",
                         "sign test p": f"{pair['sign_test_p']:.3f}",
                         "set-draws for 80% power": "-" if pair["draws_needed"] is None else str(pair["draws_needed"]),
                         "Friedman p (all)": "-" if test["friedman_p"] is None else f"{test['friedman_p']:.3f}",
                         "Nemenyi CD": f"{test['nemenyi_cd']:.2f}"})
    return markdown_table(body, list(body[0]))


def write_cd_diagrams(json_path: Path, draws: list[dict], models: list[str]) -> list[Path]:
    """aeon's critical-difference diagram (Nemenyi, alpha 0.05) of each reading, beside ``json_path``; none for
    fewer than three models (aeon's diagram starts from Friedman's test)."""
    if len(models) < 3:
        return []
    written = []
    for key, suffix in (("rank_best", "best"), ("rank_avg", "mean")):
        title = f"mean rank by the {READINGS[key]}, {len(draws)} set-draws (bar: no difference at 5%)"
        fig = stats.critical_difference_figure(rank_matrix(draws, models, key), models, title)
        written.append(atomic_save_figure(json_path.with_name(f"{json_path.stem}_cd_{suffix}.png"), fig))
    return written


def main(argv=None, results_dir: str | os.PathLike | None = None) -> int:
    """Pool the rank tables and write the record; ``results_dir``: the folder ``--json`` defaults to (required
    without)."""
    args = parse_args(argv, results_dir)
    tables = load_tables(args.inputs)
    models = tables[0]["models"]
    draws = only_sets(set_draws(tables), args.sets)
    means = mean_ranks(draws, models)
    tests = {key: significance(draws, models, key) for key in READINGS}
    accuracy = accuracy_by_set(draws, models)
    record = {"front_end": tables[0]["front_end"], "models": models, "draws": draws,
              "mean_rank_best": means["rank_best"], "mean_rank_avg": means["rank_avg"], "significance": tests,
              "accuracy_by_set": accuracy["sets"], "mean_accuracy_best": accuracy["mean_best"],
              "mean_accuracy_avg": accuracy["mean_avg"], "inputs": [str(p) for p in args.inputs]}
    sources = ", ".join(f"`{p.name}`" for p in args.inputs)
    write_record(args.json, record, ("mean_rank_best", "mean_rank_avg", "mean_accuracy_best", "mean_accuracy_avg"),
                 f"# Mean rank of {', '.join(models)} pooled over seed draws: `{record['front_end']}`\n\nFrom "
                 f"{sources}; each cell: rank by the best run / by the mean of the runs.",
                 pooled_table(draws, models, means) + "\n\nDo the mean ranks differ beyond chance?\n\n"
                 + significance_table(tests) + "\n\nTest accuracy averaged over each set's draws (chosen run / mean "
                 "of runs):\n\n" + accuracy_table(accuracy, models))
    for path in write_cd_diagrams(args.json, draws, models):
        print(f"wrote {path}")
    return 0
