"""``--jumbo-multiplier J``: J of the Jumbo models, with the registers model FLOP-matched to the same J."""

from __future__ import annotations

import json

import numpy as np
import pytest

import jumbokit
from jumbokit.encoders.flops import matching_registers, prop1_layer_macs
from jumbokit.cli import tstrain_main
from jumbokit.timeseries import protocol as ts_protocol
from jumbokit.timeseries.run import global_token_options


def _series_model(name: str, **kw):
    return jumbokit.create_model(name, num_classes=3, in_chans=1, seq_len=150, patches=16, **kw)


@pytest.mark.parametrize("j", [1, 2, 6])
def test_registers_are_matched_to_the_jumbo_models_multiplier(j):
    """The registers model given J gets Proposition 1's R for that J (its layer costs within one register of the
    Jumbo layer's), the Jumbo model a J*D token; the default stays J=4 and R=10 at 16 patches."""
    jumbo, registers = _series_model("patchtst_jumbo", jumbo_multiplier=j), _series_model(
        "patchtst_registers", jumbo_multiplier=j)
    dim, patches = jumbo.embed_dim, 16
    assert jumbo.num_global_tokens == j and jumbo.config["jumbo_multiplier"] == j
    r = registers.config["num_registers"]
    assert r == max(1, round(matching_registers(dim, patches, j))) and registers.config["jumbo_multiplier"] == 0
    one_register = prop1_layer_macs(dim, patches, registers=r + 1) - prop1_layer_macs(dim, patches, registers=r)
    gap = abs(prop1_layer_macs(dim, patches, registers=r) - prop1_layer_macs(dim, patches, jumbo_multiplier=j))
    assert gap <= one_register
    assert _series_model("patchtst_registers").config["num_registers"] == 10
    assert _series_model("patchtst_registers", jumbo_multiplier=8, num_registers=5).config["num_registers"] == 5
    with pytest.raises(ValueError, match="the J the registers are matched to.*integer >= 1, got 0"):
        _series_model("patchtst_registers", jumbo_multiplier=0)


def test_sweep_config_passes_j_only_where_it_differs_and_stores_it():
    cfg = ts_protocol.SweepConfig(jumbo_multiplier=2)
    assert global_token_options("patchtst_jumbo", cfg) == {"jumbo_multiplier": 2}
    assert global_token_options("patchtst_jumbo_rocket", cfg) == {"jumbo_multiplier": 2}
    assert global_token_options("patchtst_registers", cfg) == {"jumbo_multiplier": 2}
    assert global_token_options("patchtst", cfg) == {} and global_token_options("series_cnn", cfg) == {}
    assert global_token_options("patchtst_jumbo", ts_protocol.SweepConfig()) == {}
    assert cfg.identity()["jumbo_multiplier"] == 2 and ts_protocol.SweepConfig().identity()["jumbo_multiplier"] == 4
    for bad in (0, 2.5):
        with pytest.raises(ValueError, match=rf"jumbo_multiplier must be an integer >= 1, got {bad}"):
            ts_protocol.SweepConfig(jumbo_multiplier=bad)


def test_tstrain_jumbo_multiplier_runs_and_is_refused_without_a_model_it_sets(tmp_path, capsys):
    out = tmp_path / "j2"
    base = ["--dataset", "ItalyPowerDemand", "--epochs", "1", "--lr", "1e-3", "--dropout", "0.1", "--no-progress",
            "--cpu"]
    assert tstrain_main([*base, "--model", "patchtst", "--jumbo-multiplier", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--jumbo-multiplier sets J of the Jumbo models" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    with pytest.raises(SystemExit):
        tstrain_main([*base, "--jumbo-multiplier", "0", "--out", str(out)])
    assert "--jumbo-multiplier: expected a positive integer, got 0" in capsys.readouterr().err
    assert tstrain_main([*base, "--model", "patchtst_jumbo", "--jumbo-multiplier", "2", "--out", str(out)]) == 0
    assert json.loads((out / "sweep.json").read_text())["jumbo_multiplier"] == 2
    assert "Jumbo J=2 (registers matched to it)" in (out / "report.md").read_text()


def test_estimator_builds_the_jumbo_token_of_its_multiplier():
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(12, 1, 32)), np.array([0, 1] * 6)
    clf = PatchTSTClassifier(model="patchtst_jumbo", patches=4, epochs=1, batch_size=8, random_state=0,
                             jumbo_multiplier=2).fit(X, y)
    assert clf.network_.num_global_tokens == 2
