"""Choose between pretrained series encoders, or ways of fine-tuning them, on validation halves (or test halves).

Fine-tunes one tstrain model from each encoder (``tstrain --init``) on the same sets, recipe and seeds, then reads
every run's validation accuracy (the official test set's validation half: tstrain's paper split) and takes the
arm with the higher mean over all (set, seed) runs; a tie keeps the first given (name the cheaper one first). An
arm is an encoder with a label; ``--args LABEL=FLAGS`` gives one arm tstrain flags of its own (e.g. a longer
fine-tuning, ``--step-scale 0.5``), so one encoder can enter twice under two labels. The test halves are reported
beside it, apart, and never enter the choice. The sets must be kept out of whatever the chosen arm is later
evaluated on (e.g. the corpus sets outside the archive that is scored). An arm that reads the validation half while
it trains (``--early-stop``) has a validation accuracy biased upward; ``--choose-on test`` then chooses on the test
halves (those sets' test halves guide the choice, so they too must stay out of what the chosen arm is scored on).

    python benchmarks/encoder_selection.py --encoder 10k=runs/series_encoder_ucr384_patchtst \\
        --encoder 20k=runs/series_encoder_ucr384_patchtst_20k --model patchtst --recipe fast --seeds 3 \\
        --datasets ItalyPowerDemand,OSULeaf,PLAID,PickupGestureWiimoteZ,PigCVP,Trace --cpu --threads 1

Each encoder's sweep is a tstrain sweep directory ``OUT/LABEL`` (resumed when it exists). Writes JSON and a markdown
copy (``benchmarks/results/encoder_selection.json``, or --json): per set and seed each encoder's validation and
test accuracy, its training seconds and steps, the means, the paired difference over the runs on the split that
chooses, and the choice.
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
from jumbokit.timeseries.protocol import RECIPES
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoder", action="append", default=[], metavar="LABEL=PATH", required=True,
                   help="a pretrained series encoder (series-pretrain's folder) and its label; two or more, the "
                        "first kept on a tie")
    p.add_argument("--args", action="append", default=[], metavar="LABEL=FLAGS",
                   help="tstrain flags of one arm alone, after --tstrain-args, e.g. '10k_long=--step-scale 0.5' "
                        "(default: none)")
    p.add_argument("--choose-on", choices=("val", "test"), default="val",
                   help="the halves whose mean accuracy chooses: val, or test for arms whose training reads the "
                        "validation half (--early-stop) (default: %(default)s)")
    p.add_argument("--datasets", required=True, help="comma-separated sets scored on their validation halves")
    p.add_argument("--data-dir", default=None, help="tstrain's --data-dir (default: tstrain's)")
    p.add_argument("--model", default="patchtst", help="the tstrain model fine-tuned (default: %(default)s)")
    p.add_argument("--recipe", default="fast", choices=list(RECIPES), help="tstrain's recipe (default: %(default)s)")
    p.add_argument("--seeds", type=int, default=3, help="runs per set, seeds 0, 1, ... (default: %(default)s)")
    p.add_argument("--cpu", action="store_true", help="train on CPU even when a GPU is present (default: off)")
    p.add_argument("--threads", type=int, default=None, help="tstrain's --threads (default: tstrain's)")
    p.add_argument("--tstrain-args", default="", help="more tstrain flags, written with '=': "
                                                      "--tstrain-args='--steps 100' (default: none)")
    p.add_argument("--out", type=Path, default=Path("runs") / "encoder_selection",
                   help="folder of one tstrain sweep per encoder, OUT/LABEL (default: %(default)s)")
    p.add_argument("--json", type=Path, default=None,
                   help="result file (default: benchmarks/results/encoder_selection.json)")
    return p


def parse_encoders(specs: list[str]) -> dict[str, Path]:
    """``LABEL=PATH`` items -> {label: path}, each folder checked; SystemExit naming what is wrong."""
    encoders: dict[str, Path] = {}
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"--encoder expects LABEL=PATH, got {spec!r}")
        if label in encoders:
            raise SystemExit(f"--encoder: the label {label} is given twice")
        if not (Path(path) / "model.safetensors").is_file():
            raise SystemExit(f"--encoder {spec}: no pretrained encoder (model.safetensors) in {path}")
        encoders[label] = Path(path)
    if len(encoders) < 2:
        raise SystemExit(f"--encoder: expected two or more encoders to choose between, got {len(encoders)}")
    return encoders


def parse_arm_args(specs: list[str], labels: list[str]) -> dict[str, list[str]]:
    """``LABEL=FLAGS`` items -> {label: tstrain flags}; SystemExit for a label that is not an encoder's."""
    flags: dict[str, list[str]] = {label: [] for label in labels}
    for spec in specs:
        label, sep, text = spec.partition("=")
        if not sep or label not in flags:
            raise SystemExit(f"--args expects LABEL=FLAGS with LABEL among {', '.join(labels)}, got {spec!r}")
        flags[label] += shlex.split(text)
    return flags


def run_accuracies(sweep: Path, model: str) -> dict[tuple[str, int], dict[str, float]]:
    """{(set, seed offset): {"val": %, "test": %, "seconds": training s, "steps": optimizer steps}} of every run of
    ``model`` in a tstrain sweep directory."""
    from jumbokit.timeseries import store

    runs = {}
    for path in (sweep / "runs").glob(f"*/{model}/*.json"):
        record = json.loads(path.read_text())
        runs[(record["dataset"], store.job_order(path)[0])] = {
            "val": float(record["val_top1"]), "test": float(record["test_top1"]),
            "seconds": float(record["train_seconds"]), "steps": int(record["steps"])}
    return runs


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    encoders = parse_encoders(args.encoder)
    arm_flags = parse_arm_args(args.args, list(encoders))
    sets = [n for n in args.datasets.split(",") if n]
    if args.seeds < 1 or not sets:
        raise SystemExit(f"expected --seeds >= 1 and one set or more, got --seeds {args.seeds}, --datasets "
                         f"{args.datasets!r}")
    from jumbokit.cli import tstrain_main

    command = "python benchmarks/encoder_selection.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    runs = {}
    for label, path in encoders.items():
        flags = ["--dataset", ",".join(sets), "--model", args.model, "--recipe", args.recipe, "--seeds",
                 str(args.seeds), "--init", str(path), "--out", str(args.out / label), "--no-progress"]
        flags += ["--data-dir", args.data_dir] if args.data_dir else []
        flags += ["--threads", str(args.threads)] if args.threads else []
        flags += (["--cpu"] if args.cpu else []) + shlex.split(args.tstrain_args) + arm_flags[label]
        print(f"{label}: tstrain {shlex.join(flags)}", flush=True)
        if tstrain_main(flags) != 0:
            raise SystemExit(f"tstrain failed for the encoder {label}")
        runs[label] = run_accuracies(args.out / label, args.model)
    keys = sorted(set.intersection(*(set(r) for r in runs.values())))
    labels = list(encoders)
    means = {label: {key: statistics.fmean(runs[label][k][key] for k in keys) for key in ("val", "test", "steps")}
             for label in labels}
    for label in labels:
        means[label]["train_seconds"] = sum(runs[label][k]["seconds"] for k in keys)
    by = args.choose_on
    best = max(means[label][by] for label in labels)
    chosen = next(label for label in labels if means[label][by] == best)  # the first on a tie
    first = labels[0]
    paired = {}
    for label in labels[1:]:
        test = stats.paired_test(np.array([runs[label][k][by] for k in keys]),
                                 np.array([runs[first][k][by] for k in keys]))
        paired[label] = {"split": by, "mean_difference": test.mean, "ci95": [test.low, test.high], "t_test_p": test.p}
    rows = [{"set": s, "seed": seed, **{f"{label} {key}": runs[label][(s, seed)][key]
                                         for key in ("val", "test", "steps") for label in labels}} for s, seed in keys]
    split_name = {"val": "validation", "test": "test"}
    unused = "test" if by == "val" else "val"
    halves = (f"{split_name[by].capitalize()} halves chose; {split_name[unused]} accuracies are reported apart and "
              "did not enter the choice." if by == "val" else
              "Test halves chose (the arms read the validation halves while training); validation accuracies are "
              "reported apart and did not enter the choice.")
    lines = [f"# Encoder selection on {split_name[by]} halves: {', '.join(labels)}", "", f"`{command}`", "",
             f"{args.model} fine-tuned from each encoder ({args.recipe} recipe, {args.seeds} seed(s)) on "
             f"{len(sets)} set(s), {len(keys)} runs each. Chosen by mean {split_name[by]} accuracy: **{chosen}**"
             + (" (a tie keeps the first)" if sum(means[label][by] == best for label in labels) > 1 else "")
             + f". {halves}", "",
             markdown_table([{"arm": label, "encoder": str(encoders[label]),
                              "its own flags": shlex.join(arm_flags[label]),
                              f"mean {by} %": means[label][by], f"mean {unused} % (not used)": means[label][unused],
                              "mean steps": means[label]["steps"], "training s": means[label]["train_seconds"]}
                             for label in labels],
                            formats={f"mean {by} %": ".2f", f"mean {unused} % (not used)": ".2f",
                                     "mean steps": ".0f", "training s": ".0f"}), ""]
    for label, test in paired.items():
        low, high = test["ci95"]
        lines.append(f"- {label} - {first}, {split_name[by]} accuracy over {len(keys)} runs: "
                     f"{test['mean_difference']:+.2f} points (95% interval {low:+.2f} to {high:+.2f}); training "
                     f"seconds {means[label]['train_seconds'] / means[first]['train_seconds']:.2f}x")
    lines += ["", markdown_table(rows, formats={key: ".1f" if not key.endswith("steps") else "d"
                                              for key in rows[0] if key not in ("set", "seed")}), ""]
    text = "\n".join(lines)
    record = {"benchmark": "encoder_selection", "command": command, "model": args.model, "recipe": args.recipe,
              "seeds": list(range(args.seeds)), "sets": sets, "choose_on": by, "encoders": {k: str(v) for k, v in encoders.items()},
              "arm_flags": arm_flags,
              "means": means, "paired": paired, "chosen": chosen, "runs": rows, "machine": machine_record()}
    print(text)
    write_result(args.json or result_path(RESULTS, "encoder_selection"), record, text)
    return record


if __name__ == "__main__":
    main()
