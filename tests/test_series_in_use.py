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
