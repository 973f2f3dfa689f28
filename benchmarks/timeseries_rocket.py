"""aeon's MiniRocket, MultiRocket and Hydra alone on local UCR/UEA sets, on the splits tstrain scores on.

    python benchmarks/timeseries_rocket.py --datasets Coffee,PigCVP,Trace \\
        --json benchmarks/results/timeseries_rocket_more_sets.json

Each classifier is fitted once (seed 0) on the training split and scored on the test half of the paper's protocol
(the official test set split 50/50 with split seed 0, as ``tstrain`` splits it); the validation half and the whole
official test set are recorded too. The JSON's ``summary`` rows have the small-data benchmark's fields, so the file
can be passed to ``benchmarks/timeseries_trunk.py --reference`` beside that benchmark's JSON. Writes JSON and a
markdown copy and prints the table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

import torch
from tqdm import tqdm

from jumbokit.timeseries.baselines import ROCKET_CLASSIFIERS, rocket_baseline
from jumbokit.timeseries.data import load_dataset, local_datasets
from jumbokit.benchmarking import machine_record, result_path, results_folder, write_result
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default=None, help="comma-separated (default: every local UCR/UEA set)")
    p.add_argument("--threads", type=int, default=2, help="threads per classifier (default: %(default)s)")
    p.add_argument("--json", default=str(result_path(RESULTS, "timeseries_rocket")), help="(default: %(default)s)")
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error(f"--threads expects an integer >= 1, got {args.threads}")
    return args


def summary_row(dataset: str, model: str, result: dict) -> dict:
    """One classifier on one set in the small-data benchmark's summary fields (accuracies as fractions)."""
    test, val, full = (result[k] / 100 for k in ("test_top1", "val_top1", "full_test_top1"))
    return {"dataset": dataset, "model": model, "runs": 1, "best_test_acc": test, "avg_test_acc": test,
            "ens_test_acc": test, "best_val_acc": val, "full_test_acc": full, "wall_seconds": result["seconds"],
            "padded": bool(result.get("padded", False))}


def table(rows: list[dict]) -> str:
    """Markdown: one line per set; per classifier the test half / the whole official test set (%)."""
    by_set: dict[str, dict[str, dict]] = {}
    for r in rows:
        by_set.setdefault(r["dataset"], {})[r["model"]] = r
    lines = []
    for name, models in by_set.items():
        line = {"dataset": name}
        for m in ROCKET_CLASSIFIERS:
            r = models.get(m)
            line[f"{m}: test half / official"] = (f"{100 * r['best_test_acc']:.1f} / {100 * r['full_test_acc']:.1f}"
                                                  + ("*" if r["padded"] else "")) if r else "skipped"
        line["fit + predict s"] = " / ".join(f"{models[m]['wall_seconds']:.1f}" for m in ROCKET_CLASSIFIERS if m in models)
        lines.append(line)
    note = "\n\\* zero-padded to the longest series.\n" if any(r["padded"] for r in rows) else ""
    return markdown_table(lines).rstrip("\n") + "\n" + note


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    local = local_datasets()
    names = [n.strip() for n in args.datasets.split(",") if n.strip()] if args.datasets else local
    unknown = [n for n in names if n not in local]
    if unknown:
        print(f"error: not available locally: {', '.join(unknown)}; local sets: {', '.join(local)}", file=sys.stderr)
        return 1
    torch.set_num_threads(args.threads)
    rows, skipped = [], {}
    for name in tqdm(names, desc="sets", unit="set"):
        data = load_dataset(name, download=False)
        for model in ROCKET_CLASSIFIERS:
            result = rocket_baseline(model, data, seed=0, n_jobs=args.threads)
            if "skipped" in result:
                skipped[f"{name}/{model}"] = result["skipped"]
            else:
                rows.append(summary_row(name, model, result))
    text = table(rows)
    command = "python benchmarks/timeseries_rocket.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    record = {"command": command, "machine": machine_record(threads=args.threads, device="cpu"), "summary": rows,
              "skipped": skipped}
    print(json.dumps({"summary": rows, "skipped": skipped}, indent=1))
    print(text)
    write_result(args.json, record, f"`{record['command']}`\n\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
