"""jumbokit.benchmarking: the timer, the machine record, result files and the rank statistics (checked against
aeon's own implementation of the same tests)."""

import json

import numpy as np
import pytest

from jumbokit.benchmarking import machine_record, result_path, time_interleaved, write_result
from jumbokit.benchmarking import stats
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
    assert set(record) == {"cpu", "cores", "threads", "python", "torch", "device", "date"}
    assert record["threads"] == 3 and record["device"] == "H100 (fp32)"
    assert machine_record(device="cpu")["device"] == "cpu"


def test_write_result_writes_the_json_and_its_markdown_copy(tmp_path):
    path = write_result(tmp_path / "x" / "bench_variant.json", {"rows": [1.5]}, "# table", quiet=True)
    assert json.loads(path.read_text()) == {"rows": [1.5]}
    assert path.with_suffix(".md").read_text() == "# table\n"
    assert result_path("deploy", "h100").as_posix() == "benchmarks/results/deploy_h100.json"
    with pytest.raises(ValueError, match="ending in .json"):
        write_result(tmp_path / "x.md", {}, "")


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
