"""Sharpness-aware minimisation (SAM) as a two-step wrapper around a base optimizer.

``first_step`` moves every parameter with a gradient to ``w + rho * g / ||g||`` (the
``adaptive`` variant scales by ``|w|`` elementwise first), ``second_step`` returns to ``w`` and
lets the base optimizer update with the gradient taken at the perturbed point. ``restore``
returns to ``w`` without any update (used when the second loss selects no sample).
The optimizer state (momentum buffers) lives in the base optimizer; ``state_dict`` and
``load_state_dict`` round-trip it exactly.

Kept as our own: neither timm nor torch ships SAM; SAR's reference brings its own single-file SAM, whose two
steps this one follows (adding ``restore`` and the exact state round trip).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["SAM"]


class SAM(torch.optim.Optimizer):
    """SAM(params, base_optimizer=torch.optim.SGD, rho=0.05, adaptive=False, **base_kwargs)."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter] | Iterable[dict[str, Any]],
        base_optimizer: type[torch.optim.Optimizer] = torch.optim.SGD,
        rho: float = 0.05,
        adaptive: bool = False,
        **base_kwargs: Any,
    ) -> None:
        if rho < 0:
            raise ValueError(f"rho must be non-negative, got {rho}")
        super().__init__(params, dict(rho=rho, adaptive=adaptive, **base_kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **base_kwargs)
        self._share_base()
        self._origin: dict[torch.nn.Parameter, torch.Tensor] = {}

    def _share_base(self) -> None:
        self.param_groups = self.base_optimizer.param_groups
        self.state = self.base_optimizer.state
        self.defaults.update(self.base_optimizer.defaults)

    @torch.no_grad()
    def _grad_norm(self) -> torch.Tensor:
        norms = [
            ((p.abs() if group["adaptive"] else 1.0) * p.grad).norm(p=2)
            for group in self.param_groups
            for p in group["params"]
            if p.grad is not None
        ]
        if not norms:
            return torch.zeros(())
        device = norms[0].device
        return torch.linalg.vector_norm(torch.stack([n.to(device) for n in norms]))

    @torch.no_grad()
    def first_step(self, zero_grad: bool = False) -> None:
        """Perturb to ``w + e(w)``, e(w) = rho * g / (||g|| + 1e-12) (times w^2 if adaptive)."""
        if self._origin:
            raise RuntimeError("first_step called twice without second_step or restore")
        grad_norm = self._grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self._origin[p] = p.detach().clone()
                step = p.grad * scale.to(p)
                if group["adaptive"]:
                    step = step * p.pow(2)
                p.add_(step)
        if zero_grad:
            self.zero_grad(set_to_none=True)

    @torch.no_grad()
    def restore(self) -> None:
        """Return every perturbed parameter to ``w`` (no update)."""
        for p, origin in self._origin.items():
            p.copy_(origin)
        self._origin.clear()

    @torch.no_grad()
    def second_step(self, zero_grad: bool = False) -> None:
        """Return to ``w`` and apply the base optimizer with the current (perturbed) gradients."""
        self.restore()
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad(set_to_none=True)

    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> None:  # type: ignore[override]
        """Full SAM step; ``closure`` must recompute the loss and call backward."""
        if closure is None:
            raise ValueError("SAM.step needs a closure that runs forward and backward")
        self.first_step(zero_grad=True)
        with torch.enable_grad():
            closure()
        self.second_step()

    def state_dict(self) -> dict[str, Any]:
        return self.base_optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base_optimizer.load_state_dict(state_dict)
        self._share_base()
        self._origin.clear()
