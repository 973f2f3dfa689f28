"""The Jumbo paper's time-series protocol: training runs, the 12-run sweep, selection, ranks, reports.

One run = one dataset, one model, one (learning rate, dropout): AdamW (weight decay 0.02), batch 256,
cross-entropy, linear warm-up over the first 10% of steps then cosine decay to 1e-8, 100 epochs (20
for the seed's very large sets), through the shared runtime (``jumbokit.training.fit``). The final
model is scored on the validation and test halves. Per dataset and model, "best" is the test accuracy
of the run with the best validation accuracy (ties: lower validation loss, then sweep order) and "avg"
is the mean test accuracy over the runs. Models are ranked per dataset and the ranks averaged.

Recipes (``RECIPES``): ``paper`` is the protocol above, unchanged. ``small-data`` trains for a number of
optimizer steps that suits the series length (``steps="auto"``: :func:`auto_steps`) at a batch size that suits the
set (``batch_size="auto"``), with convolutional patch features (``conv_stem=32``), series augmentation, a smaller
grid and several seeds; ``ensemble=k`` averages the predicted probabilities of the k runs ranked best on
validation. ``pretrain_epochs`` pretrains each model by masked-patch reconstruction on the training split
(never validation or test) before fine-tuning (``jumbokit.timeseries.pretrain``).

A sweep directory holds ``sweep.json`` (what defines the sweep), ``runs/<dataset>/<model>/<run>.json``
(one file per finished run, written atomically, so an interrupted sweep resumes by skipping them) with the
run's validation and test probabilities beside it (``<run>.proba.safetensors``, for ensembles), pretrained
weights where asked (``pretrained_s<seed>.safetensors``), baselines (``runs/<dataset>/<baseline>.json``) and
the reports: ``results.csv``, ``results.json``, ``report.md``, ``accuracy.png``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from torch import nn

from jumbokit.training.optim import epochs_for_min_steps
from jumbokit.training.rundir import atomic_save_figure, atomic_write_text

from .data import AUTO_SCALE_SPREAD, ClassificationData, SeriesSplit, load_dataset, load_raw, pad_series
from .models import PATCHTST_MODELS, max_patches, patch_geometry

__all__ = [
    "SWEEP_LRS",
    "SWEEP_DROPOUTS",
    "LARGE_DATASETS",
    "BASELINES",
    "RECIPES",
    "auto_batch_size",
    "auto_steps",
    "steps_text",
    "SweepConfig",
    "RunResult",
    "SweepMismatchError",
    "build_model",
    "series_loader",
    "predict_proba",
    "evaluate",
    "scores",
    "ensemble_proba",
    "train_config",
    "series_loss",
    "train_run",
    "pretrain_run",
    "ensemble_scores",
    "selection_order",
    "rocket_baseline",
    "minirocket_baseline",
    "parse_baselines",
    "check_patches",
    "summarize",
    "rank_models",
    "run_sweep",
    "write_reports",
    "format_summary",
]

SWEEP_LRS: tuple[float, ...] = (3e-3, 1e-3, 3e-4, 1e-4)
SWEEP_DROPOUTS: tuple[float, ...] = (0.0, 0.1, 0.2)
LARGE_DATASETS = frozenset({"Sleep", "Tiselac", "FaceDetection"})  # trained for 20 epochs in the seed
BASELINES = ("minirocket", "multirocket", "hydra")  # aeon's convolution-based classifiers

LEGACY_SWEEP_KEYS = {"normalize": "instance", "min_steps": 0}
# keys added with the recipes: left out of sweep.json while at these values, so a sweep of the paper's
# protocol is defined (and stored) exactly as before
RECIPE_KEYS: dict[str, Any] = {"recipe": "paper", "steps": None, "max_patch_len": None, "conv_stem": 0,
                               "augment": "none",
                               "mixup_alpha": 0.2, "pretrain_epochs": 0, "pretrain_mask_ratio": 0.4,
                               "pretrain_lr": 1e-3, "seeds": 1, "ema_decay": 0.0}

# Named recipes: the SweepConfig fields and the sweep grid they set (flags given explicitly win).
RECIPES: dict[str, dict[str, Any]] = {
    "paper": dict(patches=8, max_patch_len=None, conv_stem=0, normalize="train", batch_size=256, steps=None, augment="none",
                  seeds=1, pretrain_epochs=0, lrs=SWEEP_LRS, dropouts=SWEEP_DROPOUTS, ensemble=1),
    "small-data": dict(patches=16, max_patch_len=None, conv_stem=32, normalize="auto", batch_size="auto", steps="auto",
                       augment="default", seeds=3, pretrain_epochs=0, lrs=(1e-3,), dropouts=(0.1,), ensemble=3),
}


def auto_batch_size(n_train: int, channels: int = 1) -> int:
    """The small-data batch: 32 series (at most the training set), fewer for many channels so that a step sees
    at most 128 channel-series (each channel is a sequence for the encoder: 21 series of 6 channels, 10 of 12),
    never fewer than 8."""
    return max(1, min(int(n_train), max(8, min(32, 128 // max(1, int(channels))))))


LONG_SERIES = 400  # steps: series longer than this get LONG_SERIES_STEPS optimizer steps under steps="auto"
SMALL_DATA_STEPS, LONG_SERIES_STEPS = 1000, 3000


def auto_steps(seq_len: int) -> int:
    """The small-data training length: 1000 optimizer steps, 3000 for series longer than 400 steps, where
    1000 steps leave the training loss high (on ACSF1, OSULeaf and PLAID 3000 steps raised every model's mean
    accuracy; on shorter series the effect varied by set: ArrowHead gained, PickupGestureWiimoteZ lost)."""
    return LONG_SERIES_STEPS if int(seq_len) > LONG_SERIES else SMALL_DATA_STEPS


def steps_text(steps: int | str) -> str:
    """A fixed training length (a step count or "auto") in words."""
    if steps == "auto":
        return (f"{SMALL_DATA_STEPS} optimizer steps per run ({LONG_SERIES_STEPS} for series longer than "
                f"{LONG_SERIES} steps)")
    return f"{steps} optimizer steps per run"


class SweepMismatchError(ValueError):
    """The output directory holds results of a sweep defined differently."""


@dataclass
class SweepConfig:
    """What defines a sweep's runs (stored in ``sweep.json``; a resumed sweep must match it)."""

    patches: int = 8
    max_patch_len: int | None = None  # longer series get more patches of this length (None = exactly `patches`)
    conv_stem: int = 0  # width of convolutional patch features added to each token (0 = linear patches only)
    epochs: int | None = None  # None: 100, or 20 for LARGE_DATASETS
    batch_size: int | str = 256  # "auto": auto_batch_size(training series, channels)
    weight_decay: float = 0.02
    warmup_fraction: float = 0.1
    min_lr: float = 1e-8
    seed: int = 0
    protocol: str = "seed"
    split_seed: int = 0
    mixed_precision: str = "no"
    normalize: str = "train"  # see jumbokit.timeseries.data.load_dataset
    branches: int = 1  # > 1: train progressive-join branches, collapse before scoring
    min_steps: int = 0  # raise the epochs of small sets so every run takes at least this many optimizer steps
    recipe: str = "paper"  # the named recipe the settings came from (RECIPES)
    steps: int | str | None = None  # optimizer steps per run (instead of epochs / min_steps); "auto": auto_steps
    augment: str = "none"  # series augmentation: "none" or names of jumbokit.timeseries.augment.AUGMENTATIONS
    mixup_alpha: float = 0.2
    pretrain_epochs: int = 0  # masked-patch pretraining on the training split before fine-tuning (0 = off)
    pretrain_mask_ratio: float = 0.4
    pretrain_lr: float = 1e-3
    seeds: int = 1  # runs per grid point, with seeds seed, seed+1, ...
    ema_decay: float = 0.0  # > 0: score the exponential moving average of the weights (TrainConfig.ema_decay)

    def __post_init__(self) -> None:
        from .augment import parse_augment

        self.augment = ",".join(parse_augment(self.augment)) or "none"
        for name in ("batch_size", "steps"):
            value = getattr(self, name)
            if isinstance(value, str) and value != "auto":
                raise ValueError(f"{name} must be a positive integer or 'auto', got {value!r}")
        checks = [
            ("recipe", self.recipe in RECIPES, f"one of {', '.join(RECIPES)}"),
            ("batch_size", self.batch_size == "auto" or int(self.batch_size) >= 1, "a positive integer or 'auto'"),
            ("steps", self.steps in (None, "auto") or int(self.steps) >= 1, "None, 'auto' or >= 1"),
            ("max_patch_len", self.max_patch_len is None or int(self.max_patch_len) >= 2, "None or >= 2"),
            ("conv_stem", self.conv_stem == 0 or int(self.conv_stem) >= 2, "0 (none) or a width >= 2"),
            ("pretrain_epochs", self.pretrain_epochs >= 0, ">= 0 (0 = no pretraining)"),
            ("pretrain_mask_ratio", 0 < self.pretrain_mask_ratio < 1, "in (0, 1)"),
            ("pretrain_lr", self.pretrain_lr > 0, "> 0"),
            ("mixup_alpha", self.mixup_alpha > 0, "> 0"),
            ("seeds", self.seeds >= 1, ">= 1"),
            ("ema_decay", 0 <= self.ema_decay < 1, "in [0, 1) (0 = off)"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}")

    def epochs_for(self, dataset: str, steps_per_epoch: int = 1) -> int:
        """The protocol's epochs (100; 20 for the largest sets), raised to reach ``min_steps`` steps."""
        epochs = int(self.epochs) if self.epochs is not None else (20 if dataset in LARGE_DATASETS else 100)
        return epochs_for_min_steps(epochs, self.min_steps, steps_per_epoch)

    def batch_for(self, n_train: int, channels: int = 1) -> int:
        """Series per optimizer step for a training set of ``n_train`` series of ``channels`` channels."""
        return auto_batch_size(n_train, channels) if self.batch_size == "auto" else int(self.batch_size)

    def steps_for(self, seq_len: int) -> int | None:
        """Optimizer steps per run for series of ``seq_len`` steps (None: epochs decide)."""
        return auto_steps(seq_len) if self.steps == "auto" else None if self.steps is None else int(self.steps)

    def run_seeds(self) -> list[int]:
        return [self.seed + i for i in range(self.seeds)]

    def identity(self) -> dict[str, Any]:
        """The settings that define the runs; recipe keys at their paper values are left out (so a sweep of the
        paper's protocol stores what it always stored)."""
        return {k: v for k, v in asdict(self).items() if not (k in RECIPE_KEYS and v == RECIPE_KEYS[k])}


@dataclass
class RunResult:
    """One finished run. Accuracies in [0, 1]."""

    dataset: str
    model: str
    lr: float
    dropout: float
    val_acc: float
    test_acc: float
    val_loss: float
    train_loss: float
    epochs: int
    steps: int
    train_seconds: float
    wall_seconds: float
    step_ms: float
    params: int
    patch_len: int
    stride: int
    num_patches: int
    global_tokens: int
    extra: dict[str, Any] = field(default_factory=dict)


def run_id(lr: float, dropout: float, seed_offset: int = 0) -> str:
    """File stem of a run: ``lr1e-3_do0.1``, plus ``_s<k>`` for the k-th extra seed."""
    return f"lr{lr:g}_do{dropout:g}" + (f"_s{seed_offset}" if seed_offset else "")


# ---------------------------------------------------------------- building blocks
def build_model(name: str, data: ClassificationData, patches: int, dropout: float = 0.0,
                strict: bool = True, branches: int = 1, max_patch_len: int | None = None,
                conv_stem: int = 0) -> nn.Module:
    """The zoo model for a dataset: channels, length and classes from ``data``; ``dropout`` -> drop_rate.

    ``max_patch_len``: longer series get more patches of this length (see ``capped_patch_geometry``).
    ``conv_stem=W``: add convolutional patch features of width W to each token (``ConvPatchFeatures``).
    ``branches=n > 1``: the progressive-join training form with n times the layers in blocks of n parallel
    branches, which collapses exactly into the plain model's depth (``model.reparameterize()``)."""
    from ..encoders import create_model, model_config

    if name not in PATCHTST_MODELS:
        raise ValueError(f"expected a model among {', '.join(PATCHTST_MODELS)}, got {name!r}")
    if branches < 1:
        raise ValueError(f"branches must be >= 1, got {branches}")
    extra: dict[str, Any] = {}
    if branches > 1:
        extra = dict(branches=branches, depth=int(model_config(name, seq_len=data.seq_len)["depth"]) * branches)
    return create_model(name, num_classes=data.num_classes, in_chans=data.channels, seq_len=data.seq_len,
                        patches=patches, max_patch_len=max_patch_len, strict_patches=strict,
                        drop_rate=float(dropout), conv_stem=int(conv_stem), **extra)


def series_loader(split: SeriesSplit, batch_size: int, shuffle: bool, seed: int = 0,
                  steps: int | None = None) -> torch.utils.data.DataLoader:
    """Batches of (x (B, C, L) float32 with NaN = missing/padded, y (B,) int64).

    ``steps``: exactly that many shuffled batches (one loader pass), cycling through seeded permutations."""
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(split.x), torch.from_numpy(split.y))
    if steps is not None:
        from .pretrain import StepBatches

        return torch.utils.data.DataLoader(dataset, batch_sampler=StepBatches(len(split), batch_size, steps, seed))
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator)


@torch.no_grad()
def predict_proba(model: nn.Module, x: np.ndarray | torch.Tensor, batch_size: int = 256,
                  device: torch.device | str | None = None) -> np.ndarray:
    """Class probabilities (n, num_classes) of series x (n, C, L) in eval mode."""
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    x = torch.as_tensor(x, dtype=torch.float32)
    out = []
    for start in range(0, x.shape[0], batch_size):
        logits = model(x[start:start + batch_size].to(device))
        out.append(torch.softmax(logits.float(), dim=-1).cpu())
    model.train(was_training)
    return torch.cat(out).numpy() if out else np.zeros((0, 0), dtype=np.float32)


def scores(proba: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of class probabilities (n, K) against labels y (n,)."""
    picked = proba[np.arange(len(y)), y]
    loss = float(-np.log(np.clip(picked, 1e-12, None)).mean())
    return float((proba.argmax(-1) == y).mean()), loss


def evaluate(model: nn.Module, split: SeriesSplit, batch_size: int = 256) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of a model on a split."""
    return scores(predict_proba(model, split.x, batch_size), split.y)


def ensemble_proba(probas: Sequence[np.ndarray]) -> np.ndarray:
    """The mean of several runs' class probabilities, each (n, K); one run gives its own probabilities."""
    if not probas:
        raise ValueError("expected at least one run's probabilities, got none")
    if len(probas) == 1:
        return np.asarray(probas[0])
    return np.mean(np.stack([np.asarray(p, dtype=np.float64) for p in probas]), axis=0)


def train_config(cfg: SweepConfig, lr: float, epochs: int, progress: bool = False, cpu: bool = False,
                 seed: int | None = None):
    """The shared runtime's TrainConfig for one run of the protocol (no checkpoints: runs are short)."""
    from ..training import TrainConfig

    return TrainConfig(epochs=epochs, lr=lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.999), optimizer="adamw",
                       warmup_fraction=cfg.warmup_fraction, min_lr=cfg.min_lr, schedule="cosine",
                       mixed_precision=cfg.mixed_precision, seed=cfg.seed if seed is None else seed,
                       checkpoint_every=0, progress=progress, cpu=cpu, save_model=False, ema_decay=cfg.ema_decay)


def series_loss(cfg: SweepConfig, num_classes: int, seed: int):
    """The training loss of a run: cross-entropy, with the sweep's series augmentation and mixup drawn from a
    CPU generator seeded with ``seed`` (a ``loss_fn`` for :func:`jumbokit.training.fit`)."""
    from ..training import classification_loss
    from .augment import SeriesAugment, SeriesMixup, parse_augment

    ops = parse_augment(cfg.augment)
    generator = torch.Generator().manual_seed(seed + 7919)
    per_series = [op for op in ops if op != "mixup"]
    augment = SeriesAugment(tuple(per_series), generator=generator) if per_series else None
    if "mixup" in ops:
        return classification_loss(mixup=SeriesMixup(num_classes, cfg.mixup_alpha, augment, generator))
    if augment is not None:
        return classification_loss(forward=lambda model, x: model(augment(x)))
    return classification_loss()


def _train(data: ClassificationData, model_name: str, lr: float, dropout: float, cfg: SweepConfig,
           progress: bool = False, accelerator: Any = None, cpu: bool = False, seed: int | None = None,
           pretrained: dict[str, torch.Tensor] | None = None) -> tuple[RunResult, dict[str, np.ndarray]]:
    """One run and its validation / test probabilities ({"val": (n_val, K), "test": (n_test, K)})."""
    from ..training import fit

    seed = cfg.seed if seed is None else int(seed)
    wall_start = time.perf_counter()
    torch.manual_seed(seed)
    model = build_model(model_name, data, cfg.patches, dropout, branches=cfg.branches,
                        max_patch_len=cfg.max_patch_len, conv_stem=cfg.conv_stem)
    if pretrained is not None:
        model.load_state_dict(pretrained)
    batch = cfg.batch_for(len(data.train), data.channels)
    fixed_steps = cfg.steps_for(data.seq_len)
    loader = series_loader(data.train, batch, shuffle=True, seed=seed, steps=fixed_steps)
    if fixed_steps is not None:
        steps, fit_epochs = fixed_steps, 1
        epochs = math.ceil(steps * min(batch, len(data.train)) / len(data.train))  # passes over the data
    else:
        epochs = fit_epochs = cfg.epochs_for(data.name, len(loader))
        steps = epochs * len(loader)
    if cfg.branches > 1:
        model.join_warmup_steps = max(1, steps // 2)  # joined by mid-training, then trained joined
    tcfg = train_config(cfg, lr, fit_epochs, progress=progress, cpu=cpu, seed=seed)
    start = time.perf_counter()
    result = fit(model, loader, series_loss(cfg, data.num_classes, seed), tcfg, accelerator=accelerator)
    seconds = time.perf_counter() - start
    model = result.model
    if cfg.branches > 1:
        model = model.reparameterize()  # the plain model that is scored (and would be deployed)
    eval_batch = batch if isinstance(cfg.batch_size, int) else 256
    proba = {"val": predict_proba(model, data.val.x, eval_batch)}
    proba["test"] = proba["val"] if data.test is data.val else predict_proba(model, data.test.x, eval_batch)
    val_acc, val_loss = scores(proba["val"], data.val.y)
    test_acc, _ = scores(proba["test"], data.test.y)
    train_loss = float(result.final.get("train_loss", float("nan")))
    conf = model.config
    extra: dict[str, Any] = {}
    if seed != cfg.seed:
        extra["seed"] = seed
    if pretrained is not None:
        extra["pretrained"] = True
    run = RunResult(
        dataset=data.name, model=model_name, lr=float(lr), dropout=float(dropout), val_acc=val_acc,
        test_acc=test_acc, val_loss=val_loss, train_loss=train_loss, epochs=epochs, steps=steps,
        train_seconds=seconds, wall_seconds=time.perf_counter() - wall_start,
        step_ms=1000.0 * seconds / max(1, steps),
        params=sum(p.numel() for p in model.parameters()), patch_len=int(conf["patch_len"]),
        stride=int(conf["stride"]), num_patches=int(model.num_patches), global_tokens=int(model.num_global_tokens),
        extra=extra,
    )
    return run, proba


def train_run(data: ClassificationData, model_name: str, lr: float, dropout: float, cfg: SweepConfig,
              progress: bool = False, accelerator: Any = None, cpu: bool = False, seed: int | None = None,
              pretrained: dict[str, torch.Tensor] | None = None) -> RunResult:
    """Train one configuration on ``data`` with the shared runtime and score the final model.

    seed: of initialisation, data order and augmentation (default ``cfg.seed``); pretrained: a state dict of
    the same model (e.g. from :func:`pretrain_run`) to start from."""
    return _train(data, model_name, lr, dropout, cfg, progress, accelerator, cpu, seed, pretrained)[0]


def pretrain_run(data: ClassificationData, model_name: str, cfg: SweepConfig, seed: int | None = None,
                 progress: bool = False, accelerator: Any = None, cpu: bool = False) -> tuple[dict, dict]:
    """Masked-patch pretraining of a sweep's model on the TRAINING split only (``cfg.pretrain_epochs`` passes
    at the sweep's batch size). Returns (state dict of the model, {"loss", "steps", "seconds"})."""
    from .pretrain import pretrain_series

    seed = cfg.seed if seed is None else int(seed)
    torch.manual_seed(seed)
    model = build_model(model_name, data, cfg.patches, 0.0, branches=cfg.branches, max_patch_len=cfg.max_patch_len,
                        conv_stem=cfg.conv_stem)
    result = pretrain_series(model, data.train.x, epochs=cfg.pretrain_epochs,
                             batch_size=cfg.batch_for(len(data.train), data.channels), lr=cfg.pretrain_lr,
                             mask_ratio=cfg.pretrain_mask_ratio, seed=seed, progress=progress, cpu=cpu,
                             accelerator=accelerator)
    state = {k: v.detach().cpu().clone() for k, v in result.model.state_dict().items()}
    return state, {"loss": result.loss, "steps": result.steps, "seconds": result.seconds}


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


def _numba_beside_torch() -> None:
    """Run numba's parallel code on its ``workqueue`` threads unless the user chose a layer
    (``NUMBA_THREADING_LAYER`` or ``numba.config.THREADING_LAYER``). Its default OpenMP layer leaves worker
    threads that halve the speed of torch training later in the same process (a tstrain step took 60 ms
    instead of 29 after a MiniRocket fit, 2-core CPU); with ``workqueue`` it stays at 24-29 ms. Takes effect
    only before numba's first parallel call."""
    import numba

    if "NUMBA_THREADING_LAYER" not in os.environ and numba.config.THREADING_LAYER == "default":
        numba.config.THREADING_LAYER = "workqueue"


def _rocket(name: str, seed: int, n_jobs: int):
    _numba_beside_torch()
    from aeon.classification.convolution_based import HydraClassifier, MiniRocketClassifier, MultiRocketClassifier

    cls = {"minirocket": MiniRocketClassifier, "multirocket": MultiRocketClassifier, "hydra": HydraClassifier}[name]
    return cls(random_state=seed, n_jobs=n_jobs)


_WARMED: set[tuple[str, bool, int]] = set()


def _warm_up(name: str, chans: int, n_jobs: int) -> None:
    """Fit once on a tiny random set so that numba's compilation (seconds, once per process) is not timed."""
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


def rocket_baseline(name: str, data: ClassificationData, seed: int = 0, data_dir: str | Path | None = None,
                    n_jobs: int | None = None) -> dict[str, Any]:
    """One of aeon's MiniRocket / MultiRocket / Hydra classifiers on the same splits (raw series; they
    normalise internally), fitted on the training split and scored on the whole official test set, whose
    validation / test halves are those of ``data``.

    aeon's classifiers need equal lengths: unequal-length sets are padded at the end with zeros to the
    longest series (aeon's ``Padder``, its default fill), which is recorded as ``"padded": true``. Sets with
    missing values inside series are skipped. ``n_jobs``: threads (default: torch's thread count, so the
    baselines get the cores the transformers get). ``seconds`` is fit + predict, without numba's one-off
    compilation (a warm-up fit on random data runs first). Returns {"test_acc", "val_acc", "full_test_acc",
    "seconds", "padded"} or {"skipped": reason}."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")
    x_train, y_train = load_raw(data.name, "train", data_dir, download=False)
    x_test, y_test = load_raw(data.name, "test", data_dir, download=False)
    padded = not data.meta.get("equal_length", False)
    x_train = pad_series(x_train, data.seq_len).astype(np.float64)
    x_test = pad_series(x_test, data.seq_len).astype(np.float64)
    inner = [_lengths_inside(x) for x in (x_train, x_test)]
    if any(bool(np.isnan(x[mask]).any()) for x, mask in zip((x_train, x_test), inner)):
        return {"skipped": "missing values inside series (not supported by aeon's ROCKET classifiers)"}
    if data.seq_len < 9:
        return {"skipped": f"series of {data.seq_len} steps (the ROCKET kernels need at least 9)"}
    x_train, x_test = np.nan_to_num(x_train, nan=0.0), np.nan_to_num(x_test, nan=0.0)  # Padder's fill: 0
    threads = torch.get_num_threads()
    try:
        _warm_up(name, x_train.shape[1], int(n_jobs or threads))
        start = time.perf_counter()
        clf = _rocket(name, seed, int(n_jobs or threads))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf.fit(x_train, np.asarray(y_train).astype(str))
            pred = clf.predict(x_test)
        seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)  # Hydra sets torch's thread count to its n_jobs
    y_test = np.asarray(y_test).astype(str)
    correct = pred == y_test
    out: dict[str, Any] = {"full_test_acc": float(correct.mean()), "seconds": seconds}
    if padded:
        out["padded"] = True
    if data.test_index is not None:
        out["test_acc"] = float(correct[data.test_index].mean())
        out["val_acc"] = float(correct[data.val_index].mean())
    else:
        out["test_acc"] = out["val_acc"] = out["full_test_acc"]
    return out


def _lengths_inside(x: np.ndarray) -> np.ndarray:
    """(n, C, L) bool: steps before each series' end (its last observation in any channel)."""
    observed = ~np.isnan(x).all(axis=1)  # (n, L)
    last = np.where(observed.any(1), x.shape[-1] - np.argmax(observed[:, ::-1], axis=1), 0)
    inside = np.arange(x.shape[-1])[None, :] < last[:, None]
    return np.broadcast_to(inside[:, None, :], x.shape)


def minirocket_baseline(data: ClassificationData, seed: int = 0, data_dir: str | Path | None = None) -> dict[str, Any]:
    """aeon's MiniRocket on the same splits (see :func:`rocket_baseline`)."""
    return rocket_baseline("minirocket", data, seed=seed, data_dir=data_dir)


def check_patches(data: ClassificationData, patches: int) -> None:
    """Raise ValueError when ``patches`` cannot be cut from this dataset's (longest) series."""
    if patches > max_patches(data.seq_len):
        raise ValueError(f"--patches {patches} is larger than {data.name} allows: its longest series has "
                         f"{data.seq_len} steps, which give at most {max_patches(data.seq_len)} patches")
    patch_geometry(data.seq_len, patches, strict=True)


# ---------------------------------------------------------------- summaries
def selection_order(runs: Sequence[dict]) -> list[dict]:
    """Runs ranked for selection: higher validation accuracy first, then lower validation loss, then sweep
    order (the first is the "best" run)."""
    return sorted(runs, key=lambda r: (-r["val_acc"], r["val_loss"]))


def _baseline_results(baselines: dict[str, dict] | None) -> Iterable[tuple[str, str, dict]]:
    """(dataset, baseline, result) from {dataset: {baseline: result}} (or the older {dataset: minirocket result})."""
    for dataset, entry in (baselines or {}).items():
        if "test_acc" in entry or "skipped" in entry:
            entry = {"minirocket": entry}
        for name, result in entry.items():
            yield dataset, name, result


def summarize(runs: Iterable[RunResult | dict], baselines: dict[str, dict] | None = None,
              ensembles: dict[tuple[str, str], dict] | None = None) -> list[dict[str, Any]]:
    """One row per (dataset, model): best (validation-selected) and mean test accuracy, timings.

    Baselines (``{dataset: {name: result}}``) add a row per baseline (one run: best = avg = ensemble).
    Ensembles (``{(dataset, model): {"k", "test_acc", "val_acc"}}``) add ``ens_test_acc`` / ``ens_val_acc`` /
    ``ens_k`` to the model's row."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        run = asdict(run) if isinstance(run, RunResult) else dict(run)
        groups.setdefault((run["dataset"], run["model"]), []).append(run)
    rows = []
    for (dataset, model), items in groups.items():
        best = selection_order(items)[0]
        tests = np.array([r["test_acc"] for r in items])
        row = {
            "dataset": dataset, "model": model, "runs": len(items), "best_test_acc": best["test_acc"],
            "best_val_acc": best["val_acc"], "avg_test_acc": float(tests.mean()), "std_test_acc": float(tests.std()),
            "max_test_acc": float(tests.max()), "best_lr": best["lr"], "best_dropout": best["dropout"],
            "train_seconds": float(sum(r["train_seconds"] for r in items)),
            "step_ms": float(np.mean([r["step_ms"] for r in items])), "params": best["params"],
            "patch_len": best["patch_len"], "stride": best["stride"], "num_patches": best["num_patches"],
            "global_tokens": best["global_tokens"],
        }
        if "wall_seconds" in best:
            row["wall_seconds"] = float(sum(r.get("wall_seconds", 0.0) for r in items))
        ens = (ensembles or {}).get((dataset, model))
        if ens is not None:
            row.update(ens_test_acc=ens["test_acc"], ens_val_acc=ens["val_acc"], ens_k=ens["k"])
        rows.append(row)
    for dataset, name, result in _baseline_results(baselines):
        if "test_acc" in result:
            rows.append({"dataset": dataset, "model": name, "runs": 1, "best_test_acc": result["test_acc"],
                         "best_val_acc": result["val_acc"], "avg_test_acc": result["test_acc"], "std_test_acc": 0.0,
                         "max_test_acc": result["test_acc"], "best_lr": None, "best_dropout": None,
                         "train_seconds": result["seconds"], "wall_seconds": result["seconds"], "step_ms": None,
                         "params": None, "patch_len": None, "stride": None, "num_patches": None,
                         "global_tokens": None, "full_test_acc": result["full_test_acc"],
                         "ens_test_acc": result["test_acc"], "padded": bool(result.get("padded", False))})
    order = {m: i for i, m in enumerate(PATCHTST_MODELS + BASELINES)}
    rows.sort(key=lambda r: (r["dataset"], order.get(r["model"], 99), r["model"]))
    return rows


def _ranks(values: list[float]) -> list[float]:
    """Rank 1 = highest value; ties share the mean rank."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def rank_models(rows: list[dict], models: Sequence[str],
                keys: Sequence[str] = ("best", "avg")) -> dict[str, dict[str, float]]:
    """Mean rank over datasets of each model, by best and by avg test accuracy (or any ``<key>_test_acc``,
    e.g. "ens"), over the datasets where all ``models`` have results. Returns {model: {"best": r, "avg": r,
    "datasets": n}}."""
    table: dict[str, dict[str, dict]] = {}
    for row in rows:
        table.setdefault(row["dataset"], {})[row["model"]] = row
    out: dict[str, dict[str, float]] = {m: {**{k: 0.0 for k in keys}, "datasets": 0} for m in models}
    count = 0
    for per_model in table.values():
        if not all(m in per_model and all(f"{k}_test_acc" in per_model[m] for k in keys) for m in models):
            continue
        count += 1
        for key in keys:
            for m, r in zip(models, _ranks([per_model[m][f"{key}_test_acc"] for m in models])):
                out[m][key] += r
    for m in models:
        out[m]["datasets"] = count
        for key in keys:
            out[m][key] = out[m][key] / count if count else float("nan")
    return out


# ---------------------------------------------------------------- files
def _pct(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def _baseline_columns(rows: list[dict]) -> list[str]:
    return [b for b in BASELINES if any(r["model"] == b for r in rows)]


def format_summary(rows: list[dict], ranks: dict[str, dict], models: Sequence[str], markdown: bool = False,
                   dataset_seconds: dict[str, float] | None = None, ranks_all: dict[str, dict] | None = None,
                   ensemble: int = 1) -> str:
    """A table: one line per dataset, best/avg test accuracy (%) per model (and the top-``ensemble``
    ensemble's when > 1), baselines, then mean accuracies and mean ranks (among the models; ``ranks_all``:
    models and baselines together, by best run and, with ensembles, by ensemble)."""
    columns = list(models) + _baseline_columns(rows)
    by = {(r["dataset"], r["model"]): r for r in rows}
    datasets = sorted({r["dataset"] for r in rows})
    ens = ensemble > 1
    suffix = f" best/avg/ens{ensemble}" if ens else " best/avg"
    header = ["dataset"] + [f"{m}{suffix}" if m in models else f"{m}" for m in columns]
    if dataset_seconds:
        header.append("sweep s")

    def model_cell(values: list[float | None]) -> str:
        return " / ".join(_pct(v) for v in values)

    lines = []
    for d in datasets:
        cells = [d]
        for m in columns:
            r = by.get((d, m))
            if r is None:
                cells.append("-")
            elif m in models:
                cells.append(model_cell([r["best_test_acc"], r["avg_test_acc"]] + ([r.get("ens_test_acc")] if ens
                                                                                     else [])))
            else:
                cells.append(_pct(r["best_test_acc"]) + ("*" if r.get("padded") else ""))
        if dataset_seconds:
            cells.append(f"{dataset_seconds.get(d, float('nan')):.0f}")
        lines.append(cells)
    means = ["mean acc"]
    for m in columns:
        vals = [by[(d, m)] for d in datasets if (d, m) in by]
        if not vals:
            means.append("-")
        elif m in models:
            keys = ["best_test_acc", "avg_test_acc"] + (["ens_test_acc"] if ens else [])
            means.append(model_cell([float(np.mean([v.get(k, np.nan) for v in vals])) for k in keys]))
        else:
            means.append(_pct(np.mean([v["best_test_acc"] for v in vals])) + f" ({len(vals)} sets)")
    if dataset_seconds:
        means.append(f"{sum(dataset_seconds.values()):.0f}")
    lines.append(means)
    footer = 2
    rank_line = ["mean rank"] + [f"{ranks[m]['best']:.2f} / {ranks[m]['avg']:.2f}" if m in ranks else "-"
                                 for m in columns]
    lines.append(rank_line + ([""] if dataset_seconds else []))
    if ranks_all:
        keys = [k for k in ("best", "ens") if k in next(iter(ranks_all.values()))]
        line = ["rank, all" + (" (best / ens)" if "ens" in keys else "")]
        line += [" / ".join(f"{ranks_all[m][k]:.2f}" for k in keys) if m in ranks_all else "-" for m in columns]
        lines.append(line + ([""] if dataset_seconds else []))
        footer += 1
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(c) + " |" for c in lines]
        return "\n".join(out)
    widths = [max(len(str(row[i])) for row in [header] + lines) for i in range(len(header))]
    fmt = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    return "\n".join([fmt(header), rule] + [fmt(r) for r in lines[:-footer]] + [rule]
                     + [fmt(r) for r in lines[-footer:]])


def _plot(path: Path, rows: list[dict], models: Sequence[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = list(models) + _baseline_columns(rows)
    datasets = sorted({r["dataset"] for r in rows})
    by = {(r["dataset"], r["model"]): r for r in rows}
    width = 0.8 / max(1, len(columns))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(datasets) * max(1, len(columns)) / 2), 4.2))
    xs = np.arange(len(datasets))
    for i, m in enumerate(columns):
        best = [100 * by[(d, m)]["best_test_acc"] if (d, m) in by else np.nan for d in datasets]
        avg = [100 * by[(d, m)]["avg_test_acc"] if (d, m) in by else np.nan for d in datasets]
        pos = xs - 0.4 + width * (i + 0.5)
        ax.bar(pos, best, width, label=m)
        if m in models:
            ax.plot(pos, avg, "k.", markersize=6, label="sweep average" if i == 0 else None)
    ax.set_xticks(xs)
    ax.set_xticklabels(datasets, rotation=20, ha="right")
    ax.set_ylabel("test accuracy (%)")
    lows = [100 * r["avg_test_acc"] for r in rows if r["model"] in columns]
    ax.set_ylim(max(0.0, (min(lows) if lows else 0.0) - 10), 101)
    ax.set_title("Best run (validation-selected) per dataset; dots: mean over the sweep")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="y", alpha=0.3)
    atomic_save_figure(path, fig)


def _training_text(cfg: SweepConfig) -> str:
    """How each run trains, in words (the paper's sentence when the paper's recipe is used)."""
    if cfg.steps is not None:
        length = steps_text(cfg.steps)
    else:
        length = (f"{cfg.epochs} epochs" if cfg.epochs is not None
                  else "100 epochs (20 for Sleep, Tiselac, FaceDetection)")
        if cfg.min_steps:
            length += f", raised to reach at least {cfg.min_steps} optimizer steps"
    batch = ("batch min(n_train, 32, max(8, 128 // channels))" if cfg.batch_size == "auto"
             else f"batch {cfg.batch_size}")
    patching = f"{cfg.patches} patches" + (f" (more where they would exceed {cfg.max_patch_len} steps)"
                                           if cfg.max_patch_len else "")
    if cfg.conv_stem:
        patching += f" + convolutional patch features of width {cfg.conv_stem}"
    text = (f"{patching}; {length}; {batch}; AdamW, weight decay {cfg.weight_decay}; "
            f"warm-up {int(100 * cfg.warmup_fraction)}% then cosine to {cfg.min_lr:g}; seed {cfg.seed}")
    if cfg.seeds > 1:
        text += f" to {cfg.seed + cfg.seeds - 1} ({cfg.seeds} seeds per grid point)"
    text += "."
    if cfg.augment != "none":
        text += f" Augmentation: {cfg.augment.replace(',', ', ')} (each with probability 0.5 per series"
        text += f"; mixup alpha {cfg.mixup_alpha:g})." if "mixup" in cfg.augment else ")."
    if cfg.ema_decay:
        text += f" Scored: the exponential moving average of the weights (decay {cfg.ema_decay:g})."
    if cfg.pretrain_epochs:
        text += (f" Masked-patch pretraining on the training split first: {cfg.pretrain_epochs} epochs, mask ratio "
                 f"{cfg.pretrain_mask_ratio:g}, lr {cfg.pretrain_lr:g}.")
    if cfg.recipe != "paper":
        text += f" Recipe: {cfg.recipe}."
    return text


def write_reports(out_dir: Path, rows: list[dict], ranks: dict[str, dict], models: Sequence[str],
                  runs: list[RunResult], cfg: SweepConfig, baselines: dict[str, dict],
                  dataset_seconds: dict[str, float], lrs: Sequence[float], dropouts: Sequence[float],
                  data_summaries: dict[str, str], ranks_all: dict[str, dict] | None = None,
                  ensemble: int = 1) -> dict[str, Path]:
    """results.csv, results.json, report.md and accuracy.png in ``out_dir`` (each written atomically)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: out_dir / name for name in ("results.csv", "results.json", "report.md", "accuracy.png")}
    buf = io.StringIO()
    fields = ["dataset", "model", "runs", "best_test_acc", "avg_test_acc", "std_test_acc", "best_val_acc",
              "max_test_acc", "best_lr", "best_dropout", "train_seconds", "step_ms", "params", "patch_len", "stride",
              "num_patches", "global_tokens", "full_test_acc"]
    if ensemble > 1:
        fields += ["ens_test_acc", "ens_val_acc", "ens_k"]
    if any("padded" in r for r in rows):
        fields += ["wall_seconds", "padded"]
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in fields})
    atomic_write_text(paths["results.csv"], buf.getvalue())
    payload = {"sweep": cfg.identity(), "lrs": list(lrs), "dropouts": list(dropouts), "models": list(models),
               "summary": rows, "ranks": ranks, "baselines": baselines, "dataset_seconds": dataset_seconds,
               "datasets": data_summaries, "runs": [asdict(r) for r in runs]}
    if ranks_all:
        payload["ranks_all"] = ranks_all
    if ensemble > 1:
        payload["ensemble"] = ensemble
    atomic_write_text(paths["results.json"], json.dumps(payload, indent=2, default=float) + "\n")
    branches = (f"Each model was trained with {cfg.branches} parallel branches per block (joined progressively "
                "over the first half of the steps) and collapsed exactly to the plain depth before scoring."
                if cfg.branches > 1 else "")
    if cfg.protocol == "seed":
        protocol = "official test set split 50/50 (stratified) into validation and test"
    else:
        protocol = "official train/test (selection on the test set: optimistic)"
    protocol += {"train": "; channels standardised with training-split statistics",
                 "instance": "; each series normalised by its own statistics",
                 "auto": ("; channels standardised with training-split statistics, or each series by its own where "
                          f"the training series' scales differ more than {AUTO_SCALE_SPREAD:g}-fold"),
                 "none": ""}[cfg.normalize]
    runs_per = len(lrs) * len(dropouts) * cfg.seeds
    baseline_names = _baseline_columns(rows)
    if baseline_names:
        ranked = (f"Ranks: 1 = best. \"mean rank\" ranks the transformer models; \"rank, all\" ranks them together "
                  f"with {', '.join(baseline_names)} (best run" + (", and ensemble" if ensemble > 1 else "") + ").")
    else:
        ranked = "Ranks: 1 = best, among the transformer models (MiniRocket, where shown, is not ranked)."
    md = [
        "# Time-series classification (PatchTST family)",
        "",
        f"Protocol: {protocol}; {_training_text(cfg)} {branches}".rstrip(),
        f"Sweep: lr {', '.join(f'{v:g}' for v in lrs)} x dropout {', '.join(f'{v:g}' for v in dropouts)}"
        + (f" x {cfg.seeds} seeds" if cfg.seeds > 1 else "") + f" ({runs_per} run(s) per dataset and model).",
        "",
        "Test accuracy (%), best run chosen on validation / mean over the sweep"
        + (f" / mean probabilities of the {ensemble} runs best on validation" if ensemble > 1 else "")
        + f". {ranked}" + (" *: series padded with zeros to equal length for the baseline." if any(
            r.get("padded") for r in rows) else ""),
        "",
        format_summary(rows, ranks, models, markdown=True, dataset_seconds=dataset_seconds, ranks_all=ranks_all,
                       ensemble=ensemble),
        "",
        "## Datasets",
        "",
    ]
    md += [f"- {s}" for s in data_summaries.values()]
    skipped = [f"{name} on {d}: {result['skipped']}" for d, name, result in _baseline_results(baselines)
               if "skipped" in result]
    if skipped:
        md += ["", "Baselines skipped: " + "; ".join(skipped)]
    md += ["", "## Per model", "", "| dataset | model | params | patch len / stride / patches | global tokens | "
           "best lr / dropout | step ms | train s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["model"] in models:
            md.append(f"| {r['dataset']} | {r['model']} | {r['params']:,} | {r['patch_len']} / {r['stride']} / "
                      f"{r['num_patches']} | {r['global_tokens']} | {r['best_lr']:g} / {r['best_dropout']:g} | "
                      f"{r['step_ms']:.1f} | {r['train_seconds']:.0f} |")
    md += ["", "![accuracy per dataset and model](accuracy.png)", ""]
    atomic_write_text(paths["report.md"], "\n".join(md))
    _plot(paths["accuracy.png"], rows, models)
    return paths


# ---------------------------------------------------------------- the sweep
def _check_out_dir(out_dir: Path, identity: dict[str, Any]) -> None:
    sweep_file = out_dir / "sweep.json"
    if sweep_file.exists():
        stored = json.loads(sweep_file.read_text())
        # keys added after a sweep was written: what those sweeps did (series were normalised per instance)
        defaults = {**asdict(SweepConfig()), **LEGACY_SWEEP_KEYS}
        keys = list(identity) + [k for k in stored if k not in identity]
        diff = {k: (stored.get(k, defaults.get(k)), identity.get(k, defaults.get(k))) for k in keys}
        diff = {k: (a, b) for k, (a, b) in diff.items() if a != b}
        if diff:
            desc = ", ".join(f"{k}: {a!r} there vs {b!r} now" for k, (a, b) in diff.items())
            raise SweepMismatchError(f"{out_dir} holds results of a different sweep ({desc}); pass another --out "
                                     "or the same settings to resume")
    elif out_dir.exists() and any(out_dir.iterdir()):
        raise SweepMismatchError(f"{out_dir} is not empty and holds no sweep.json (not a tstrain output "
                                 "directory); pass an empty or new --out")


def _load_run(path: Path) -> RunResult | None:
    """A finished run's record, or None when the file is unreadable or lacks a field (the run is redone)."""
    try:
        record = json.loads(path.read_text())
        names = {f.name for f in fields(RunResult)}
        return RunResult(**{k: v for k, v in record.items() if k in names})
    except (OSError, ValueError, TypeError):
        return None


def _proba_path(run_path: Path) -> Path:
    return run_path.with_name(run_path.stem + ".proba.safetensors")


def _save_proba(path: Path, proba: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    from ..encoders.io import atomic_write

    arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in proba.items()}
    atomic_write(path, lambda tmp: save_file(arrays, tmp))


def _load_proba(path: Path) -> dict[str, np.ndarray] | None:
    from safetensors.numpy import load_file

    try:
        return dict(load_file(str(path)))
    except Exception:  # missing, truncated or damaged: the run is redone
        return None


def ensemble_scores(runs: Sequence[dict], probas: Sequence[dict[str, np.ndarray]], k: int, y_val: np.ndarray,
                    y_test: np.ndarray) -> dict[str, Any]:
    """Accuracy of the mean probabilities of the ``k`` runs ranked best on validation (all runs when fewer).

    runs: run records (val_acc, val_loss); probas: their {"val", "test"} probabilities, in the same order.
    Returns {"k": members used, "test_acc", "val_acc", "members": indices into runs}."""
    if k < 1:
        raise ValueError(f"expected an ensemble of at least 1 run, got {k}")
    ranked = sorted(range(len(runs)), key=lambda i: (-runs[i]["val_acc"], runs[i]["val_loss"]))[:k]
    val = ensemble_proba([probas[i]["val"] for i in ranked])
    test = ensemble_proba([probas[i]["test"] for i in ranked])
    return {"k": len(ranked), "val_acc": scores(val, y_val)[0], "test_acc": scores(test, y_test)[0],
            "members": ranked}


def _pretrained_state(out_dir: Path, data: ClassificationData, model: str, cfg: SweepConfig, seed: int,
                      accelerator: Any, cpu: bool, is_main: bool) -> tuple[dict[str, torch.Tensor], dict]:
    """The pretrained weights of (dataset, model, seed): read from the sweep directory, or pretrained on the
    training split and written there (atomically)."""
    from ..encoders.io import atomic_write, read_safetensors

    folder = out_dir / "runs" / data.name / model
    weights, record_path = folder / f"pretrained_s{seed}.safetensors", folder / f"pretrained_s{seed}.json"
    if weights.exists() and record_path.exists():
        try:
            return read_safetensors(weights), json.loads(record_path.read_text())
        except ValueError:
            pass  # damaged: pretrain again
    state, record = pretrain_run(data, model, cfg, seed=seed, accelerator=accelerator, cpu=cpu)
    if is_main:
        from safetensors.torch import save_file

        tensors = {k: v.contiguous() for k, v in state.items()}
        atomic_write(weights, lambda tmp: save_file(tensors, tmp))
        atomic_write_text(record_path, json.dumps(record, indent=1) + "\n")
    return state, record


def run_sweep(datasets: Sequence[str], models: Sequence[str], cfg: SweepConfig, out_dir: str | Path,
              lrs: Sequence[float] = SWEEP_LRS, dropouts: Sequence[float] = SWEEP_DROPOUTS,
              baseline: str | Sequence[str] | None = None, data_dir: str | Path | None = None,
              progress: bool = True, skip_short: bool = False, log: Callable[[str], None] = print,
              cpu: bool = False, ensemble: int = 1) -> dict[str, Any]:
    """Run (or resume) the sweep and write the reports; returns {"rows", "ranks", "runs", "paths", ...}.

    Every dataset is loaded and checked before any training, so bad input fails with nothing written.
    ``skip_short``: drop datasets too short for ``cfg.patches`` (with a note) instead of failing.
    ``baseline``: names of :data:`BASELINES` (a comma-separated string or a list), run on the same splits.
    ``ensemble``: also score the mean probabilities of the top-k runs (chosen on validation) per dataset and
    model; 1 = off.
    """
    from tqdm.auto import tqdm

    models = list(dict.fromkeys(models))
    for m in models:
        if m not in PATCHTST_MODELS:
            raise ValueError(f"unknown model {m!r}; expected one or more of {', '.join(PATCHTST_MODELS)}")
    baselines_wanted = parse_baselines(baseline)
    if isinstance(ensemble, bool) or int(ensemble) != ensemble or ensemble < 1:
        raise ValueError(f"ensemble must be a positive integer (1 = single runs), got {ensemble!r}")
    if not datasets:
        raise ValueError("no datasets to run")
    out_dir = Path(out_dir)
    _check_out_dir(out_dir, cfg.identity())

    loaded: dict[str, ClassificationData] = {}
    for name in datasets:
        data = load_dataset(name, protocol=cfg.protocol, split_seed=cfg.split_seed, data_dir=data_dir,
                            normalize=cfg.normalize)
        try:
            check_patches(data, cfg.patches)
        except ValueError as err:
            if not skip_short:
                raise
            log(f"skipping {name}: {err}")
            continue
        loaded[name] = data
    if not loaded:
        raise ValueError(f"none of the datasets ({', '.join(datasets)}) allows {cfg.patches} patches")

    from ..training import make_accelerator

    accelerator = make_accelerator(train_config(cfg, 1e-3, 1, cpu=cpu))
    is_main = accelerator.is_main_process
    if is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        if not (out_dir / "sweep.json").exists():
            atomic_write_text(out_dir / "sweep.json", json.dumps(cfg.identity(), indent=2) + "\n")

    grid = [(lr, do) for lr in lrs for do in dropouts]
    seeds = cfg.run_seeds()
    total = len(loaded) * len(models) * len(grid) * len(seeds)
    if is_main:
        log(f"{len(loaded)} dataset(s) x {len(models)} model(s) x {len(grid) * len(seeds)} run(s) = {total} runs "
            f"-> {out_dir}")
    runs: list[RunResult] = []
    ensembles: dict[tuple[str, str], dict] = {}
    baselines: dict[str, dict] = {}
    dataset_seconds: dict[str, float] = {}
    pretrain_seconds: dict[tuple[str, str], float] = {}
    bar = tqdm(total=total, desc="sweep", unit="run", disable=not (progress and is_main), dynamic_ncols=True)
    for name, data in loaded.items():
        if is_main:
            (bar.write if progress else log)(data.summary())
        for model in models:
            model_runs: list[RunResult] = []
            model_probas: list[dict[str, np.ndarray]] = []
            pretrain_records: dict[int, dict] = {}
            for offset, seed in enumerate(seeds):
                pretrained = None
                for lr, dropout in grid:
                    path = out_dir / "runs" / name / model / f"{run_id(lr, dropout, offset)}.json"
                    done = _load_run(path) if path.exists() else None
                    proba = None
                    if done is not None and ensemble > 1:
                        proba = _load_proba(_proba_path(path))
                        if proba is None:
                            log(f"{path} has no stored probabilities (needed by --ensemble): running it again")
                            done = None
                    if done is None:
                        if cfg.pretrain_epochs and pretrained is None:
                            bar.set_postfix_str(f"{name} {model} pretraining seed {seed}")
                            pretrained, pretrain_records[seed] = _pretrained_state(
                                out_dir, data, model, cfg, seed, accelerator, cpu, is_main)
                        bar.set_postfix_str(f"{name} {model} lr={lr:g} do={dropout:g}"
                                            + (f" seed={seed}" if len(seeds) > 1 else ""))
                        done, proba = _train(data, model, lr, dropout, cfg, accelerator=accelerator, cpu=cpu,
                                             seed=seed, pretrained=pretrained)
                        if is_main:
                            _save_proba(_proba_path(path), proba)
                            atomic_write_text(path, json.dumps(asdict(done), indent=1) + "\n")
                        accelerator.free_memory()
                    runs.append(done)
                    model_runs.append(done)
                    model_probas.append(proba)
                    dataset_seconds[name] = dataset_seconds.get(name, 0.0) + done.wall_seconds
                    bar.update(1)
            if cfg.pretrain_epochs:  # pretraining costs once per seed, counted also when its runs were resumed
                for seed in seeds:
                    record_path = out_dir / "runs" / name / model / f"pretrained_s{seed}.json"
                    if seed not in pretrain_records and record_path.exists():
                        pretrain_records[seed] = json.loads(record_path.read_text())
                spent = float(sum(r.get("seconds", 0.0) for r in pretrain_records.values()))
                pretrain_seconds[(name, model)] = spent
                dataset_seconds[name] = dataset_seconds.get(name, 0.0) + spent
            if ensemble > 1:
                ensembles[(name, model)] = ensemble_scores([asdict(r) for r in model_runs], model_probas, ensemble,
                                                           data.val.y, data.test.y)
        for base in baselines_wanted:
            if not is_main:
                continue
            path = out_dir / "runs" / name / f"{base}.json"
            if path.exists():
                result = json.loads(path.read_text())
            else:
                bar.set_postfix_str(f"{name} {base}")
                result = rocket_baseline(base, data, seed=cfg.seed, data_dir=data_dir)
                atomic_write_text(path, json.dumps(result, indent=1) + "\n")
            baselines.setdefault(name, {})[base] = result
            dataset_seconds[name] = dataset_seconds.get(name, 0.0) + float(result.get("seconds", 0.0))
    bar.close()

    rows = summarize(runs, baselines, ensembles)
    for row in rows:
        if (row["dataset"], row["model"]) in pretrain_seconds:
            row["pretrain_seconds"] = pretrain_seconds[(row["dataset"], row["model"])]
            row["wall_seconds"] = row.get("wall_seconds", 0.0) + row["pretrain_seconds"]
    ranks = rank_models(rows, models)
    ran = _baseline_columns(rows)
    ranks_all = rank_models(rows, models + ran, keys=("best", "ens") if ensemble > 1 else ("best",)) if ran else None
    result = {"rows": rows, "ranks": ranks, "ranks_all": ranks_all, "runs": runs, "baselines": baselines,
              "models": models, "dataset_seconds": dataset_seconds, "ensemble": ensemble, "paths": {}}
    if is_main:
        result["paths"] = write_reports(out_dir, rows, ranks, models, runs, cfg, baselines, dataset_seconds, lrs,
                                        dropouts, {n: d.summary() for n, d in loaded.items()}, ranks_all=ranks_all,
                                        ensemble=ensemble)
    return result
