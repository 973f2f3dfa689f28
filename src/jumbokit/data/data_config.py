"""The data config a saved image model carries: what its evaluation transform is and what its outputs mean.

Keys follow timm's ``pretrained_cfg``: ``input_size`` (C, H, W), ``mean``, ``std``, ``crop_pct``, ``crop_mode``,
``interpolation``, ``num_classes`` and ``label_names`` (the class names, in output order). A model loaded with
``jumbokit.load`` exposes it as ``model.pretrained_cfg``, so timm rebuilds the evaluation transform in one call:

```python
import timm.data, jumbokit
model = jumbokit.load("runs/supervised_vit_pico_jumbo_digits")
transform = timm.data.create_transform(**timm.data.resolve_model_data_config(model))
# the same tensors as jumbokit.data.eval_transform(model.pretrained_cfg), on images in the model's channel mode
```

The training recipes store the block in the saved model config (``jumbokit.save``); for runs written before
that, ``read_run_data_config`` derives it from the ``data`` record of the run's ``config.json``.

Series models carry a variant of the block, marked ``modality: "series"`` (``is_series_config``): ``in_chans``,
``seq_len``, ``unequal_length``, ``normalize`` (with the per-channel ``mean`` / ``std`` for "train"),
``num_classes`` and ``label_names``; ``jumbokit.timeseries.data_config`` writes it and prepares raw series with it.
``check_data_config`` checks either kind.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["DATA_CONFIG_KEYS", "data_config_from_record", "read_run_data_config", "check_data_config",
           "timm_crop_pct", "eval_transform", "image_mode", "SERIES_MODALITY", "SERIES_UNEQUAL_LENGTHS",
           "SERIES_NORMALIZATIONS", "is_series_config", "check_series_data_config"]

DATA_CONFIG_KEYS = ("input_size", "mean", "std", "crop_pct", "crop_mode", "interpolation", "num_classes",
                    "label_names")
SERIES_MODALITY = "series"
# shorter series: NaN-padded and masked, stretched to the longest, or zero-padded (jumbokit.timeseries.data)
SERIES_UNEQUAL_LENGTHS = ("pad", "resample", "zero")
SERIES_NORMALIZATIONS = ("train", "instance", "none")  # as applied (tstrain's "auto" resolves to one of the first two)


def timm_crop_pct(img_size: int, crop_pct: float) -> float:
    """A ``crop_pct`` with which timm's evaluation resize (``floor(img_size / crop_pct)``) and jumbokit's
    (``round(img_size / crop_pct)``) both give jumbokit's size: ``crop_pct`` itself when they agree (1.0, or
    0.875 at 224 px), else ``img_size / (size + 0.25)``."""
    size = int(round(img_size / crop_pct))
    if math.floor(img_size / crop_pct) == size:
        return float(crop_pct)
    return img_size / (size + 0.25)


def data_config_from_record(record: dict[str, Any]) -> dict[str, Any] | None:
    """The data config of a run's ``data`` record (``ImageDataset.info()``: img_size, in_chans, mean, std,
    crop_pct, interpolation, classes); None when the record lacks the size, channels or normalisation."""
    if not all(record.get(k) is not None for k in ("img_size", "in_chans", "mean", "std")):
        return None
    size, chans = int(record["img_size"]), int(record["in_chans"])
    config: dict[str, Any] = {
        "input_size": (chans, size, size),
        "mean": tuple(float(v) for v in record["mean"]),
        "std": tuple(float(v) for v in record["std"]),
        "crop_pct": timm_crop_pct(size, float(record.get("crop_pct") or 1.0)),
        "crop_mode": "center",
        "interpolation": record.get("interpolation") or "bicubic",
    }
    classes = record.get("classes")
    if classes:
        config.update(num_classes=len(classes), label_names=[str(c) for c in classes])
    elif record.get("num_classes"):
        config["num_classes"] = int(record["num_classes"])
    return check_data_config(config)


def read_run_data_config(path: str | os.PathLike) -> dict[str, Any] | None:
    """The data config derived from the ``config.json`` of the run that holds ``path`` (a run directory or its
    ``model.safetensors``); None when there is no readable run record with a ``data`` block."""
    path = Path(path)
    run_config = (path if path.is_dir() else path.parent) / "config.json"
    try:
        record = json.loads(run_config.read_text()).get("data")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return data_config_from_record(record) if isinstance(record, dict) else None


def is_series_config(config: dict[str, Any] | None) -> bool:
    """Whether a data config (``pretrained_cfg``) describes a series model."""
    return bool(config) and config.get("modality") == SERIES_MODALITY


def check_series_data_config(config: dict[str, Any]) -> dict[str, Any]:
    """A series data config after checking what preparing series needs; ``ValueError`` naming the key that is
    missing or inconsistent."""
    missing = [k for k in ("in_chans", "seq_len", "unequal_length", "normalize") if config.get(k) is None]
    if missing:
        raise ValueError(f"series data config lacks {', '.join(missing)}")
    for key, allowed in (("unequal_length", SERIES_UNEQUAL_LENGTHS), ("normalize", SERIES_NORMALIZATIONS)):
        if config[key] not in allowed:
            raise ValueError(f"series data config {key} must be one of {', '.join(allowed)}, got {config[key]!r}")
    chans = int(config["in_chans"])
    if config["normalize"] == "train":
        for key in ("mean", "std"):
            if len(config.get(key) or ()) != chans:
                raise ValueError(f"series data config {key} must hold one value per channel ({chans}), "
                                 f"got {config.get(key)!r}")
    names = config.get("label_names")
    if names is not None and config.get("num_classes") not in (None, len(names)):
        raise ValueError(f"series data config has {len(names)} label_names for num_classes {config['num_classes']}")
    return dict(config)


def check_data_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with tuples for its sequences, after checking what the transform needs; raises ``ValueError``
    naming the key that is missing or inconsistent. A series data config is checked by
    :func:`check_series_data_config`."""
    if is_series_config(config):
        return check_series_data_config(config)
    missing = [k for k in ("input_size", "mean", "std") if config.get(k) is None]
    if missing:
        raise ValueError(f"data config lacks {', '.join(missing)} (expected the keys {', '.join(DATA_CONFIG_KEYS)})")
    out = {k: tuple(v) if isinstance(v, list) and k != "label_names" else v for k, v in config.items()}
    chans = len(out["input_size"]) == 3 and out["input_size"][0]
    if chans not in (1, 3):
        raise ValueError(f"data config input_size must be (C, H, W) with C 1 or 3, got {config['input_size']}")
    for key in ("mean", "std"):
        if len(out[key]) != chans:
            raise ValueError(f"data config {key} has {len(out[key])} values for {chans} channel(s)")
    names = out.get("label_names")
    if names is not None and out.get("num_classes") not in (None, len(names)):
        raise ValueError(f"data config has {len(names)} label_names for num_classes {out['num_classes']}")
    return out


def image_mode(config: dict[str, Any]) -> str:
    """The PIL mode images are converted to before the transform: "L" for 1 channel, "RGB" for 3."""
    return "L" if config["input_size"][0] == 1 else "RGB"


def eval_transform(config: dict[str, Any]):
    """jumbokit's evaluation transform of a data config (resize to ``H / crop_pct``, center crop, normalise) for
    PIL images in ``image_mode(config)``."""
    from .transforms import build_transform

    config = check_data_config(config)
    _, height, width = config["input_size"]
    if height != width:
        raise ValueError(f"jumbokit's image models take square inputs, got input_size {config['input_size']}")
    return build_transform("eval", int(height), config["mean"], config["std"],
                           crop_pct=float(config.get("crop_pct") or 1.0),
                           interpolation=config.get("interpolation") or "bicubic")
