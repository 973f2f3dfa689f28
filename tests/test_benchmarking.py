"""jumbokit.benchmarking: the timer, the machine record, result files and the rank statistics (checked against
aeon's own implementation of the same tests)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from jumbokit.benchmarking import machine_record, result_path, results_folder, time_interleaved, write_result
from jumbokit.benchmarking import records, stats
from jumbokit.benchmarking.records import STAMP_KEYS, is_legacy
from jumbokit.timeseries.results import rank_values


def test_time_interleaved_warms_up_then_alternates_the_order_of_each_round():
    calls = []
    timings = time_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3,
                               iters=2, warmup=1, alternate=True)
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] + ["b", "b", "a", "a"] + ["a", "a", "b", "b"]
    assert set(timings) == {"a", "b"} and len(timings["a"].rounds) == 3
    summary = timings["a"].summary()
    assert summary["rounds"] == 3 and summary["fastest_s"] <= summary["median_s"]
    with pytest.raises(ValueError, match="expected repeats >= 1"):
        time_interleaved({"a": lambda: None}, repeats=0)


def test_machine_record_has_one_shape():
    record = machine_record(threads=3, device="H100 (fp32)")
    assert set(record) == {"cpu", "cpu_model", "cpu_kernels", "cores", "threads", "python", "torch", "device", "date"}
    assert record["cpu_kernels"] == torch.backends.cpu.get_cpu_capability() and record["cpu_kernels"]
    assert record["threads"] == 3 and record["device"] == "H100 (fp32)"
    assert machine_record(device="cpu")["device"] == "cpu"


def test_write_result_writes_the_stamped_json_and_its_markdown_copy(tmp_path):
    record = {"rows": [1.5], "seeds": [0, 1, 2]}
    path = write_result(tmp_path / "x" / "bench_variant.json", record, "# table", quiet=True)
    written = json.loads(path.read_text())
    assert record == {"rows": [1.5], "seeds": [0, 1, 2]}  # the caller's dict is left alone
    assert written["rows"] == [1.5] and not is_legacy(written) and set(STAMP_KEYS) <= set(written["stamp"])
    stamp = written["stamp"]
    assert stamp["seeds"] == [0, 1, 2] and stamp["wall_s"] >= 0 and stamp["started"] <= stamp["finished"]
    assert stamp["cpu_s"]["total"] == pytest.approx(stamp["cpu_s"]["self"] + stamp["cpu_s"]["children"], abs=0.02)
    assert stamp["cpu_s"]["self"] > 0 and stamp["peak_rss_mib"]["self"] > 10
    assert stamp["argv"] == records.portable_argv(sys.orig_argv, records._checkout_root())
    assert stamp["command"].startswith("python ") and str(Path.cwd()) not in path.read_text()  # no local paths
    assert records.portable_argv(["/usr/bin/python3", str(Path.cwd() / "b.py"), "/elsewhere/x"]) == [
        "python3", "b.py", "/elsewhere/x"]
    assert set(stamp["machine"]) == {"cpu", "cpu_model", "cpu_kernels", "cores", "threads", "python", "torch", "device",
                                     "date"}
    commit, dirty = records.git_state()
    assert stamp["commit"] == commit and stamp["dirty"] == dirty
    if commit is not None:  # run from a checkout
        assert len(commit) == 40 and isinstance(dirty, bool)
    markdown = path.with_suffix(".md").read_text()
    assert markdown.startswith("# table\n\nRecorded: `") and "seeds 0, 1, 2" in markdown
    assert result_path("benchmarks/results", "deploy", "h100").as_posix() == "benchmarks/results/deploy_h100.json"
    assert result_path(tmp_path, "deploy") == tmp_path / "deploy.json"
    assert results_folder("benchmarks/deploy.py").as_posix() == "benchmarks/results"  # beside the script, relative
    with pytest.raises(ValueError, match="ending in .json"):
        write_result(tmp_path / "x.md", {}, "")


def test_stamp_counts_child_processes_and_finds_seeds(monkeypatch):
    import subprocess

    before = records.run_stamp({})["cpu_s"]["children"]
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    after = records.run_stamp({})
    assert after["cpu_s"]["children"] > before and after["peak_rss_mib"]["children"] > 1
    assert records.run_stamp({"seed": 4})["seeds"] == [4]
    assert records.run_stamp({"run_seeds": [3, 4, 5]})["seeds"] == [3, 4, 5]
    assert records.run_stamp({}, seeds=[7])["seeds"] == [7]
    monkeypatch.setattr(sys, "orig_argv", ["/usr/bin/python3.11", "bench.py", "--seeds", "0", "1", "--cpu"])
    stamp = records.run_stamp({})
    assert stamp["seeds"] == [0, 1] and stamp["command"] == "python bench.py --seeds 0 1 --cpu"
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "x", "--seed=3"])
    assert records.run_stamp({})["seeds"] == [3]
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "x"])
    assert records.run_stamp({})["seeds"] is None
    assert is_legacy({"rows": []}) and is_legacy({"stamp": {"command": "x"}})


def test_paired_test_against_a_target():
    jumbo, registers = [74.54, 74.52, 76.63], [73.95, 73.61, 73.87]
    result = stats.paired_test(jumbo, registers, target=1.0)
    assert result.mean == pytest.approx(1.42) and result.sd == pytest.approx(1.1715, abs=1e-4)
    assert not result.met and result.verdict == "inside the noise (p 0.30)"
    from scipy.stats import ttest_rel

    shifted = ttest_rel(np.array(jumbo) - 1.0, registers, alternative="greater").pvalue
    assert result.p == pytest.approx(shifted, rel=1e-9)
    assert result.low < 1.0 < result.high  # the 95% interval straddles the target
    clear = stats.paired_test([6.0, 6.4, 5.8], target=0.0)
    assert clear.met and clear.verdict == "met (p < 0.001)" and clear.low > 0
    short = stats.paired_test([0.1, -0.3, 0.2], target=1.0)
    assert not short.met and short.verdict.startswith("missed")
    under = stats.paired_test([0.60, 0.61, 0.59, 0.60], target=0.63, greater=False)  # a ratio that must stay under
    assert under.met and under.high < 0.63
    assert stats.paired_test([0.0, 0.0, 0.0], target=-1.0).verdict == "untestable (no spread over 3 pairs)"
    assert stats.paired_test([2.0], target=1.0).verdict == "untestable (1 pair)"
    assert result.summary() == "+1.42 ± 1.17 (95% CI -1.49 to +4.33, n 3)"
    with pytest.raises(ValueError, match="paired"):
        stats.paired_test([1, 2, 3], [1, 2])
    assert stats.format_p(0.0004) == "p < 0.001" and stats.format_p(0.031) == "p 0.031"


def test_ranks_and_tests_agree_with_aeon():
    from aeon.benchmarking.stats import check_friedman, nemenyi_test

    rng = np.random.default_rng(0)
    scores = rng.random((12, 4))
    ranks = np.array([rank_values(row) for row in scores])
    chi2, p = stats.friedman(ranks)
    assert p == pytest.approx(check_friedman(ranks), rel=1e-9) and chi2 > 0
    assert stats.friedman(ranks[:, :2]) is None
    cd = stats.nemenyi_cd(4, 12)
    mean_ranks = np.sort(ranks.mean(axis=0))
    cliques = nemenyi_test(mean_ranks, 12, 0.05)  # aeon: pairs closer than its (3-digit) critical difference
    gaps = mean_ranks[None, :] - mean_ranks[:, None]
    assert np.array_equal(cliques, (gaps >= 0) & (gaps < cd))
    assert cd == pytest.approx(2.569 * np.sqrt(4 * 5 / (6 * 12)), abs=1e-3)  # q_0.05 for 4 models: 2.569


def test_sign_test_and_draws_needed():
    ahead, behind, p = stats.sign_test(np.array([1, 1, 1, 1, 1, 2]), np.array([2, 2, 2, 2, 2, 2]))
    assert (ahead, behind, round(p, 4)) == (5, 0, 0.0625)
    assert stats.draws_needed(3, 3, 6) is None
    assert stats.draws_needed(6, 0, 6) == 4


def test_a_script_run_from_another_checkout_is_stamped_with_that_checkout(tmp_path):
    """python /elsewhere/bench.py run from this checkout (a worktree of another commit, say): the stamp names the
    commit of the checkout holding the script, the code that ran, and the script's path inside it, no machine path."""
    import shutil
    import subprocess

    if shutil.which("git") is None or records.git_state()[0] is None:
        pytest.skip("needs git and a checkout to run from")
    other = tmp_path / "other"
    (other / "benchmarks").mkdir(parents=True)
    script = other / "benchmarks" / "bench.py"
    script.write_text("import sys\nfrom jumbokit.benchmarking import write_result\n"
                      "write_result(sys.argv[1], {'seed': 0}, '# x', quiet=True)\n")
    git = ["git", "-C", str(other), "-c", "user.email=a@b", "-c", "user.name=a"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "bench"]):
        subprocess.run([*git, *args], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    out = tmp_path / "r.json"
    here = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, str(script), str(out)], cwd=here, check=True)
    stamp = json.loads(out.read_text())["stamp"]
    assert stamp["commit"] == head and stamp["dirty"] is False
    assert stamp["argv"][1] == "benchmarks/bench.py" and stamp["command"].startswith("python benchmarks/bench.py ")
