"""Series models in use: the data config saved with them, kept sweep models, the estimator's save/load, and
``jumbokit predict`` / ``jumbokit validate`` on series."""

import numpy as np
import pytest

import jumbokit
from jumbokit.timeseries.data import load_dataset, load_raw
from jumbokit.timeseries.data_config import prepare_series, series_data_config


def _official_test(data):
    """The sweep's validation and test halves put back in the official test split's order."""
    full = np.empty((len(data.val) + len(data.test),) + data.val.x.shape[1:], dtype=np.float32)
    full[data.val_index], full[data.test_index] = data.val.x, data.test.x
    return full


@pytest.mark.parametrize("unequal_length", ["pad", "resample", "zero"])
@pytest.mark.parametrize("normalize", ["train", "instance"])
def test_saved_series_config_prepares_raw_series_as_training_did(unequal_length, normalize):
    data = load_dataset("JapaneseVowels", unequal_length=unequal_length, normalize=normalize)
    cfg = series_data_config(data)
    assert cfg["in_chans"] == 12 and cfg["label_names"] == [str(c) for c in data.classes]
    raw_train, raw_test = load_raw("JapaneseVowels", "train")[0], load_raw("JapaneseVowels", "test")[0]
    assert np.array_equal(prepare_series(raw_train, cfg), data.train.x, equal_nan=True)
    assert np.array_equal(prepare_series(raw_test, cfg), _official_test(data), equal_nan=True)
    with pytest.raises(ValueError, match="of 12 channel"):
        prepare_series([s[:3] for s in raw_test], cfg)


def test_series_config_travels_with_the_weights(tmp_path):
    from jumbokit.timeseries.run import build_series_model

    data = load_dataset("GunPoint")
    cfg = series_data_config(data)
    assert cfg["normalize"] == "train" and len(cfg["mean"]) == 1 and cfg["seq_len"] == 150
    jumbokit.save(build_series_model("patchtst", data, 8), tmp_path, data_config=cfg)
    assert jumbokit.load(tmp_path).pretrained_cfg == cfg


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A tiny tstrain sweep on GunPoint (paper protocol): two runs of patchtst, the top-2 ensemble scored."""
    from jumbokit.recipes import tstrain

    out = tmp_path_factory.mktemp("series") / "sweep"
    assert tstrain.main(["--dataset", "GunPoint", "--model", "patchtst", "--epochs", "2", "--lr", "1e-3,3e-3",
                         "--dropout", "0.1", "--ensemble", "2", "--out", str(out), "--no-progress", "--cpu"]) == 0
    return out


def test_tstrain_keeps_the_chosen_run_and_the_ensemble(sweep):
    import json

    from jumbokit.timeseries.run import predict_proba
    from jumbokit.timeseries.store import load_proba

    folder = sweep / "models" / "GunPoint" / "patchtst"
    kept = json.loads((folder / "kept.json").read_text())
    row = next(r for r in json.loads((sweep / "results.json").read_text())["summary"] if r["model"] == "patchtst")
    assert kept["chosen"]["test_top1"] == row["test_top1"] and kept["chosen"]["val_top1"] == row["val_top1"]
    assert [m["file"] for m in kept["ensemble"]][0].startswith("ensemble/1_" + kept["chosen"]["run"])
    assert (folder / "model_config.json").is_file() and len(kept["ensemble"]) == 2
    data = load_dataset("GunPoint")
    model = jumbokit.load(folder)
    assert model.pretrained_cfg["label_names"] == ["1", "2"]
    stored = load_proba(sweep / "runs" / "GunPoint" / "patchtst" / f"{kept['chosen']['run']}.proba.safetensors")
    assert np.array_equal(predict_proba(model, data.test.x), stored["test"])
    for member in kept["ensemble"]:
        assert jumbokit.load(folder / member["file"]).pretrained_cfg == model.pretrained_cfg


def test_a_sweep_without_run_weights_resumes_and_says_so(sweep, tmp_path, caplog):
    import shutil

    from jumbokit.recipes import tstrain

    old = tmp_path / "old"
    shutil.copytree(sweep, old)
    shutil.rmtree(old / "models")
    for weights in (old / "runs").rglob("*.model.safetensors"):
        weights.unlink()
    assert tstrain.main(["--dataset", "GunPoint", "--model", "patchtst", "--epochs", "2", "--lr", "1e-3,3e-3",
                         "--dropout", "0.1", "--ensemble", "2", "--out", str(old), "--no-progress", "--cpu"]) == 0
    assert not (old / "models").exists() and not list((old / "runs").rglob("*.model.safetensors"))
    assert "no model kept" in caplog.text and "have no saved weights" in caplog.text
