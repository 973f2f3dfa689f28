"""``--unequal-length resample`` / ``zero``: shorter series stretched over the longest one's steps, or zero-padded
and read as data, instead of NaN-padded and masked."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from jumbokit.cli import tstrain_main
from jumbokit.timeseries import protocol as ts_protocol
from jumbokit.timeseries.data import lengths_of, load_dataset, pad_series, resample_to_length, zero_tails


def test_a_short_ramp_is_stretched_linearly_and_full_length_series_are_kept():
    x = pad_series([np.arange(5.0), np.arange(9.0) * 2])  # (2, 1, 9), the first NaN after 5 steps
    out = resample_to_length(x, np.array([5, 9]))
    assert out.shape == (2, 1, 9) and out.dtype == np.float32
    np.testing.assert_allclose(out[0, 0], np.linspace(0.0, 4.0, 9), atol=1e-6)
    np.testing.assert_array_equal(out[1], x[1])
    shrunk = resample_to_length(x, np.array([5, 9]), length=3)
    np.testing.assert_allclose(shrunk[:, 0], [[0.0, 2.0, 4.0], [0.0, 8.0, 16.0]], atol=1e-6)


def test_a_missing_step_inside_a_series_stays_missing_where_it_is_nearest():
    x = pad_series([np.array([0.0, 1.0, np.nan, 3.0, 4.0])], 9)
    out = resample_to_length(x, np.array([5]))[0, 0]
    nearest = np.rint(np.linspace(0.0, 4.0, 9)).astype(int)
    assert np.array_equal(np.isnan(out), nearest == 2)
    np.testing.assert_allclose(out[~np.isnan(out)], np.linspace(0.0, 4.0, 9)[nearest != 2], atol=1e-6)


def test_bad_lengths_are_refused():
    x = np.zeros((2, 1, 4), dtype=np.float32)
    for bad in (np.array([0, 4]), np.array([5, 4]), np.array([4])):
        with pytest.raises(ValueError, match=r"expected one length in 1..4 per series \(2\)"):
            resample_to_length(x, bad)
    with pytest.raises(ValueError, match="expected a target length >= 1, got 0"):
        resample_to_length(x, np.array([4, 4]), length=0)


def test_load_dataset_resamples_every_split_and_keeps_the_splits_and_equal_sets():
    padded = load_dataset("PickupGestureWiimoteZ", normalize="none")
    stretched = load_dataset("PickupGestureWiimoteZ", normalize="none", unequal_length="resample")
    length = padded.seq_len
    for a, b in zip((padded.train, padded.val, padded.test), (stretched.train, stretched.val, stretched.test)):
        assert b.x.shape == a.x.shape and not np.isnan(b.x).any()
        assert (b.lengths == length).all() and a.lengths.min() < length
        np.testing.assert_array_equal(a.y, b.y)
        first = int(np.argmin(a.lengths))  # its first and last observed steps are the ends of the stretched one
        np.testing.assert_allclose(b.x[first, :, [0, -1]], a.x[first, :, [0, a.lengths[first] - 1]], atol=1e-5)
    assert "29-361 resampled to 361" in stretched.summary()
    # to a pretrained encoder's length: the summary names the length the series now have
    assert "29-361 resampled to 64" in load_dataset("PickupGestureWiimoteZ", length=64).summary()
    assert "length 150 resampled to 64" in load_dataset("GunPoint", length=64).summary()
    gunpoint = load_dataset("GunPoint", unequal_length="resample")
    np.testing.assert_array_equal(gunpoint.train.x, load_dataset("GunPoint").train.x)
    with pytest.raises(ValueError, match="unknown unequal_length='crop'; expected one of pad, resample, zero"):
        load_dataset("GunPoint", unequal_length="crop")


def test_sweep_config_stores_resample_only_when_chosen():
    assert ts_protocol.SweepConfig().identity()["unequal_length"] == "pad"
    assert ts_protocol.SweepConfig(unequal_length="resample").identity()["unequal_length"] == "resample"
    with pytest.raises(ValueError, match="unequal_length must be one of pad, resample, zero, got 'crop'"):
        ts_protocol.SweepConfig(unequal_length="crop")


@pytest.mark.parametrize("how, said", [("resample", "shorter series resampled to the longest one's length"),
                                       ("zero", "shorter series zero-padded to the longest one's length")])
def test_tstrain_unequal_length_runs_is_recorded_and_says_so(tmp_path, capsys, how, said):
    out = tmp_path / how
    base = ["--dataset", "JapaneseVowels", "--model", "patchtst", "--epochs", "1", "--lr", "1e-3", "--dropout",
            "0.1", "--no-progress", "--cpu", "--out", str(out)]
    with pytest.raises(SystemExit):
        tstrain_main([*base, "--unequal-length", "crop"])
    assert "invalid choice: 'crop'" in capsys.readouterr().err and not out.exists()
    assert tstrain_main([*base, "--unequal-length", how]) == 0
    assert json.loads((out / "sweep.json").read_text())["unequal_length"] == how
    assert said in (out / "report.md").read_text()


def _resampled(X, length: int) -> np.ndarray:
    return resample_to_length(pad_series(X), lengths_of(X), length)


def _zero_padded(X, length: int) -> np.ndarray:
    return np.nan_to_num(pad_series(X, length))  # zeros given as data


@pytest.mark.parametrize("how, prepare, new_lengths", [("resample", _resampled, (40, 12)),
                                                       ("zero", _zero_padded, (12, 30))])
def test_estimator_handles_unequal_lengths_in_fit_and_at_prediction(how, prepare, new_lengths):
    """Fit and prediction equal a model fitted and asked on series prepared beforehand (a resampled series longer
    than in training is not warned about)."""
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    rng = np.random.default_rng(0)
    X = [rng.normal(size=(1, n)) for n in (24, 32, 20, 28) * 3]
    y = np.array([0, 1] * 6)
    settings = dict(model="patchtst_jumbo", patches=4, epochs=1, batch_size=8, random_state=0)
    clf = PatchTSTClassifier(**settings, unequal_length=how).fit(X, y)
    assert clf.seq_len_ == 32
    same = PatchTSTClassifier(**settings).fit(prepare(X, 32), y)
    new = [rng.normal(size=(1, n)) for n in new_lengths]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        proba = clf.predict_proba(new)
    np.testing.assert_allclose(proba, same.predict_proba(prepare(new, 32)), atol=1e-6)


def test_estimator_refuses_an_unknown_unequal_length():
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    X, y = np.zeros((4, 1, 16)), np.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match="unknown unequal_length='crop'; expected one of pad, resample, zero"):
        PatchTSTClassifier(patches=4, epochs=1, unequal_length="crop").fit(X, y)


def test_zero_tails_fills_only_after_each_series_end():
    first = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]])  # two channels, a missing step inside the first
    x = pad_series([first, np.arange(10.0).reshape(2, 5)])  # (2, 2, 5)
    out = zero_tails(x, np.array([3, 5]))
    np.testing.assert_array_equal(out[0], [[1.0, np.nan, 3.0, 0.0, 0.0], [4.0, 5.0, 6.0, 0.0, 0.0]])
    np.testing.assert_array_equal(out[1], x[1])
    assert np.isnan(x[0, 0, 3])  # the input is left as it was
    with pytest.raises(ValueError, match=r"expected one length in 1..5 per series \(2\)"):
        zero_tails(x, np.array([0, 5]))


def test_load_dataset_zero_pads_before_normalising_like_the_rocket_baselines():
    padded = load_dataset("PickupGestureWiimoteZ")
    zeroed = load_dataset("PickupGestureWiimoteZ", unequal_length="zero")
    raw = load_dataset("PickupGestureWiimoteZ", normalize="none", unequal_length="zero")
    short = int(np.argmin(padded.train.lengths))
    tail = raw.train.x[short, :, padded.train.lengths[short]:]
    assert tail.size and (tail == 0).all() and not np.isnan(raw.train.x).any()
    mean, std = raw.train.x.mean(axis=(0, 2)), raw.train.x.std(axis=(0, 2))  # train statistics, zeros included
    np.testing.assert_allclose(zeroed.test.x, (raw.test.x - mean[None, :, None]) / std[None, :, None], atol=1e-4)
    for a, b in zip((padded.train, padded.val, padded.test), (zeroed.train, zeroed.val, zeroed.test)):
        np.testing.assert_array_equal(a.y, b.y)
        assert (b.lengths == zeroed.seq_len).all()
    assert "29-361 zero-padded to 361" in zeroed.summary()
