"""benchmarks/gpu_suite.py on the CPU at tiny sizes: every section's code that a CPU can run (all but CUDA's sync
debug mode, peak memory and Inductor on a GPU), the record on disk after every section and cell, a kill, the time
budget (cells, whole sections and each model's compile), and a source checkout without the data-set packages."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--device", "cpu", "--tiny", "--batches", "2", "--compile-batches", "2", "--compile-backend", "eager",
        "--repeats", "1", "--train-repeats", "1", "--warmup", "0", "--compile-warmup", "0"]
HEAVY = ("aeon", "sktime", "datasets", "imagecorruptions")


@pytest.fixture
def gpu_suite(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_suite

    return gpu_suite


def on_disk(out: Path) -> dict:
    return json.loads((out / "gpu_suite_cpu.json").read_text())


class FakeClock:
    """What ``Budget.now`` reads in a test: seconds that move only when the test moves them."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_tiny_cpu_run_of_the_timed_sections(gpu_suite, tmp_path, one_torch_thread):
    record = gpu_suite.main(FAST + ["--sections", "inference,mae,train,patchtst", "--out", str(tmp_path)])
    assert record["status"] == "finished"
    assert {name: s["status"] for name, s in record["sections"].items()} == dict.fromkeys(
        ["inference", "mae", "train", "patchtst"], "ok")
    metrics = record["metrics"]
    expected = [f"jumbo_d{d}_vs_reg16_{mode}_b2" for d in (128, 192) for mode in ("fp32_tf32", "bf16")]
    expected += [f"{m}_{mode}_b2_img_s" for m in ("vit_nano_jumbo", "vit_tiny_reg16", "timm_vit_tiny")
                 for mode in ("fp32_tf32", "bf16")]
    expected += ["mae_jumbo_vs_cls_bf16_b2", "mae_vit_pico_jumbo_bf16_b2_img_s", "train_jumbo_vs_reg16_bf16_b2",
                 "train_jumbo_vs_reg16_fp32_tf32_b2", "train_vit_pico_reg16_fp32_tf32_b2_img_s",
                 "patchtst_jumbo_bf16_b4_series_s", "patchtst_jumbo_nan_check_bf16_b4_series_s",
                 "vit_tiny_jumbo_best_img_s"]
    expected += [f"patchtst_{k}_{mode}_b4" for k in ("jumbo_vs_registers", "jumbo_declared_vs_nan_check")
                 for mode in ("fp32_tf32", "bf16")]
    assert all(metrics.get(key, 0) > 0 for key in expected), {k: metrics.get(k) for k in expected}
    rows = [r for s in record["sections"].values() for r in s["rows"] if r["unit"] != "ratio"]
    assert rows and all(r["rounds"] == 1 and r["calls_per_round"] >= 1 and r["spread"] >= 0 for r in rows)
    ratio = next(t for t in record["targets"] if t["metric"] == "jumbo_d192_vs_reg16_bf16_b2")
    assert ratio["threshold"] == 1.0 and ratio["max_spread"] == 0.1 and isinstance(ratio["met"], bool)
    assert any(t["threshold"] == 40_800 and t["value"] > 0 for t in record["targets"])
    saved = on_disk(tmp_path)
    assert saved["status"] == "finished" and saved["metrics"] == metrics and saved["stamp"]["argv"]
    assert saved["sections"]["patchtst"]["seconds"] > 0
    assert "jumbo_d192_vs_reg16_bf16_b2" in (tmp_path / "gpu_suite_cpu.md").read_text()


def test_sync_checks_and_compile_with_a_per_model_budget(gpu_suite, tmp_path, monkeypatch, one_torch_thread):
    """The sync section records host reads on a CPU (the undeclared PatchTST step's NaN check is the one expected);
    the compile section checks the budget before each model's compile: with room for one compile, the D=192 cell
    compiles and times vit_tiny_jumbo and skips the rest of its models (no ratio), and the D=128 cell is skipped."""
    clock = FakeClock()
    monkeypatch.setattr(gpu_suite.Budget, "now", staticmethod(clock))
    real_compile = gpu_suite.compile_model

    def compile_taking_70s(model, call, args):
        clock.t += 70.0
        return real_compile(model, call, args)

    monkeypatch.setattr(gpu_suite, "compile_model", compile_taking_70s)
    assert gpu_suite.COMPILE_SECONDS_PER_MODEL == 75
    record = gpu_suite.main(FAST + ["--sections", "sync,compile", "--sync-batch", "1", "--time-budget", "140",
                                    "--out", str(tmp_path)])

    sync = record["sections"]["sync"]
    assert sync["status"] == "ok" and len(sync["checks"]) == 8
    expected = [c for c in sync["checks"] if c["sync_expected"]]
    assert [c["check"] for c in expected] == ["train step patchtst_jumbo fp32 (per-batch NaN check)"]
    assert not expected[0]["ok"] and "_local_scalar_dense" in expected[0]["error"]
    assert all(c["ok"] and c["method"] == "host reads recorded on the CPU" for c in sync["checks"]
               if not c["sync_expected"])
    assert record["host_sync"]["train step patchtst_jumbo fp32 (NaN-free declared, as tstrain)"] is True

    comp = record["sections"]["compile"]
    assert comp["status"] == "partial: time budget" and not comp["errors"]
    assert [r["model"] for r in comp["rows"]] == ["vit_tiny_jumbo"]
    assert comp["skipped"] == [f"D={d} bf16_compile batch 2 {m} (compile): skipped: time budget" for d, m in
                               [(192, "vit_tiny_reg16"), (192, "timm_vit_tiny"), (128, "vit_nano_jumbo"),
                                (128, "vit_nano_reg16")]]
    assert record["metrics"]["vit_tiny_jumbo_bf16_compile_b2_compile_s"] > 0
    assert record["metrics"]["vit_tiny_jumbo_bf16_compile_b2_img_s"] > 0
    assert "jumbo_d192_vs_reg16_bf16_compile_b2" not in record["metrics"]
    # the best ViT-Tiny+Jumbo rate (the 40,800 img/s target) counts the compiled cell
    assert record["vit_tiny_jumbo_best"]["metric"] == "vit_tiny_jumbo_bf16_compile_b2_img_s"
    assert on_disk(tmp_path)["sections"]["compile"]["skipped"] == comp["skipped"]
    assert "timm_vit_tiny (compile): skipped: time budget" in (tmp_path / "gpu_suite_cpu.md").read_text()
    assert clock.t == 1070.0  # one compile happened


def test_budget_ending_mid_section_skips_its_remaining_cells_and_the_later_sections(gpu_suite, tmp_path,
                                                                                     monkeypatch, one_torch_thread):
    clock = FakeClock()
    monkeypatch.setattr(gpu_suite.Budget, "now", staticmethod(clock))
    real_cell = gpu_suite.patchtst_cell

    def cell_then_time_is_up(section, args, mode):
        real_cell(section, args, mode)
        clock.t += 500.0

    monkeypatch.setattr(gpu_suite, "patchtst_cell", cell_then_time_is_up)
    record = gpu_suite.main(FAST + ["--sections", "patchtst,sync,compile", "--time-budget", "480",
                                    "--out", str(tmp_path)])
    patchtst = record["sections"]["patchtst"]
    assert patchtst["status"] == "partial: time budget"
    assert patchtst["skipped"] == ["patchtst_jumbo vs patchtst_registers bf16: skipped: time budget"]
    assert record["metrics"]["patchtst_jumbo_vs_registers_fp32_tf32_b4"] > 0
    assert "patchtst_jumbo_vs_registers_bf16_b4" not in record["metrics"]
    assert record["sections"]["sync"] == record["sections"]["compile"] == {"status": "skipped: time budget"}
    assert on_disk(tmp_path)["sections"] == record["sections"]


def test_record_on_disk_holds_finished_sections_when_the_run_is_killed(gpu_suite, tmp_path, monkeypatch,
                                                                      one_torch_thread):
    """What is on disk at the moment of a kill (no handler runs on SIGKILL) already holds every finished section;
    a failing section is recorded and the run goes on; Ctrl-C or SIGTERM also marks where the run stopped."""
    seen = {}

    def failing_section(section, args):
        section.cell("a cell that works", lambda: section.metric("first_cell", 1.0))
        raise RuntimeError("the section broke")

    def killed_section(section, args):
        section.cell("a cell that works", lambda: section.metric("sync_cell", 2.0))
        seen.update(on_disk(tmp_path))  # the file as a kill here would leave it
        raise KeyboardInterrupt

    monkeypatch.setitem(gpu_suite.RUNNERS, "train", failing_section)
    monkeypatch.setitem(gpu_suite.RUNNERS, "sync", killed_section)
    with pytest.raises(KeyboardInterrupt):
        gpu_suite.main(FAST + ["--sections", "train,patchtst,sync,compile", "--out", str(tmp_path)])

    assert seen["status"] == "running"
    assert seen["sections"]["train"]["status"] == "error"  # no row measured before it broke
    assert seen["sections"]["train"]["errors"][0]["error"] == "RuntimeError: the section broke"
    assert seen["sections"]["patchtst"]["status"] == "ok"
    assert seen["metrics"]["patchtst_jumbo_vs_registers_bf16_b4"] > 0 and seen["metrics"]["first_cell"] == 1.0
    assert seen["sections"]["sync"]["status"] == "running" and seen["metrics"]["sync_cell"] == 2.0
    assert "compile" not in seen["sections"]
    assert any(t["metric"] == "patchtst_jumbo_vs_registers_bf16_b4" for t in seen["targets"])
    final = on_disk(tmp_path)
    assert final["status"] == "interrupted: KeyboardInterrupt"
    assert final["sections"]["sync"]["status"] == "interrupted: KeyboardInterrupt"
    assert final["sections"]["patchtst"] == seen["sections"]["patchtst"]


def test_rounds_are_lengthened_to_the_seconds_asked(monkeypatch):
    """Calls per round: enough for the fastest call to fill ``seconds`` (8 x 0.125 s = 1 s), within its bounds."""
    from jumbokit.benchmarking import timing

    now = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])

    def costing(seconds):
        def call():
            now[0] += seconds
        return call

    calls = {"fast": costing(0.125), "slow": costing(0.5)}
    assert timing.calls_per_round(calls, 1.0) == 8
    assert timing.calls_per_round(calls, 1.0, minimum=20) == 20
    assert timing.calls_per_round(calls, 0.0, minimum=3) == 3
    assert timing.calls_per_round(calls, 1000.0, maximum=100) == 100


def test_help_names_the_output_folder_and_the_source_checkout_way(gpu_suite, capsys):
    with pytest.raises(SystemExit):
        gpu_suite.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())  # as wrapped at any terminal width
    assert "--out OUT" in text and "(default: benchmarks/results; on a remote GPU machine, the folder" in text
    assert "PYTHONPATH=src python3 benchmarks/gpu_suite.py --device cuda --out OUT_DIR" in text
    assert "--compile-batches" in text and "(default: 1024; --tiny: 4)" in text
    assert "--min-round-s" in text and "(default: 0.2;" in text


def blocked_run(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``code`` from the source checkout (PYTHONPATH=src, as on a GPU machine with its own torch) with the data-set
    packages made unimportable, as they are there."""
    blocker = ("import sys, importlib.abc\n"
               "class Block(importlib.abc.MetaPathFinder):\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               f"        if name.split('.')[0] in {HEAVY!r}:\n"
               "            raise ImportError(f'{name} is not installed here')\n"
               "sys.meta_path.insert(0, Block())\n"
               "sys.path.insert(0, 'benchmarks')\n")
    env = {**os.environ, "PYTHONPATH": "src", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", blocker + code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_suite_and_its_library_import_nothing_of_the_data_set_packages():
    code = ("import gpu_suite, throughput, mae, timeseries, jumbokit\n"
            "from jumbokit.benchmarking import steps, hostsync\n"
            f"print([m for m in {HEAVY!r} if m in sys.modules], jumbokit.__file__)\n")
    proc = blocked_run(code, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded, where = proc.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert loaded == "[]" and Path(where).resolve().is_relative_to(ROOT / "src")


@pytest.mark.slow
def test_full_tiny_run_from_a_source_checkout_without_the_data_set_packages(tmp_path):
    """Every section, with Inductor compiling on the CPU, in a fresh process that cannot import the data-set
    packages (minutes: Inductor's first compile)."""
    code = (f"import gpu_suite\nr = gpu_suite.main(['--device', 'cpu', '--tiny', '--threads', '1', '--time-budget', "
            f"'3000', '--out', {str(tmp_path)!r}])\n"
            "print({k: s['status'] for k, s in r['sections'].items()}, "
            f"[m for m in {HEAVY!r} if m in sys.modules])\n")
    proc = blocked_run(code, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == (
        "{'inference': 'ok', 'mae': 'ok', 'train': 'ok', 'patchtst': 'ok', 'sync': 'ok', 'compile': 'ok'} []"), \
        proc.stdout[-4000:]
    record = on_disk(tmp_path)
    assert record["metrics"]["vit_tiny_jumbo_bf16_compile_b4_img_s"] > 0
    assert record["metrics"]["vit_tiny_jumbo_bf16_compile_b4_compile_s"] > 0


@pytest.mark.multiprocess
def test_sigterm_mid_run_leaves_the_finished_sections_on_disk(tmp_path):
    """``timeout``'s SIGTERM during a section: the process writes where it stopped; the sections before stay."""
    env = {**os.environ, "PYTHONPATH": "src", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "benchmarks/gpu_suite.py", *FAST, "--sections", "patchtst,train,sync",
                             "--out", str(tmp_path)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    path = tmp_path / "gpu_suite_cpu.json"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if json.loads(path.read_text())["sections"].get("patchtst", {}).get("status") == "ok":  # then sync
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=120)[0]
    record = json.loads(path.read_text())
    assert proc.returncode != 0, output[-2000:]
    assert record["status"] == "interrupted: SIGTERM", output[-2000:]
    assert record["sections"]["train"]["status"] == record["sections"]["patchtst"]["status"] == "ok"
    assert record["sections"]["sync"]["status"] == "interrupted: SIGTERM"
    assert record["metrics"]["train_jumbo_vs_reg16_bf16_b2"] > 0
