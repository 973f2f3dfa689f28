"""SAR: sharpness-aware and reliable entropy minimisation (Niu et al., ICLR 2023).

Per batch: (1) forward, keep samples with entropy below E0 (= 0.4 ln C by default), back-propagate
their mean entropy and perturb the weights with SAM; (2) forward again at the perturbed weights,
filter again with E0, take the gradient there and update the original weights with SGD (momentum).
Predictions come from the first forward. Model recovery: when the exponential moving average
(momentum 0.9) of the second-step loss falls below ``reset_constant`` (0.2), the model and the
optimizer are restored to the source state and the moving average starts again.

Differences from the reference code, all deliberate fixes: a batch in which a filter keeps no
sample makes no update at all (no NaN loss, no momentum step, the moving average untouched); the
moving average really restarts after a recovery; the recovery threshold is the ``reset_constant``
argument instead of a literal.
"""
from __future__ import annotations

import re

import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

from .sam import SAM
from .tent import (
    AdaptationMethod,
    check_model,
    configure_model,
    entropy_margin,
    default_lr,
    require_norm_layers,
    softmax_entropy,
)
from .tent import collect_params as collect_norm_params

__all__ = ["SAR", "collect_params", "configure_model", "num_blocks", "block_index"]

_BLOCK_PATTERNS = (
    re.compile(r"(?:^|\.)blocks\.(\d+)(?:\.|$)"),  # timm / jumbokit transformer blocks
    re.compile(r"(?:^|\.)(?:layer_norms|norms|jumbo_norms?)\.(\d+)(?:\.|$)"),  # per-layer plug-in norms
)
_FINAL_NORMS = ("norm", "fc_norm", "head_norm")


def num_blocks(model: nn.Module) -> int:
    """Number of transformer blocks (``len(model.blocks)``), or 0 when the model has none."""
    blocks = getattr(model, "blocks", None)
    return len(blocks) if isinstance(blocks, (nn.ModuleList, nn.Sequential)) else 0


def block_index(layer_name: str) -> int | None:
    """Layer index a norm layer belongs to (``blocks.7.norm1`` -> 7), or None."""
    for pattern in _BLOCK_PATTERNS:
        match = pattern.search(layer_name)
        if match:
            return int(match.group(1))
    return None


def collect_params(
    model: nn.Module,
    exclude_last_blocks: int | None = None,
    exclude_final_norm: bool = True,
) -> tuple[list[nn.Parameter], list[str]]:
    """Norm affines that SAR adapts: all but the last blocks and the final norm.

    ``exclude_last_blocks=None`` excludes the last quarter of the blocks (blocks 9-11 of a
    12-block ViT, as the reference does for ViT-Base); per-layer norms of a global-token plug-in
    (Jumbo) follow their layer. ``exclude_final_norm`` leaves out ``norm``/``fc_norm`` after the
    last block and anything in the head; ResNet ``layer4`` is skipped as in the reference.
    Returns ``(params, names)``.
    """
    depth = num_blocks(model)
    n_excluded = depth // 4 if exclude_last_blocks is None else int(exclude_last_blocks)
    if n_excluded < 0 or (depth and n_excluded > depth):
        raise ValueError(f"exclude_last_blocks must be in [0, {depth}], got {exclude_last_blocks}")
    first_excluded = depth - n_excluded

    def excluded(layer_name: str) -> bool:
        index = block_index(layer_name)
        if depth and index is not None and index >= first_excluded:
            return True
        if "layer4" in layer_name.split("."):
            return True
        return exclude_final_norm and (
            layer_name in _FINAL_NORMS or layer_name.startswith(("head.", "norm.", "fc_norm."))
        )

    layers = require_norm_layers(model)
    return collect_norm_params(model, exclude=[name for name, _ in layers if excluded(name)])


class SAR(AdaptationMethod):
    """SAR wrapper; ``forward(x)`` adapts on the batch and returns the first-pass logits (B, C).

    With ``optimizer=None`` the model is configured here and a :class:`SAM` over SGD
    (momentum 0.9, ``lr`` or :func:`~jumbokit.adaptation.tent.default_lr` for ``batch_size``)
    is built on :func:`collect_params`. ``margin_e0=None`` means 0.4 ln(num_classes), resolved
    from the logits of the first batch. A caller-built optimizer must be a :class:`SAM`.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: SAM | None = None,
        *,
        lr: float | None = None,
        batch_size: int = 64,
        rho: float = 0.05,
        margin_e0: float | None = None,
        reset_constant: float = 0.2,
        ema_momentum: float = 0.9,
        exclude_last_blocks: int | None = None,
        steps: int = 1,
        episodic: bool = False,
    ) -> None:
        if optimizer is None:
            configure_model(model)
            params, _ = collect_params(model, exclude_last_blocks=exclude_last_blocks)
            check_model(model, params)
            optimizer = SAM(
                params, torch.optim.SGD, rho=rho,
                lr=default_lr(batch_size) if lr is None else lr, momentum=0.9,
            )
        elif not isinstance(optimizer, SAM):
            raise TypeError(f"SAR needs a SAM optimizer, got {type(optimizer).__name__}")
        if not 0.0 <= ema_momentum < 1.0:
            raise ValueError(f"ema_momentum must be in [0, 1), got {ema_momentum}")
        super().__init__(model, optimizer, steps=steps, episodic=episodic)
        self.margin_e0 = margin_e0
        self.reset_constant = reset_constant
        self.ema_momentum = ema_momentum
        self.ema: float | None = None
        self.stats.update(recoveries=0, skipped=0)
        self._batch_dependent = any(isinstance(m, _BatchNorm) for m in model.modules())

    def reset_method_state(self) -> None:
        self.ema = None

    def _margin(self, num_classes: int) -> float:
        if self.margin_e0 is None:
            self.margin_e0 = entropy_margin(num_classes)
        return self.margin_e0

    def _second_forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        # LayerNorm/GroupNorm models treat samples independently: forwarding only the selected
        # samples gives the same entropies. BatchNorm models see the whole batch, as in the paper.
        if self._batch_dependent:
            return softmax_entropy(self.model(x))[keep]
        return softmax_entropy(self.model(x[keep]))

    def forward_and_adapt(self, x: torch.Tensor) -> torch.Tensor:
        optimizer: SAM = self.optimizer  # type: ignore[assignment]
        optimizer.zero_grad(set_to_none=True)
        with torch.enable_grad():
            logits = self.model(x)
            margin = self._margin(logits.shape[1])
            entropy = softmax_entropy(logits)
            keep = entropy < margin
            if not bool(keep.any()):
                self.stats["skipped"] += 1
                return logits.detach()
            entropy[keep].mean().backward()
            optimizer.first_step(zero_grad=True)

            entropy2 = self._second_forward(x, keep)
            keep2 = entropy2 < margin
            if not bool(keep2.any()):
                optimizer.restore()
                optimizer.zero_grad(set_to_none=True)
                self.stats["skipped"] += 1
                return logits.detach()
            loss2 = entropy2[keep2].mean()
            loss2.backward()
        optimizer.second_step(zero_grad=True)
        self.stats["updates"] += 1
        self.stats["selected"] += int(keep2.sum())

        value = float(loss2.detach())
        self.ema = value if self.ema is None else self.ema_momentum * self.ema + (1 - self.ema_momentum) * value
        if self.ema < self.reset_constant:
            self.reset()  # restores weights + optimizer state and clears the moving average
            self.stats["recoveries"] += 1
        return logits.detach()
