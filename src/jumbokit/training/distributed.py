"""What ``fit`` needs to give one answer on 1 or N processes: per-process random streams, evaluation on every
process, and the full model under FSDP (whose parameters are sharded, so its forward and state dict are
collective)."""
from __future__ import annotations

import copy
from typing import Any, Callable

import torch
from torch import nn

from .accelerator import is_fsdp
from .evaluate import evaluate_classifier

Forward = Callable[[nn.Module, torch.Tensor], torch.Tensor]

__all__ = ["process_seed", "seed_process", "check_sharding", "FullModel", "full_state_dict",
           "evaluate_loaders"]


def process_seed(seed: int, process_index: int) -> int:
    """The seed of process ``process_index``: ``seed + process_index`` (as MAE's reference seeds each rank), so
    process 0 keeps the stream of a one-process run and the others draw their own masks, drop paths and dropouts."""
    return int(seed) + int(process_index)


def seed_process(seed: int, accelerator) -> int:
    """Seed Python, NumPy and torch (CPU and every GPU) of this process with ``process_seed``; returns the seed."""
    from accelerate.utils import set_seed

    value = process_seed(seed, accelerator.process_index)
    set_seed(value)
    return value


def check_sharding(accelerator, ema_decay: float) -> None:
    """Raise ``ValueError`` for what FSDP cannot do here: a weight average (it would need the whole model on
    every process)."""
    if ema_decay > 0 and is_fsdp(accelerator):
        raise ValueError(f"ema_decay={ema_decay} is not supported under FSDP (the weight average would need the "
                         "whole model on every process); train with DDP or set ema_decay 0")


class FullModel:
    """The whole trained model on the main process, for what runs there alone (``eval_fn``, ``on_epoch_end``, the
    final save, the returned model).

    Without FSDP that is the unwrapped model itself. Under FSDP the main process keeps a plain copy taken before
    sharding; ``refresh`` (called on every process: the state dict is gathered collectively) loads the current
    weights into it."""

    def __init__(self, accelerator, model: nn.Module) -> None:
        self.acc, self.sharded = accelerator, is_fsdp(accelerator)
        self.copy = copy.deepcopy(model) if self.sharded and accelerator.is_main_process else None
        self.prepared: nn.Module | None = None

    def attach(self, prepared: nn.Module) -> None:
        """The model as Accelerate prepared it."""
        self.prepared = prepared

    def refresh(self) -> nn.Module:
        """The current whole model (the unwrapped model, or under FSDP the main process's refreshed copy; other
        processes get the sharded module)."""
        if not self.sharded:
            return self.acc.unwrap_model(self.prepared)
        state = full_state_dict(self.acc, self.prepared)
        if self.copy is None:
            return self.acc.unwrap_model(self.prepared)
        self.copy.load_state_dict({k: v.to(next(self.copy.parameters()).device) for k, v in state.items()})
        return self.copy


def full_state_dict(accelerator, prepared: nn.Module) -> dict[str, torch.Tensor]:
    """The whole state dict of an FSDP-prepared model (collective: every process calls it).

    FSDP2: the module's own ``state_dict()`` (its key renaming hooks apply: timm names) with every sharded
    DTensor gathered by ``full_tensor()``; FSDP1: ``accelerator.get_state_dict`` (full tensors on the main
    process)."""
    if not getattr(accelerator, "is_fsdp2", False):
        return accelerator.get_state_dict(prepared)
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach()
            for k, v in prepared.state_dict().items()}


def evaluate_loaders(accelerator, model: nn.Module, loaders: dict[str, Any],
                     forward: Forward | dict[str, Forward] | None = None) -> dict[str, Any]:
    """``evaluate_classifier`` of ``model`` on every prepared loader, each process on its shard, combined with
    ``gather_for_metrics``: ``{f"{split}_top1", f"{split}_top5", f"{split}_loss", f"{split}_n"}`` per split,
    the same on every process. ``forward(model, images) -> logits``: one for every split, or one per split."""
    out: dict[str, Any] = {}
    with accelerator.autocast():
        for split, loader in loaders.items():
            split_forward = forward.get(split) if isinstance(forward, dict) else forward
            out.update(evaluate_classifier(model, loader, forward=split_forward, prefix=f"{split}_",
                                           accelerator=accelerator))
    return out
