"""numba's one-off compilation of the ROCKET-family classifiers, apart from their per-set cost.

aeon compiles the transforms of MiniRocket and MultiRocket with numba and caches the machine code on disk
(``cache=True``): the first process on a machine pays the compilation, every later one loads it. The archive
benchmarks run every set in its own process after the cache is filled, so their per-set CPU seconds hold the
loading, not the compilation. This script measures both: for each classifier and for 1 and 3 channels, a fit and
predict on 8 random series of 64 steps in a fresh process with an empty numba cache (``NUMBA_CACHE_DIR``: cold,
compiling), then the same in a second fresh process with that cache (warm, loading). Each child reports the CPU
seconds of the fit + predict alone (imports left out), one thread. ``--channels`` picks other channel counts.

    python benchmarks/numba_compile.py                 # every classifier, ~2-4 min on one core

Writes JSON and a markdown copy (``benchmarks/results/numba_compile_cpu.json``, ``.md``, or --json).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from jumbokit.benchmarking import machine_record, result_path, results_folder, write_result
from jumbokit.timeseries.baselines import BASELINES
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)

CHILD = """
import json, sys, time, warnings
import numpy as np
from jumbokit.timeseries.baselines import use_numba_workqueue
from jumbokit.timeseries.rocket_classifiers import RocketClassifier
use_numba_workqueue()
name, chans = sys.argv[1], int(sys.argv[2])
x = np.random.default_rng(0).normal(size=(8, chans, 64))
y = np.array(["a", "b"] * 4)
start = time.process_time()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    RocketClassifier(name, random_state=0, n_jobs=1).fit(x, y).predict(x)
print(json.dumps({"cpu_seconds": time.process_time() - start}))
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classifiers", default=",".join(BASELINES),
                   help="comma-separated, among " + ", ".join(BASELINES) + " (default: all)")
    p.add_argument("--channels", default="1,3", help="channel counts to measure, comma-separated (default: %(default)s)")
    p.add_argument("--json", type=Path, default=None,
                   help="result file (default: benchmarks/results/numba_compile_cpu.json)")
    return p


def child_seconds(name: str, chans: int, cache: str) -> float:
    """CPU seconds of one fit + predict in a fresh process whose numba cache is ``cache``."""
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", CHILD, name, str(chans)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name} ({chans} channels) failed:\n{proc.stderr[-2000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["cpu_seconds"])


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    names = [n.strip() for n in args.classifiers.split(",") if n.strip()]
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise SystemExit(f"--classifiers: expected names among {', '.join(BASELINES)}, got {', '.join(unknown)}")
    try:
        channels = [int(c) for c in args.channels.split(",") if c.strip()]
    except ValueError:
        channels = []
    if not channels or min(channels) < 1:
        raise SystemExit(f"--channels: expected counts >= 1, comma-separated, got {args.channels!r}")
    rows = []
    for name in names:
        for chans in channels:
            with tempfile.TemporaryDirectory(prefix="numba_cache_") as cache:
                cold = child_seconds(name, chans, cache)
                warm = child_seconds(name, chans, cache)
            rows.append({"classifier": name, "channels": chans, "cold CPU s (compiling)": cold,
                         "warm CPU s (cache loaded)": warm, "compilation CPU s": cold - warm})
            print(f"{name}, {chans} channel(s): cold {cold:.1f} s, warm {warm:.1f} s", flush=True)
    command = "python benchmarks/numba_compile.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    text = "\n".join([
        "# numba's one-off compilation of the ROCKET-family classifiers", "", f"`{command}`", "",
        "CPU seconds of one fit + predict on 8 random series of 64 steps, one thread, in a fresh process: with an "
        "empty numba cache (cold: aeon's transforms compiled) and again with the cache it filled (warm: loaded). "
        "The difference is paid once per machine (per aeon install and cache folder); the archive benchmarks' "
        "per-set CPU seconds hold the warm cost.", "",
        markdown_table(rows, formats={"cold CPU s (compiling)": ".1f", "warm CPU s (cache loaded)": ".2f",
                                      "compilation CPU s": ".1f"})])
    print(text)
    record = {"benchmark": "numba_compile", "command": command, "machine": machine_record(), "rows": rows}
    write_result(args.json or result_path(RESULTS, "numba_compile", "cpu"), record, text)
    return record


if __name__ == "__main__":
    main()
