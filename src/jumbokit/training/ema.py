"""Exponential moving average of a model's weights (``TrainConfig.ema_decay``; timm's ``--model-ema``).

    ema = WeightEMA(model, decay=0.998)
    for step in range(total_steps):
        ...; optimizer.step()
        ema.update(model, step)          # after every optimizer step
    evaluate(ema.module)                 # the averaged copy (same class as ``model``, eval mode)

The decay warms up as ``min(decay, (1 + t) / (10 + t))`` at update ``t`` (as timm's ``ModelEmaV3``), so the
first updates follow the model closely instead of keeping its random initialisation for thousands of steps.
Buffers are copied, not averaged. :func:`jumbokit.training.fit` stores ``module`` in every checkpoint as
``ema.safetensors`` and restores it on resume.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

__all__ = ["WeightEMA"]


class WeightEMA(nn.Module):
    """A frozen copy of ``model`` whose floating-point parameters track their exponential moving average."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        super().__init__()
        if not 0.0 < decay < 1.0:
            raise ValueError(f"expected an EMA decay in (0, 1), got {decay!r}")
        self.decay = float(decay)
        self.module = copy.deepcopy(model).eval().requires_grad_(False)

    def decay_at(self, update: int) -> float:
        """The decay used at update ``update`` (0-based)."""
        return min(self.decay, (1.0 + update) / (10.0 + update))

    @torch.no_grad()
    def update(self, model: nn.Module, update: int) -> None:
        """Move the average towards ``model``'s current weights (``update``: optimizer steps taken before)."""
        averaged, current = [], []
        for mine, theirs in zip(self.module.parameters(), model.parameters(), strict=True):
            if mine.is_floating_point():
                averaged.append(mine)
                current.append(theirs.detach())
            else:
                mine.copy_(theirs)
        if averaged:  # one fused kernel per device and dtype, as torch's AveragedModel does
            torch._foreach_lerp_(averaged, current, 1.0 - self.decay_at(update))
        for mine, theirs in zip(self.module.buffers(), model.buffers(), strict=True):
            mine.copy_(theirs)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)
