"""Your own series as arrays or a table, in the folder layout tstrain reads (``--data-dir DIR --dataset NAME``).

Beside aeon's ``.ts`` and the UCR 2018 archive's ``.tsv`` files (:mod:`.ucr_tsv`), a set ``NAME`` in ``DIR`` may be:

- ``DIR/NAME/NAME_TRAIN.npz`` + ``NAME_TEST.npz``: ``np.savez(path, X=X, y=y)``, ``X`` of shape (n, L) or
  (n, C, L) (NaN = a missing step; trailing NaN = a shorter series), ``y`` (n,) labels of any kind;
- ``DIR/NAME/NAME_TRAIN_X.npy`` + ``NAME_TRAIN_y.npy`` (and the same for TEST): the two arrays apart;
- ``DIR/NAME/NAME_TRAIN.csv`` + ``NAME_TEST.csv``: a header row, one series per row; the label is the column named
  ``label``, ``target``, ``class`` or ``y`` (any case), else the first column; the other columns are the steps of
  one channel (an empty cell is missing; a row with fewer values is a shorter series, said once per file).

```python
import numpy as np
np.savez("mydata/Waves/Waves_TRAIN.npz", X=x_train, y=y_train)   # and Waves_TEST.npz
# tstrain --data-dir mydata --dataset Waves
```
"""
from __future__ import annotations

import csv
import os
import warnings
from pathlib import Path

import numpy as np

__all__ = ["ARRAY_FORMATS", "array_format", "has_array_split_files", "load_array_split", "LABEL_COLUMNS"]

ARRAY_FORMATS = ("npz", "npy", "csv")
LABEL_COLUMNS = ("label", "target", "class", "y")


def _paths(root: Path, name: str, split: str, fmt: str) -> list[Path]:
    stem = root / name / f"{name}_{split.upper()}"
    if fmt == "npy":
        return [stem.with_name(stem.name + "_X.npy"), stem.with_name(stem.name + "_y.npy")]
    return [stem.with_suffix(f".{fmt}")]


def array_format(root: str | os.PathLike | None, name: str) -> str | None:
    """The format (``npz``, ``npy`` or ``csv``) of set ``name``'s train and test files in ``root``, or None."""
    if root is None:
        return None
    root = Path(root).expanduser()
    for fmt in ARRAY_FORMATS:
        if all(p.is_file() for split in ("train", "test") for p in _paths(root, name, split, fmt)):
            return fmt
    return None


def has_array_split_files(root: str | os.PathLike | None, name: str) -> bool:
    """Whether ``root/NAME`` holds the train and test files of one of :data:`ARRAY_FORMATS`."""
    return array_format(root, name) is not None


def load_array_split(root: str | os.PathLike, name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X (n, C, L) float64, labels (n,))`` of one split ("train" | "test"); raises ``ValueError`` naming the
    file and what it expected."""
    if split not in ("train", "test"):
        raise ValueError(f"expected split 'train' or 'test', got {split!r}")
    root = Path(root).expanduser()
    fmt = array_format(root, name)
    if fmt is None:
        raise ValueError(f"{root / name} holds no {name}_TRAIN/_TEST .npz, _X/_y .npy or .csv files")
    paths = _paths(root, name, split, fmt)
    if fmt == "csv":
        x, y = _read_table(paths[0])
    else:
        x, y = _read_arrays(paths, fmt)
    return x, _label_strings(y)


def _read_arrays(paths: list[Path], fmt: str) -> tuple[np.ndarray, np.ndarray]:
    where = paths[0] if fmt == "npz" else paths[0].parent
    try:
        if fmt == "npz":
            with np.load(paths[0], allow_pickle=False) as arrays:
                names = sorted(arrays.files)
                found = {k.lower(): arrays[k] for k in names}
        else:
            names = ["X", "y"]
            found = {"x": np.load(paths[0], allow_pickle=False), "y": np.load(paths[1], allow_pickle=False)}
    except (OSError, ValueError) as err:
        raise ValueError(f"{where}: cannot read it as NumPy arrays ({' '.join(str(err).split())[:160]})") from None
    if "x" not in found or "y" not in found:
        raise ValueError(f"{where}: expected arrays named X and y (np.savez(path, X=X, y=y)), got "
                         f"{names}")
    x, y = found["x"], found["y"]
    if x.dtype.kind not in "fiub":
        raise ValueError(f"{where}: X must hold numbers, got dtype {x.dtype}")
    if x.ndim == 2:
        x = x[:, None, :]
    if x.ndim != 3:
        raise ValueError(f"{where}: X must be (n, length) or (n, channels, length), got shape {x.shape}")
    if y.ndim == 2 and 1 in y.shape:  # a column or row vector of labels
        y = y.reshape(-1)
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(f"{where}: y must hold one label per series ({len(x)}), got shape {y.shape}")
    return x.astype(np.float64), y


def _read_table(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.reader(fh) if any(f.strip() for f in r)]
    if len(rows) < 2:
        raise ValueError(f"{path}: expected a header row and one series per row, got {len(rows)} row(s)")
    header = [h.strip().lower() for h in rows[0]]
    column = next((header.index(c) for c in LABEL_COLUMNS if c in header), 0)
    labels, series = [], []
    for number, fields in enumerate(rows[1:], start=2):
        if len(fields) <= column:
            raise ValueError(f"{path}, line {number}: no label in column {column + 1} ({rows[0][column]!r})")
        labels.append(fields[column].strip())
        values = []
        for k, text in enumerate(fields):
            if k == column:
                continue
            try:
                values.append(float(text) if text.strip() else np.nan)
            except ValueError:
                raise ValueError(f"{path}, line {number}, column {k + 1}: expected a number (empty = missing), "
                                 f"got {text[:30]!r}") from None
        series.append(np.array(values))
    lengths = sorted({len(s) for s in series})
    if len(lengths) > 1:
        warnings.warn(f"{path}: rows hold {lengths[0]} to {lengths[-1]} values; shorter rows are read as shorter "
                      "series (their last steps missing)")
    x = np.full((len(series), 1, lengths[-1]), np.nan)
    for i, s in enumerate(series):
        x[i, 0, :len(s)] = s
    return x, np.array(labels)


def _label_strings(y: np.ndarray) -> np.ndarray:
    """Labels as the strings tstrain keeps (an integral number ``1.0`` as ``1``), like the ``.tsv`` reader."""
    out = []
    for v in np.asarray(y).tolist():
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        out.append(str(v))
    return np.array(out)
