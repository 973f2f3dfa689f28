"""Exponential moving average of a model's weights (``TrainConfig.ema_decay``; timm's ``--model-ema``).

    ema = WeightEMA(model, decay=0.998)
    for step in range(total_steps):
        ...; optimizer.step()
        ema.update(model, step)          # after every optimizer step
    evaluate(ema.module)                 # the averaged copy (same class as ``model``, eval mode)

timm's ``ModelEmaV3`` does the averaging (one fused lerp over the parameters; buffers are copied, not averaged).
The decay warms up as ``min(decay, (1 + t) / (10 + t))`` at update ``t`` (TensorFlow's ``num_updates`` rule), so
the first updates follow the model closely instead of keeping its random initialisation for thousands of steps.
Kept as our one-line ``get_decay``: ``ModelEmaV3``'s own warm-up draws the same curve only with ``warmup_gamma=9``,
``warmup_power=1`` and a step shifted by two, and its float64 decays differ from these in the last bit.
:func:`jumbokit.training.fit` stores ``module`` in every checkpoint as ``ema.safetensors`` and restores it on resume.
"""

from __future__ import annotations

from timm.utils import ModelEmaV3
from torch import nn

__all__ = ["WeightEMA"]


class WeightEMA(ModelEmaV3):
    """A frozen copy of ``model`` whose floating-point parameters track their exponential moving average."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"expected an EMA decay in (0, 1), got {decay!r}")
        super().__init__(model, decay=float(decay), exclude_buffers=True)
        self.module.requires_grad_(False)

    def get_decay(self, step: int | None = None) -> float:
        """The decay used at update ``step`` (0-based optimizer steps taken before; None: the configured decay)."""
        if step is None:
            return self.decay
        return min(self.decay, (1.0 + step) / (10.0 + step))
