"""Time-series classification (UCR/UEA) with PatchTST, PatchTST+registers and PatchTST+Jumbo.

- ``models``: the zoo entries ``patchtst``, ``patchtst_registers``, ``patchtst_jumbo`` and the patching rule.
- ``data``: aeon/sktime loading, padding/masks, normalisation (training-split channel statistics by default),
  the 50/50 validation/test split.
- ``train``: the paper's protocol (runs, 12-run sweep, selection, ranks, reports); ``cli``: ``tstrain``.
- ``augment``: series augmentation (jitter, scaling, magnitude/time warping, window slicing, mixup).
- ``pretrain``: ``pretrain_series``, masked-patch self-supervised pretraining of a series encoder.
- ``estimator``: ``PatchTSTClassifier``, an aeon classifier.

Importing this package is cheap (aeon and the runtime load on first use of ``data``/``train``/``estimator``).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .models import PATCHTST_MODELS, patch_geometry

_LAZY = {
    "load_dataset": "data", "local_datasets": "data", "user_datasets": "data", "ClassificationData": "data",
    "SweepConfig": "train", "run_sweep": "train", "train_run": "train", "SWEEP_LRS": "train",
    "SWEEP_DROPOUTS": "train", "RECIPES": "train", "BASELINES": "train", "ensemble_proba": "train",
    "PatchTSTClassifier": "estimator", "pretrain_series": "pretrain", "PretrainResult": "pretrain",
    "SeriesAugment": "augment", "SeriesMixup": "augment", "AUGMENTATIONS": "augment",
}

__all__ = ["PATCHTST_MODELS", "patch_geometry", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
