"""One training run: build the model for a dataset, train it with the shared runtime, predict, score.

The sweep (:func:`train_run`), masked-patch pretraining (:func:`pretrain_run`) and the aeon estimator all
set a run up here: :func:`new_run_model` (seeded model for the data), :func:`pretrain_model` (in place, on
the training split only) and :func:`fit_series_model` (loader, length, loss and :func:`jumbokit.training.fit`).
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn

from .data import ClassificationData, SeriesSplit
from .models import (HYBRID_MODELS, JUMBO_MODELS, JUMBO_MULTIPLIER, JUMBO_MULTIPLIER_MODELS,
                     PATCHTST_MODELS, REFERENCE_MODELS, SERIES_MODELS,
                     check_reference_model, max_patches, patch_geometry, width_options)
from .models.tokenizer import declared_missing
from .protocol import SweepConfig

__all__ = [
    "RunResult",
    "FittedModel",
    "build_series_model",
    "check_patches",
    "new_run_model",
    "series_loader",
    "predict_proba",
    "scores",
    "evaluate",
    "train_config",
    "series_loss",
    "run_length",
    "fit_series_model",
    "fit_frozen",
    "pretrain_model",
    "train_run",
    "train_run_model",
    "train_run_with_proba",
    "pretrain_run",
    "quiet_training",
]


@dataclass
class RunResult:
    """One finished run. Top-1 accuracies in percent (0-100)."""

    dataset: str
    model: str
    lr: float
    dropout: float
    val_top1: float
    test_top1: float
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


@dataclass
class FittedModel:
    """A trained model (collapsed to the plain depth when trained with branches) and how it was trained."""

    model: nn.Module
    history: list[dict]
    train_loss: float
    batch: int
    epochs: int  # passes over the training data
    steps: int  # optimizer steps
    seconds: float  # training time, without building the model


@contextmanager
def quiet_training() -> Iterator[None]:
    """Hide the shared training loop's INFO lines (per-epoch records) inside the block; warnings still show."""
    training_logger = logging.getLogger("jumbokit.training")
    level = training_logger.level
    training_logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        training_logger.setLevel(level)


def build_series_model(name: str, data: ClassificationData, patches: int, dropout: float = 0.0,
                       strict: bool = True, branches: int = 1, max_patch_len: int | None = None,
                       rocket_seed: int = 0, **tokenizer: Any) -> nn.Module:
    """The zoo model for a dataset: channels, length and classes from ``data``; ``dropout`` -> drop_rate.

    ``max_patch_len``: longer series get more patches of this length (see ``capped_patch_geometry``).
    ``tokenizer``: series tokenizer options of the encoder (``conv_stem=W``, ``trunk="inception"``,
    ``trunk_width``, ``trunk_depth``, ``trunk_diff``, ``token_stats``; see ``SweepConfig.tokenizer_options``).
    ``depth`` among them: transformer layers instead of the model's own 3 (not for ``series_cnn``, which has none).
    ``branches=n > 1``: the progressive-join training form with n times the layers in blocks of n parallel
    branches, which collapses exactly into the plain model's depth (``model.reparameterize()``).
    A hybrid name (``patchtst_jumbo_rocket``) wraps its transformer with MiniRocket features fitted on
    ``data.train`` only (``rocket_seed``; see ``jumbokit.timeseries.models.rocket``)."""
    from ..encoders import create_model, model_config

    if name in HYBRID_MODELS:
        from .models.rocket import build_rocket_hybrid

        if branches > 1:
            raise ValueError(f"{name} cannot train progressive-join branches; use branches=1")
        encoder = build_series_model(HYBRID_MODELS[name], data, patches, dropout, strict, 1, max_patch_len,
                                     **tokenizer)
        return build_rocket_hybrid(encoder, data.train.x, seed=rocket_seed)
    if name not in PATCHTST_MODELS + REFERENCE_MODELS:
        raise ValueError(f"expected a model among {', '.join(SERIES_MODELS)}, got {name!r}")
    if name in REFERENCE_MODELS:
        check_reference_model(name, layers=tokenizer.get("depth"), branches=branches)
    if branches < 1:
        raise ValueError(f"branches must be >= 1, got {branches}")
    extra: dict[str, Any] = {}
    if branches > 1:
        depth = tokenizer.pop("depth", None) or int(model_config(name, seq_len=data.seq_len)["depth"])
        extra = dict(branches=branches, depth=int(depth) * branches)
    return create_model(name, num_classes=data.num_classes, in_chans=data.channels, seq_len=data.seq_len,
                        patches=patches, max_patch_len=max_patch_len, strict_patches=strict,
                        drop_rate=float(dropout), **tokenizer, **extra)


def check_patches(data: ClassificationData, patches: int) -> None:
    """Raise ValueError when ``patches`` cannot be cut from this dataset's (longest) series."""
    if patches > max_patches(data.seq_len):
        raise ValueError(f"--patches {patches} is larger than {data.name} allows: its longest series has "
                         f"{data.seq_len} steps, which give at most {max_patches(data.seq_len)} patches")
    patch_geometry(data.seq_len, patches, strict=True)


def new_run_model(data: ClassificationData, model_name: str, cfg: SweepConfig, dropout: float, seed: int,
                  strict: bool = True) -> nn.Module:
    """The sweep's model for ``data``, initialised from ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return build_series_model(model_name, data, cfg.model.patches, dropout, strict=strict, branches=cfg.branches,
                              max_patch_len=cfg.model.max_patch_len, rocket_seed=seed,
                              **cfg.tokenizer_options(data.seq_len), **head_options(model_name, cfg),
                              **global_token_options(model_name, cfg), **encoder_options(cfg))


def head_options(model_name: str, cfg: SweepConfig) -> dict[str, Any]:
    """The encoder options of the sweep's heads: ``jumbo_pool`` for a Jumbo model
    (:data:`~jumbokit.timeseries.protocol.JUMBO_POOLS`; the CLS models' feature is their CLS token), and
    ``trunk_head`` when ``cfg.model.trunk_head`` is on (a second head on the trunk's mean token), except for the
    trunk-alone reference, whose one head reads that mean token already."""
    options: dict[str, Any] = {"jumbo_pool": cfg.jumbo_pool} if model_name in JUMBO_MODELS else {}
    if cfg.model.trunk_head and model_name not in REFERENCE_MODELS:
        options["trunk_head"] = True
    return options


def global_token_options(model_name: str, cfg: SweepConfig) -> dict[str, Any]:
    """``jumbo_multiplier`` when ``cfg.jumbo_multiplier`` is not the models' J=4: the Jumbo token's J for a Jumbo
    model, the J that ``patchtst_registers``' R is matched to (Proposition 1); nothing for the CLS-only models.
    ``length_embed`` when ``cfg.model.length_embed`` is on, except for the trunk-alone reference (no global token)."""
    options: dict[str, Any] = {}
    if cfg.model.length_embed and model_name not in REFERENCE_MODELS:
        options["length_embed"] = True
    if cfg.jumbo_multiplier != JUMBO_MULTIPLIER and model_name in JUMBO_MULTIPLIER_MODELS:
        options["jumbo_multiplier"] = int(cfg.jumbo_multiplier)
    return options


def encoder_options(cfg: SweepConfig) -> dict[str, Any]:
    """The sweep's encoder options beyond the tokenizer and head, where they differ from the models' defaults:
    ``init_values`` (LayerScale) when ``cfg.layer_scale`` is on, ``pos_embed`` when not "learn", ``depth`` when
    ``cfg.layers`` is set, ``drop_path_rate`` (stochastic depth) when ``cfg.drop_path`` is on, and the token width
    ``dim`` with ``dim // 8`` heads and an FFN hidden of ``2 * dim`` (the models' 128 / 16 / 256) when ``cfg.dim``
    is set."""
    options: dict[str, Any] = {"init_values": float(cfg.layer_scale)} if cfg.layer_scale else {}
    if cfg.pos_embed != "learn":
        options["pos_embed"] = cfg.pos_embed
    if cfg.layers is not None:
        options["depth"] = int(cfg.layers)
    if cfg.drop_path:
        options["drop_path_rate"] = float(cfg.drop_path)
    if cfg.dim is not None:
        options.update(width_options(cfg.dim))
    return options


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
    """(accuracy in [0, 1], mean cross-entropy) of class probabilities (n, K) against labels y (n,)."""
    picked = proba[np.arange(len(y)), y]
    loss = float(-np.log(np.clip(picked, 1e-12, None)).mean())
    return float((proba.argmax(-1) == y).mean()), loss


def evaluate(model: nn.Module, split: SeriesSplit, batch_size: int = 256) -> tuple[float, float]:
    """(accuracy in [0, 1], mean cross-entropy) of a model on a split."""
    return scores(predict_proba(model, split.x, batch_size), split.y)


def train_config(cfg: SweepConfig, lr: float, epochs: int, progress: bool = False, cpu: bool = False,
                 seed: int | None = None):
    """The shared runtime's TrainConfig for one run of the protocol (no checkpoints: runs are short)."""
    from ..training import TrainConfig

    return TrainConfig(epochs=epochs, lr=lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.999), optimizer="adamw",
                       warmup_fraction=cfg.warmup_fraction, min_lr=cfg.min_lr, schedule="cosine",
                       mixed_precision=cfg.mixed_precision, seed=cfg.seed if seed is None else seed,
                       checkpoint_every=0, progress=progress, cpu=cpu, save_model=False, ema_decay=cfg.ema_decay,
                       grad_clip=cfg.grad_clip, lr_cycles=int(cfg.lr_cycles),
                       layer_decay=cfg.layer_decay)


def series_loss(cfg: SweepConfig, num_classes: int, seed: int):
    """The training loss of a run: cross-entropy (targets smoothed by ``cfg.label_smoothing``), with the sweep's
    series augmentation and mixup drawn from a CPU generator seeded with ``seed`` (a ``loss_fn`` for
    :func:`jumbokit.training.fit`); ``cfg`` decided for the set (:meth:`SweepConfig.for_dataset`)."""
    from ..training import classification_loss
    from .augment import SeriesAugment, SeriesMixup, parse_augment

    cfg.check_decided()
    ops = parse_augment(cfg.augment)
    generator = torch.Generator().manual_seed(seed + 7919)
    per_series = [op for op in ops if op != "mixup"]
    augment = (SeriesAugment(tuple(per_series), jitter_relative=cfg.model.level_scale, generator=generator)
               if per_series else None)
    if "mixup" in ops:
        mixup = SeriesMixup(num_classes, cfg.mixup_alpha, augment, generator, smoothing=cfg.label_smoothing)
        return classification_loss(mixup=mixup)
    criterion = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    if augment is not None:
        return classification_loss(criterion, forward=lambda model, x: augmented_forward(model, augment, x))
    return classification_loss(criterion)


def augmented_forward(model: nn.Module, augment: Callable[[torch.Tensor], torch.Tensor],
                      x: torch.Tensor) -> torch.Tensor:
    """Logits of the augmented batch; a model with ``takes_clean_input`` (the ROCKET hybrid) also gets the clean
    batch x (B, C, L), from which it computes its fixed features."""
    from accelerate.utils import extract_model_from_parallel

    if getattr(extract_model_from_parallel(model), "takes_clean_input", False):
        return model(augment(x), rocket_input=x)
    return model(augment(x))


def run_length(data: ClassificationData, cfg: SweepConfig) -> tuple[int, int, int, int | None]:
    """(batch size, optimizer steps, passes over the training data, the fixed steps or None) of a run on
    ``data``: fixed steps whatever the set size, or the protocol's epochs of ``ceil(n_train / batch)`` steps."""
    n = len(data.train)
    batch = cfg.batch_for(n, data.channels)
    fixed_steps = cfg.steps_for(data.seq_len)
    if fixed_steps is not None:
        return batch, fixed_steps, math.ceil(fixed_steps * min(batch, n) / n), fixed_steps
    per_epoch = math.ceil(n / batch)
    epochs = cfg.epochs_for(data.name, per_epoch)
    return batch, epochs * per_epoch, epochs, None


def fit_series_model(model: nn.Module, data: ClassificationData, lr: float, cfg: SweepConfig, seed: int,
                     progress: bool = False, accelerator: Any = None, cpu: bool = False) -> FittedModel:
    """Train ``model`` on ``data.train`` for the length ``cfg`` sets (fixed steps, or epochs of the protocol); with
    ``cfg.frozen``, fit its head alone as a ridge classifier of the frozen encoder's features (:func:`fit_frozen`)."""
    from ..training import fit

    if cfg.frozen:
        return fit_frozen(model, data, cfg)
    batch, steps, epochs, fixed_steps = run_length(data, cfg)
    loader = series_loader(data.train, batch, shuffle=True, seed=seed, steps=fixed_steps)
    fit_epochs = 1 if fixed_steps is not None else epochs
    if cfg.branches > 1:
        model.join_warmup_steps = max(1, steps // 2)  # joined by mid-training, then trained joined
    tcfg = train_config(cfg, lr, fit_epochs, progress=progress, cpu=cpu, seed=seed)
    stopping: dict[str, Any] = {}
    if cfg.early_stop:  # the validation half scored every eval_every steps; the run's steps are its budget
        from ..training import EarlyStop

        every, start = cfg.scoring(steps)
        stopping = dict(early_stop=EarlyStop(every=every, patience=cfg.early_stop, start=start,
                                             metric=cfg.early_stop_metric),
                        eval_loaders={"val": series_loader(data.val, 256, shuffle=False)})
    # splits the model reads without NaN are declared so: no step reads its batch back to look (a GPU sync)
    read = [data.train.x] + ([data.val.x] if stopping else [])
    missing = None if any(bool(np.isnan(x).any()) for x in read) else False
    start = time.perf_counter()
    with declared_missing(model, missing):
        result = fit(model, loader, series_loss(cfg, data.num_classes, seed), tcfg, accelerator=accelerator,
                     **stopping)
    seconds = time.perf_counter() - start
    model = result.model
    if cfg.branches > 1:
        model = model.reparameterize()  # the plain model that is scored (and would be deployed)
    ran = int(result.final["early_stop"]["last_step"]) if stopping else steps
    return FittedModel(model=model, history=result.history, train_loss=float(result.final.get("train_loss", math.nan)),
                       batch=batch, epochs=math.ceil(epochs * ran / steps), steps=ran, seconds=seconds)


def fit_frozen(model: nn.Module, data: ClassificationData, cfg: SweepConfig) -> FittedModel:
    """``model``'s encoder frozen, its head fitted as a ridge classifier of the encoder's features of
    ``data.train`` (:func:`~jumbokit.timeseries.ridge_head.fit_ridge_head`): no optimizer step, one pass over the
    training series. The history holds the fit's one record (the penalty chosen, the features' width)."""
    from .ridge_head import fit_ridge_head

    batch = cfg.batch_for(len(data.train), data.channels)
    start = time.perf_counter()
    chosen = fit_ridge_head(model, data.train.x, data.train.y, batch_size=256)
    seconds = time.perf_counter() - start
    train_acc, train_loss = scores(torch.softmax(torch.from_numpy(chosen["train_logits"]), -1).numpy(), data.train.y)
    history = [{"ridge_alpha": chosen["alpha"], "features": chosen["features"], "train_loss": train_loss,
                "train_top1": 100.0 * train_acc}]
    return FittedModel(model=model.eval(), history=history, train_loss=train_loss, batch=batch, epochs=1, steps=0,
                       seconds=seconds)


def pretrain_model(model: nn.Module, data: ClassificationData, cfg: SweepConfig, seed: int, progress: bool = False,
                   cpu: bool = False, accelerator: Any = None, data_dir: str | Path | None = None):
    """Masked-patch pretraining of ``model`` (in place) for as many steps as ``cfg.pretrain_epochs`` passes over
    the TRAINING split take at the run's batch size: on that split, or with ``cfg.pretrain_on`` on the pool of
    the named sets' training splits (``pretraining_pool``; the target is left out). Returns the
    :class:`~jumbokit.timeseries.pretrain.PretrainResult`."""
    from .pool import pretraining_pool
    from .pretrain import pretrain_series

    batch = min(cfg.batch_for(len(data.train), data.channels), len(data.train))
    steps = cfg.pretrain_epochs * math.ceil(len(data.train) / batch)
    x = data.train.x
    if cfg.pretrain_on:
        x = pretraining_pool(cfg.pretrain_on, data.name, data.channels, data.seq_len, data_dir, seed)
    return pretrain_series(model, x, steps=steps, batch_size=batch, lr=cfg.pretrain_lr,
                           mask_ratio=cfg.pretrain_mask_ratio, seed=seed, progress=progress, cpu=cpu,
                           accelerator=accelerator)


def train_run_model(data: ClassificationData, model_name: str, lr: float, dropout: float, cfg: SweepConfig,
                    progress: bool = False, accelerator: Any = None, cpu: bool = False, seed: int | None = None,
                    pretrained: dict[str, torch.Tensor] | None = None
                    ) -> tuple[RunResult, dict[str, np.ndarray], nn.Module]:
    """One run, its validation / test probabilities ({"val": (n_val, K), "test": (n_test, K)}) and the scored
    model (in eval mode). The model starts from ``pretrained`` (a state dict of the same model) when given, else from
    the pretrained encoder ``cfg.init`` names for it (its head its own), else from its seeded initialisation."""
    seed = cfg.seed if seed is None else int(seed)
    wall_start = time.perf_counter()
    cfg = cfg.for_dataset(data.train.x)
    model = new_run_model(data, model_name, cfg, dropout, seed)
    if pretrained is not None:
        model.load_state_dict(pretrained)
    elif cfg.init:
        from .encoder_pretrain import encoder_state, init_for, load_into

        init = init_for(cfg.init, model_name)
        load_into(model, encoder_state(init), source=f"the encoder {init}")
    fitted = fit_series_model(model, data, lr, cfg, seed, progress=progress, accelerator=accelerator, cpu=cpu)
    model = fitted.model
    eval_batch = fitted.batch if isinstance(cfg.batch_size, int) else 256
    proba = {"val": predict_proba(model, data.val.x, eval_batch)}
    proba["test"] = proba["val"] if data.test is data.val else predict_proba(model, data.test.x, eval_batch)
    val_acc, val_loss = scores(proba["val"], data.val.y)
    test_acc = scores(proba["test"], data.test.y)[0]
    extra: dict[str, Any] = {}
    if seed != cfg.seed:
        extra["seed"] = seed
    if pretrained is not None:
        extra["pretrained"] = True
    elif cfg.init:
        extra["init"] = init
    if cfg.frozen:
        extra["ridge_alpha"] = fitted.history[0]["ridge_alpha"]
    if cfg.early_stop:
        stopped = fitted.history[-1]["early_stop"]
        extra["early_stop"] = {k: stopped[k] for k in ("rule", "best_step", "last_step", "budget_steps", "stopped",
                                                       "curve")}
    run = RunResult(
        dataset=data.name, model=model_name, lr=float(lr), dropout=float(dropout), val_top1=100.0 * val_acc,
        test_top1=100.0 * test_acc, val_loss=val_loss, train_loss=fitted.train_loss, epochs=fitted.epochs, steps=fitted.steps,
        train_seconds=fitted.seconds, wall_seconds=time.perf_counter() - wall_start,
        step_ms=1000.0 * fitted.seconds / max(1, fitted.steps),
        params=sum(p.numel() for p in model.parameters()), patch_len=int(model.config["patch_len"]),
        stride=int(model.config["stride"]), num_patches=int(model.num_patches),
        global_tokens=int(model.num_global_tokens), extra=extra,
    )
    return run, proba, model.eval()


def train_run_with_proba(data: ClassificationData, model_name: str, lr: float, dropout: float, cfg: SweepConfig,
                         progress: bool = False, accelerator: Any = None, cpu: bool = False, seed: int | None = None,
                         pretrained: dict[str, torch.Tensor] | None = None) -> tuple[RunResult, dict[str, np.ndarray]]:
    """One run and its validation / test probabilities ({"val": (n_val, K), "test": (n_test, K)})."""
    return train_run_model(data, model_name, lr, dropout, cfg, progress, accelerator, cpu, seed, pretrained)[:2]


def train_run(data: ClassificationData, model_name: str, lr: float, dropout: float, cfg: SweepConfig,
              progress: bool = False, accelerator: Any = None, cpu: bool = False, seed: int | None = None,
              pretrained: dict[str, torch.Tensor] | None = None) -> RunResult:
    """Train one configuration on ``data`` with the shared runtime and score the final model.

    seed: of initialisation, data order and augmentation (default ``cfg.seed``); pretrained: a state dict of
    the same model (e.g. from :func:`pretrain_run`) to start from."""
    return train_run_with_proba(data, model_name, lr, dropout, cfg, progress, accelerator, cpu, seed, pretrained)[0]


def pretrain_run(data: ClassificationData, model_name: str, cfg: SweepConfig, seed: int | None = None,
                 progress: bool = False, accelerator: Any = None, cpu: bool = False,
                 data_dir: str | Path | None = None) -> tuple[dict, dict]:
    """Masked-patch pretraining of a sweep's model (dropout 0) on training series only (see
    :func:`pretrain_model`). Returns (state dict of the model, {"loss", "steps", "seconds"})."""
    seed = cfg.seed if seed is None else int(seed)
    cfg = cfg.for_dataset(data.train.x)
    model = new_run_model(data, model_name, cfg, 0.0, seed)
    result = pretrain_model(model, data, cfg, seed, progress=progress, cpu=cpu, accelerator=accelerator,
                            data_dir=data_dir)
    state = {k: v.detach().cpu().clone() for k, v in result.model.state_dict().items()}
    return state, {"loss": result.loss, "steps": result.steps, "seconds": result.seconds}
