"""tstrain on 1 vs N processes: the same 12-run sweep launched once as one process and once as N torchrun
processes (one CPU thread each), on the same machine. Two sweeps: "short" (3 learning rates, 100 steps a run) and
"small-data" (the small-data recipe: 3 seeds of 1,000 steps a run, as a user would sweep).

Checks that both give identical runs (every record's results and the stored validation / test probabilities,
bit for bit) and reports the wall time of each launch (start-up, data loading, all runs, reports) and their
ratio: with whole runs handed to the processes as they free up, the ideal on N free cores is N. The CPU seconds of all
processes of a launch show the cost of going parallel (start-up and data loading repeated per process) also when
the machine is busy and the wall-time ratio says little.

    OMP_NUM_THREADS=1 python benchmarks/tstrain_scaling.py                    # 12 runs, 1 vs 2 processes
    OMP_NUM_THREADS=1 python benchmarks/tstrain_scaling.py --sweep small-data
    python benchmarks/tstrain_scaling.py --steps 60 --nproc 4 --out /tmp/tstrain_scaling

Prints a table and writes benchmarks/results/tstrain_scaling[_small_data].json and .md (or --json). Never run
in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from jumbokit.benchmarking import machine_record, result_path, results_folder, write_result
from jumbokit.timeseries import store
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

# 2 datasets x 2 models x (3 learning rates | 3 seeds) = 12 runs
COMMON = ["--dataset", "ItalyPowerDemand,GunPoint", "--model", "patchtst,patchtst_jumbo", "--cpu", "--no-progress"]
SWEEPS = {"short": [*COMMON, "--lr", "1e-3,3e-4,1e-4", "--dropout", "0.1", "--batch-size", "32"],
          "small-data": [*COMMON, "--recipe", "small-data"]}
RESULT_KEYS = ("val_top1", "test_top1", "val_loss", "train_loss", "steps")


def launch(nproc: int, argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of all its processes) of ``tstrain argv`` as one plain process or ``nproc``
    torchrun processes, one thread each."""
    if nproc == 1:
        cmd = [sys.executable, "-m", "jumbokit", "tstrain", *argv]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--standalone",
               "-m", "jumbokit", "tstrain", *argv]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cpu_start, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu_start
    if done.returncode != 0:
        raise SystemExit(f"tstrain on {nproc} process(es) failed:\n{done.stderr[-3000:]}")
    return seconds, cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def runs_of(out: Path) -> dict[str, tuple[list, dict[str, np.ndarray]]]:
    """Every run record's results and stored probabilities in a sweep directory."""
    found = {}
    for path in sorted((out / "runs").glob("*/*/*.json")):
        if path.name.startswith((".", "pretrained_")):
            continue
        record = json.loads(path.read_text())
        found[str(path.relative_to(out))] = ([record[k] for k in RESULT_KEYS],
                                             store.load_proba(store.proba_path(path)) or {})
    return found


def identical(a: dict, b: dict) -> tuple[bool, int]:
    """(whether two sweeps hold the same runs with the same results and probabilities, runs compared)."""
    if sorted(a) != sorted(b):
        return False, 0
    same = all(a[k][0] == b[k][0] and set(a[k][1]) == set(b[k][1])
               and all(np.array_equal(a[k][1][s], b[k][1][s]) for s in a[k][1]) for k in a)
    return same, len(a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", choices=sorted(SWEEPS), default="short",
                        help="short: 3 learning rates x 100 steps; small-data: the recipe's 3 seeds x 1,000 steps "
                        "(default: short)")
    parser.add_argument("--steps", type=int, default=None,
                        help="optimizer steps per run (default: 100 for the short sweep, the recipe's otherwise)")
    parser.add_argument("--nproc", type=int, default=2, help="processes of the parallel launch (default: 2)")
    parser.add_argument("--out", default="runs/tstrain_scaling", help="scratch sweep directories (default: "
                        "runs/tstrain_scaling; emptied first)")
    parser.add_argument("--json", default=None, help="result file; a markdown copy goes next to it (default: "
                        "benchmarks/results/tstrain_scaling.json, tstrain_scaling_small_data.json for that sweep)")
    args = parser.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    steps = args.steps if args.steps is not None else (100 if args.sweep == "short" else None)
    argv = [*SWEEPS[args.sweep], *(["--steps", str(steps)] if steps is not None else [])]
    suffix = "" if args.sweep == "short" else "_" + args.sweep.replace("-", "_")
    args.json = args.json or result_path(RESULTS, "tstrain_scaling", suffix.lstrip("_"))
    load_before = os.getloadavg()
    timed = {n: launch(n, [*argv, "--out", str(out / f"p{n}")]) for n in (1, args.nproc)}
    seconds = {n: wall for n, (wall, _) in timed.items()}
    load_after = os.getloadavg()
    same, runs = identical(runs_of(out / "p1"), runs_of(out / f"p{args.nproc}"))
    machine = machine_record(threads=1, device="cpu")
    cores = machine["cores"]
    rows = [{"processes": n, "runs": runs, "wall_s": seconds[n], "cpu_s": timed[n][1],
             "speed-up": seconds[1] / seconds[n]} for n in (1, args.nproc)]
    result = {"command": "tstrain " + shlex.join(argv), "threads_per_process": 1, "machine": machine,
              "load_average_1min": {"before": load_before[0], "after": load_after[0]},
              "identical_runs": same, "rows": rows, "speed_up": seconds[1] / seconds[args.nproc]}
    loaded = load_before[0] > 0.5 * cores  # the load after includes the benchmark's own processes
    note = (f"Measured on a loaded machine (1-minute load average {load_before[0]:.1f} before the launches, on "
            f"{cores} cores): the ratio is not the idle one." if loaded else
            f"Machine idle at the start (1-minute load average {load_before[0]:.1f} on {cores} cores; "
            f"{load_after[0]:.1f} after, the benchmark's own processes).")
    result["note"] = note
    table = markdown_table(rows, formats={"wall_s": ".1f", "cpu_s": ".1f", "speed-up": ".2f"})
    print(table)
    print(f"identical runs on 1 and {args.nproc} processes: {same} ({runs} runs compared); {note}")
    write_result(args.json, result, "\n".join([
        f"# tstrain on 1 vs {args.nproc} processes", "", f"`{result['command']}`, one CPU thread per process, "
        f"{cores} cores. Each process takes the next unfinished run whenever it is free (long runs first); every "
        "run is trained whole by one process.", "", table, "",
        f"Identical runs (results and stored probabilities, bit for bit): {same} ({runs} runs).", "", note, "",
        "Re-run on an idle machine: `OMP_NUM_THREADS=1 python benchmarks/tstrain_scaling.py"
        + ("" if args.sweep == "short" else f" --sweep {args.sweep}") + "`", ""]))


if __name__ == "__main__":
    main()
