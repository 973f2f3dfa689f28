"""A trained model in use: the data config saved with the weights (timm's ``pretrained_cfg``), ``jumbokit
validate`` and ``jumbokit predict`` on a supervised digits run, and their one-line refusals."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import jumbokit
from jumbokit.data import build_transform
from jumbokit.data.data_config import data_config_from_record, eval_transform, read_run_data_config
from jumbokit.encoders.zoo import load_config, load_data_config

torch.set_num_threads(1)

RECORD = dict(img_size=16, in_chans=1, mean=[0.3], std=[0.35], crop_pct=1.0, interpolation="bicubic",
              classes=[str(i) for i in range(10)])


def tiny_model(in_chans: int = 1, img_size: int = 16) -> torch.nn.Module:
    return jumbokit.create_model("vit_pico_cls", img_size=img_size, patch_size=4, in_chans=in_chans, num_classes=10)


def noise_image(mode: str, size: tuple[int, int] = (24, 20), seed: int = 0) -> Image.Image:
    shape = (size[1], size[0]) + ((3,) if mode == "RGB" else ())
    return Image.fromarray(np.random.RandomState(seed).randint(0, 256, shape, dtype=np.uint8), mode)


# ------------------------------------------------------------------------------------------------ data config
def test_data_config_round_trip_and_timm_transform(tmp_path):
    import timm.data

    model = tiny_model()
    model.pretrained_cfg = data_config_from_record(RECORD)
    jumbokit.save(model, tmp_path / "run")
    assert "pretrained_cfg" not in load_config(tmp_path / "run")  # the model options alone rebuild the model
    assert load_data_config(tmp_path / "run")["label_names"] == RECORD["classes"]
    loaded = jumbokit.load(tmp_path / "run")
    cfg = loaded.pretrained_cfg
    assert cfg["input_size"] == (1, 16, 16) and cfg["mean"] == (0.3,) and cfg["num_classes"] == 10
    timm_transform = timm.data.create_transform(**timm.data.resolve_model_data_config(loaded))
    ours = build_transform("eval", 16, RECORD["mean"], RECORD["std"], crop_pct=1.0)
    img = noise_image("L")
    assert torch.equal(timm_transform(img), ours(img))
    lone = jumbokit.load(tmp_path / "run" / "model.safetensors")  # the metadata carries the block too
    assert lone.pretrained_cfg == cfg
    for key, value in loaded.state_dict().items():
        assert torch.equal(value, model.state_dict()[key])


@pytest.mark.parametrize("img_size,crop_pct", [(32, 0.9), (32, 0.875), (224, 0.875), (28, 1.0)])
def test_timm_reproduces_the_eval_crop_exactly(tmp_path, img_size, crop_pct):
    """timm resizes to floor(size / crop_pct), jumbokit to round(...): the stored crop_pct gives both the same."""
    import timm.data

    record = dict(RECORD, img_size=img_size, in_chans=3, mean=[0.5, 0.4, 0.3], std=[0.2, 0.25, 0.3],
                  crop_pct=crop_pct)
    model = tiny_model(in_chans=3, img_size=img_size)
    jumbokit.save(model, tmp_path, data_config=data_config_from_record(record))
    loaded = jumbokit.load(tmp_path)
    timm_transform = timm.data.create_transform(**timm.data.resolve_model_data_config(loaded))
    ours = build_transform("eval", img_size, record["mean"], record["std"], crop_pct=crop_pct)
    img = noise_image("RGB", size=(img_size + 13, img_size + 7))
    expected = ours(img)
    assert torch.equal(timm_transform(img), expected)
    assert torch.equal(eval_transform(loaded.pretrained_cfg)(img), expected)


def test_run_saved_before_data_configs_still_loads(tmp_path):
    """No block in the model config: derived from the run's config.json; no run record either: none."""
    run = tmp_path / "old"
    jumbokit.save(tiny_model(), run)
    assert load_data_config(run) is None
    assert not hasattr(jumbokit.load(run), "pretrained_cfg")
    (run / "config.json").write_text(json.dumps({"recipe": "supervised", "data": {**RECORD, "dataset": "digits"}}))
    model = jumbokit.load(run)
    assert model.pretrained_cfg == read_run_data_config(run) == data_config_from_record(RECORD)
    assert model.pretrained_cfg["label_names"] == RECORD["classes"]


def test_bad_data_config_is_named():
    with pytest.raises(ValueError, match="1 values for 3 channel"):
        data_config_from_record(dict(RECORD, in_chans=3))
    assert data_config_from_record({"img_size": 16}) is None
