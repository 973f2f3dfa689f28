"""Cross-dataset pretraining pools: other sets' TRAINING series, shaped for one target set's model.

``tstrain --pretrain-on NAMES`` pretrains each target's model on the training splits of the named sets (the
target itself is always left out, so its validation and test series are never read) and then fine-tunes on
the target. The encoder is channel-independent, so every channel of every pool series is one univariate
series: its observed steps are resampled linearly to the target's length and standardised on their own
(the target's series are standardised as loaded), then grouped C at a time into (C, L) samples for a model
built for C channels.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np

from .data import load_raw, pad_series

__all__ = ["parse_pool", "pretraining_pool", "resample_observed", "training_series"]

logger = logging.getLogger(__name__)


def parse_pool(spec: str | Sequence[str] | None) -> list[str]:
    """``"GunPoint,ArrowHead"`` (or a list) -> the set names, in order, without repeats; [] for None."""
    if spec is None:
        return []
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    return list(dict.fromkeys(n.strip() for n in names if n and n.strip()))


def resample_observed(values: np.ndarray, length: int) -> np.ndarray | None:
    """The observed (non-NaN) steps of one univariate series, resampled linearly to ``length`` steps and
    standardised (mean 0, std 1; a constant series gives zeros). None when fewer than 2 steps are observed."""
    seen = values[np.isfinite(values)]
    if seen.size < 2:
        return None
    out = np.interp(np.linspace(0.0, seen.size - 1.0, length), np.arange(seen.size), seen)
    std = out.std()
    return ((out - out.mean()) / std if std > 1e-8 else np.zeros(length)).astype(np.float32)


def training_series(names: Sequence[str], length: int,
                    data_dir: str | Path | None = None) -> dict[str, list[np.ndarray]]:
    """{set: its usable univariate series}: every channel of every TRAINING series of each set (only
    ``load_raw(name, "train")`` is read), its observed steps resampled to ``length`` and standardised
    (:func:`resample_observed`)."""
    out = {}
    for name in names:
        x, _ = load_raw(name, "train", data_dir, download=False)
        padded = pad_series(x)  # (n, C, L) with NaN padding
        out[name] = [s for s in (resample_observed(v, length) for v in padded.reshape(-1, padded.shape[-1]))
                     if s is not None]
    return out


def pretraining_pool(names: Sequence[str], target: str, channels: int, length: int,
                     data_dir: str | Path | None = None, seed: int = 0) -> np.ndarray:
    """(n, ``channels``, ``length``) float32 pretraining samples from the TRAINING splits of ``names`` other
    than ``target`` (see the module docstring). Only ``load_raw(name, "train")`` is called; a name that is not
    available locally raises ``DatasetNotFoundError``."""
    others = [n for n in parse_pool(names) if n != target]
    if not others:
        raise ValueError(f"--pretrain-on names no set other than the target {target!r}; name one or more others")
    series = [s for per_set in training_series(others, length, data_dir).values() for s in per_set]
    count = len(series) // channels
    if count < 1:
        raise ValueError(f"the pretraining pool {', '.join(others)} has {len(series)} usable series, fewer than the "
                         f"{channels} channels of {target}")
    order = np.random.default_rng(seed).permutation(len(series))[:count * channels]
    pool = np.stack([series[i] for i in order]).reshape(count, channels, length)
    logger.info("pretraining pool for %s: %d series from %s -> %d samples of %d x %d", target, len(series),
                ", ".join(others), count, channels, length)
    return pool
