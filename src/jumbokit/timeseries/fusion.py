"""Late fusion of a transformer with a ROCKET-family classifier: one weight, chosen on the validation half.

The transformer gives class probabilities; the ROCKET classifiers give ridge scores, a regression onto the codes
+1 (the class) and -1 (the others), so a confident score sits near +1 for the class and near -1 elsewhere.
:func:`ridge_proba` turns them into probabilities with a softmax at a fixed :data:`RIDGE_TEMPERATURE` (a score gap
of 2 becomes odds of about 150 to 1). :func:`late_fusion` mixes the two,
``w * transformer + (1 - w) * ridge``, with ``w`` from :data:`FUSION_WEIGHTS` chosen by validation accuracy (ties:
the weight nearest 0.5, then the smaller), and scores the mixture on the test half. Nothing is fitted on the test
half, and neither model is retrained: the fusion reads the probabilities a sweep stored.

A sweep keeps each fused model as one folder (``models/<dataset>/<model>+<baseline>/``): the transformer as any
kept model (``model.safetensors`` + ``model_config.json``, ``kept.json``), the fitted ROCKET classifier
(:data:`ROCKET_FILE`, :func:`~jumbokit.timeseries.rocket_classifiers.save_rocket`) and :data:`FUSION_FILE` (the
weight, the temperature, the parts). :func:`rocket_proba` scores new raw series with the ROCKET half in the
transformer's class order, and :func:`fuse_proba` mixes the two as the sweep did
(``jumbokit.inference.series.load_series_predictor`` puts it together).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["FUSION_FILE", "FUSION_FORMAT", "FUSION_WEIGHTS", "RIDGE_TEMPERATURE", "ROCKET_FILE",
           "choose_weight", "fuse_proba", "fused_name", "fusion_record", "late_fusion", "ridge_proba",
           "rocket_proba"]

FUSION_WEIGHTS = tuple(np.round(np.linspace(0.0, 1.0, 11), 2).tolist())  # the transformer's share
RIDGE_TEMPERATURE = 2.5
SEPARATOR = "+"
FUSION_FILE = "fusion.json"  # in a kept fused model's folder: weight, temperature, parts
ROCKET_FILE = "rocket.safetensors"  # in a kept fused model's folder: the fitted ROCKET classifier
FUSION_FORMAT = "jumbokit.late_fusion/1"


def fused_name(model: str, baseline: str) -> str:
    """The row name of a model fused with a baseline: ``patchtst_jumbo+multirocket_hydra``."""
    return f"{model}{SEPARATOR}{baseline}"


def ridge_proba(scores: np.ndarray, num_classes: int) -> np.ndarray:
    """Class probabilities (n, K) from ridge scores: (n,) for two classes (positive: the second class) or
    (n, K), in the classes' sorted order (the order of the sweep's class codes)."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim == 1:
        if num_classes != 2:
            raise ValueError(f"expected scores (n, {num_classes}) for {num_classes} classes, got shape {scores.shape}")
        scores = np.stack([-scores, scores], axis=1)
    if scores.ndim != 2 or scores.shape[1] != num_classes:
        raise ValueError(f"expected scores (n, {num_classes}), got shape {scores.shape}")
    logits = RIDGE_TEMPERATURE * scores
    logits -= logits.max(axis=1, keepdims=True)
    proba = np.exp(logits)
    return proba / proba.sum(axis=1, keepdims=True)


def fuse_proba(model: np.ndarray, ridge: np.ndarray, weight: float) -> np.ndarray:
    """The fused probabilities: ``weight * model + (1 - weight) * ridge`` (``weight``: the transformer's share)."""
    return weight * model + (1 - weight) * ridge


def rocket_proba(classifier: Any, raw: np.ndarray | list[np.ndarray], label_names: list[str]) -> np.ndarray:
    """Class probabilities (n, K) of raw series from a fitted ROCKET classifier (:func:`ridge_proba` of its ridge
    scores), their columns in ``label_names``' order (the transformer's classes). The series are read as the sweep
    fitted it: NaN at the end of a shorter series zero-padded, every series padded to the training length.
    ValueError for other channels, missing values inside a series, or classes other than the transformer's."""
    from .baselines import missing_inside, rocket_series
    from .data import pad_series

    classes = [str(c) for c in classifier.classes_]
    if sorted(classes) != sorted(map(str, label_names)):
        raise ValueError(f"the ROCKET classifier knows classes {classes[:10]}, the transformer "
                         f"{list(label_names)[:10]}: not one fused model")
    x = pad_series(raw)
    channels, steps = classifier.input_shape_
    if x.shape[1] != channels:
        raise ValueError(f"expected series of {channels} channel(s) (the model's), got {x.shape[1]}")
    if missing_inside(x).any():
        raise ValueError("the ROCKET half of a fused model cannot read series with missing values before their end "
                         "(NaN only after a series' last value is read as a shorter series)")
    proba = ridge_proba(classifier.decision_function(rocket_series(x, max(steps, x.shape[-1]))), len(classes))
    return proba[:, [classes.index(str(name)) for name in label_names]]


def _accuracy(proba: np.ndarray, y: np.ndarray) -> float:
    return 100.0 * float((proba.argmax(axis=1) == y).mean())


def choose_weight(model: np.ndarray, ridge: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    """The transformer's share chosen on validation probabilities (n, K) of both models with labels y: (the weight
    of :data:`FUSION_WEIGHTS` with the best accuracy, ties to the weight nearest 0.5 then the smaller; that accuracy
    in percent; how many weights tied)."""
    y = np.asarray(y)
    accuracy = [_accuracy(fuse_proba(model, ridge, w), y) for w in FUSION_WEIGHTS]
    best = max(accuracy)
    tied = [w for w, acc in zip(FUSION_WEIGHTS, accuracy) if acc == best]
    return min(tied, key=lambda w: (abs(w - 0.5), w)), best, len(tied)


def fusion_record(model: str, baseline: str, weight: float, ensemble: bool = False, **scores: Any) -> dict[str, Any]:
    """The :data:`FUSION_FILE` of a kept fused model: format, parts, weight, temperature, the ROCKET file, whether
    the transformer is an ensemble, and any ``scores`` (the set, its accuracies)."""
    return {"format": FUSION_FORMAT, **scores, "model": model, "baseline": baseline, "weight": float(weight),
            "ridge_temperature": RIDGE_TEMPERATURE, "rocket": ROCKET_FILE, "ensemble": bool(ensemble)}


def late_fusion(model: dict[str, np.ndarray], ridge: dict[str, np.ndarray], y_val: np.ndarray,
                y_test: np.ndarray) -> dict[str, Any]:
    """The fused classifier's accuracies (percent) and its weight.

    ``model``: the transformer's {"val": (n_val, K), "test": (n_test, K)} probabilities; ``ridge``: the ROCKET
    classifier's probabilities on the same halves (:func:`ridge_proba`). Returns {"weight": the transformer's
    share, "val_top1", "test_top1", "weights_tied": how many weights shared the best validation accuracy}."""
    for half, y in (("val", y_val), ("test", y_test)):
        if model[half].shape != ridge[half].shape or len(model[half]) != len(y):
            raise ValueError(f"expected {len(y)} {half} probabilities of the same classes from both models, got "
                             f"{model[half].shape} and {ridge[half].shape}")
    weight, best, tied = choose_weight(model["val"], ridge["val"], y_val)
    test = fuse_proba(model["test"], ridge["test"], weight)
    return {"weight": weight, "val_top1": best, "test_top1": _accuracy(test, np.asarray(y_test)),
            "weights_tied": tied}
