"""Several seeds of one UCR archive benchmark together: each model's accuracy on a set averaged over its seeds,
the spread over seeds, and the same comparisons as one seed's record.

Reads records of ``benchmarks/ucr_archive.py`` that ran the same command but for ``--seed`` (same recipe, tstrain
flags and split), nothing else; no model runs here. A model's accuracy on a set is its mean over the records that
hold it (a column read from an earlier record, such as seed 0's MiniRocket, counts once), and the report gives,
for every model, its archive mean at each seed, the mean over seeds and their standard deviation (the spread a
re-draw of the seeds moves the archive mean by). On the seed means: the headline table (``--headline`` against
MiniRocket, MultiRocket and Hydra: mean accuracy, mean rank, wins / ties / losses, Friedman, Nemenyi and the
critical-difference diagram), every model's table, the tables of ``--group A,B,...`` (those models alone, with
their diagram), the paired comparisons asked for (``--pair A:B``), the targets
with their intervals, and then each paired comparison and target seed by seed. Cost: CPU seconds per set at each
seed (total, median, max) and each set's largest peak memory over the seeds.

    python benchmarks/ucr_seeds.py benchmarks/results/ucr_archive_fast_init_s0.json \\
        benchmarks/results/ucr_archive_fast_init_s1.json benchmarks/results/ucr_archive_fast_init_s2.json \\
        --headline patchtst_jumbo+multirocket_hydra --pair patchtst_jumbo+multirocket_hydra:multirocket_hydra

Writes JSON, a markdown copy and the diagram (``benchmarks/results/ucr_archive_<recipe>_seeds.json``, ``.md``,
``_cd.png``, or --json).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

import numpy as np

from jumbokit.benchmarking import machine_record, result_path, results_folder, stats, write_result
from jumbokit.benchmarking.archive import (compare, group_figures, memory_line, pair_line, pair_stats, summary_table,
                                           target_lines)
from jumbokit.training.rundir import atomic_save_figure, markdown_table

RESULTS = results_folder(__file__)
ROCKETS = ("minirocket", "multirocket", "hydra")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("records", nargs="+", type=Path,
                   help="records of benchmarks/ucr_archive.py, one per seed, the same command otherwise")
    p.add_argument("--headline", default=None, metavar="MODEL",
                   help="the model ranked against MiniRocket, MultiRocket and Hydra (default: the records' own "
                        "headline model)")
    p.add_argument("--group", action="append", default=[], metavar="A,B,...",
                   help="another table of these models alone on the seed means (mean accuracy, mean rank, Friedman, "
                        "Nemenyi and a diagram), repeatable, e.g. patchtst,patchtst_registers,patchtst_jumbo "
                        "(default: none)")
    p.add_argument("--pair", action="append", default=[], metavar="A:B",
                   help="a paired comparison over the sets on the seed means, and seed by seed, repeatable "
                        "(default: none)")
    p.add_argument("--reference", action="append", default=[], metavar="SEEDS_RECORD:MODEL=ALIAS",
                   help="a column from another record of this script (another recipe over seeds): MODEL's accuracy "
                        "in each of the records it read, named ALIAS here, so pairs with it are paired seed by seed "
                        "too, repeatable, e.g. benchmarks/results/ucr_archive_fast_init10k_long_seeds.json:"
                        "patchtst=patchtst@500 (default: none)")
    p.add_argument("--json", type=Path, default=None,
                   help="result file (default: benchmarks/results/ucr_archive_<recipe>_seeds.json)")
    return p


def without_seed(argv: list[str]) -> list[str]:
    """tstrain's flags with the value of ``--seed`` left out (what must agree between the seeds' records)."""
    return [a for i, a in enumerate(argv) if not (i and argv[i - 1] == "--seed")]


def load_records(paths: list[Path]) -> list[dict]:
    """The records, sorted by seed; SystemExit unless each is an archive record and they differ only by seed."""
    records = []
    for path in paths:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise SystemExit(f"{path}: expected a JSON record of benchmarks/ucr_archive.py ({err})") from None
        if record.get("benchmark") != "ucr_archive" or "per_set" not in record:
            raise SystemExit(f"{path}: expected a record of benchmarks/ucr_archive.py, got "
                             f"benchmark {record.get('benchmark')!r}")
        records.append({**record, "path": str(path)})
    records.sort(key=lambda r: r["seed"])
    seeds = [r["seed"] for r in records]
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"expected one record per seed, got seeds {seeds}")
    first = records[0]
    for record in records[1:]:
        for key, value, other in (("recipe", first["recipe"], record["recipe"]),
                                  ("tstrain flags", without_seed(first["tstrain_args"]),
                                   without_seed(record["tstrain_args"]))):
            if value != other:
                raise SystemExit(f"{record['path']} differs from {first['path']} in its {key} ({other} vs {value}): "
                                 "expected the same command at another seed")
    return records


def load_reference(spec: str) -> tuple[list[dict], str, str]:
    """``SEEDS_RECORD:MODEL=ALIAS`` as (the per-seed records that seeds record read, MODEL, ALIAS); SystemExit for a
    bad spec, a file that is not such a record, or MODEL absent from its records."""
    path, _, column = spec.rpartition(":")
    model, _, alias = column.partition("=")
    if not path or not model or not alias:
        raise SystemExit(f"--reference expects SEEDS_RECORD:MODEL=ALIAS, got {spec!r}")
    try:
        seeds_record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise SystemExit(f"--reference {path}: expected a JSON record of benchmarks/ucr_seeds.py ({err})") from None
    if seeds_record.get("benchmark") != "ucr_seeds":
        raise SystemExit(f"--reference {path}: expected a record of benchmarks/ucr_seeds.py, got benchmark "
                         f"{seeds_record.get('benchmark')!r}")
    records = load_records([Path(p) for p in seeds_record["records"]])
    if not any(model in row["models"] for r in records for row in r["per_set"].values()):
        raise SystemExit(f"--reference {path}: no model {model!r} in the records it read")
    return records, model, alias


def seed_rows(records: list[dict], references: list[tuple[list[dict], str, str]] = ()) -> tuple[dict, dict]:
    """({set: {model: {"test_top1": mean over seeds, "wall_seconds": mean, "seeds": n}}} over the sets every
    record holds, {model: {seed: {set: accuracy}}}); each reference (records, MODEL, ALIAS) adds the column ALIAS,
    MODEL's accuracy in those records at their seeds."""
    sets = [s for s in records[0]["per_set"] if all(s in r["per_set"] for r in records)]
    by_seed: dict[str, dict[int, dict[str, float]]] = {}
    walls: dict[tuple[str, str], list[float]] = {}
    for source, only, alias in [(records, None, None), *references]:
        for record in source:
            for s in (s for s in sets if s in record["per_set"]):
                for model, row in record["per_set"][s]["models"].items():
                    if only is not None and model != only:
                        continue
                    name = alias or model
                    by_seed.setdefault(name, {}).setdefault(record["seed"], {})[s] = row["test_top1"]
                    walls.setdefault((s, name), []).append(row.get("wall_seconds") or 0.0)
    rows = {}
    for s in sets:
        rows[s] = {}
        for model, seeds in by_seed.items():
            values = [acc[s] for acc in seeds.values() if s in acc]
            if values:
                rows[s][model] = {"test_top1": statistics.fmean(values), "seeds": len(values),
                                  "wall_seconds": statistics.fmean(walls[(s, model)])}
    return rows, by_seed


def spread(by_seed: dict, rows: dict) -> dict:
    """Each model's archive mean at each seed over the sets where every one of its seeds has it, with the mean
    and (two or more seeds) the standard deviation over seeds."""
    result = {}
    for model, seeds in by_seed.items():
        sets = [s for s in rows if all(s in acc for acc in seeds.values())]
        means = {seed: statistics.fmean(acc[s] for s in sets) for seed, acc in seeds.items()} if sets else {}
        result[model] = {"sets": len(sets), "per_seed": means,
                         "mean": statistics.fmean(means.values()) if means else None,
                         "std": statistics.stdev(means.values()) if len(means) > 1 else None}
    return result


def per_seed_pairs(by_seed: dict, a: str, b: str) -> list[dict]:
    """``A - B`` at each seed both ran (a column with one seed pairs with every seed of the other)."""
    seeds = sorted(set(by_seed[a]) | set(by_seed[b]))
    pairs = []
    for seed in seeds:
        acc_a = by_seed[a].get(seed) or next(iter(by_seed[a].values()))
        acc_b = by_seed[b].get(seed) or next(iter(by_seed[b].values()))
        rows = {s: {a: {"test_top1": acc_a[s]}, b: {"test_top1": acc_b[s]}} for s in acc_a if s in acc_b}
        pairs.append({"seed": seed, **pair_stats(rows, a, b)})
    return pairs


def costs_by_seed(records: list[dict], sets: list[str]) -> tuple[list[dict], dict]:
    """CPU seconds of the sets' processes at each seed (total, median, max) and each set's largest peak memory."""
    table = []
    for record in records:
        cpu = [record["per_set"][s].get("cpu_seconds") or 0.0 for s in sets]
        table.append({"seed": record["seed"], "CPU s (all sets)": sum(cpu),
                      "median CPU s a set": statistics.median(cpu), "max CPU s a set": max(cpu)})
    peaks = {s: {"cpu_seconds": 0.0, "peak_rss_mib": max((r["per_set"][s].get("peak_rss_mib") or 0.0)
                                                         for r in records) or None} for s in sets}
    return table, peaks


def report_text(command: str, records: list[dict], rows: dict, spreads: dict, headline: dict, everything: dict,
                pairs: list[dict], seeded_pairs: list[list[dict]], costs: list[dict], peaks: dict,
                groups: list[dict] | None = None, references: list[tuple[list[dict], str, str]] = ()) -> str:
    seeds = [r["seed"] for r in records]
    models = everything["models"]
    title = f"{headline['models'][0]} ({records[0]['recipe']})"
    lines = [f"# UCR 2018 archive over seeds {', '.join(map(str, seeds))}: {title}",
             "", f"`{command}`", "", "The records, one per seed:", "",
             *[f"- seed {r['seed']}: `{r['path']}` (`{r['command'][:200]}{'...' if len(r['command']) > 200 else ''}`)"
               for r in records],
             *[f"- column {alias}: {model} of `{', '.join(r['path'] for r in source)}` (seeds "
               f"{', '.join(str(r['seed']) for r in source)})" for source, model, alias in references],
             "", f"{len(rows)} sets every record holds. Test accuracy on the paper's split (the official test set "
             "halved into validation and test, the same halves at every seed). A model's accuracy on a set is its "
             "mean over the seeds that ran it; the spread is the standard deviation over seeds of the archive mean.",
             "", "## Each model's archive mean, seed by seed", ""]
    per_seed = [{"model": m, "seeds": len(spreads[m]["per_seed"]), "sets": spreads[m]["sets"],
                 **{f"seed {seed}": spreads[m]["per_seed"].get(seed) for seed in seeds},
                 "mean": spreads[m]["mean"], "std over seeds": spreads[m]["std"]} for m in models]
    lines += [markdown_table(per_seed, formats={**{f"seed {seed}": ".2f" for seed in seeds}, "mean": ".2f",
                                                "std over seeds": ".2f"}), ""]
    lines += [f"## On the seed means: {', '.join(headline['models'])} ({len(headline['sets'])} sets)", "",
              summary_table(headline), ""]
    if everything["models"] != headline["models"]:
        lines += [f"## Every model on the seed means ({len(everything['sets'])} sets with all of them)", "",
                  summary_table(everything), ""]
    for group in groups or []:
        lines += [f"## On the seed means: {', '.join(group['models'])} alone ({len(group['sets'])} sets with all of "
                  "them)", "", summary_table(group), ""]
        if group.get("figure"):
            lines += [f"![critical-difference diagram]({group['figure']})", ""]
    if pairs:
        lines += ["## Paired over the sets, on the seed means", "", *[f"- {pair_line(p)}" for p in pairs], "",
                  "and seed by seed:", ""]
        for group in seeded_pairs:
            lines += [f"- seed {p['seed']}: {p['a']} - {p['b']} {p['mean_difference']:+.2f} (95% interval "
                      f"{p['ci95'][0]:+.2f} to {p['ci95'][1]:+.2f}; W/T/L {p['wins']}/{p['ties']}/{p['losses']})"
                      for p in group]
        lines += [""]
    lines += ["## Targets, on the seed means", "", *target_lines(rows, headline, everything), ""]
    lines += ["## Cost", "", markdown_table(costs, formats={"CPU s (all sets)": ",.0f", "median CPU s a set": ".1f",
                                                            "max CPU s a set": ".0f"}), "", memory_line(peaks), ""]
    per_set = [{"dataset": s, **{m: rows[s][m]["test_top1"] if m in rows[s] else None for m in models}}
               for s in rows]
    lines += ["## Per set (test top-1 %, mean over the seeds that ran the model)", "",
              markdown_table(per_set, formats={m: ".1f" for m in models})]
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    bad = [spec for spec in args.pair if len([m for m in spec.split(":") if m]) != 2]
    bad += [spec for spec in args.group if len([m for m in spec.split(",") if m]) < 2]
    if bad:
        raise SystemExit(f"--pair expects A:B and --group two or more names A,B,...; got {', '.join(bad)}")
    records = load_records(args.records)
    references = [load_reference(spec) for spec in args.reference]
    rows, by_seed = seed_rows(records, references)
    models = list(by_seed)
    headline = args.headline or records[0]["models"][0]
    named = [headline, *(m for spec in args.pair for m in spec.split(":", 1))]
    named += [m for spec in args.group for m in spec.split(",") if m]
    unknown = [m for m in dict.fromkeys(named) if m not in models]
    if unknown:
        raise SystemExit(f"--headline / --pair / --group: expected models among {', '.join(models)}, got "
                         f"{', '.join(unknown)}")
    table = [headline, *(m for m in ROCKETS if m in models)]
    everything = compare(rows, models)
    result = compare(rows, table) if len(table) > 1 else everything
    pairs = [pair_stats(rows, *spec.split(":", 1)) for spec in args.pair]
    seeded_pairs = [per_seed_pairs(by_seed, *spec.split(":", 1)) for spec in args.pair]
    spreads = spread(by_seed, rows)
    costs, peaks = costs_by_seed(records, list(rows))
    groups = [compare(rows, [m for m in spec.split(",") if m]) for spec in args.group]
    command = "python benchmarks/ucr_seeds.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    json_path = args.json or result_path(RESULTS, "ucr_archive", f"{records[0]['recipe']}_seeds")
    group_figures(groups, json_path, ", mean over seeds")
    text = report_text(command, records, rows, spreads, result, everything, pairs, seeded_pairs, costs, peaks,
                       groups, references)
    record = {"benchmark": "ucr_seeds", "command": command, "records": [r["path"] for r in records],
              "seeds": [r["seed"] for r in records], "recipe": records[0]["recipe"], "machine": machine_record(),
              "references": {alias: {"model": model, "records": [r["path"] for r in source]}
                             for source, model, alias in references},
              **result, "spread": spreads, "every_model": everything, "groups": groups, "pairs": pairs,
              "pairs_per_seed": seeded_pairs,
              "cost_per_seed": costs, "peak_rss_mib": {s: c["peak_rss_mib"] for s, c in peaks.items()},
              "per_set": rows}
    if len(result["sets"]) > 1 and len(result["models"]) > 2:
        fig = stats.critical_difference_figure(np.array(result["ranks"]), result["models"],
                                               f"UCR 2018, {len(result['sets'])} sets, mean over seeds "
                                               f"{', '.join(str(r['seed']) for r in records)}: mean rank "
                                               "(bar: no difference at 5%)")
        record["figure"] = atomic_save_figure(json_path.with_name(f"{json_path.stem}_cd.png"), fig).name
        text += f"\n\n![critical-difference diagram]({record['figure']})\n"
    print(text)
    write_result(json_path, record, text, seeds=record["seeds"])
    return record


if __name__ == "__main__":
    main()
