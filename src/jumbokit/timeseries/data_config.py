"""The data config a saved series model carries: how raw series become its input, and what its outputs mean.

The series variant of the image models' ``pretrained_cfg`` block (``jumbokit.data.data_config``, which also checks
it: ``check_series_data_config``), stored the same way (``jumbokit.save(model, path, data_config=...)``) and exposed by ``jumbokit.load`` as ``model.pretrained_cfg``:

- ``modality``: ``"series"`` (what tells it from an image block);
- ``in_chans`` and ``seq_len``: the channels and the steps of the longest training series;
- ``unequal_length``: ``"pad"`` (NaN-padded at the end and masked), ``"resample"`` (stretched to ``seq_len``) or
  ``"zero"`` (zero-padded; see ``jumbokit.timeseries.data.load_dataset``);
- ``normalize``: ``"train"`` (per channel, with the training split's ``mean`` and ``std``, one value per channel),
  ``"instance"`` (each series by its own statistics) or ``"none"``;
- ``num_classes`` and ``label_names``: the original labels as text, in the order of the model's outputs;
- ``dataset``, ``protocol`` and ``split_seed`` where known: the set and the split a sweep scored it on.

```python
import jumbokit
from jumbokit.timeseries.data_config import prepare_series
model = jumbokit.load("sweep/models/GunPoint/patchtst_jumbo")
x = prepare_series(raw_series, model.pretrained_cfg)     # (n, C, seq_len) float32, as in training
```
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..data.data_config import SERIES_MODALITY, check_series_data_config, is_series_config

__all__ = ["SERIES_MODALITY", "is_series_config", "check_series_data_config", "series_data_config",
           "normalizer_config", "normalizer_from_config", "prepare_series"]


def series_data_config(data, normalizer=None) -> dict[str, Any]:
    """The data config of a model trained on ``data`` (:class:`~jumbokit.timeseries.data.ClassificationData`);
    ``normalizer``: the normalisation fitted on its training split (default ``data.normalizer``)."""
    described = normalizer_config(data.normalizer if normalizer is None else normalizer)
    applied = data.meta.get("normalized_as", described["normalize"])
    if applied != described["normalize"]:
        raise ValueError(f"{data.name} was normalised as {applied!r}, but its normaliser is "
                         f"{described['normalize']!r}; pass the normaliser fitted on its training split")
    config: dict[str, Any] = {
        "modality": SERIES_MODALITY, "in_chans": data.channels, "seq_len": data.seq_len,
        "unequal_length": data.meta.get("unequal_length", "pad"), **described,
        "num_classes": data.num_classes, "label_names": [str(c) for c in data.classes],
        "dataset": data.name, "protocol": data.protocol,
    }
    if data.meta.get("split_seed") is not None:
        config["split_seed"] = int(data.meta["split_seed"])
    if data.meta.get("data_dir"):  # a set read from a folder of one's own: validate finds it again
        config["data_dir"] = str(data.meta["data_dir"])
    return check_series_data_config(config)


def normalizer_config(normalizer) -> dict[str, Any]:
    """The keys that describe a fitted normalisation (:func:`~jumbokit.timeseries.normalize.fit_normalizer`):
    ``normalize`` and, for the training split's per-channel statistics, ``mean`` and ``std``."""
    from .normalize import ChannelScaler, as_float32, normalize_instances

    if isinstance(normalizer, ChannelScaler):
        return {"normalize": "train", "mean": normalizer.mean.ravel().tolist(), "std": normalizer.std.ravel().tolist()}
    if normalizer is normalize_instances:
        return {"normalize": "instance"}
    if normalizer is None or normalizer is as_float32:
        return {"normalize": "none"}
    raise ValueError(f"expected a normalisation of fit_normalizer, got {normalizer!r}")


def normalizer_from_config(config: dict[str, Any]):
    """The (n, C, L) -> float32 normalisation a data config describes (the inverse of :func:`normalizer_config`)."""
    from .normalize import ChannelScaler, as_float32, normalize_instances

    if config["normalize"] == "train":
        shape = (1, int(config["in_chans"]), 1)
        return ChannelScaler(np.asarray(config["mean"], dtype=np.float64).reshape(shape),
                             np.asarray(config["std"], dtype=np.float64).reshape(shape))
    if config["normalize"] == "instance":
        return normalize_instances
    return as_float32


def prepare_series(series: np.ndarray | Sequence[np.ndarray], config: dict[str, Any],
                   what: str = "series") -> np.ndarray:
    """Raw series as the model's input, exactly as its training data was prepared: (n, C, seq_len) float32, NaN =
    missing or padded.

    series: (n, C, L) or (n, L) array, or a list of (C, L_i) / (L_i,) arrays. Series must have the model's
    channels and (unless resampled) at most ``seq_len`` steps; ``ValueError`` naming ``what`` otherwise."""
    from .data import lengths_of, pad_series, resample_to_length, zero_tails
    from .normalize import check_series

    chans, length = int(config["in_chans"]), int(config["seq_len"])
    x = pad_series(series)
    if x.shape[1] != chans:
        raise ValueError(f"{what}: the model takes series of {chans} channel(s), got {x.shape[1]}")
    lengths = lengths_of(series) if not isinstance(series, np.ndarray) or series.dtype == object \
        else np.full(x.shape[0], x.shape[-1], dtype=np.int64)
    how = config["unequal_length"]
    if how == "resample":
        x = resample_to_length(x, lengths, length)
    else:
        if x.shape[-1] > length:
            raise ValueError(f"{what}: the model takes series of at most {length} steps (its longest training "
                             f"series; unequal_length={how!r}), got {x.shape[-1]}")
        x = pad_series(x, length)
        if how == "zero":
            x = zero_tails(x, lengths)
    check_series(x, what)
    return normalizer_from_config(config)(x)
