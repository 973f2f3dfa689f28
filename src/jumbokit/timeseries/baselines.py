"""aeon's convolution-based classifiers (MiniRocket, MultiRocket, Hydra, MultiRocket-Hydra) on the sweep's splits, in
bounded memory; their ridge scores on the validation and test halves are kept for late fusion (:mod:`.fusion`)."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from .data import ClassificationData, load_raw, pad_series

__all__ = ["BASELINES", "ROCKET_CLASSIFIERS", "fit_rocket", "missing_inside", "parse_baselines", "rocket_baseline",
           "rocket_series", "use_numba_workqueue"]

ROCKET_CLASSIFIERS = ("minirocket", "multirocket", "hydra")  # aeon's three single-transform classifiers
BASELINES = (*ROCKET_CLASSIFIERS, "multirocket_hydra")  # every baseline tstrain runs (aeon's convolution-based ones)


def parse_baselines(spec: str | Sequence[str] | None) -> list[str]:
    """``"minirocket,multirocket,hydra"`` (or a list) -> known baseline names, in the given order."""
    if spec is None:
        return []
    names = [v.strip() for v in spec.split(",")] if isinstance(spec, str) else [str(v).strip() for v in spec]
    names = list(dict.fromkeys(n.lower() for n in names if n.strip()))
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline(s) {', '.join(map(repr, unknown))}; expected one or more of "
                         f"{', '.join(BASELINES)}, comma-separated")
    return names


def use_numba_workqueue() -> None:
    """Run numba's parallel code on its ``workqueue`` threads unless the user chose a layer
    (``NUMBA_THREADING_LAYER`` or ``numba.config.THREADING_LAYER``), so that no OpenMP worker threads compete
    with torch later in the same process. Takes effect only before numba's first parallel call."""
    import numba

    if "NUMBA_THREADING_LAYER" not in os.environ and numba.config.THREADING_LAYER == "default":
        numba.config.THREADING_LAYER = "workqueue"


def _rocket(name: str, seed: int, n_jobs: int):
    """aeon's classifier ``name`` (default settings, ``random_state=seed``) in bounded memory: its transformer in
    chunks into float32 features and the same ridge fit without float64 copies (:mod:`.rocket_classifiers`)."""
    use_numba_workqueue()
    from .rocket_classifiers import RocketClassifier

    return RocketClassifier(name, random_state=seed, n_jobs=n_jobs)


_WARMED: set[tuple[str, bool, int]] = set()


def _warm_up(name: str, chans: int, n_jobs: int) -> None:
    """Fit once on a tiny random set so that numba's compilation (once per process) is not timed."""
    key = (name, chans > 1, n_jobs)
    if key in _WARMED:
        return
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, chans, 64))
    y = np.array(["a", "b"] * 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _rocket(name, 0, n_jobs).fit(x, y).predict(x)
    _WARMED.add(key)


def _lengths_inside(x: np.ndarray) -> np.ndarray:
    """(n, C, L) bool: steps before each series' end (its last observation in any channel)."""
    observed = ~np.isnan(x).all(axis=1)  # (n, L)
    last = np.where(observed.any(1), x.shape[-1] - np.argmax(observed[:, ::-1], axis=1), 0)
    inside = np.arange(x.shape[-1])[None, :] < last[:, None]
    return np.broadcast_to(inside[:, None, :], x.shape)


def missing_inside(x: np.ndarray) -> np.ndarray:
    """(n,) bool: which series of x (n, C, L; NaN-padded at the end) miss a value before their end, which aeon's
    ROCKET classifiers cannot read (a shorter series, NaN only after its last observation, they can: zero-padded)."""
    return (np.isnan(x) & _lengths_inside(x)).any(axis=(1, 2))


def rocket_series(x: np.ndarray | list[np.ndarray], length: int | None = None) -> np.ndarray:
    """Series as the ROCKET classifiers take them: (n, C, length) float64 (the values rounded to float32 first, as
    :func:`~jumbokit.timeseries.data.pad_series` stores them), zero-padded at the end (aeon's ``Padder`` fill) to
    ``length`` (default: the longest series)."""
    return np.nan_to_num(pad_series(x, length).astype(np.float64), nan=0.0)


def _fit_predict(name: str, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, seed: int,
                 n_jobs: int | None) -> tuple[Any, np.ndarray, np.ndarray, float]:
    """The fitted classifier, its test predictions, its ridge scores of the test series and the seconds of fit +
    predict (numba compiled beforehand)."""
    from .rocket_classifiers import labels_of_scores

    threads = torch.get_num_threads()
    try:
        _warm_up(name, x_train.shape[1], int(n_jobs or threads))
        start = time.perf_counter()
        clf = fit_rocket(name, x_train, y_train, seed, n_jobs or threads)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scores = clf.decision_function(x_test)
        return clf, labels_of_scores(clf.classes_, scores), scores, time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)  # Hydra sets torch's thread count to its n_jobs


def fit_rocket(name: str, x: np.ndarray, y: Any, seed: int = 0, n_jobs: int | None = None) -> Any:
    """Classifier ``name`` (:data:`BASELINES`, aeon's settings, ``random_state=seed``) fitted on series x (n, C, L;
    :func:`rocket_series`) with labels y (as text) in bounded memory; ``n_jobs`` threads (default: torch's count,
    which is restored afterwards: Hydra sets it to its n_jobs)."""
    threads = torch.get_num_threads()
    try:
        clf = _rocket(name, seed, int(n_jobs or threads))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return clf.fit(x, np.asarray(y).astype(str))
    finally:
        torch.set_num_threads(threads)


def rocket_baseline(name: str, data: ClassificationData, seed: int = 0, data_dir: str | Path | None = None,
                    n_jobs: int | None = None, keep: bool = False) -> dict[str, Any]:
    """One of aeon's MiniRocket / MultiRocket / Hydra classifiers on the same splits (raw series; they
    normalise internally), fitted on the training split and scored on the whole official test set, whose
    validation / test halves are those of ``data``. The classifier runs through
    :class:`~jumbokit.timeseries.rocket_classifiers.RocketClassifier`: aeon's transformer, scaling and ridge
    classifier with the same settings and seed, in bounded memory (the same predictions up to float rounding).

    aeon's classifiers need equal lengths: unequal-length sets are padded at the end with zeros to the
    longest series (aeon's ``Padder``, its default fill), which is recorded as ``"padded": true``. Sets with
    missing values inside series are skipped. ``n_jobs``: threads (default: torch's thread count, so the
    baselines get the cores the transformers get). ``seconds`` is fit + predict, without numba's one-off
    compilation (a warm-up fit on random data runs first). Returns {"test_top1", "val_top1", "full_test_top1"
    (percent), "seconds", "padded", "scores": {"val", "test"}} or {"skipped": reason}; "scores" are the ridge scores
    of the validation and test halves ((n,) for two classes, else (n, K) in the sorted classes' order, the order of
    the sweep's class codes), which the sweep keeps apart from the JSON record; with ``keep``, also
    "classifier": the fitted :class:`~jumbokit.timeseries.rocket_classifiers.RocketClassifier` (a fused model
    keeps it, :func:`~jumbokit.timeseries.store.write_baseline`)."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")
    x_train, y_train = load_raw(data.name, "train", data_dir, download=False)
    x_test, y_test = load_raw(data.name, "test", data_dir, download=False)
    padded = not data.meta.get("equal_length", False)
    # the raw series at their own length: a run's series may be resampled to another (tstrain --init)
    x_train, x_test = pad_series(x_train), pad_series(x_test)
    if missing_inside(x_train).any() or missing_inside(x_test).any():
        return {"skipped": "missing values inside series (not supported by aeon's ROCKET classifiers)"}
    length = max(x_train.shape[-1], x_test.shape[-1])
    if length < 9:
        return {"skipped": f"series of {length} steps (the ROCKET kernels need at least 9)"}
    x_train, x_test = rocket_series(x_train, length), rocket_series(x_test, length)
    clf, pred, scores, seconds = _fit_predict(name, x_train, y_train, x_test, seed, n_jobs)
    correct = pred == np.asarray(y_test).astype(str)
    out: dict[str, Any] = {"full_test_top1": 100.0 * float(correct.mean()), "seconds": seconds}
    if keep:
        out["classifier"] = clf
    if padded:
        out["padded"] = True
    if data.test_index is not None:
        out["test_top1"] = 100.0 * float(correct[data.test_index].mean())
        out["val_top1"] = 100.0 * float(correct[data.val_index].mean())
        out["scores"] = {"val": scores[data.val_index], "test": scores[data.test_index]}
    else:
        out["test_top1"] = out["val_top1"] = out["full_test_top1"]
        out["scores"] = {"val": scores, "test": scores}
    return out
