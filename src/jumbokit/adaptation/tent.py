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
import warnings
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
    "transformer_blocks",
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


def default_lr(batch_size: int, base_lr: float = 1e-3, base_batch: int = 64, *, method: str = "tent") -> float:
    """SGD learning rate of the SAR reference for ViTs: ``base_lr * batch_size / base_batch``.

    As in the reference, the rate is doubled for SAR alone at batch size 1 (its ``bs1`` setting);
    Tent and EATA use the plain rule at every batch size.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    lr = base_lr * batch_size / base_batch
    return 2 * lr if method == "sar" and batch_size == 1 else lr


def transformer_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Transformer blocks of ``model`` in forward order, as (qualified name, block).

    Blocks are the children of every ``ModuleList`` / ``Sequential`` named ``blocks``, wherever it sits:
    ``blocks.7`` in a ViT, ``1.blocks.7`` in ``nn.Sequential(normalize, vit)``, ``stages.2.blocks.1`` in a
    multi-stage encoder (stages in module order, so the count runs across stages). A ``blocks`` list
    inside a block found earlier is part of that block, not a new one.
    """
    found: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] != "blocks" or not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        if any(name.startswith(block + ".") for block, _ in found):
            continue
        found.extend((f"{name}.{child}", block) for child, block in module.named_children())
    return found


def _is_branched(model: nn.Module) -> bool:
    """True for a progressive-join model in its branched training form (norm affines folded away)."""
    try:
        from jumbokit.encoders.branches import BranchedBlock
    except ImportError:  # pragma: no cover - the encoders package is part of jumbokit
        return False
    return any(isinstance(m, BranchedBlock) for m in model.modules())


def norm_layers(model: nn.Module, adapt_batchnorm: bool | None = None) -> list[tuple[str, nn.Module]]:
    """Norm layers of ``model`` whose affine parameters adaptation updates, as (qualified name, module).

    ``adapt_batchnorm=None`` (default): a model with transformer blocks (see :func:`transformer_blocks`:
    a ViT, or a multi-stage encoder whose conv stem at ``patch_embed`` carries BatchNorm2d) is adapted
    LayerNorm-only: its BatchNorm layers are left out and keep their source running statistics (test
    batch statistics in a stem would tie every prediction to its batch and break at batch size 1); a
    model without transformer blocks (a ResNet) adapts its BatchNorm layers as Tent does. ``True`` /
    ``False`` force BatchNorm in or out.
    """
    if adapt_batchnorm is None:
        adapt_batchnorm = not transformer_blocks(model)
    found = []
    for name, module in model.named_modules():
        if not isinstance(module, NORM_LAYERS):
            continue
        if isinstance(module, _BatchNorm) and not adapt_batchnorm:
            continue
        if any(getattr(module, attr, None) is not None for attr in AFFINE_NAMES):
            found.append((name, module))
    return found


def skipped_batchnorm(model: nn.Module, adapt_batchnorm: bool | None = None) -> list[str]:
    """Names of the BatchNorm layers :func:`norm_layers` leaves out (LayerNorm-only adaptation of ViTs)."""
    kept = {name for name, _ in norm_layers(model, adapt_batchnorm)}
    return [name for name, m in model.named_modules() if isinstance(m, _BatchNorm) and name not in kept]


def require_norm_layers(model: nn.Module, adapt_batchnorm: bool | None = None) -> list[tuple[str, nn.Module]]:
    """``norm_layers(model)``, or a ``ValueError`` saying the model has none to adapt.

    A progressive-join model in its branched training form is refused: its per-branch norms carry no
    affine parameters (they are folded into the projections); reparameterize it first.
    """
    if _is_branched(model):
        raise ValueError(
            f"{type(model).__name__} is a progressive-join model in its branched training form, whose block "
            "norms have no affine parameters to adapt; reparameterize first: model = jumbokit.reparameterize(model)"
        )
    layers = norm_layers(model, adapt_batchnorm)
    if not layers:
        raise ValueError(
            f"{type(model).__name__} has no adaptable normalization layers: expected LayerNorm, "
            "GroupNorm or BatchNorm modules with affine parameters, found none"
        )
    return layers


def configure_model(model: nn.Module, adapt_batchnorm: bool | None = None) -> nn.Module:
    """Prepare ``model`` in place for adaptation and return it.

    All parameters are frozen except the affine ones of the norm layers :func:`norm_layers` selects.
    The model is put in eval mode (dropout and drop-path off, so adaptation is deterministic); the
    adapted BatchNorm layers are switched to train mode with their running statistics removed, so they
    normalise with the test batch's statistics as in Tent. BatchNorm layers left out (the conv stem of
    a ViT, by default) stay in eval mode with their source statistics; a warning names them. Raises
    ``ValueError`` when the model has no adaptable norm layer.
    """
    layers = require_norm_layers(model, adapt_batchnorm)
    skipped = skipped_batchnorm(model, adapt_batchnorm)
    if skipped:
        shown = ", ".join(skipped[:4]) + (f" and {len(skipped) - 4} more" if len(skipped) > 4 else "")
        warnings.warn(
            f"LayerNorm-only adaptation of a model with transformer blocks: {len(skipped)} BatchNorm layer(s) "
            f"({shown}) stay frozen with their source running statistics; pass adapt_batchnorm=True to adapt "
            "them", stacklevel=2,
        )
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
    model: nn.Module, exclude: Iterable[str] | None = None, adapt_batchnorm: bool | None = None
) -> tuple[list[nn.Parameter], list[str]]:
    """Affine parameters of the norm layers :func:`norm_layers` selects, minus the layers in ``exclude``.

    Returns ``(params, names)`` with names qualified like ``blocks.0.norm1.weight``.
    """
    excluded = set(exclude or ())
    params: list[nn.Parameter] = []
    names: list[str] = []
    for layer_name, module in require_norm_layers(model, adapt_batchnorm):
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

    def update(self, loss: torch.Tensor, selected: int) -> None:
        """The one update step of the entropy methods (Tent, EATA): back-propagate ``loss``, take an optimizer
        step, clear the gradients, and count the step and its ``selected`` samples in :attr:`stats`."""
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.stats["updates"] += 1
        self.stats["selected"] += selected


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
    model: nn.Module, optimizer: torch.optim.Optimizer | None, lr: float | None, batch_size: int,
    adapt_batchnorm: bool | None = None,
) -> torch.optim.Optimizer:
    """The given optimizer, or: configure the model as Tent does and build SGD over the selected norm affines."""
    if optimizer is not None:
        return optimizer
    configure_model(model, adapt_batchnorm)
    params, _ = collect_params(model, adapt_batchnorm=adapt_batchnorm)
    return _default_optimizer(model, params, lr, batch_size)


class NoAdapt(AdaptationMethod):
    """The source model unchanged: eval mode, no gradient. The baseline of every table."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model.eval(), optimizer=None)

    @torch.no_grad()
    def forward_and_adapt(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class Tent(AdaptationMethod):
    """Tent: one entropy-minimisation step per batch on the affines of the norm layers.

    With ``optimizer=None`` the model is configured here and SGD (momentum 0.9, lr from
    :func:`default_lr` for ``batch_size`` unless ``lr`` is given) is built over
    :func:`collect_params`: every norm layer, except BatchNorm in models with transformer blocks
    (LayerNorm-only adaptation of ViTs; ``adapt_batchnorm`` overrides, see :func:`norm_layers`).
    With an explicit optimizer the caller configures the model.
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
        adapt_batchnorm: bool | None = None,
    ) -> None:
        optimizer = _tent_style_optimizer(model, optimizer, lr, batch_size, adapt_batchnorm)
        super().__init__(model, optimizer, steps=steps, episodic=episodic)

    def forward_and_adapt(self, x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            logits = self.model(x)
            self.update(softmax_entropy(logits).mean(), x.shape[0])
        return logits.detach()


def entropy_margin(num_classes: int, factor: float = 0.4) -> float:
    """Entropy threshold E0 = factor * ln(num_classes) used by SAR and EATA."""
    if num_classes < 2:
        raise ValueError(f"entropy filtering needs at least 2 classes, got {num_classes}")
    return factor * math.log(num_classes)
