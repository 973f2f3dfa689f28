"""Cross-dataset pretraining (`tstrain --pretrain-on`): the pool reads only other sets' training splits."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jumbokit.cli import tstrain_main
from jumbokit.timeseries import pool


def test_pool_reads_only_training_splits_of_other_sets(monkeypatch):
    calls = []
    real = pool.load_raw

    def recording(name, split, *args, **kwargs):
        calls.append((name, split))
        return real(name, split, *args, **kwargs)

    monkeypatch.setattr(pool, "load_raw", recording)
    samples = pool.pretraining_pool("GunPoint,ItalyPowerDemand,BasicMotions", target="GunPoint", channels=3,
                                    length=50, seed=1)
    assert calls == [("ItalyPowerDemand", "train"), ("BasicMotions", "train")]  # never the target, never val/test
    assert samples.shape == ((67 + 40 * 6) // 3, 3, 50) and samples.dtype == np.float32
    flat = samples.reshape(-1, 50)
    np.testing.assert_allclose(flat.mean(1), 0.0, atol=1e-5)
    np.testing.assert_allclose(flat.std(1), 1.0, atol=1e-4)
    again = pool.pretraining_pool("ItalyPowerDemand,BasicMotions", target="GunPoint", channels=3, length=50, seed=1)
    np.testing.assert_array_equal(samples, again)


def test_resampling_keeps_the_observed_steps_only():
    series = np.array([0.0, 1.0, 2.0, 3.0, np.nan, np.nan])
    out = pool.resample_observed(series, 7)
    expected = np.linspace(0.0, 3.0, 7)
    np.testing.assert_allclose(out, (expected - expected.mean()) / expected.std(), rtol=1e-6)
    assert pool.resample_observed(np.array([1.0, np.nan]), 5) is None
    assert not pool.resample_observed(np.ones(4), 5).any()


def test_a_pool_of_only_the_target_is_refused():
    with pytest.raises(ValueError, match="no set other than the target 'GunPoint'"):
        pool.pretraining_pool(["GunPoint"], target="GunPoint", channels=1, length=10)


def test_tstrain_pretrains_on_other_sets_then_fine_tunes(tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["--dataset", "GunPoint", "--model", "patchtst", "--epochs", "1", "--lr", "1e-3", "--dropout", "0.1",
            "--pretrain-on", "ItalyPowerDemand,GunPoint", "--pretrain-epochs", "1", "--out", str(out),
            "--no-progress", "--cpu"]
    assert tstrain_main(args) == 0
    assert json.loads((out / "sweep.json").read_text())["pretrain_on"] == "ItalyPowerDemand,GunPoint"
    run = json.loads(next((out / "runs").rglob("lr*.json")).read_text())
    assert run["extra"]["pretrained"] is True
    assert "training splits of ItalyPowerDemand, GunPoint (each target left out)" in (out / "report.md").read_text()
    capsys.readouterr()
    for extra, message in ((["--pretrain-epochs", "0"], "--pretrain-on needs --pretrain-epochs"),
                           (["--pretrain-epochs", "1", "--pretrain-on", "GunPiont"], "GunPiont not available")):
        bad = tmp_path / "bad"
        assert tstrain_main(["--dataset", "GunPoint", "--pretrain-on", "ItalyPowerDemand", *extra, "--out", str(bad),
                         "--no-progress", "--cpu"]) == 2
        assert message in capsys.readouterr().err and not bad.exists()
