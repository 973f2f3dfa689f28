"""Exponential moving average of a model's weights (``TrainConfig.ema_decay``; timm's ``--model-ema``).

    ema = WeightEMA(model, decay=0.998)
    for step in range(total_steps):
        ...; optimizer.step()
        ema.update(model, step)          # after every optimizer step
    evaluate(ema.module)                 # the averaged copy (same class as ``model``, eval mode)

timm's ``ModelEmaV3`` keeps the copy and averages it (one fused lerp over the parameters; buffers are copied, not
averaged). The decay warms up as ``min(decay, (1 + t) / (10 + t))`` at update ``t`` (TensorFlow's ``num_updates``
rule), so the first updates follow the model closely instead of keeping its random initialisation for thousands of
steps. That rule stays ours (``get_decay``): ``ModelEmaV3``'s own warm-up draws the same curve only with
``warmup_gamma=9``, ``warmup_power=1`` and a step shifted by two, and its float64 decays differ in the last bit.
:func:`jumbokit.training.fit` stores ``module`` in every checkpoint as ``ema.safetensors`` and restores it on resume.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["WeightEMA"]


class WeightEMA(nn.Module):
    """A frozen copy of ``model`` whose floating-point parameters track their exponential moving average."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        from timm.utils import ModelEmaV3

        if not 0.0 < decay < 1.0:
            raise ValueError(f"expected an EMA decay in (0, 1), got {decay!r}")
        super().__init__()
        self.decay = float(decay)
        self.average = ModelEmaV3(model, decay=self.decay, exclude_buffers=True)
        self.average.module.requires_grad_(False)

    @property
    def module(self) -> nn.Module:
        """The averaged copy of the model (eval mode, no gradients)."""
        return self.average.module

    def get_decay(self, step: int) -> float:
        """The decay used at update ``step`` (0-based: optimizer steps taken before)."""
        return min(self.decay, (1.0 + step) / (10.0 + step))

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> None:
        """Move the average towards ``model``'s current weights (``step``: optimizer steps taken before)."""
        self.average.apply_update_no_buffers_(model, self.get_decay(step))

    def forward(self, *args, **kwargs):
        return self.average.module(*args, **kwargs)
