"""How much of the class does a series' length alone carry? Length-only classifiers on the unequal-length sets.

    python benchmarks/timeseries_length_probe.py            # every local set whose series differ in length

For each set, classifiers that see nothing but each series' length (its longest channel) are fitted on the
official training split and scored on the official test split: one nearest neighbour, and a random forest (300
trees, seed 0), beside the rate of the training split's most frequent class (what no information scores). A set
whose length-only score sits well above that rate has a class cue that the padding or resampling choice
(``tstrain --unequal-length``) and ``--length-embed`` decide whether the model can read. Writes JSON and a
markdown copy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.neighbors import KNeighborsClassifier

from jumbokit.benchmarking import result_path, results_folder, write_result
from jumbokit.timeseries.data import DatasetNotFoundError, lengths_of, load_raw, local_datasets
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default=None,
                   help="comma-separated (default: every local set whose series differ in length)")
    p.add_argument("--json", type=Path, default=result_path(RESULTS, "timeseries_length_probe"),
                   help="(default: %(default)s)")
    return p.parse_args(argv)


def length_probe(train_lengths: np.ndarray, train_y: np.ndarray, test_lengths: np.ndarray,
                 test_y: np.ndarray) -> dict[str, float]:
    """Test accuracy (%) of length-only classifiers: lengths (n,) and labels (n,) of each split."""
    fit_x, test_x = train_lengths.reshape(-1, 1).astype(float), test_lengths.reshape(-1, 1).astype(float)
    values, counts = np.unique(train_y, return_counts=True)
    nearest = KNeighborsClassifier(n_neighbors=1).fit(fit_x, train_y)
    forest = RandomForestClassifier(n_estimators=300, random_state=0).fit(fit_x, train_y)
    return {"nearest_neighbour": 100 * nearest.score(test_x, test_y),
            "random_forest": 100 * forest.score(test_x, test_y),
            "majority_class": 100 * float(np.mean(test_y == values[counts.argmax()]))}


def probe_set(name: str) -> dict | None:
    """The probe's row for one set, or None when its series all have one length."""
    train_x, train_y = load_raw(name, "train", download=False)
    test_x, test_y = load_raw(name, "test", download=False)
    train_lengths, test_lengths = lengths_of(train_x), lengths_of(test_x)
    if len(set(train_lengths) | set(test_lengths)) == 1:
        return None
    return {"dataset": name, "classes": int(len(np.unique(train_y))),
            "lengths": f"{min(train_lengths.min(), test_lengths.min())}-{max(train_lengths.max(), test_lengths.max())}",
            **length_probe(train_lengths, np.asarray(train_y), test_lengths, np.asarray(test_y))}


def main(argv=None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()] if args.datasets else local_datasets()
    try:
        rows = [row for row in map(probe_set, names) if row is not None]
    except DatasetNotFoundError as err:
        raise SystemExit(str(err)) from None
    if not rows:
        raise SystemExit(f"none of {', '.join(names)} has series of different lengths; nothing to probe")
    text = markdown_table(rows, formats={k: ".1f" for k in ("nearest_neighbour", "random_forest", "majority_class")})
    print(text)
    write_result(args.json, {"rows": rows}, "# Length-only classifiers on the unequal-length sets\n\nOfficial "
                 "train/test splits; test accuracy (%) of a classifier that sees only each series' length.\n\n"
                 + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
