"""Optimizers (AdamW / SGD / LARS) with no weight decay on norms, biases, tokens and position embeddings, and the
per-step warm-up + cosine learning-rate schedule.

Kept rather than timm's: ``CosineLRScheduler`` cannot draw this schedule (our warm-up reaches the peak at step
``warmup - 1`` and the cosine starts from the peak at step ``warmup``, so the peak lasts two steps; in timm's it
lasts one, whichever step is passed, and the steps after it differ), and ``param_groups_weight_decay`` makes the
same split but puts the no-decay group first (earlier checkpoints' optimizer states are decay-first), merges both
into one group at weight decay 0 and matches ``no_weight_decay()`` names exactly or by wildcard depending on the
timm release.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch
from torch import nn

from .config import TrainConfig


def param_groups(
    model: nn.Module, weight_decay: float, no_decay_names: Iterable[str] | None = None
) -> list[dict]:
    """Two param groups: ``decay`` (matrices, conv kernels) and ``no_decay`` (1-D params such as norms and
    biases, plus ``model.no_weight_decay()`` names: tokens, pos_embed). Frozen params are left out.

    Names from ``no_weight_decay()`` match a parameter exactly or as a prefix (``jumbo_token`` ->
    ``jumbo_token``, ``global_tokens`` -> ``global_tokens.*``).
    """
    skip = set(no_decay_names or ())
    if hasattr(model, "no_weight_decay"):
        skip |= set(model.no_weight_decay())
    decay, no_decay, decay_names, no_decay_names_out = [], [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        skipped = p.ndim <= 1 or any(name == s or name.startswith(s + ".") for s in skip)
        (no_decay if skipped else decay).append(p)
        (no_decay_names_out if skipped else decay_names).append(name)
    groups = []
    if decay:
        groups.append({"params": decay, "weight_decay": weight_decay, "names": decay_names, "group": "decay"})
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0, "names": no_decay_names_out, "group": "no_decay"})
    if not groups:
        raise ValueError(f"{type(model).__name__} has no trainable parameters")
    return groups


def check_layer_decay(model: nn.Module, layer_decay: float) -> None:
    """Raise ``ValueError`` unless ``model`` has layers (timm's ``group_matcher()``) and ``layer_decay`` is in
    (0, 1]."""
    if not callable(getattr(model, "group_matcher", None)):
        raise ValueError(f"--layer-decay needs a model with timm's group_matcher() (its layers); "
                         f"{type(model).__name__} has none")
    if not 0 < layer_decay <= 1:
        raise ValueError(f"--layer-decay must be in (0, 1] (e.g. 0.75; 1 = every layer at the full rate), "
                         f"got {layer_decay}")


def layer_decay_groups(model: nn.Module, weight_decay: float, layer_decay: float) -> list[dict]:
    """Param groups for layer-wise learning-rate decay (fine-tuning; BEiT / MAE), as timm's
    ``param_groups_layer_decay`` makes them: one group per (layer, decay / no decay), the layers from the model's
    ``group_matcher()``, each group's ``lr_scale`` = ``layer_decay ** (last layer - layer)`` (the head keeps the
    full rate). Weight decay is split as in :func:`param_groups`: 1-D params and ``no_weight_decay()`` names
    (exactly or as a prefix) get none. Frozen params are left out.
    """
    from timm.optim import param_groups_layer_decay

    check_layer_decay(model, layer_decay)
    names = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    patterns = sorted(names | {name + ".*" for name in names})  # timm matches by fnmatch pattern
    return param_groups_layer_decay(model, weight_decay, patterns, layer_decay=layer_decay)


def build_optimizer(model_or_params: nn.Module | Iterable, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Optimizer named by ``cfg.optimizer`` over ``param_groups(model)`` (``layer_decay_groups`` with
    ``cfg.layer_decay``) or the given params / groups.

    Every group keeps ``base_lr`` (its peak learning rate: its own ``lr``, else ``cfg.lr`` times its ``lr_scale``
    when it has one); the schedule scales it. ``"lars"`` is :func:`build_lars` (LARS as MAE's linear probe uses
    it); weight decay is set per group.
    """
    if isinstance(model_or_params, nn.Module) and cfg.layer_decay is not None:
        groups = layer_decay_groups(model_or_params, cfg.weight_decay, cfg.layer_decay)
    elif isinstance(model_or_params, nn.Module):
        groups = param_groups(model_or_params, cfg.weight_decay)
    else:
        groups = list(model_or_params)
        if not groups:
            raise ValueError("build_optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
    for g in groups:
        g.setdefault("weight_decay", cfg.weight_decay)
        g.setdefault("lr", cfg.lr * g["lr_scale"] if "lr_scale" in g else cfg.lr)
        g["base_lr"] = g["lr"]
        g.pop("names", None)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "lars":
        return build_lars(groups, lr=cfg.lr, momentum=cfg.momentum)
    raise ValueError(f"unknown optimizer {cfg.optimizer!r}; expected adamw, sgd or lars")


def build_lars(groups: Iterable[dict], lr: float, momentum: float = 0.9, trust_coeff: float = 0.001) -> torch.optim.Optimizer:
    """LARS (timm's ``Lars``) as MAE's linear probe uses it: every tensor of two or more dimensions gets the
    layer-wise trust ratio ``trust_coeff * ||w|| / (||g|| + wd * ||w||)`` on its step whatever its weight decay
    (``always_adapt``; without it timm adapts only groups with weight decay, i.e. plain momentum SGD at wd 0);
    1-D tensors (biases, norm affines) take plain momentum SGD steps without weight decay.

    ``groups``: param-group dicts (``params`` plus e.g. ``weight_decay``, ``lr``, ``base_lr``), split here by
    tensor rank; empty parts are dropped.
    """
    from timm.optim import Lars

    split = []
    for group in groups:
        params = list(group["params"])
        matrices = [p for p in params if p.ndim > 1]
        vectors = [p for p in params if p.ndim <= 1]
        if matrices:
            split.append({**group, "params": matrices, "always_adapt": True})
        if vectors:
            split.append({**group, "params": vectors, "always_adapt": False, "weight_decay": 0.0})
    if not split:
        raise ValueError("LARS got no parameters")
    return Lars(split, lr=lr, momentum=momentum, trust_coeff=trust_coeff)


def lr_lambda(
    step: int,
    total_steps: int,
    warmup_steps: int = 0,
    base_lr: float = 1.0,
    min_lr: float = 0.0,
    schedule: str = "cosine",
) -> float:
    """Multiplier of ``base_lr`` at optimizer step ``step`` (0-based) of ``total_steps``.

    Linear warm-up ``(step + 1) / warmup_steps`` for the first ``warmup_steps`` steps, then ``schedule``:
    "cosine" (half cosine from base_lr to min_lr), "linear" (straight line to min_lr) or "constant".
    """
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    if schedule == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    elif schedule == "linear":
        shape = 1.0 - progress
    else:
        raise ValueError(f"unknown schedule {schedule!r}; expected cosine, linear or constant")
    floor = min_lr / base_lr if base_lr > 0 else 0.0
    return floor + (1.0 - floor) * shape


def epochs_for_min_steps(epochs: int, min_steps: int, steps_per_epoch: int) -> int:
    """``epochs``, raised so that training takes at least ``min_steps`` optimizer steps (small datasets)."""
    if epochs < 1 or min_steps < 0:
        raise ValueError(f"expected epochs >= 1 and min_steps >= 0; got epochs={epochs}, min_steps={min_steps}")
    return max(int(epochs), math.ceil(min_steps / max(1, steps_per_epoch)))


def warmup_steps_for(cfg: TrainConfig, steps_per_epoch: int, total: int | None = None) -> int:
    """Warm-up length in optimizer steps of a schedule of ``total`` steps (default: the whole run, ``cfg.epochs``
    epochs): ``warmup_fraction`` of them wins over ``warmup_epochs``."""
    total = cfg.epochs * steps_per_epoch if total is None else total
    if cfg.warmup_fraction is not None:
        return int(round(cfg.warmup_fraction * total))
    return min(total, int(round(cfg.warmup_epochs * steps_per_epoch)))


def cycle_length(total_steps: int, lr_cycles: int) -> int:
    """Optimizer steps of one learning-rate cycle when ``lr_cycles`` restarts share ``total_steps`` (at most one cycle
    a step; the last cycle may be shorter)."""
    return math.ceil(total_steps / min(lr_cycles, total_steps))


@dataclass(frozen=True)
class StepPlan:
    """The training length of ``cfg`` over a loader of ``batches`` micro-batches per epoch (after sharding)."""

    batches: int
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int
    cycles: int  # learning-rate cycles (``TrainConfig.lr_cycles``, at most one a step)
    cycle_warmup: int  # the warm-up of each cycle (warmup_steps with one cycle)

    @classmethod
    def of(cls, batches: int, cfg: TrainConfig) -> "StepPlan":
        """Raise ``ValueError`` for an empty loader; ``grad_accum`` micro-batches make one optimizer step."""
        if batches == 0:
            raise ValueError("the training loader yields no batches (dataset smaller than one batch per process?); "
                             "lower the batch size")
        steps_per_epoch = math.ceil(batches / cfg.grad_accum)
        total = cfg.epochs * steps_per_epoch
        cycle_warmup = warmup_steps_for(cfg, steps_per_epoch, cycle_length(total, cfg.lr_cycles))  # a cycle-long run
        return cls(batches, steps_per_epoch, total, warmup_steps_for(cfg, steps_per_epoch), min(cfg.lr_cycles, total),
                   cycle_warmup)

    @property
    def cycle_steps(self) -> int:
        """Optimizer steps of a learning-rate cycle (the last may be shorter)."""
        return cycle_length(self.total_steps, self.cycles)

    def schedule_at(self, step: int) -> tuple[int, int, int]:
        """(step within its learning-rate cycle, the cycle's steps, its warm-up), what :func:`set_lr` schedules:
        with one cycle, (step, total_steps, warmup_steps)."""
        start = min(step // self.cycle_steps, self.cycles - 1) * self.cycle_steps
        return step - start, min(self.cycle_steps, self.total_steps - start), self.cycle_warmup


def set_lr(optimizer: torch.optim.Optimizer, step: int, total_steps: int, warmup_steps: int, cfg: TrainConfig) -> float:
    """Set every group's lr for ``step``; returns the lr of the first group with the highest ``base_lr`` (the
    first group when all share one; the head's under layer-wise lr decay, i.e. the schedule's own rate)."""
    for g in optimizer.param_groups:
        base = g.get("base_lr", cfg.lr)
        g["lr"] = base * lr_lambda(step, total_steps, warmup_steps, base, min(cfg.min_lr, base), cfg.schedule)
    return max(optimizer.param_groups, key=lambda g: g.get("base_lr", cfg.lr))["lr"]
