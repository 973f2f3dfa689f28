"""Shared test-time adaptation machinery and Tent (entropy minimisation on norm affines).

The API follows Tent's small interface, used by every method in this package:

* :func:`configure_model` — freeze everything except the affine parameters of norm layers,
  switch off dropout / drop-path, and make BatchNorm use the statistics of the test batch;
* :func:`collect_params` — the adaptable parameters and their names;
* a wrapper module (:class:`Tent`, :class:`~jumbokit.adaptation.eata.EATA`,
  :class:`~jumbokit.adaptation.sar.SAR`, :class:`NoAdapt`) whose ``forward(x)`` adapts on the
  batch and returns the logits, and whose ``reset()`` restores the source model and optimizer.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Iterable

import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = [
    "NORM_LAYERS",
    "AdaptationMethod",
    "NoAdapt",
    "Tent",
    "check_model",
    "collect_params",
    "configure_model",
    "default_lr",
    "norm_layers",
    "require_norm_layers",
    "softmax_entropy",
]

# Layers whose affine (scale, shift) parameters test-time adaptation updates.
NORM_LAYERS: tuple[type[nn.Module], ...] = (nn.LayerNorm, nn.GroupNorm, _BatchNorm) + (
    (nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()
)
AFFINE_NAMES = ("weight", "bias")


def softmax_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of softmax(logits); (B, C) -> (B,), computed in float32."""
    logits = logits.float()
    return -(logits.softmax(dim=1) * logits.log_softmax(dim=1)).sum(dim=1)


def default_lr(batch_size: int, base_lr: float = 1e-3, base_batch: int = 64) -> float:
    """SGD learning rate of the SAR reference for ViTs: ``base_lr * batch_size / base_batch``.

    For small batches (below 32, so batch size 1 in the ``bs1`` setting) the rate is doubled,
    as the reference's later revision does.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    lr = base_lr * batch_size / base_batch
    return lr * 2 if batch_size < 32 else lr


def norm_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Norm layers of ``model`` that carry affine parameters, as (qualified name, module)."""
    found = []
    for name, module in model.named_modules():
        if isinstance(module, NORM_LAYERS) and any(
            getattr(module, attr, None) is not None for attr in AFFINE_NAMES
        ):
            found.append((name, module))
    return found


def require_norm_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``norm_layers(model)``, or a ``ValueError`` saying the model has none to adapt."""
    layers = norm_layers(model)
    if not layers:
        raise ValueError(
            f"{type(model).__name__} has no adaptable normalization layers: expected LayerNorm, "
            "GroupNorm or BatchNorm modules with affine parameters, found none"
        )
    return layers


def configure_model(model: nn.Module) -> nn.Module:
    """Prepare ``model`` in place for adaptation and return it.

    All parameters are frozen except the norm layers' affine ones. The model is put in eval mode
    (dropout and drop-path off, so adaptation is deterministic); BatchNorm layers are switched to
    train mode with their running statistics removed, so they normalise with the test batch's
    statistics as in Tent. Raises ``ValueError`` when the model has no adaptable norm layer.
    """
    layers = require_norm_layers(model)
    model.eval()
    model.requires_grad_(False)
    for _, module in layers:
        for attr in AFFINE_NAMES:
            param = getattr(module, attr, None)
            if isinstance(param, nn.Parameter):
                param.requires_grad_(True)
        if isinstance(module, _BatchNorm):
            module.train()
            module.track_running_stats = False
            module.running_mean = None
            module.running_var = None
    return model


def collect_params(
    model: nn.Module, exclude: Iterable[str] | None = None
) -> tuple[list[nn.Parameter], list[str]]:
    """Affine parameters of every norm layer, minus the layers named in ``exclude``.

    Returns ``(params, names)`` with names qualified like ``blocks.0.norm1.weight``.
    """
    excluded = set(exclude or ())
    params: list[nn.Parameter] = []
    names: list[str] = []
    for layer_name, module in require_norm_layers(model):
        if layer_name in excluded:
            continue
        for attr in AFFINE_NAMES:
            param = getattr(module, attr, None)
            if isinstance(param, nn.Parameter):
                params.append(param)
                names.append(f"{layer_name}.{attr}" if layer_name else attr)
    return params, names


def check_model(model: nn.Module, params: Iterable[nn.Parameter]) -> None:
    """Raise ``ValueError`` unless ``params`` is a non-empty strict subset of trainable tensors."""
    params = list(params)
    if not params:
        raise ValueError("no parameters to adapt: the selection of norm-layer affines is empty")
    frozen = [p for p in params if not p.requires_grad]
    if frozen:
        raise ValueError(
            f"{len(frozen)} of the {len(params)} parameters to adapt do not require grad; "
            "call configure_model(model) before building the optimizer"
        )


class AdaptationMethod(nn.Module):
    """Base wrapper: ``forward(x)`` adapts on the batch and returns logits (B, num_classes).

    Keeps a copy of the model and optimizer state taken at construction; ``reset()`` restores
    it exactly. ``episodic=True`` resets before every batch. Subclasses implement
    :meth:`forward_and_adapt`. Counters in :attr:`stats` are cumulative across resets.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        steps: int = 1,
        episodic: bool = False,
    ) -> None:
        super().__init__()
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        self.model = model
        self.optimizer = optimizer
        self.steps = steps
        self.episodic = episodic
        self.stats: dict[str, int] = {"batches": 0, "samples": 0, "updates": 0, "selected": 0}
        self._model_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self._optimizer_state = (
            copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.episodic:
            self.reset()
        logits = None
        for _ in range(self.steps):
            logits = self.forward_and_adapt(x)
        self.stats["batches"] += 1
        self.stats["samples"] += x.shape[0]
        return logits

    def forward_and_adapt(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def reset(self) -> None:
        """Restore the model and optimizer to the state saved at construction."""
        self.model.load_state_dict(self._model_state, strict=True)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(copy.deepcopy(self._optimizer_state))
            self.optimizer.zero_grad(set_to_none=True)
        self.reset_method_state()

    def reset_method_state(self) -> None:
        """Clear method-specific running state (moving averages); called by :meth:`reset`."""


def _default_optimizer(
    model: nn.Module,
    params: list[nn.Parameter],
    lr: float | None,
    batch_size: int,
    momentum: float = 0.9,
) -> torch.optim.Optimizer:
    check_model(model, params)
    return torch.optim.SGD(params, lr=default_lr(batch_size) if lr is None else lr, momentum=momentum)


def _tent_style_optimizer(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, lr: float | None, batch_size: int
) -> torch.optim.Optimizer:
    """The given optimizer, or: configure the model as Tent does and build SGD over all norm affines."""
    if optimizer is not None:
        return optimizer
    configure_model(model)
    params, _ = collect_params(model)
    return _default_optimizer(model, params, lr, batch_size)


class NoAdapt(AdaptationMethod):
    """The source model unchanged: eval mode, no gradient. The baseline of every table."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model.eval(), optimizer=None)

    @torch.no_grad()
    def forward_and_adapt(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class Tent(AdaptationMethod):
    """Tent: one entropy-minimisation step per batch on the affines of all norm layers.

    With ``optimizer=None`` the model is configured here and SGD (momentum 0.9, lr from
    :func:`default_lr` for ``batch_size`` unless ``lr`` is given) is built over
    :func:`collect_params`. With an explicit optimizer the caller configures the model.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        lr: float | None = None,
        batch_size: int = 64,
        steps: int = 1,
        episodic: bool = False,
    ) -> None:
        optimizer = _tent_style_optimizer(model, optimizer, lr, batch_size)
        super().__init__(model, optimizer, steps=steps, episodic=episodic)

    def forward_and_adapt(self, x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            logits = self.model(x)
            loss = softmax_entropy(logits).mean()
            loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.stats["updates"] += 1
        self.stats["selected"] += x.shape[0]
        return logits.detach()


def entropy_margin(num_classes: int, factor: float = 0.4) -> float:
    """Entropy threshold E0 = factor * ln(num_classes) used by SAR and EATA."""
    if num_classes < 2:
        raise ValueError(f"entropy filtering needs at least 2 classes, got {num_classes}")
    return factor * math.log(num_classes)
