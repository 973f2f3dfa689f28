"""The UCR 2018 archive's own layout: ``NAME/NAME_TRAIN.tsv`` and ``NAME/NAME_TEST.tsv``.

One series per line, tab-separated: the class label first, then the values. Unequal-length series are padded
at the end with ``NaN`` to the longest series of the file, and missing values inside a series are ``NaN`` too; a
series here ends at its last value that is not ``NaN`` (so a missing last observation counts as the end).
Labels are kept as the strings the file writes (an integral number such as ``1.0`` is written ``1``), the way
aeon keeps the labels of ``.ts`` files; :func:`jumbokit.timeseries.data.encode_labels` maps them to 0..K-1.

```python
from jumbokit.timeseries.ucr_tsv import has_tsv_split_files, load_tsv
x, y = load_tsv("~/data/UCRArchive_2018", "ECG200", "train")   # (100, 1, 96) float64, labels '-1' / '1'
```
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["has_tsv_split_files", "load_tsv", "read_ucr_tsv", "tsv_path"]


def tsv_path(root: str | os.PathLike, name: str, split: str) -> Path:
    """``root/NAME/NAME_TRAIN.tsv`` (split "train") or ``..._TEST.tsv`` ("test")."""
    if split not in ("train", "test"):
        raise ValueError(f"expected split 'train' or 'test', got {split!r}")
    return Path(root).expanduser() / name / f"{name}_{split.upper()}.tsv"


def has_tsv_split_files(root: str | os.PathLike | None, name: str) -> bool:
    """Whether ``root/NAME/NAME_TRAIN.tsv`` and ``NAME_TEST.tsv`` exist."""
    return root is not None and all(tsv_path(root, name, s).is_file() for s in ("train", "test"))


def _label(token: str) -> str:
    """The label as written, with an integral number in its integer form ("1.0" -> "1", "-1" stays "-1")."""
    try:
        value = float(token)
    except ValueError:
        return token
    return str(int(value)) if value.is_integer() else token


def _values(fields: list[str], path: Path, number: int) -> np.ndarray:
    """The float64 values of one line; an empty field is missing (NaN)."""
    try:
        return np.array(fields, dtype=np.float64)
    except ValueError:
        pass
    values = []
    for column, text in enumerate(fields, start=2):
        try:
            values.append(float(text) if text.strip() else np.nan)
        except ValueError:
            raise ValueError(f"{path}, line {number}, column {column}: expected a number or NaN, got "
                             f"{text[:30]!r}") from None
    return np.array(values, dtype=np.float64)


def read_ucr_tsv(path: str | os.PathLike) -> tuple[np.ndarray | list[np.ndarray], np.ndarray]:
    """One TSV file of the archive: an (n, 1, L) float64 array when every series has the same length, else a list
    of (1, L_i) arrays (aeon's unequal-length format), and the labels as strings (n,).

    Raises ``ValueError`` naming the file and line for a line without a label and values, or a value that is not
    a number."""
    path = Path(path)
    series, labels = [], []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) < 2 or not fields[0].strip():
                hint = " (the archive's files are tab-separated)" if "," in line else ""
                raise ValueError(f"{path}, line {number}: expected a class label and the series' values separated "
                                 f"by tabs, got {line.strip()[:60]!r}{hint}")
            values = _values(fields[1:], path, number)
            observed = np.flatnonzero(~np.isnan(values))
            if not len(observed):
                raise ValueError(f"{path}, line {number}: the series has no value (only NaN)")
            series.append(values[: observed[-1] + 1][None, :])  # trailing NaN is the archive's padding
            labels.append(_label(fields[0].strip()))
    if not series:
        raise ValueError(f"{path} holds no series (expected one line per series: label<TAB>values)")
    labels = np.asarray(labels, dtype=str)
    if len({s.shape[1] for s in series}) == 1:
        return np.stack(series), labels
    return series, labels


def load_tsv(root: str | os.PathLike, name: str, split: str) -> tuple[np.ndarray | list[np.ndarray], np.ndarray]:
    """Split ``split`` ("train" | "test") of set ``name`` under ``root`` (see :func:`read_ucr_tsv`)."""
    return read_ucr_tsv(tsv_path(root, name, split))
