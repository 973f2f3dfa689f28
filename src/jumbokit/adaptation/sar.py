"""SAR: sharpness-aware and reliable entropy minimisation (Niu et al., ICLR 2023).

Per batch: (1) forward, keep samples with entropy below E0 (= 0.4 ln C by default), back-propagate
their mean entropy and perturb the weights with SAM; (2) forward again at the perturbed weights,
filter again with E0, take the gradient there and update the original weights with SGD (momentum).
Predictions come from the first forward. Model recovery: when the exponential moving average
(momentum 0.9) of the second-step loss falls below the recovery threshold, the model and the
optimizer are restored to the source state and the moving average starts again.

Recovery threshold: the reference's 0.2 is an entropy (nats) for 1000 classes. Entropies scale with
ln C, so the default here is ``0.2 * ln(C) / ln(1000)`` (0.2 at C = 1000, 0.067 at C = 10); without the
scaling a confident few-class model falls below 0.2 after every update and never adapts.

Differences from the reference code, all deliberate fixes: a batch in which a filter keeps no
sample makes no update at all (no NaN loss, no momentum step, the moving average untouched); the
moving average really restarts after a recovery; the recovery threshold scales with ln C (above) and
is an argument instead of a literal; recoveries are counted, and recoveries on consecutive updates
(the model cannot adapt at all) raise a warning.
"""
from __future__ import annotations

import math
import re
import warnings

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
    transformer_blocks,
)
from .tent import collect_params as collect_norm_params

__all__ = ["SAR", "collect_params", "configure_model", "recovery_threshold"]

_PLUGIN_NORM_PATTERN = re.compile(r"(?:^|\.)(?:layer_norms|norms|jumbo_norms?)\.(\d+)(?:\.|$)")  # per-layer plug-in norms
_FINAL_NORMS = ("norm", "fc_norm", "head_norm")
REFERENCE_RESET_CONSTANT = 0.2  # the reference's threshold, an entropy in nats for 1000 classes
REFERENCE_CLASSES = 1000


def recovery_threshold(num_classes: int, reset_constant: float = REFERENCE_RESET_CONSTANT) -> float:
    """SAR's recovery threshold for ``num_classes``: ``reset_constant * ln(C) / ln(1000)``.

    The reference's 0.2 holds for ImageNet's 1000 classes; entropies scale with ln C, so the threshold
    does too (0.2 at C = 1000, 0.067 at C = 10, 0.047 at C = 5).
    """
    if num_classes < 2:
        raise ValueError(f"SAR needs at least 2 classes, got {num_classes}")
    return reset_constant * math.log(num_classes) / math.log(REFERENCE_CLASSES)


def _plugin_layer(layer_name: str, blocks: set[str]) -> str | int | None:
    """The block a per-layer plug-in norm belongs to: ``global_tokens.jumbo_norms.3`` -> ``blocks.3`` of the
    same container (``stages.1.global_tokens.jumbo_norms.3`` -> ``stages.1.blocks.3``), or the bare index
    when no such block exists; None for other layers."""
    match = _PLUGIN_NORM_PATTERN.search(layer_name)
    if match is None:
        return None
    container = layer_name[:match.start()]
    if container.endswith("global_tokens"):
        container = container[: -len("global_tokens")].rstrip(".")
    block = f"{container}.blocks.{match.group(1)}" if container else f"blocks.{match.group(1)}"
    return block if block in blocks else int(match.group(1))


def _inside(name: str, prefixes: list[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def collect_params(
    model: nn.Module,
    exclude_last_blocks: int | None = None,
    exclude_final_norm: bool = True,
    adapt_batchnorm: bool | None = None,
) -> tuple[list[nn.Parameter], list[str]]:
    """Norm affines that SAR adapts: all but those of the last blocks and the final norm.

    Blocks are found wherever they sit (:func:`~jumbokit.adaptation.tent.transformer_blocks`: ``blocks``
    of a ViT, of a ViT wrapped in ``nn.Sequential(normalize, vit)``, or ``stages.{s}.blocks`` of a
    multi-stage encoder) and counted in forward order across stages. ``exclude_last_blocks=None``
    excludes the last quarter of them (blocks 9-11 of a 12-block ViT, as the reference does for
    ViT-Base); per-layer norms of a global-token plug-in (``jumbo_norms.{i}``) follow layer ``i``.
    ``exclude_final_norm`` leaves out ``norm`` / ``fc_norm`` / ``head_norm`` after the last block (at any
    prefix) and any norm inside a ``head``; ResNet ``layer4`` is skipped as in the reference. BatchNorm
    follows :func:`~jumbokit.adaptation.tent.norm_layers` (left out of models with transformer blocks
    unless ``adapt_batchnorm=True``). Returns ``(params, names)``.
    """
    blocks = [name for name, _ in transformer_blocks(model)]
    depth = len(blocks)
    n_excluded = depth // 4 if exclude_last_blocks is None else int(exclude_last_blocks)
    if n_excluded < 0 or (depth and n_excluded > depth):
        raise ValueError(f"exclude_last_blocks must be in [0, {depth}], got {exclude_last_blocks}")
    first_excluded = depth - n_excluded
    top_blocks = blocks[first_excluded:]
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    last_block = order[blocks[-1]] if blocks else -1

    def excluded(layer_name: str) -> bool:
        if _inside(layer_name, top_blocks):
            return True
        if depth and not _inside(layer_name, blocks):
            layer = _plugin_layer(layer_name, set(blocks))
            if layer is not None and (layer in top_blocks if isinstance(layer, str) else layer >= first_excluded):
                return True
        parts = layer_name.split(".")
        if "layer4" in parts:
            return True
        if not exclude_final_norm:
            return False
        if "head" in parts:
            return True
        # a final norm comes after the last block (module order) and is not part of a block
        return parts[-1] in _FINAL_NORMS and order[layer_name] > last_block and not _inside(layer_name, blocks)

    layers = require_norm_layers(model, adapt_batchnorm)
    return collect_norm_params(model, exclude=[name for name, _ in layers if excluded(name)],
                               adapt_batchnorm=adapt_batchnorm)


class SAR(AdaptationMethod):
    """SAR wrapper; ``forward(x)`` adapts on the batch and returns the first-pass logits (B, C).

    With ``optimizer=None`` the model is configured here and a :class:`SAM` over SGD
    (momentum 0.9, ``lr`` or :func:`~jumbokit.adaptation.tent.default_lr` for ``batch_size``, which
    doubles the rate at batch size 1 as the reference does for SAR) is built on :func:`collect_params`.
    ``margin_e0=None`` means 0.4 ln(num_classes); ``reset_constant=None`` means the recovery threshold
    ``0.2 * ln(num_classes) / ln(1000)`` (:func:`recovery_threshold`); both are resolved from the logits of
    the first batch. A caller-built optimizer must be a :class:`SAM`.

    ``stats["recoveries"]`` counts model recoveries and ``stats["consecutive_recoveries"]`` those that
    follow a recovery on the previous update; the first of the latter raises a ``RuntimeWarning`` (the
    loss average keeps falling below the threshold, so the model is reset before it can adapt).
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
        reset_constant: float | None = None,
        ema_momentum: float = 0.9,
        exclude_last_blocks: int | None = None,
        steps: int = 1,
        episodic: bool = False,
        adapt_batchnorm: bool | None = None,
    ) -> None:
        if optimizer is None:
            configure_model(model, adapt_batchnorm)
            params, _ = collect_params(model, exclude_last_blocks=exclude_last_blocks,
                                       adapt_batchnorm=adapt_batchnorm)
            check_model(model, params)
            optimizer = SAM(
                params, torch.optim.SGD, rho=rho,
                lr=default_lr(batch_size, method="sar") if lr is None else lr, momentum=0.9,
            )
        elif not isinstance(optimizer, SAM):
            raise TypeError(f"SAR needs a SAM optimizer, got {type(optimizer).__name__}")
        if not 0.0 <= ema_momentum < 1.0:
            raise ValueError(f"ema_momentum must be in [0, 1), got {ema_momentum}")
        if reset_constant is not None and reset_constant < 0:
            raise ValueError(f"reset_constant must be >= 0 (or None for 0.2 ln(C) / ln(1000)), got {reset_constant}")
        super().__init__(model, optimizer, steps=steps, episodic=episodic)
        self.margin_e0 = margin_e0
        self.reset_constant = reset_constant
        self.ema_momentum = ema_momentum
        self.ema: float | None = None
        self.stats.update(recoveries=0, consecutive_recoveries=0, skipped=0)
        self._recovered_last_update = False
        self._warned_consecutive = False
        # BatchNorm in train mode (test-batch statistics) couples the samples of a batch
        self._batch_dependent = any(isinstance(m, _BatchNorm) and m.training for m in model.modules())

    def reset_method_state(self) -> None:
        self.ema = None
        self._recovered_last_update = False

    def _margin(self, num_classes: int) -> float:
        if self.margin_e0 is None:
            self.margin_e0 = entropy_margin(num_classes)
        if self.reset_constant is None:
            self.reset_constant = recovery_threshold(num_classes)
        return self.margin_e0

    def _second_forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        # LayerNorm/GroupNorm models treat samples independently: forwarding only the selected
        # samples gives the same entropies. BatchNorm models see the whole batch, as in the paper.
        if self._batch_dependent:
            return softmax_entropy(self.model(x))[keep]
        return softmax_entropy(self.model(x[keep]))

    def _recover(self, ema: float) -> None:
        consecutive = self._recovered_last_update
        self.reset()  # restores weights + optimizer state and clears the moving average
        self.stats["recoveries"] += 1
        if consecutive:
            self.stats["consecutive_recoveries"] += 1
            if not self._warned_consecutive:
                self._warned_consecutive = True
                warnings.warn(
                    f"SAR recovered the model on consecutive updates: the loss average {ema:.4g} stays below the "
                    f"recovery threshold {self.reset_constant:.4g}, so every update is undone; lower reset_constant "
                    "(stats['recoveries'] counts the recoveries)", RuntimeWarning, stacklevel=2,
                )
        self._recovered_last_update = True

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
            self._recover(self.ema)
        else:
            self._recovered_last_update = False
        return logits.detach()
