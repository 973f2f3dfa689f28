"""Every recipe and benchmark script imports cleanly and explains itself with ``--help``."""

import ast
import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for d in ("recipes", "benchmarks") for p in (ROOT / d).glob("*.py"))


@pytest.mark.multiprocess
@pytest.mark.parametrize("script", SCRIPTS)
def test_script_help(script):
    proc = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:"), proc.stdout[:200]
    assert len(proc.stdout.splitlines()) > 5


def _docstring_continuations(path: Path) -> list[int]:
    """Lines of a file's module docstring that end in one backslash: Python joins them, so --help loses the line."""
    text = path.read_text()
    body = ast.parse(text).body
    node = body[0] if body else None
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
        return []
    source = text.splitlines()[node.lineno - 1:node.end_lineno]
    if source[0].lstrip().lower().startswith(("r\"", "r'")):
        return []
    return [node.lineno + i for i, line in enumerate(source) if line.endswith("\\") and not line.endswith("\\\\")]


def test_module_docstrings_keep_their_shell_line_continuations():
    files = [*(ROOT / "benchmarks").glob("*.py"), *(ROOT / "recipes").glob("*.py"), *(ROOT / "src").rglob("*.py")]
    joined = {f.relative_to(ROOT).as_posix(): lines for f in files if (lines := _docstring_continuations(f))}
    assert joined == {}, "write a shell continuation in a docstring as \\\\ (or make the docstring raw)"


def test_every_benchmark_is_listed_in_the_benchmarks_readme():
    text = (ROOT / "benchmarks" / "README.md").read_text()
    missing = [p.name for p in sorted((ROOT / "benchmarks").glob("*.py")) if f"`{p.name}`" not in text]
    assert not missing, f"benchmarks/README.md does not list {missing}"


def _recipe(name: str):
    import importlib

    return importlib.import_module(f"jumbokit.recipes.{name}")


@pytest.mark.parametrize("recipe", ["supervised", "mae_pretrain", "linear_probe", "sar_adapt"])
def test_zero_batch_size_is_named_in_one_line(recipe, capsys):
    from jumbokit.cli.errors import run_cli

    main = _recipe(recipe).main
    code = run_cli(lambda: main(["--batch-size", "0"]))
    err = capsys.readouterr().err.strip().splitlines()[-1]  # the CPU-thread log line may come first
    assert code == 2
    assert err == "error: --batch-size must be an integer >= 1 (the per-process batch), got 0"


@pytest.mark.multiprocess
def test_mae_recipe_imports_no_heavy_optional_packages():
    """The main job starts without the time-series, plotting and corruption packages (seconds of imports)."""
    code = ("import sys; import jumbokit.recipes.mae_pretrain as mae_pretrain; mae_pretrain.build_parser(); "
            "import jumbokit.data, jumbokit.ssl, jumbokit.training; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'aeon', 'sktime', 'matplotlib', 'imagecorruptions', 'numba', 'timm'}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _front_door_parsers():
    """``jumbokit COMMAND`` -> its argparse parser, for every front door."""
    import importlib

    from jumbokit.cli import COMMANDS

    return {cmd: importlib.import_module(f"jumbokit.recipes.{mod}").build_parser for cmd, mod in COMMANDS.items()}


@pytest.mark.parametrize("command", sorted(_front_door_parsers()))
def test_front_door_help_has_one_default_per_flag(command):
    """Every flag of ``jumbokit COMMAND --help`` has a help line, which names its default at most once (the help
    text is expanded as argparse prints it, ArgumentDefaultsHelpFormatter's addition included)."""
    import argparse
    import re

    parser = _front_door_parsers()[command]()
    formatter = parser._get_formatter()  # argparse has no public way to expand one action's help
    missing, repeated = [], []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help" or action.help == argparse.SUPPRESS:
            continue
        if not (action.help or "").strip():
            missing.append(action.option_strings[0])
            continue
        text = formatter._expand_help(action)
        if len(re.findall(r"default", text, flags=re.IGNORECASE)) > 1:
            repeated.append(f"{action.option_strings[0]}: {text}")
    assert not missing, f"flags without help: {missing}"
    assert not repeated, "help naming a default more than once:\n" + "\n".join(repeated)


def _run_record(dataset: str, model: str, val: float, val_loss: float, test: float):
    from jumbokit.timeseries.run import RunResult

    return RunResult(dataset=dataset, model=model, lr=1e-3, dropout=0.1, val_top1=val, test_top1=test,
                     val_loss=val_loss, train_loss=0.1, epochs=1, steps=10, train_seconds=1.0, wall_seconds=2.0,
                     step_ms=1.0, params=100, patch_len=8, stride=8, num_patches=4, global_tokens=1)


@pytest.mark.multiprocess
def test_trunk_benchmark_tabulates_a_partial_sweep(tmp_path):
    """``--collect-only`` reads the finished runs of a stopped sweep: selection on validation (ties: lower loss),
    the runs in seed order (``_s10`` after ``_s2``), and the (set, model) pairs without runs named as not finished."""
    from jumbokit.timeseries.store import write_run

    folder = tmp_path / "sweep" / "runs" / "GunPoint" / "patchtst_jumbo"
    proba = {"test": np.zeros((2, 2))}
    runs = {"lr0.001_do0.1": (90.0, 0.5, 80.0), "lr0.001_do0.1_s1": (90.0, 0.4, 84.0),
            "lr0.001_do0.1_s2": (70.0, 0.1, 99.0), "lr0.001_do0.1_s10": (60.0, 0.1, 50.0)}
    for name, (val, loss, test) in runs.items():
        write_run(folder / f"{name}.json", _run_record("GunPoint", "patchtst_jumbo", val, loss, test), proba)
    out_json = tmp_path / "table.json"
    cmd = [sys.executable, "benchmarks/timeseries_trunk.py", "--collect-only", "--seeds", "3", "--datasets",
           "GunPoint,ArrowHead", "--out", str(tmp_path / "sweep"), "--json", str(out_json), "--device", "test"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(out_json.read_text())["rows"]
    assert (row["dataset"], row["arm_best"], row["arm_tests"], row["arm_runs"]) == ("GunPoint", 84.0,
                                                                                      [80.0, 84.0, 99.0, 50.0], 4)
    assert row["arm_avg"] == pytest.approx(313.0 / 4) and row["arm_val_avg"] == pytest.approx(310.0 / 4)
    assert row["arm_ens"] is None  # probabilities that do not fit GunPoint's halves are not scored
    assert "Not finished (no runs): ArrowHead patchtst_jumbo." in out_json.with_suffix(".md").read_text()
    empty = subprocess.run(cmd[:-6] + ["--out", str(tmp_path / "none"), "--json", str(tmp_path / "x.json")],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert empty.returncode != 0 and "no finished runs" in empty.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.multiprocess
def test_trunk_benchmark_records_the_trunk_recipe(tmp_path):
    """``--recipe small-data-trunk`` runs that recipe with no trunk flags of its own, says so in the record,
    scores the arm's ensemble from the stored probabilities, and compares the arm with the recipe's runs from
    ``--recipe-runs`` (a missing file is refused, nothing written)."""
    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.store import write_run

    data = load_dataset("GunPoint", download=False)
    folder = tmp_path / "sweep" / "runs" / "GunPoint" / "patchtst_jumbo"
    # the chosen run (validation 90) puts 0.6 on each true class, the other (80) 0.9 on the wrong one: their mean
    # is wrong on every series, so the ensemble of both scores 0 while the chosen run tests 88
    halves = (("val", data.val), ("test", data.test))
    write_run(folder / "lr0.001_do0.1.json", _run_record("GunPoint", "patchtst_jumbo", 90.0, 0.5, 88.0),
              {half: 0.4 + 0.2 * np.eye(2)[split.y] for half, split in halves})
    write_run(folder / "lr0.001_do0.1_s1.json", _run_record("GunPoint", "patchtst_jumbo", 80.0, 0.6, 10.0),
              {half: 0.9 - 0.8 * np.eye(2)[split.y] for half, split in halves})
    out_json = tmp_path / "table.json"
    cmd = [sys.executable, "benchmarks/timeseries_trunk.py", "--collect-only", "--recipe", "small-data-trunk",
           "--datasets", "GunPoint", "--out", str(tmp_path / "sweep"), "--json", str(out_json), "--device", "test",
           "--threads", "1", "--recipe-runs"]
    recipe = _trunk_json(tmp_path / "recipe.json", "tstrain --recipe small-data-trunk --seeds 3 --model patchtst_jumbo",
                         "cpu", [("GunPoint", "patchtst_jumbo", 97.0, 96.0, 3)])
    proc = subprocess.run(cmd + [str(recipe)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out_json.read_text())
    assert record["command"] == "tstrain --recipe small-data-trunk --seeds 1 --model patchtst_jumbo --threads 1 --cpu"
    row = record["rows"][0]
    assert (row["arm_best"], row["recipe_best"], row["recipe_avg"], row["recipe_source"]) == (88.0, 97.0, 96.0,
                                                                                             "recipe.json")
    assert (row["arm_val_avg"], row["arm_ens"]) == (85.0, 0.0)
    text = out_json.with_suffix(".md").read_text()
    assert text.startswith("# patchtst_jumbo with `--recipe small-data-trunk` vs the small-data-trunk recipe")
    assert "The recipe's runs: recipe.json" in text
    out_json.unlink()
    missing = subprocess.run(cmd + [str(tmp_path / "none.json")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "--recipe-runs expects JSON files" in missing.stderr
    assert not out_json.exists()


@pytest.mark.multiprocess
def test_trunk_benchmark_reads_baselines_from_several_references(tmp_path):
    """``--reference A B``: a set's ROCKET columns come from whichever file holds it (B's row wins over A's), as
    benchmarks/timeseries_rocket.py writes them (its summary rows and table); a missing file is refused."""
    from jumbokit.timeseries.store import write_run

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import timeseries_rocket

    result = {"test_top1": 75.0, "val_top1": 50.0, "full_test_top1": 62.5, "seconds": 1.5}
    row = timeseries_rocket.summary_row("GunPoint", "minirocket", result)
    assert (row["best_test_acc"], row["best_val_acc"], row["full_test_acc"], row["padded"]) == (0.75, 0.5, 0.625,
                                                                                               False)
    assert "| GunPoint | 75.0 / 62.5 | skipped | skipped | 1.5 |" in timeseries_rocket.table([row])
    first, second = tmp_path / "small.json", tmp_path / "rocket.json"
    first.write_text(json.dumps({"summary": [dict(row, best_test_acc=0.5), dict(row, model="hydra")]}))
    second.write_text(json.dumps({"summary": [row]}))
    write_run(tmp_path / "sweep" / "runs" / "GunPoint" / "patchtst_jumbo" / "lr0.001_do0.1.json",
              _run_record("GunPoint", "patchtst_jumbo", 90.0, 0.5, 80.0), {"test": np.zeros((2, 2))})
    out_json = tmp_path / "table.json"
    cmd = [sys.executable, "benchmarks/timeseries_trunk.py", "--collect-only", "--datasets", "GunPoint", "--out",
           str(tmp_path / "sweep"), "--json", str(out_json), "--device", "test", "--reference", str(first)]
    proc = subprocess.run(cmd + [str(second)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (got,) = json.loads(out_json.read_text())["rows"]
    assert (got["minirocket"], got["hydra"], got["multirocket"]) == (75.0, 75.0, None)
    assert (got["resnet_published"], got["inceptiontime_published"]) == (99.1, 100.0)
    out_json.unlink()
    missing = subprocess.run(cmd + [str(tmp_path / "none.json")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "none.json" in missing.stderr and not out_json.exists()


@pytest.mark.multiprocess
def test_rocket_benchmark_refuses_a_set_not_available_locally(tmp_path):
    out_json = tmp_path / "rocket.json"
    proc = subprocess.run([sys.executable, "benchmarks/timeseries_rocket.py", "--datasets", "GunPoint,Nope", "--json",
                           str(out_json)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "not available locally: Nope" in proc.stderr and "GunPoint" in proc.stderr
    assert not out_json.exists()


@pytest.mark.multiprocess
def test_trunk_benchmark_pools_sweeps_of_other_seeds(tmp_path):
    """``--pool`` tabulates sweeps of one arm run with other seeds as one sweep: the run chosen on validation
    among all of them, the mean over all, the seeds recorded; a sweep of other settings, or one storing a run of a
    seed already pooled, is refused with nothing written; seeds declared but never finished do not count."""
    from jumbokit.timeseries.protocol import SweepConfig
    from jumbokit.timeseries.store import write_run, write_sweep_file

    def sweep(name: str, seed: int, runs: list[tuple[float, float]], seeds: int = 0, **settings) -> str:
        folder = tmp_path / name
        write_sweep_file(folder, SweepConfig(seed=seed, seeds=seeds or len(runs), **settings))
        for k, (val, test) in enumerate(runs):
            stem = "lr0.001_do0.1" + (f"_s{k}" if k else "")
            write_run(folder / "runs" / "GunPoint" / "patchtst_jumbo" / f"{stem}.json",
                      _run_record("GunPoint", "patchtst_jumbo", val, 0.5, test), {"test": np.zeros((2, 2))})
        return str(folder)

    first = sweep("seeds0", 0, [(80.0, 70.0), (85.0, 75.0)])
    later = sweep("seeds2", 2, [(90.0, 60.0)])
    out_json = tmp_path / "table.json"
    cmd = [sys.executable, "benchmarks/timeseries_trunk.py", "--collect-only", "--seeds", "2", "--datasets",
           "GunPoint", "--out", first, "--json", str(out_json), "--device", "test", "--pool"]
    proc = subprocess.run(cmd + [later], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out_json.read_text())
    (row,) = record["rows"]
    assert (row["arm_best"], row["arm_tests"], row["arm_runs"]) == (60.0, [70.0, 75.0, 60.0], 3)
    assert row["arm_avg"] == pytest.approx(205.0 / 3) and record["run_seeds"] == [0, 1, 2]
    assert "Pooled sweeps (the same arm, run with `--seed K`)" in out_json.with_suffix(".md").read_text()
    out_json.unlink()
    stopped = sweep("stopped", 2, [(95.0, 65.0)], seeds=3)  # declared seeds 2-4, only seed 2 finished
    resumed = sweep("resumed", 3, [(50.0, 90.0), (50.0, 80.0)])  # seeds 3-4 run again elsewhere
    cmd_stopped = [stopped if part == first else part for part in cmd]
    proc = subprocess.run(cmd_stopped + [resumed], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out_json.read_text())
    assert record["run_seeds"] == [2, 3, 4] and record["rows"][0]["arm_tests"] == [65.0, 90.0, 80.0]
    out_json.unlink()
    smoothed = sweep("smoothed", 3, [(90.0, 60.0)], label_smoothing=0.1)
    for bad, message in ((smoothed, "differs in label_smoothing: 0.1 there vs 0.0"),
                         (sweep("again", 1, [(90.0, 60.0)]), "both hold GunPoint patchtst_jumbo lr0.001_do0.1 seed 1"),
                         (str(tmp_path / "missing"), "holds no sweep.json")):
        refused = subprocess.run(cmd + [bad], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and message in refused.stderr, refused.stderr
        assert not out_json.exists()


def _trunk_json(path: Path, command: str, device: str, rows: list[tuple[str, str, float, float, int]]) -> Path:
    """A JSON as benchmarks/timeseries_trunk.py writes it, with (set, model, best, mean, runs) rows."""
    path.write_text(json.dumps({"command": command, "device": device, "rows": [
        {"dataset": d, "model": m, "arm_best": best, "arm_avg": avg, "arm_runs": runs} for d, m, best, avg, runs in rows]}))
    return path


@pytest.mark.multiprocess
def test_rank_benchmark_ranks_sets_run_side_by_side(tmp_path):
    """Ranks come from sets where every model has enough runs on one device; the first file wins a shared row;
    files of different front ends are refused with nothing written."""
    trunk = "tstrain --recipe small-data --trunk inception --diff"
    a, b, c, d, jumbo = "ArrowHead", "BasicMotions", "GunPoint", "ItalyPowerDemand", "patchtst_jumbo"
    cpu = _trunk_json(tmp_path / "cpu.json", f"{trunk} --seeds 3 --model patchtst,patchtst_jumbo --threads 2 --cpu",
                      "cpu", [(a, "patchtst", 80.0, 79.0, 3), (a, jumbo, 90.0, 85.0, 3), (b, "patchtst", 70.0, 70.0, 3),
                              (c, "patchtst", 60.0, 60.0, 1), (c, jumbo, 65.0, 65.0, 3)])
    gpu = _trunk_json(tmp_path / "gpu.json", f"{trunk} --seeds 3 --model patchtst_jumbo --runs-per-device 10", "gpu",
                      [(a, jumbo, 10.0, 10.0, 3), (b, jumbo, 75.0, 71.0, 3), (d, "patchtst", 50.0, 50.0, 3),
                       (d, jumbo, 50.0, 40.0, 3)])
    out = tmp_path / "ranks.json"
    cmd = [sys.executable, "benchmarks/timeseries_rank.py", str(cpu), str(gpu), "--models", "patchtst,patchtst_jumbo",
           "--json", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    assert [s["dataset"] for s in record["sets"]] == [a, d]  # b: two devices; c: one run of patchtst
    assert record["mean_rank_best"] == {"patchtst": 1.75, "patchtst_jumbo": 1.25}  # 2/1, tie 1.5/1.5
    assert record["mean_rank_avg"] == {"patchtst": 1.5, "patchtst_jumbo": 1.5}
    assert any(s.startswith(f"{b} (the models ran on different devices") for s in record["left_out"])
    other = _trunk_json(tmp_path / "other.json", f"{trunk} --rel-pos --seeds 3", "cpu", [])
    refused = subprocess.run(cmd[:2] + [str(cpu), str(other), "--json", str(tmp_path / "x.json")], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "different front ends" in refused.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.multiprocess
def test_rank_benchmark_ranks_a_recipe_from_the_explicit_flags_it_stands_for(tmp_path):
    """``--front-end "tstrain --recipe small-data-trunk"`` takes, set by set, the rows of files whose explicit flags
    train the recipe's runs there: the plain trunk flags on GunPoint but not on PLAID (where the recipe reads level
    and scale), the level-and-scale flags on PLAID; a file matching nowhere is refused with the differing setting."""
    trunk = ("tstrain --recipe small-data --conv-stem 0 --trunk resnet --trunk-width auto --trunk-depth 3 --diff "
             "--trunk-head")
    plain = _trunk_json(tmp_path / "plain.json", f"{trunk} --seeds 3 --model patchtst,patchtst_jumbo", "cpu",
                        [("GunPoint", "patchtst", 90.0, 90.0, 3), ("GunPoint", "patchtst_jumbo", 95.0, 95.0, 3),
                         ("PLAID", "patchtst", 99.0, 99.0, 3), ("PLAID", "patchtst_jumbo", 1.0, 1.0, 3)])
    plaid = _trunk_json(tmp_path / "plaid.json", f"{trunk} --level-scale --augment jitter,time_warp,window_slice "
                        "--seeds 3 --model patchtst,patchtst_jumbo", "cpu",
                        [("PLAID", "patchtst", 80.0, 80.0, 3), ("PLAID", "patchtst_jumbo", 85.0, 85.0, 3)])
    out = tmp_path / "ranks.json"
    cmd = [sys.executable, "benchmarks/timeseries_rank.py", "--front-end", "tstrain --recipe small-data-trunk",
           "--models", "patchtst,patchtst_jumbo", "--json", str(out)]
    proc = subprocess.run(cmd + [str(plain), str(plaid)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    sets = {s["dataset"]: s for s in json.loads(out.read_text())["sets"]}
    assert sets["GunPoint"]["sources"] == ["plain.json"] and sets["PLAID"]["sources"] == ["plaid.json"]
    assert sets["PLAID"]["best"] == {"patchtst": 80.0, "patchtst_jumbo": 85.0}
    assert sets["PLAID"]["trunk_width"] == "64" and sets["GunPoint"]["trunk_width"] == "32"
    mixup = _trunk_json(tmp_path / "mixup.json", f"{trunk} --mixup 0.2 --seeds 3", "cpu",
                        [("GunPoint", "patchtst", 1.0, 1.0, 3)])
    refused = subprocess.run(cmd[:-2] + ["--json", str(tmp_path / "x.json"), str(plain), str(mixup)], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "mixup.json differs" in refused.stderr and "augment" in refused.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.multiprocess
def test_rank_benchmark_resolves_auto_trunk_width_per_set(tmp_path):
    """``--trunk-width auto`` ranks beside width-32 rows on a short set (ArrowHead, 251 steps) and width-64 rows on
    a long one (OSULeaf, 427 steps); a row at the other width is not used there."""
    trunk = "tstrain --recipe small-data --conv-stem 0 --trunk resnet --trunk-width {} --diff --seeds 3 --model {}"
    auto = _trunk_json(tmp_path / "auto.json", trunk.format("auto", "patchtst"), "cpu",
                       [("ArrowHead", "patchtst", 80.0, 80.0, 3), ("OSULeaf", "patchtst", 90.0, 90.0, 3)])
    jumbo = "patchtst_jumbo"
    narrow = _trunk_json(tmp_path / "w32.json", trunk.format(32, jumbo), "cpu",
                         [("ArrowHead", jumbo, 85.0, 85.0, 3), ("OSULeaf", jumbo, 10.0, 10.0, 3)])
    wide = _trunk_json(tmp_path / "w64.json", trunk.format(64, jumbo), "cpu",
                       [("ArrowHead", jumbo, 1.0, 1.0, 3), ("OSULeaf", jumbo, 95.0, 95.0, 3)])
    out = tmp_path / "ranks.json"
    proc = subprocess.run([sys.executable, "benchmarks/timeseries_rank.py", str(auto), str(narrow), str(wide),
                           "--models", "patchtst,patchtst_jumbo", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    sets = {s["dataset"]: s for s in json.loads(out.read_text())["sets"]}
    assert {d: s["trunk_width"] for d, s in sets.items()} == {"ArrowHead": "32", "OSULeaf": "64"}
    assert sets["ArrowHead"]["best"]["patchtst_jumbo"] == 85.0 and sets["OSULeaf"]["best"]["patchtst_jumbo"] == 95.0
    assert sets["ArrowHead"]["sources"] == ["auto.json", "w32.json"]
    assert "| ArrowHead | cpu | 32 |" in out.with_suffix(".md").read_text()


@pytest.mark.multiprocess
def test_small_data_benchmark_reports_a_sweep_without_an_ensemble(tmp_path):
    """benchmarks/timeseries_small.py on one set with ``--ensemble 1``: the tables say "-" where no ensemble ran
    (results.json then has no "ensemble"), the copies under --results are written; a bad --long-sets writes nothing."""
    out, stem = tmp_path / "bench", tmp_path / "copy" / "small"
    stem.parent.mkdir()
    cmd = [sys.executable, "benchmarks/timeseries_small.py", "--datasets", "ItalyPowerDemand", "--threads", "1",
           "--skip-pretrain", "--lock", "", "--tstrain-args", "--steps 2 --seeds 1 --ensemble 1"]
    proc = subprocess.run(cmd + ["--out", str(out), "--results", str(stem)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (out / "benchmark.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| ItalyPowerDemand |"))
    assert len(row.strip("|").split("|")) == 7 and " / - |" in row  # 3 transformers (best / no ensemble), 3 baselines
    assert "ensemble not run (--ensemble 1)" in text
    report = json.loads((out / "benchmark.json").read_text())
    assert report["ensemble"] == 1 and report["targets"]["within_1_point_of_minirocket"]["met_ensemble"] is None
    assert stem.with_suffix(".md").read_text() == text
    bad = subprocess.run(cmd + ["--out", str(tmp_path / "bad"), "--results", "", "--long-sets", "OSULeaf"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "--long-sets: OSULeaf not among the benchmark's sets" in bad.stderr
    no_threads = subprocess.run(cmd + ["--out", str(tmp_path / "bad"), "--results", "", "--threads", "0"], cwd=ROOT,
                                capture_output=True, text=True, timeout=300)
    assert no_threads.returncode != 0 and no_threads.stderr.strip() == "--threads must be >= 1, got 0"
    assert not (tmp_path / "bad").exists()


@pytest.mark.multiprocess
def test_pretrain_pool_benchmark_tabulates_its_three_arms(tmp_path):
    """``--collect-only`` reads the three arms' runs (one sweep directory each; "without" shared between mask ratios):
    the run chosen on validation, the runs in seed order, the mean gains; a set an arm has not finished, or an
    unknown set, stops it writing nothing."""
    from jumbokit.timeseries.store import write_run

    proba = {"test": np.zeros((2, 2))}
    arms = {"without": [(80.0, 0.5, 70.0), (90.0, 0.4, 80.0)], "own_split_mask0.6": [(90.0, 0.3, 75.0), (90.0, 0.2, 85.0)],
            "other_sets_mask0.6": [(95.0, 0.9, 90.0), (85.0, 0.1, 100.0)], "other_sets": [(99.0, 0.1, 10.0)]}
    for arm, runs in arms.items():
        folder = tmp_path / "pool" / arm / "runs" / "GunPoint" / "patchtst_jumbo"
        for seed, (val, loss, test) in enumerate(runs):
            record = _run_record("GunPoint", "patchtst_jumbo", val, loss, test)
            record.extra = {"seed": seed} if seed else {}
            write_run(folder / f"lr0.001_do0.1{f'_s{seed}' if seed else ''}.json", record, proba)
    out_json = tmp_path / "pool.json"
    cmd = [sys.executable, "benchmarks/timeseries_pretrain_pool.py", "--collect-only", "--recipe", "small-data-trunk",
           "--mask-ratio", "0.6", "--out", str(tmp_path / "pool")]
    proc = subprocess.run(cmd + ["--datasets", "GunPoint", "--json", str(out_json)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(out_json.read_text())["rows"]
    assert row["without: best / mean (runs)"] == "80.0 / 75.0 (70.0, 80.0)"
    assert row["own split: best / mean (runs)"] == "85.0 / 80.0 (75.0, 85.0)"  # a validation tie: lower loss wins
    assert row["other sets: best / mean (runs)"] == "90.0 / 95.0 (90.0, 100.0)"
    assert (row["other sets - without (mean)"], row["other sets - own split (mean)"]) == (20.0, 15.0)
    assert row["validation mean: without / own split / other sets"] == "85.0 / 90.0 / 90.0"
    assert "--recipe small-data-trunk --model patchtst_jumbo --pretrain-epochs 100 --pretrain-mask-ratio 0.6 " \
           "--pretrain-on" in out_json.with_suffix(".md").read_text()
    for datasets, message in (("GunPoint,ArrowHead", "no finished runs in"),
                              ("GunPiont", "--datasets: unknown dataset(s) GunPiont")):
        bad = subprocess.run(cmd + ["--datasets", datasets, "--json", str(tmp_path / "bad.json")], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode != 0 and message in bad.stderr
    assert not (tmp_path / "bad.json").exists()


@pytest.mark.multiprocess
def test_fusion_benchmark_scores_every_pair_of_runs(tmp_path):
    """benchmarks/timeseries_fusion.py: each side's runs and the mean probabilities of every (first, second) pair,
    on the sets both sides ran; a directory without a sweep is refused in one line."""
    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.protocol import SweepConfig
    from jumbokit.timeseries.store import write_run, write_sweep_file

    data = load_dataset("GunPoint", download=False)
    halves = (("val", data.val), ("test", data.test))

    def sweep(name: str, model: str, probas: list) -> str:
        write_sweep_file(tmp_path / name, SweepConfig())
        for k, proba in enumerate(probas):
            stem = "lr0.001_do0.1" + (f"_s{k}" if k else "")
            write_run(tmp_path / name / "runs" / "GunPoint" / model / f"{stem}.json",
                      _run_record("GunPoint", model, 50.0, 0.5, 50.0),
                      {half: proba(np.eye(2)[split.y]) for half, split in halves})
        return f"{tmp_path / name}:{model}"

    # right but unsure (0.6 on the class), wrong and sure (0.9 on the other), right and sure (0.9): a pair of the
    # unsure right run with the sure wrong one is wrong everywhere, the sure right one outweighs the wrong one
    first = sweep("cnn", "series_cnn", [lambda onehot: 0.4 + 0.2 * onehot])
    second = sweep("jumbo", "patchtst_jumbo", [lambda onehot: 0.9 - 0.8 * onehot, lambda onehot: 0.1 + 0.8 * onehot])
    out_json = tmp_path / "fusion.json"
    cmd = [sys.executable, "benchmarks/timeseries_fusion.py", "--first", first, "--second", second,
           "--json", str(out_json)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(out_json.read_text())["rows"]
    assert (row["dataset"], row["first"], row["second"], row["pairs"]) == ("GunPoint", [100.0], [0.0, 100.0],
                                                                           [0.0, 100.0])
    assert "| GunPoint | 100.0 (1) | 50.0 (2) | 50.0 (2) |" in out_json.with_suffix(".md").read_text()
    bad = subprocess.run(cmd[:3] + [str(tmp_path / "none") + ":series_cnn"] + cmd[4:], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "holds no sweep.json: expected a tstrain output directory" in bad.stderr


@pytest.mark.multiprocess
def test_rank_pool_significance_of_a_model_always_first(tmp_path):
    """Three models ranked 1/2/3 on six draws: Friedman's chi2 = 12 (p = e^-6), the Nemenyi critical difference
    for 3 models and 6 draws 2.343 * sqrt(1/3), the sign test 2 / 2^6 for each pair, which 4 draws would find with 80% power."""
    ranks = {"patchtst": 1, "patchtst_registers": 2, "patchtst_jumbo": 3}
    table = _rank_json(tmp_path / "r.json", "tstrain --recipe small-data", [
        (name, "a.json", ranks, ranks) for name in ("A", "B", "C", "D", "E", "F")])
    out = tmp_path / "pooled.json"
    proc = subprocess.run([sys.executable, "benchmarks/timeseries_rank_pool.py", str(table), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    test = json.loads(out.read_text())["significance"]["rank_best"]
    assert test["friedman_chi2"] == 12.0 and test["friedman_p"] == round(math.exp(-6), 4)
    assert test["nemenyi_cd"] == pytest.approx(2.343 * math.sqrt(1 / 3), abs=2e-3)
    assert [p["sign_test_p"] for p in test["pairs"]] == [0.0312] * 3
    assert [p["draws_needed"] for p in test["pairs"]] == [4] * 3  # (1.96 * 0.5 / 0.5)^2 = 3.84 draws, no ties
    assert "Do the mean ranks differ beyond chance?" in out.with_suffix(".md").read_text()
    for reading in ("best", "mean"):
        assert (tmp_path / f"pooled_cd_{reading}.png").read_bytes()[:4] == b"\x89PNG"


def _rank_json(path: Path, front: str, sets: list[tuple[str, str, dict[str, float], dict[str, float]]]) -> Path:
    """A JSON as benchmarks/timeseries_rank.py writes it, with (set, source, rank_best, rank_avg) sets; each
    accuracy is 100 - 10 * its rank."""
    models = list(sets[0][2])

    def accuracy(ranks: dict[str, float]) -> dict[str, float]:
        return {m: 100.0 - 10.0 * r for m, r in ranks.items()}

    path.write_text(json.dumps({"front_end": front, "models": models, "sets": [
        {"dataset": d, "device": "cpu (fp32)", "sources": [src], "rank_best": best, "rank_avg": avg,
         "best": accuracy(best), "avg": accuracy(avg)} for d, src, best, avg in sets]}))
    return path


@pytest.mark.multiprocess
def test_rank_pool_counts_every_set_draw_once(tmp_path):
    """Pooled ranks are the mean over all (set, draw) pairs of tables of one front end (seeds never matter); a
    table of another front end, or the same draw twice, is refused with nothing written."""
    trunk = "tstrain --recipe small-data --trunk inception --diff"
    first = _rank_json(tmp_path / "s0.json", trunk, [
        ("ArrowHead", "a.json", {"patchtst": 1, "patchtst_jumbo": 2}, {"patchtst": 1, "patchtst_jumbo": 2}),
        ("GunPoint", "a.json", {"patchtst": 2, "patchtst_jumbo": 1}, {"patchtst": 1.5, "patchtst_jumbo": 1.5})])
    second = _rank_json(tmp_path / "s3.json", f"{trunk} --seed 3", [
        ("ArrowHead", "b.json", {"patchtst": 2, "patchtst_jumbo": 1}, {"patchtst": 2, "patchtst_jumbo": 1})])
    out = tmp_path / "pooled.json"
    cmd = [sys.executable, "benchmarks/timeseries_rank_pool.py"]
    proc = subprocess.run(cmd + [str(first), str(second), "--json", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    assert [(d["dataset"], d["table"]) for d in record["draws"]] == [
        ("ArrowHead", "s0.json"), ("GunPoint", "s0.json"), ("ArrowHead", "s3.json")]
    assert record["mean_rank_best"] == {"patchtst": 5 / 3, "patchtst_jumbo": 4 / 3}
    assert record["mean_rank_avg"] == {"patchtst": 1.5, "patchtst_jumbo": 1.5}
    assert "| mean rank, best run | 3 set-draws |" in out.with_suffix(".md").read_text()
    (pair,) = record["significance"]["rank_best"]["pairs"]  # patchtst ahead on one draw, Jumbo on two
    assert (pair["a_ahead"], pair["b_ahead"], pair["ties"], pair["sign_test_p"]) == (1, 2, 0, 1.0)
    assert record["significance"]["rank_avg"]["friedman_p"] is None  # two models: the sign test is the test
    assert not list(tmp_path.glob("*.png"))  # nor a critical-difference diagram
    other = _rank_json(tmp_path / "relpos.json", f"{trunk} --rel-pos", [
        ("OSULeaf", "c.json", {"patchtst": 1, "patchtst_jumbo": 2}, {"patchtst": 1, "patchtst_jumbo": 2})])
    for bad, why in (([first, other], "rel_pos_bias: True vs False"), ([first, first], "expected each draw once")):
        refused = subprocess.run(cmd + [str(p) for p in bad] + ["--json", str(tmp_path / "x.json")], cwd=ROOT,
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and why in refused.stderr, refused.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.multiprocess
def test_rank_pool_averages_each_sets_accuracy_over_its_draws_and_pools_named_sets(tmp_path):
    """Accuracy per set is the mean over its draws, the overall mean counts each set once (not each draw);
    ``--sets`` keeps only the named sets, and a name no table ranks is refused with nothing written."""
    ranks = ({"patchtst": 1, "patchtst_jumbo": 2}, {"patchtst": 2, "patchtst_jumbo": 1})
    table = _rank_json(tmp_path / "r.json", "tstrain --recipe small-data", [
        ("ArrowHead", "a.json", ranks[0], ranks[0]), ("GunPoint", "a.json", ranks[1], ranks[0]),
        ("ArrowHead", "b.json", ranks[1], ranks[1]), ("ArrowHead", "c.json", ranks[1], ranks[1])])
    cmd = [sys.executable, "benchmarks/timeseries_rank_pool.py", str(table), "--json"]
    proc = subprocess.run(cmd + [str(tmp_path / "all.json")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "all.json").read_text())
    arrow, gun = record["accuracy_by_set"]
    assert (arrow["dataset"], arrow["draws"], gun["draws"]) == ("ArrowHead", 3, 1)
    assert arrow["best"] == pytest.approx({"patchtst": 250 / 3, "patchtst_jumbo": 260 / 3})
    two_sets = {"patchtst": (250 / 3 + 80) / 2, "patchtst_jumbo": (260 / 3 + 90) / 2}  # each set once, not each draw
    assert record["mean_accuracy_best"] == pytest.approx(two_sets)
    by_mean = {"patchtst": (250 / 3 + 90) / 2, "patchtst_jumbo": (260 / 3 + 80) / 2}
    assert record["mean_accuracy_avg"] == pytest.approx(by_mean)
    assert "| mean over 2 sets |  | 81.67 / 86.67 | 88.33 / 83.33 |" in (tmp_path / "all.md").read_text()
    proc = subprocess.run(cmd + [str(tmp_path / "gun.json"), "--sets", "GunPoint"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "gun.json").read_text())
    assert [d["dataset"] for d in record["draws"]] == ["GunPoint"] and record["mean_rank_best"]["patchtst"] == 2
    refused = subprocess.run(cmd + [str(tmp_path / "x.json"), "--sets", "GunPoint,Nope"], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode != 0 and "expected names of ranked sets (ArrowHead, GunPoint)" in refused.stderr
    assert not (tmp_path / "x.json").exists()


def test_length_probe_scores_lengths_that_decide_the_class_and_lengths_that_do_not(monkeypatch):
    monkeypatch.syspath_prepend("benchmarks")
    from timeseries_length_probe import length_probe

    y = np.repeat([0, 1, 2], 10)
    telling = length_probe(np.repeat([20, 50, 90], 10), y, np.array([21, 48, 95, 88]), np.array([0, 1, 2, 2]))
    assert telling == {"nearest_neighbour": 100.0, "random_forest": 100.0, "majority_class": 25.0}
    silent = length_probe(np.full(30, 40), y, np.full(6, 40), np.array([0, 0, 0, 1, 2, 2]))
    assert silent["majority_class"] == 50.0 and silent["random_forest"] <= 50.0


@pytest.mark.multiprocess
def test_length_probe_reads_unequal_sets_and_refuses_equal_ones(tmp_path):
    out = tmp_path / "probe.json"
    cmd = [sys.executable, "benchmarks/timeseries_length_probe.py", "--json", str(out), "--datasets"]
    proc = subprocess.run([*cmd, "GunPoint,JapaneseVowels"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(out.read_text())["rows"]  # GunPoint's series share one length: left out
    assert (row["dataset"], row["classes"], row["lengths"]) == ("JapaneseVowels", 9, "7-29")
    assert row["random_forest"] > 2 * row["majority_class"]
    assert "| JapaneseVowels | 9 | 7-29 |" in out.with_suffix(".md").read_text()
    proc = subprocess.run([*cmd, "GunPoint"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "nothing to probe" in proc.stderr
    proc = subprocess.run([*cmd, "GunPoint,Nope"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "unknown dataset 'Nope'" in proc.stderr and "Traceback" not in proc.stderr


def _write_uint8_idx(path: Path, array: np.ndarray) -> None:
    """``array`` (uint8) as an IDX file: two zero bytes, type 0x08, the rank, big-endian sizes, the values."""
    path.write_bytes(bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
                     + array.astype(np.uint8).tobytes())


def test_fashion_mnist_benchmark_compares_kinds_with_anchors_and_reads_finished_runs(tmp_path, monkeypatch):
    """At a tiny size (the accuracies mean nothing): CLS, the registers matched to Jumbo's FLOPs (R = 19 at 16
    patches of pico) and Jumbo for two seeds on generated IDX files; Jumbo minus each paired by seed, the
    logistic-regression anchor and the published ResNet-18 row; a second call reads the finished runs."""
    from jumbokit.data import fashion_mnist
    from jumbokit.encoders import zoo
    from jumbokit.recipes import supervised

    rng = np.random.default_rng(0)
    for part, per_class in (("train", 4), ("test", 2)):
        labels = np.repeat(np.arange(10, dtype=np.uint8), per_class)
        images = rng.integers(0, 255, size=(len(labels), 28, 28), dtype=np.uint8)
        for name, array in zip(fashion_mnist.FASHION_MNIST_FILES[part], (images, labels)):
            _write_uint8_idx(tmp_path / name, array)
    monkeypatch.setattr(fashion_mnist, "FASHION_MNIST_VAL_SIZE", 10)  # the real cut is 5,000 images
    monkeypatch.setattr(zoo, "_REGISTRY", dict(zoo._REGISTRY))  # the matched-registers name stays in this test
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import fashion_mnist_supervised as bench

    out = tmp_path / "fm.json"
    argv = ["--sizes", "pico", "--patch-size", "8", "--seeds", "0", "1", "--epochs", "1", "--dataset",
            f"fashion-mnist:{tmp_path}", "--supervised-args=--cpu --batch-size 8", "--runs", str(tmp_path / "runs"),
            "--json", str(out)]
    record = bench.main(argv)
    assert list(record["models"]) == ["vit_pico_cls_p8", "vit_pico_reg19_p8", "vit_pico_jumbo_p8"]
    reg, jumbo = record["models"]["vit_pico_reg19_p8"], record["models"]["vit_pico_jumbo_p8"]
    assert reg["num_registers"] == 19 and [r["seed"] for r in jumbo["runs"]] == [0, 1]
    assert all(r["wall_seconds"] > 0 for e in record["models"].values() for r in e["runs"])
    (to_reg, to_cls) = record["differences"]
    runs = {k: {r["seed"]: r["test_top1"] for r in e["runs"]} for k, e in record["models"].items()}
    assert to_reg["per_seed"] == pytest.approx([runs["vit_pico_jumbo_p8"][s] - runs["vit_pico_reg19_p8"][s]
                                                for s in (0, 1)])
    assert to_cls["difference"] == "vit_pico_jumbo (patch 8) - vit_pico_cls (patch 8)"
    (fit,) = record["anchors"]["logistic_regression"]["fits"]  # all 30 training images: one fit
    assert fit["train_images"] == 30 and 0 <= fit["test_top1"] <= 100
    text = out.with_suffix(".md").read_text()
    assert "| logistic regression on pixels (computed here) |" in text and "| 94.9 |" in text

    def no_training(argv):
        raise AssertionError(f"finished run trained again: {argv}")

    monkeypatch.setattr(supervised, "main", no_training)
    again = bench.main(argv)
    assert again["models"] == record["models"] and again["differences"] == record["differences"]


def _write_ucr_tsv(root: Path, name: str, labels: tuple[str, str], length: int, rng) -> None:
    """A two-class set in the UCR 2018 layout: the class shifts the level; some series NaN-padded at the end."""
    (root / name).mkdir(parents=True)
    for split, count in (("TRAIN", 12), ("TEST", 20)):
        y = np.repeat([0, 1], count // 2)
        x = rng.normal(size=(count, length)) + 2.0 * y[:, None]
        x[::5, length - 3:] = np.nan
        lines = ["\t".join([labels[c], *(f"{v:.4f}" if v == v else "NaN" for v in row)]) for c, row in zip(y, x)]
        (root / name / f"{name}_{split}.tsv").write_text("\n".join(lines) + "\n")


@pytest.mark.multiprocess
def test_ucr_archive_benchmark_ranks_models_against_minirocket_and_resumes(tmp_path):
    """At a tiny size (2 steps a run, the accuracies mean nothing): two generated UCR 2018 sets, two transformers
    and MiniRocket; accuracy, ranks, wins/ties/losses against MiniRocket, Friedman, the diagram; a second call
    reuses tstrain's finished runs."""
    rng = np.random.default_rng(0)
    _write_ucr_tsv(tmp_path / "ucr", "Odd", ("-1", "1"), 24, rng)
    _write_ucr_tsv(tmp_path / "ucr", "Even", ("3", "8"), 32, rng)
    out = tmp_path / "ucr.json"
    cmd = [sys.executable, "benchmarks/ucr_archive.py", "--data-dir", str(tmp_path / "ucr"), "--model",
           "patchtst,patchtst_jumbo", "--baseline", "minirocket", "--steps", "2", "--cpu", "--threads", "1",
           "--out", str(tmp_path / "sweep"), "--json", str(out), "--pair", "patchtst_jumbo:patchtst",
           "--group", "patchtst,patchtst_jumbo"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    pair, group = record["pairs"][0], record["groups"][0]
    assert (pair["a"], pair["b"], pair["sets"]) == ("patchtst_jumbo", "patchtst", 2)
    assert pair["wins"] + pair["ties"] + pair["losses"] == 2 and group["models"] == ["patchtst", "patchtst_jumbo"]
    assert record["sets"] == ["Even", "Odd"] and record["models"] == ["patchtst", "patchtst_jumbo", "minirocket"]
    acc = np.array(record["accuracy"])
    assert record["mean_accuracy"]["minirocket"] == pytest.approx(acc[:, 2].mean())
    assert np.array(record["ranks"]).sum(axis=1) == pytest.approx([6.0, 6.0])  # 1 + 2 + 3 on each set
    wtl = record["against_minirocket"]["patchtst_jumbo"]
    assert wtl["wins"] + wtl["ties"] + wtl["losses"] == 2
    assert wtl["wins"] == int((acc[:, 1] > acc[:, 2]).sum()) and wtl["losses"] == int((acc[:, 1] < acc[:, 2]).sum())
    assert record["friedman"] is not None and record["nemenyi_cd"] > 0
    assert (tmp_path / "ucr_cd.png").stat().st_size > 0 and "vs MiniRocket" in out.with_suffix(".md").read_text()
    assert all(record["per_set"][s]["cpu_seconds"] > 0 for s in ("Even", "Odd"))
    # each set in its own process: its peak memory (at least torch's import), named in the report's memory line
    assert all(100 < record["per_set"][s]["peak_rss_mib"] < 8192 for s in ("Even", "Odd"))
    assert "every set within 8,192 MiB" in out.with_suffix(".md").read_text()
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir()) == ["Even", "Odd"]  # one sweep folder a set
    runs = sorted(p.stat().st_mtime_ns for p in (tmp_path / "sweep").glob("*/runs/**/*.json"))
    assert len(runs) == 6  # 2 sets x (2 runs + MiniRocket)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.stat().st_mtime_ns for p in (tmp_path / "sweep").glob("*/runs/**/*.json")) == runs
    assert json.loads(out.read_text())["accuracy"] == record["accuracy"]
    # columns read back from two earlier records (copies of this one), each named in the report; a label that is a
    # column already is refused
    copy = tmp_path / "copy.json"
    copy.write_text(out.read_text())
    mixed = tmp_path / "mixed.json"
    read_back = [*cmd[:cmd.index("--json")], "--json", str(mixed), "--reference-record",
                 f"{out}:patchtst_jumbo=jumbo_a", "--reference-record", f"{copy}:patchtst_jumbo=jumbo_b,minirocket=mr"]
    proc = subprocess.run(read_back, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    both = json.loads(mixed.read_text())
    for name in ("Even", "Odd"):
        models = both["per_set"][name]["models"]
        assert models["jumbo_a"]["test_top1"] == models["jumbo_b"]["test_top1"] == models["patchtst_jumbo"]["test_top1"]
        assert models["mr"]["test_top1"] == models["minirocket"]["test_top1"] and models["mr"]["reference"] == str(copy)
    assert set(both["reference_commands"]) == {str(out), str(copy)}
    assert mixed.with_suffix(".md").read_text().count("Columns read from an earlier record") == 2
    proc = subprocess.run([*read_back[:-1], f"{copy}:patchtst"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "patchtst would be two columns" in proc.stderr


@pytest.mark.multiprocess
def test_ucr_archive_seeds_add_the_ensemble_column(tmp_path):
    """--seeds 2: tstrain runs seeds 0 and 1 of the set in one process; the model's column is the run best on
    validation and MODEL_ens2 the mean probabilities of both (tstrain's own ensemble), stamped with both seeds."""
    _write_ucr_tsv(tmp_path / "ucr", "Odd", ("-1", "1"), 24, np.random.default_rng(0))
    out = tmp_path / "ens.json"
    cmd = [sys.executable, "benchmarks/ucr_archive.py", "--data-dir", str(tmp_path / "ucr"), "--model", "patchtst",
           "--baseline", "", "--steps", "2", "--seeds", "2", "--cpu", "--threads", "1", "--out",
           str(tmp_path / "sweep"), "--json", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    summary = json.loads((tmp_path / "sweep" / "Odd" / "results.json").read_text())["summary"]
    (row,) = [r for r in summary if r["model"] == "patchtst"]
    assert row["runs"] == 2 and sorted(p.name for p in (tmp_path / "sweep").glob("Odd/runs/Odd/patchtst/*.json")) \
        == ["lr0.001_do0.1.json", "lr0.001_do0.1_s1.json"]
    models = record["per_set"]["Odd"]["models"]
    assert models["patchtst"]["test_top1"] == row["test_top1"]
    assert models["patchtst_ens2"]["test_top1"] == row["ens_test_top1"] is not None
    assert record["run_seeds"] == [0, 1] and record["stamp"]["seeds"] == [0, 1]
    assert "seeds 0-1" in out.with_suffix(".md").read_text()
    proc = subprocess.run([*cmd[:cmd.index("--seeds") + 1], "0", *cmd[cmd.index("--seeds") + 2:]], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "--seeds expects a number of runs per set >= 1, got 0" in proc.stderr


def test_ucr_archive_ensemble_rows_score_the_ensemble():
    """add_ensembles: a trained model's row gains MODEL_ensK scored by the ensemble's accuracy; baselines and rows
    without an ensemble gain nothing."""
    archive = _script("ucr_archive")
    rows = {"A": {"patchtst": {"test_top1": 80.0, "val_top1": 70.0, "ens_test_top1": 85.0, "ens_val_top1": 75.0},
                  "minirocket": {"test_top1": 90.0, "val_top1": 88.0, "ens_test_top1": 90.0, "ens_val_top1": 88.0}},
            "B": {"patchtst": {"test_top1": 60.0, "val_top1": 60.0, "ens_test_top1": None, "ens_val_top1": None}}}
    archive.add_ensembles(rows, ["patchtst"], 3)
    assert rows["A"]["patchtst_ens3"] == {"test_top1": 85.0, "val_top1": 75.0, "ens_test_top1": 85.0,
                                          "ens_val_top1": 75.0, "model": "patchtst_ens3"}
    assert rows["A"]["patchtst"]["test_top1"] == 80.0 and "minirocket_ens3" not in rows["A"]
    assert set(rows["B"]) == {"patchtst"}


def test_encoder_selection_chooses_on_validation_accuracy_only(tmp_path):
    """Two tiny encoders fine-tuned on one set (2 steps a run, the accuracies mean nothing): every (set, seed) run
    of each read back, the choice the higher mean validation accuracy (the first on a tie), test beside it."""
    from jumbokit.timeseries import encoder_pretrain as ep

    for seed in (0, 1):
        model, record = ep.pretrain_encoder(["GunPoint"], length=32, steps=2, batch_size=8, cpu=True, dim=16,
                                            seed=seed)
        ep.save_encoder(model, tmp_path / f"enc{seed}", record)
    selection = _script("encoder_selection")
    record = selection.main(["--encoder", f"a={tmp_path / 'enc0'}", "--encoder", f"b={tmp_path / 'enc1'}",
                             "--datasets", "ItalyPowerDemand", "--model", "patchtst_jumbo", "--seeds", "2", "--cpu",
                             "--threads", "1", "--tstrain-args=--dim 16 --steps 2", "--args", "b=--dropout 0.2",
                             "--out", str(tmp_path / "sweeps"), "--json", str(tmp_path / "selection.json")])
    assert record["arm_flags"] == {"a": [], "b": ["--dropout", "0.2"]}  # an arm's own flags reach its runs alone
    assert {json.loads(f.read_text())["dropout"] for f in (tmp_path / "sweeps" / "b").glob("runs/*/*/*.json")} == {0.2}
    assert {json.loads(f.read_text())["dropout"] for f in (tmp_path / "sweeps" / "a").glob("runs/*/*/*.json")} == {0.1}
    assert [(r["set"], r["seed"]) for r in record["runs"]] == [("ItalyPowerDemand", 0), ("ItalyPowerDemand", 1)]
    for label in ("a", "b"):
        for split in ("val", "test"):
            runs = [r[f"{label} {split}"] for r in record["runs"]]
            assert record["means"][label][split] == pytest.approx(np.mean(runs))
    val = {label: record["means"][label]["val"] for label in ("a", "b")}
    assert record["chosen"] == ("b" if val["b"] > val["a"] else "a")
    assert record["paired"]["b"]["mean_difference"] == pytest.approx(val["b"] - val["a"])
    assert record["means"]["a"]["steps"] == 2 and record["means"]["a"]["train_seconds"] > 0
    assert "did not enter the choice" in (tmp_path / "selection.md").read_text()
    # chosen on the test halves (arms that read the validation half while training): the same sweeps, read again
    again = selection.main(["--encoder", f"a={tmp_path / 'enc0'}", "--encoder", f"b={tmp_path / 'enc1'}",
                            "--datasets", "ItalyPowerDemand", "--model", "patchtst_jumbo", "--seeds", "2", "--cpu",
                            "--threads", "1", "--tstrain-args=--dim 16 --steps 2", "--args", "b=--dropout 0.2",
                            "--out", str(tmp_path / "sweeps"), "--json", str(tmp_path / "on_test.json"),
                            "--choose-on", "test"])
    test = {label: again["means"][label]["test"] for label in ("a", "b")}
    assert again["runs"] == record["runs"] and again["choose_on"] == "test"
    assert again["chosen"] == ("b" if test["b"] > test["a"] else "a")
    assert again["paired"]["b"]["split"] == "test"
    assert again["paired"]["b"]["mean_difference"] == pytest.approx(test["b"] - test["a"])
    assert "Test halves chose" in (tmp_path / "on_test.md").read_text()
    with pytest.raises(SystemExit, match="expected two or more encoders"):
        selection.main(["--encoder", f"a={tmp_path / 'enc0'}", "--datasets", "ItalyPowerDemand"])
    with pytest.raises(SystemExit, match="--args expects LABEL=FLAGS with LABEL among a, b"):
        selection.main(["--encoder", f"a={tmp_path / 'enc0'}", "--encoder", f"b={tmp_path / 'enc1'}", "--args",
                        "c=--lr 1", "--datasets", "ItalyPowerDemand"])
    with pytest.raises(SystemExit, match="expects LABEL=PATH"):
        selection.main(["--encoder", str(tmp_path / "enc0"), "--encoder", "b=x", "--datasets", "ItalyPowerDemand"])


@pytest.mark.multiprocess
def test_recipe_cost_measures_each_arm_in_its_own_process_and_reads_ledgers_back(tmp_path):
    """Two arms on two generated sets (2 and 4 steps a run): each (set, arm) in a fresh process with CPU seconds and
    peak memory from the kernel, the arms' order rotating; ratios against the first arm; a second call measures
    nothing again; bad arms are refused before anything runs."""
    rng = np.random.default_rng(0)
    _write_ucr_tsv(tmp_path / "ucr", "Odd", ("-1", "1"), 24, rng)
    _write_ucr_tsv(tmp_path / "ucr", "Even", ("3", "8"), 32, rng)
    cost = _script("recipe_cost")
    assert cost.arm_order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert cost.arm_order(["a", "b", "c"], 4) == ["b", "c", "a"]
    argv = ["--data-dir", str(tmp_path / "ucr"), "--datasets", "Odd,Even",
            "--arm", "short=--model patchtst --recipe fast --steps 2",
            "--arm", "long=--model patchtst --recipe fast --steps 4",
            "--cpu", "--threads", "1", "--out", str(tmp_path / "cost"), "--json", str(tmp_path / "cost.json")]
    record = cost.main(argv)
    for name in ("Odd", "Even"):
        for arm, steps in (("short", 2), ("long", 4)):
            row = record["per_set"][name][arm]
            assert row["cpu_seconds"] > row["train_seconds"] > 0 and 100 < row["peak_rss_mib"] < 8192
            (run,) = (tmp_path / "cost" / arm / name).glob("runs/*/patchtst/*.json")
            assert json.loads(run.read_text())["steps"] == steps
    cpu = {arm: [record["per_set"][s][arm]["cpu_seconds"] for s in ("Odd", "Even")] for arm in ("short", "long")}
    ratio = record["ratios"]["long"]["cpu_seconds"]
    assert ratio["ratio_of_totals"] == pytest.approx(sum(cpu["long"]) / sum(cpu["short"]))
    assert ratio["geometric_mean"] == pytest.approx(np.exp(np.mean(np.log(np.array(cpu["long"]) / cpu["short"]))))
    assert ratio["ci95"][0] < ratio["geometric_mean"] < ratio["ci95"][1]
    assert "long / short, CPU seconds" in (tmp_path / "cost.md").read_text()
    ledgers = sorted(p.stat().st_mtime_ns for p in (tmp_path / "cost").glob("*/*/cost.json"))
    assert len(ledgers) == 4 and cost.main(argv)["per_set"] == record["per_set"]
    assert sorted(p.stat().st_mtime_ns for p in (tmp_path / "cost").glob("*/*/cost.json")) == ledgers
    for arms, message in ((["--arm", "a=--steps 2"], "expected two or more arms"),
                          (["--arm", "a=--steps 2", "--arm", "a=--steps 3"], "the label a is given twice"),
                          (["--arm", "a=--steps 2", "--arm", "b=--out x"], "--out belong"),
                          (["--arm", "a", "--arm", "b=--steps 2"], "expects LABEL=FLAGS")):
        with pytest.raises(SystemExit, match=message):
            cost.main(["--datasets", "Odd", *arms, "--out", str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists()


def test_tstrain_step_times_the_phases_and_sorts_operators_by_kind(tmp_path):
    """The step of a tstrain run on a bundled set at two batch sizes: every phase timed, FLOPs counted, the
    profile's operators summed by kind into the step; flags the script owns and bad batch sizes are refused."""
    step = _script("tstrain_step")
    assert [step.kind_of(n) for n in ("aten::addmm", "aten::_scaled_dot_product_flash_attention_for_cpu",
                                      "aten::bernoulli_", "aten::convolution_backward", "aten::gelu_backward",
                                      "Optimizer.step#AdamW.step", "aten::native_layer_norm", "aten::fill_")] == \
        ["matmul", "attention", "dropout", "convolution + pooling", "activation", "optimizer", "normalisation", "other"]
    record = step.main(["--dataset", "ItalyPowerDemand", "--model", "patchtst", "--tstrain-args=--recipe fast --dim 16",
                        "--batch-sizes", "8,4", "--steps", "2", "--warmup", "1", "--profile-steps", "2",
                        "--gemm", "64", "--json", str(tmp_path / "step.json")])
    assert [r["batch"] for r in record["rows"]] == [8, 4]
    for row in record["rows"]:
        phases = [row[f"ms_{p}"] for p in ("data", "forward", "backward", "optimizer")]
        assert min(phases) > 0 and row["ms_step"] == pytest.approx(sum(phases)) and row["gflop_step"] > 0
    assert record["rows"][0]["gflop_step"] == pytest.approx(2 * record["rows"][1]["gflop_step"], rel=0.01)
    profile = record["profile"]
    assert profile["ms_by_kind"]["matmul"] > 0 and profile["ms_by_kind"]["optimizer"] > 0
    for kind in ("matmul", "attention", "dropout"):  # a kind holds at least its largest operators' own time
        listed = sum(op["ms_step"] for op in profile["top_operators"] if op["kind"] == kind)
        assert profile["ms_by_kind"][kind] >= listed * (1 - 1e-9)
    assert {op["kind"] for op in profile["top_operators"]} <= set(profile["ms_by_kind"])
    assert "| matmul |" in (tmp_path / "step.md").read_text()
    with pytest.raises(SystemExit, match="belong"):
        step.main(["--dataset", "ItalyPowerDemand", "--tstrain-args=--model patchtst_jumbo"])
    with pytest.raises(SystemExit, match="--batch-sizes expects comma-separated positive integers"):
        step.main(["--dataset", "ItalyPowerDemand", "--batch-sizes", "0"])


def _script(name: str):
    """A benchmark script of benchmarks/ loaded as a module (its main called in this process, without a child's
    imports)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _archive_record(seed: int, accuracy: dict, cpu: float = 10.0) -> dict:
    """A record of benchmarks/ucr_archive.py as it writes it, reduced to what ucr_seeds.py reads."""
    per_set = {s: {"models": {m: {"test_top1": a, "wall_seconds": 1.0} for m, a in models.items()},
                   "cpu_seconds": cpu, "peak_rss_mib": 500.0 + seed}
               for s, models in accuracy.items()}
    return {"benchmark": "ucr_archive", "command": f"python benchmarks/ucr_archive.py --seed {seed}", "seed": seed,
            "recipe": "fast", "tstrain_args": ["--model", "m", "--seed", str(seed)], "per_set": per_set,
            "models": ["fused", "minirocket", "multirocket", "hydra"]}


def test_ucr_seeds_averages_each_set_over_seeds_and_reports_the_spread(tmp_path):
    """Two seeds of a model and one seed of the ROCKET columns: each set's accuracy is the mean over the seeds that
    ran the model, the archive means per seed and their spread, the pairs seed by seed; a record of another command
    and a repeated seed are refused."""
    sets = ["A", "B", "C", "D"]
    rockets = {"minirocket": 80.0, "multirocket": 82.0, "hydra": 81.0}
    seed0 = {s: {"fused": 80.0 + i, "mrh": 81.0, **rockets} for i, s in enumerate(sets)}
    seed1 = {s: {"fused": 82.0 + i, "mrh": 80.0} for i, s in enumerate(sets)}
    paths = []
    for seed, acc in ((0, seed0), (1, seed1)):
        paths.append(tmp_path / f"s{seed}.json")
        paths[-1].write_text(json.dumps(_archive_record(seed, acc, cpu=10.0 * (seed + 1))))
    out = tmp_path / "seeds.json"
    script = _script("ucr_seeds")
    script.main([*map(str, paths), "--pair", "fused:mrh", "--group", "fused,mrh,minirocket", "--json", str(out)])
    record = json.loads(out.read_text())
    group = record["groups"][0]  # the three alone on the seed means: fused 82.5 > minirocket 80 > mrh 80.5 on A..D
    assert group["models"] == ["fused", "mrh", "minirocket"] and group["mean_rank"] == {
        "fused": 1.0, "mrh": 2.0, "minirocket": 3.0}
    assert (tmp_path / group["figure"]).stat().st_size > 0
    assert record["seeds"] == [0, 1] and record["models"] == ["fused", "minirocket", "multirocket", "hydra"]
    assert record["per_set"]["B"]["fused"]["test_top1"] == pytest.approx(82.0)  # (81 + 83) / 2
    assert record["per_set"]["B"]["minirocket"]["seeds"] == 1
    fused = record["spread"]["fused"]
    assert fused["per_seed"] == {"0": pytest.approx(81.5), "1": pytest.approx(83.5)}
    assert fused["mean"] == pytest.approx(82.5) and fused["std"] == pytest.approx(2 ** 0.5)
    assert record["spread"]["minirocket"]["std"] is None
    assert record["mean_accuracy"]["fused"] == pytest.approx(82.5)
    assert [p["mean_difference"] for p in record["pairs_per_seed"][0]] == pytest.approx([0.5, 3.5])
    assert record["pairs"][0]["mean_difference"] == pytest.approx(2.0)
    assert [c["CPU s (all sets)"] for c in record["cost_per_seed"]] == pytest.approx([40.0, 80.0])
    assert record["peak_rss_mib"]["A"] == pytest.approx(501.0)
    text = out.with_suffix(".md").read_text()
    assert "std over seeds" in text
    # +0.5 over MultiRocket with an interval holding 0 is level inside the noise, never "met"
    assert "Target, fused mean >= multirocket mean: not met: ahead inside the noise" in text
    assert (tmp_path / "seeds_cd.png").stat().st_size > 0

    other = _archive_record(2, seed1)
    other["tstrain_args"] = ["--model", "n", "--seed", "2"]
    (tmp_path / "other.json").write_text(json.dumps(other))
    again = [str(paths[0]), str(paths[0]), "--json", str(tmp_path / "x.json")]
    for argv, message in (([str(paths[0]), str(tmp_path / "other.json")], "expected the same command at another"),
                          (again, "expected one record per seed"),
                          ([str(paths[0]), "--pair", "fused:nothing"], "expected models among"),
                          ([str(paths[0]), "--group", "fused"], "--group two or more names")):
        with pytest.raises(SystemExit, match=message):
            script.main(argv)
    assert not (tmp_path / "x.json").exists()


def test_ucr_archive_reports_the_steps_runs_took_where_rows_say():
    """The steps line: mean, median and range of a model's steps over the sets, and the kept weights' step."""
    script = _script("ucr_archive")
    rows = {"A": {"m": {"steps": 500.0, "best_step": 250}, "minirocket": {}},
            "B": {"m": {"steps": 1500.0, "best_step": 1450}}, "C": {"m": {"steps": 700.0, "best_step": 250}}}
    [line] = [x for x in script.steps_lines(rows, ["m", "minirocket"]) if x.startswith("- ")]
    assert line == ("- m: 900 optimizer steps a run (mean over 3 sets; median 700, 500 to 1,500); the chosen run's "
                    "kept weights from step 250 (median), step 250 on 2 sets.")
    assert script.steps_lines({"A": {"minirocket": {}}}, ["minirocket"]) == []


def test_ucr_seeds_takes_a_column_of_another_seeds_record_seed_by_seed(tmp_path):
    """--reference: a model of another recipe's seeds record, read from the records that record read, becomes a
    column paired seed by seed (seed 0 with seed 0, seed 1 with seed 1) and on the seed means; bad specs refused."""
    sets = ["A", "B", "C"]
    script = _script("ucr_seeds")
    paths = {}
    for recipe, base in (("old", 70.0), ("new", 75.0)):
        for seed in (0, 1):
            record = _archive_record(seed, {s: {"fused": base + seed * 2 + i, "minirocket": 80.0}
                                            for i, s in enumerate(sets)})
            record["recipe"] = recipe
            paths[recipe, seed] = tmp_path / f"{recipe}{seed}.json"
            paths[recipe, seed].write_text(json.dumps(record))
    old = tmp_path / "old_seeds.json"
    script.main([str(paths["old", 0]), str(paths["old", 1]), "--json", str(old)])
    out = tmp_path / "new_seeds.json"
    script.main([str(paths["new", 0]), str(paths["new", 1]), "--reference", f"{old}:fused=fused@old",
                 "--pair", "fused:fused@old", "--json", str(out)])
    record = json.loads(out.read_text())
    assert record["references"]["fused@old"]["model"] == "fused"
    assert record["per_set"]["B"]["fused@old"] == {"test_top1": pytest.approx(72.0), "seeds": 2,
                                                   "wall_seconds": pytest.approx(1.0)}  # (71 + 73) / 2
    assert [p["mean_difference"] for p in record["pairs_per_seed"][0]] == pytest.approx([5.0, 5.0])
    assert record["pairs"][0]["mean_difference"] == pytest.approx(5.0)
    assert "column fused@old: fused of" in out.with_suffix(".md").read_text()
    for spec, message in ((f"{old}:fused", "expects SEEDS_RECORD:MODEL=ALIAS"),
                          (f"{paths['old', 0]}:fused=x", "expected a record of benchmarks/ucr_seeds.py"),
                          (f"{old}:nothing=x", "no model 'nothing'")):
        with pytest.raises(SystemExit, match=message):
            script.main([str(paths["new", 0]), "--reference", spec, "--json", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()


def test_numba_compile_benchmark_reports_cold_and_warm_seconds(tmp_path):
    """Hydra (torch, nothing for numba to compile) through the cold / warm children: both measured, a record and
    its markdown written; an unknown classifier refused before any child runs."""
    script = _script("numba_compile")
    out = tmp_path / "nc.json"
    script.main(["--classifiers", "hydra", "--channels", "2", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [(r["classifier"], r["channels"]) for r in rows] == [("hydra", 2)]
    assert all(r["cold CPU s (compiling)"] > 0 and r["warm CPU s (cache loaded)"] > 0 for r in rows)
    assert "compilation CPU s" in out.with_suffix(".md").read_text()
    for argv, message in ((["--classifiers", "rocket"], "expected names among"),
                          (["--channels", "0"], "expected counts >= 1")):
        with pytest.raises(SystemExit, match=message):
            script.main([*argv, "--json", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()
