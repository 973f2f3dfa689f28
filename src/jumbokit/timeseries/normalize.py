"""Checks and normalisation of series arrays (n, C, L), NaN = missing or padded: per channel with training
statistics, per series on its own, or chosen from the training split's spread of scales ("auto")."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["NORMALIZATIONS", "AUTO_SCALE_SPREAD", "ChannelScaler", "check_series", "normalize_instances",
           "normalize_splits", "fit_normalizer", "as_float32", "resolve_normalization", "scale_spread"]

NORMALIZATIONS = ("train", "instance", "auto", "none")
# "auto" standardises each series on its own when the training series' scales differ by more than this factor
# (90th / 10th percentile of the per-series std, in any channel); otherwise per channel with training statistics
AUTO_SCALE_SPREAD = 100.0


def check_series(x: np.ndarray, what: str = "series") -> None:
    """Refuse series with a channel that holds no observation at all (NaN-only), or infinite values."""
    if x.shape[0] == 0:
        raise ValueError(f"{what}: expected at least one series, got none")
    if x.shape[-1] == 0:
        raise ValueError(f"{what}: expected series with at least one time step, got length 0")
    empty = np.isnan(x).all(axis=-1)  # (n, C)
    if empty.any():
        idx, chan = np.argwhere(empty)[0]
        raise ValueError(f"{what}: series {idx} has no observed value in channel {chan} (all NaN; "
                         f"{int(empty.sum())} such series/channel pairs in total); expected at least one "
                         "observation per channel: drop or impute these series")
    if np.isinf(x).any():
        idx = int(np.argwhere(np.isinf(x))[0][0])
        raise ValueError(f"{what}: series {idx} holds an infinite value; expected finite values or NaN for missing")


def normalize_instances(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """RevIN-style normalisation of each series and channel by its own observed mean and std.

    x: (n, C, L) with NaN for missing/padded steps (kept NaN). Uses no statistics of other series, so
    nothing leaks between splits, but each series' level and amplitude are lost to the model.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        mean = np.nanmean(x, axis=-1, keepdims=True)
        std = np.nanstd(x, axis=-1, keepdims=True)
    return ((x - mean) / (std + eps)).astype(np.float32)


@dataclass
class ChannelScaler:
    """Per-channel standardisation with statistics of the training split only.

    Keeps differences in level and amplitude between series (which per-instance normalisation removes,
    and which carry the class in sets such as JapaneseVowels and BasicMotions). mean, std: (1, C, 1).
    """

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray, eps: float = 1e-5) -> "ChannelScaler":
        """x: (n, C, L), NaN = missing/padded (ignored)."""
        mean = np.nanmean(x, axis=(0, 2), keepdims=True)
        std = np.nanstd(x, axis=(0, 2), keepdims=True)
        std = np.where(std > eps, std, 1.0)  # constant channels are only centred
        return cls(mean.astype(np.float64), std.astype(np.float64))

    def transform(self, x: np.ndarray) -> np.ndarray:
        """x (n, C, L) standardised with the stored statistics, as float32; ValueError for other channels."""
        if x.shape[1] != self.mean.shape[1]:
            raise ValueError(f"expected series with {self.mean.shape[1]} channel(s) (as in training), "
                             f"got {x.shape[1]}")
        return ((x - self.mean) / self.std).astype(np.float32)

    __call__ = transform


def check_normalization(how: str) -> str:
    if how not in NORMALIZATIONS:
        raise ValueError(f"unknown normalisation normalize={how!r}; expected one of {', '.join(NORMALIZATIONS)}")
    return how


def as_float32(x: np.ndarray) -> np.ndarray:
    """x as float32, values unchanged (the normalisation "none")."""
    return x.astype(np.float32)


def scale_spread(train: np.ndarray) -> float:
    """How far apart the scales of the training series are: the largest, over channels, ratio of the 90th to
    the 10th percentile of the per-series std (inf when a tenth of the series are constant). train: (n, C, L)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        std = np.nanstd(train, axis=-1)  # (n, C)
    low, high = np.nanpercentile(std, 10, axis=0), np.nanpercentile(std, 90, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(high > 0, high / low, 1.0)
    return float(np.max(ratio))


def resolve_normalization(train: np.ndarray, how: str) -> str:
    """The normalisation ``how`` stands for on this training split: ``"auto"`` is ``"instance"`` when the series'
    scales spread over more than :data:`AUTO_SCALE_SPREAD` (:func:`scale_spread`; e.g. PLAID's currents, from
    idle to tens of amperes, where one per-channel scale leaves most series near 0), else ``"train"``."""
    check_normalization(how)
    if how != "auto":
        return how
    return "instance" if scale_spread(train) > AUTO_SCALE_SPREAD else "train"


def fit_normalizer(train: np.ndarray, how: str = "train") -> Callable[[np.ndarray], np.ndarray]:
    """The normalisation ``how`` fitted on ``train`` (n, C, L), as a picklable (n', C, L') -> float32 transform:
    ``"train"`` = per-channel statistics of ``train`` (the fitted :class:`ChannelScaler` itself, whose ``mean``
    and ``std`` a saved model keeps); ``"instance"`` = each series by
    its own statistics (:func:`normalize_instances`); ``"auto"`` = one of the two (:func:`resolve_normalization`);
    ``"none"`` = as is."""
    how = resolve_normalization(train, how)
    if how == "train":
        return ChannelScaler.fit(train)
    return normalize_instances if how == "instance" else as_float32


def normalize_splits(train: np.ndarray, *others: np.ndarray, how: str = "train") -> list[np.ndarray]:
    """Normalise ``train`` and every other (n, C, L) split with :func:`fit_normalizer` fitted on ``train``."""
    transform = fit_normalizer(train, how)
    return [transform(a) for a in (train, *others)]
