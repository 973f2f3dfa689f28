"""Time-series classification (UCR/UEA) with PatchTST, PatchTST+registers and PatchTST+Jumbo.

One module per job:

- ``models``: the zoo entries ``patchtst``, ``patchtst_registers``, ``patchtst_jumbo`` and the patching rule.
- ``data``: loading (sets other packages bundle: ``bundled``), padding/masks, the 50/50 validation/test split;
  ``normalize``: checks and normalisation (training-split channel statistics by default, per series, or "auto" by
  the spread of scales).
- ``protocol``: ``SweepConfig``, the named recipes (``RECIPES``) and their automatic rules.
- ``run``: one training run (build the model for a dataset, train, predict, score), shared by the sweep,
  pretraining and the estimator.
- ``baselines``: aeon's MiniRocket / MultiRocket / Hydra on the same splits; ``rocket_classifiers``: those
  classifiers in bounded memory (aeon's transformers in chunks, the ridge fit without float64 copies).
- ``results``: validation-based selection, ensembles, one row per (dataset, model), ranks.
- ``report``: the summary table, results.csv / results.json / report.md / accuracy.png.
- ``sweep``: ``run_sweep`` (``plan_sweep`` + ``execute_sweep``), the orchestration of a resumable sweep;
  ``store``: the sweep directory's files; ``cli``: ``tstrain``, whose flags are in ``flags``.
- ``jobs``: a sweep's runs, pretrainings and baselines as jobs, those still to do, and their relative cost;
  ``queue``: the order they are handed out in and the shared counter through which each process of a launch takes
  the next one (whole jobs, never a run sharded); ``worker``: doing the jobs a process takes, one by one or in a
  pool (each run trains with :class:`jumbokit.training.local.LocalAccelerator`, one process alone).
- ``augment``: series augmentation (jitter, scaling, magnitude/time warping, window slicing, mixup).
- ``pretrain``: ``pretrain_series``, masked-patch self-supervised pretraining of a series encoder; ``pool``: the
  cross-dataset pretraining pool (other sets' training splits); ``encoder_pretrain``: one encoder pretrained across
  sets (``jumbokit series-pretrain``) and ``tstrain --init``; ``ridge_head``: that encoder frozen, its head a ridge
  classifier of its features (``tstrain --frozen``).
- ``models.rocket``: the hybrid ``patchtst_jumbo_rocket`` (MiniRocket features in the first Jumbo segment).
- ``estimator``: ``PatchTSTClassifier``, an aeon classifier.

Importing this package is cheap (aeon and the runtime load on first use of a name below).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .models import PATCHTST_MODELS, patch_geometry

_LAZY = {
    "load_dataset": "data", "local_datasets": "data", "ClassificationData": "data",
    "SweepConfig": "protocol", "RECIPES": "protocol", "train_run": "run", "run_sweep": "sweep",
    "SweepResult": "results", "PatchTSTClassifier": "estimator", "pretrain_series": "pretrain",
    "PretrainResult": "pretrain", "SeriesAugment": "augment", "SeriesMixup": "augment", "AUGMENTATIONS": "augment",
}

__all__ = ["PATCHTST_MODELS", "patch_geometry", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
