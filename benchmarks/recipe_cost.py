"""What two or more tstrain recipes cost on the same sets, measured side by side on one machine.

Each arm is a label and its tstrain flags (model, recipe, encoder...); the first arm is the reference. Set by set,
every arm runs in a fresh child process (one set, one sweep folder ``OUT/LABEL/SET``), the arms' order rotating
from one set to the next so that a drift in the machine's load reaches every arm alike. The kernel reports each
process's CPU seconds (user + system: imports, data loading, training and scoring) and its peak resident memory;
the run records give the training seconds alone. The result: per set and arm the CPU seconds, the training
seconds and the test accuracy; per arm the totals and, against the reference, the ratio of the totals and the
geometric mean of the per-set ratios with its 95% interval over sets. Accuracy is reported, not tested: a cost
comparison on a handful of sets says nothing about accuracy beyond them.

    python benchmarks/recipe_cost.py --data-dir $D --datasets ACSF1,CBF,Crop,ECGFiveDays,Fish,GesturePebbleZ2 \\
        --arm "small-data=--model patchtst_jumbo --recipe small-data --seeds 1 --ensemble 1" \\
        --arm "fine-tune=--model patchtst --recipe fine-tune --init runs/series_encoder_ucr384_patchtst" \\
        --cpu --threads 1 --json benchmarks/results/recipe_cost_fine-tune.json

A measured (set, arm) keeps its ledger ``OUT/LABEL/SET/cost.json``; a rerun with the same ``--out`` reads it
instead of measuring again (a resumed process would report only its reading), so an interrupted comparison goes
on where it stopped. Writes JSON and a markdown copy (``benchmarks/results/recipe_cost.json``, or --json).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from jumbokit.benchmarking import machine_record, result_path, results_folder, stats, write_result
from jumbokit.benchmarking.tstrain import tstrain_child
from jumbokit.training.rundir import atomic_write_json, markdown_table

RESULTS = results_folder(__file__)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arm", action="append", default=[], metavar="LABEL=FLAGS", required=True,
                   help="one recipe to cost: a label and its tstrain flags, e.g. 'fine-tune=--model patchtst "
                        "--recipe fine-tune --init DIR'; two or more, the first the reference")
    p.add_argument("--datasets", required=True, help="comma-separated sets every arm runs")
    p.add_argument("--data-dir", default=None, help="tstrain's --data-dir (default: tstrain's)")
    p.add_argument("--cpu", action="store_true", help="train on CPU even when a GPU is present (default: off)")
    p.add_argument("--threads", type=int, default=None,
                   help="tstrain's --threads; give 1 for CPU costs comparable with other records (default: tstrain's)")
    p.add_argument("--out", type=Path, default=Path("runs") / "recipe_cost",
                   help="folder of the sweeps, OUT/LABEL/SET, and their cost ledgers (default: %(default)s)")
    p.add_argument("--json", type=Path, default=None,
                   help="result file (default: benchmarks/results/recipe_cost.json)")
    return p


def parse_arms(specs: list[str]) -> dict[str, list[str]]:
    """``LABEL=FLAGS`` items -> {label: tstrain flags}; SystemExit naming what is wrong."""
    arms: dict[str, list[str]] = {}
    for spec in specs:
        label, sep, text = spec.partition("=")
        if not sep or not label or not text.strip() or "/" in label:
            raise SystemExit(f"--arm expects LABEL=FLAGS (a label without '/', then tstrain flags), got {spec!r}")
        if label in arms:
            raise SystemExit(f"--arm: the label {label} is given twice")
        flags = shlex.split(text)
        owned = sorted({"--dataset", "--out", "--data-dir"} & {f.split("=")[0] for f in flags})
        if owned:
            raise SystemExit(f"--arm {label}: {', '.join(owned)} belong(s) to this script (--datasets, --out, "
                             f"--data-dir), not to an arm")
        arms[label] = flags
    if len(arms) < 2:
        raise SystemExit(f"--arm: expected two or more arms to compare, got {len(arms)}")
    return arms


def arm_order(labels: list[str], index: int) -> list[str]:
    """The arms' order on the ``index``-th set: the list rotated by ``index``, so each arm goes first in turn."""
    shift = index % len(labels)
    return labels[shift:] + labels[:shift]


def measure(name: str, label: str, flags: list[str], args: argparse.Namespace) -> dict:
    """One arm on one set in a fresh process, or its ledger when it was measured before: CPU and wall seconds,
    peak memory, and the sweep's summary (training seconds, test accuracy) summed or averaged over its rows."""
    folder = args.out / label / name
    ledger = folder / "cost.json"
    if ledger.is_file():
        return json.loads(ledger.read_text())
    argv = ["--dataset", name, "--out", str(folder), "--no-progress", *flags]
    argv += ["--data-dir", args.data_dir] if args.data_dir else []
    argv += ["--threads", str(args.threads)] if args.threads else []
    argv += ["--cpu"] if args.cpu else []
    started = time.perf_counter()
    cpu, peak = tstrain_child(argv)
    wall = time.perf_counter() - started
    rows = [r for r in json.loads((folder / "results.json").read_text())["summary"] if r["dataset"] == name]
    record = {"set": name, "arm": label, "cpu_seconds": cpu, "wall_seconds": wall, "peak_rss_mib": peak,
              "train_seconds": sum(float(r.get("train_seconds") or 0.0) for r in rows),
              "test_top1": statistics.fmean(float(r["test_top1"]) for r in rows), "models": [r["model"] for r in rows]}
    atomic_write_json(ledger, record)
    return record


def ratio_summary(reference: list[float], other: list[float]) -> dict:
    """``other`` against ``reference`` over sets: the ratio of the totals, and the geometric mean of the per-set
    ratios with the 95% interval of the paired test over the sets' log ratios (None for fewer than two sets)."""
    test = stats.paired_test(np.log(other), np.log(reference))
    interval = [math.exp(test.low), math.exp(test.high)] if len(reference) > 1 else None
    return {"ratio_of_totals": sum(other) / sum(reference), "geometric_mean": math.exp(test.mean), "ci95": interval}


def report(args: argparse.Namespace, command: str, arms: dict[str, list[str]], sets: list[str],
           results: dict[str, dict[str, dict]]) -> tuple[dict, str]:
    """The record and its markdown: per set and arm, the totals, the ratios against the first arm."""
    labels = list(arms)
    ref = labels[0]
    totals = {label: {key: sum(results[s][label][key] for s in sets)
                      for key in ("cpu_seconds", "wall_seconds", "train_seconds")} for label in labels}
    for label in labels:
        totals[label]["mean_test_top1"] = statistics.fmean(results[s][label]["test_top1"] for s in sets)
        totals[label]["max_peak_rss_mib"] = max(results[s][label]["peak_rss_mib"] for s in sets)
    ratios = {label: {key: ratio_summary([results[s][ref][key] for s in sets], [results[s][label][key] for s in sets])
                      for key in ("cpu_seconds", "train_seconds")} for label in labels[1:]}
    rows = [{"set": s, **{f"{label} {col}": results[s][label][key] for label in labels
                          for col, key in (("CPU s", "cpu_seconds"), ("train s", "train_seconds"),
                                           ("test %", "test_top1"))}} for s in sets]
    summary = [{"arm": label, "tstrain flags": shlex.join(arms[label]), "CPU s": totals[label]["cpu_seconds"],
                "train s": totals[label]["train_seconds"], "wall s": totals[label]["wall_seconds"],
                "peak MiB (max)": totals[label]["max_peak_rss_mib"], "mean test %": totals[label]["mean_test_top1"]}
               for label in labels]
    lines = [f"# What the recipes cost: {', '.join(labels)}", "", f"`{command}`", "",
             f"{len(sets)} set(s), each arm in a fresh process per set, the arms' order rotating from set to set; "
             f"CPU seconds of the whole process (imports, data, training, scoring), training seconds from the run "
             f"records. The reference is {ref}. Test accuracy is reported, not tested.", "",
             markdown_table(summary, formats={"CPU s": ".0f", "train s": ".0f", "wall s": ".0f",
                                              "peak MiB (max)": ".0f", "mean test %": ".2f"}), ""]
    for label, by_key in ratios.items():
        for key, name in (("cpu_seconds", "CPU seconds"), ("train_seconds", "training seconds")):
            r = by_key[key]
            interval = (f" (95% interval {r['ci95'][0]:.2f}x to {r['ci95'][1]:.2f}x)" if r["ci95"] else "")
            lines.append(f"- {label} / {ref}, {name}: {r['ratio_of_totals']:.2f}x of the totals; geometric mean of "
                         f"the per-set ratios {r['geometric_mean']:.2f}x{interval}")
    formats = {key: (".1f" if key.endswith("%") else ".0f") for key in rows[0] if key != "set"}
    lines += ["", markdown_table(rows, formats=formats), ""]
    record = {"benchmark": "recipe_cost", "command": command, "sets": sets, "arms": arms, "reference": ref,
              "threads": args.threads, "per_set": results, "totals": totals, "ratios": ratios,
              "machine": machine_record()}
    return record, "\n".join(lines)


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    arms = parse_arms(args.arm)
    sets = [n for n in args.datasets.split(",") if n]
    if not sets or len(set(sets)) != len(sets):
        raise SystemExit(f"--datasets: expected one set or more, each once, got {args.datasets!r}")
    command = "python benchmarks/recipe_cost.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    labels = list(arms)
    results: dict[str, dict[str, dict]] = {}
    for i, name in enumerate(sets):
        results[name] = {}
        for label in arm_order(labels, i):
            results[name][label] = measure(name, label, arms[label], args)
            r = results[name][label]
            print(f"[{i + 1}/{len(sets)}] {name} {label}: {r['cpu_seconds']:.0f} CPU s "
                  f"({r['train_seconds']:.0f} s training), test {r['test_top1']:.1f}%", flush=True)
    record, text = report(args, command, arms, sets, results)
    print(text)
    write_result(args.json or result_path(RESULTS, "recipe_cost"), record, text)
    return record


if __name__ == "__main__":
    main()
