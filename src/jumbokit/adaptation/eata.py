"""EATA: efficient anti-forgetting test-time adaptation (Niu et al., ICML 2022).

Per batch: keep reliable samples (entropy below E0), drop redundant ones (|cosine| of their
probabilities to the moving average of past selected predictions >= ``d_margin``), weight each
kept sample's entropy by exp(E0 - entropy), add the Fisher regulariser
``alpha * sum_i F_i (theta_i - theta_i^0)^2`` and take one SGD step. No sample kept: no step.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .tent import (
    AdaptationMethod,
    _tent_style_optimizer,
    entropy_margin,
    softmax_entropy,
)

__all__ = ["EATA", "compute_fishers"]

Fishers = dict[str, tuple[torch.Tensor, torch.Tensor]]


def compute_fishers(
    model: nn.Module,
    batches: Iterable,
    param_names: Iterable[str] | None = None,
    max_samples: int | None = None,
) -> Fishers:
    """Diagonal Fisher information of the adapted parameters on clean data.

    ``batches`` yields images (B, C, H, W) or tuples whose first item is the images. The loss is
    the cross-entropy with the model's own predictions as labels (labels are not needed); the
    squared batch gradients are averaged over batches. Returns ``{name: (fisher, anchor)}`` with
    ``anchor`` the current parameter values. ``model`` must be configured
    (:func:`~jumbokit.adaptation.tent.configure_model`); its gradients are cleared afterwards.
    """
    named = dict(model.named_parameters())
    names = list(param_names) if param_names is not None else [n for n, p in named.items() if p.requires_grad]
    missing = [n for n in names if n not in named]
    if missing:
        raise ValueError(f"unknown parameter names for the Fisher regulariser: {missing[:5]}")
    sums = {n: torch.zeros_like(named[n]) for n in names}
    device = next(model.parameters()).device
    seen, n_batches = 0, 0
    for batch in batches:
        images = batch[0] if isinstance(batch, (tuple, list)) else batch
        if max_samples is not None:
            images = images[: max(max_samples - seen, 0)]
        if images.shape[0] == 0:
            break
        images = images.to(device)
        model.zero_grad(set_to_none=True)
        with torch.enable_grad():
            logits = model(images)
            F.cross_entropy(logits, logits.argmax(dim=1)).backward()
        for n in names:
            if named[n].grad is not None:
                sums[n] += named[n].grad.detach() ** 2
        seen += images.shape[0]
        n_batches += 1
        if max_samples is not None and seen >= max_samples:
            break
    model.zero_grad(set_to_none=True)
    if n_batches == 0:
        raise ValueError("compute_fishers got no clean samples")
    return {n: (sums[n] / n_batches, named[n].detach().clone()) for n in names}


class EATA(AdaptationMethod):
    """EATA wrapper; ``forward(x)`` adapts on the batch and returns its logits (B, C).

    ``fishers`` from :func:`compute_fishers` (None: plain ETA, no regulariser).
    ``e_margin=None`` means 0.4 ln(num_classes) (the value the paper uses), resolved on the first
    batch. With ``optimizer=None`` the model is configured and SGD (momentum 0.9) is built on the
    affines of the norm layers Tent adapts (LayerNorm-only for models with transformer blocks, see
    :func:`~jumbokit.adaptation.tent.norm_layers`).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        fishers: Fishers | None = None,
        fisher_alpha: float = 2000.0,
        e_margin: float | None = None,
        d_margin: float = 0.05,
        prob_momentum: float = 0.9,
        lr: float | None = None,
        batch_size: int = 64,
        steps: int = 1,
        episodic: bool = False,
        adapt_batchnorm: bool | None = None,
    ) -> None:
        optimizer = _tent_style_optimizer(model, optimizer, lr, batch_size, adapt_batchnorm)
        super().__init__(model, optimizer, steps=steps, episodic=episodic)
        self.fishers = fishers
        self.fisher_alpha = fisher_alpha
        self.e_margin = e_margin
        self.d_margin = d_margin
        self.prob_momentum = prob_momentum
        self.moving_probs: torch.Tensor | None = None
        self.stats.update(reliable=0)
        self._named = dict(model.named_parameters())
        if fishers:
            unknown = [n for n in fishers if n not in self._named]
            if unknown:
                raise ValueError(f"Fisher entries for parameters the model lacks: {unknown[:5]}")

    def reset_method_state(self) -> None:
        self.moving_probs = None

    def _update_moving_probs(self, probs: torch.Tensor) -> None:
        if probs.shape[0] == 0:
            return
        mean = probs.mean(dim=0)
        if self.moving_probs is None:
            self.moving_probs = mean
        else:
            self.moving_probs = self.prob_momentum * self.moving_probs + (1 - self.prob_momentum) * mean

    def fisher_penalty(self) -> torch.Tensor | None:
        """alpha * sum F (theta - theta0)^2 over the Fisher entries, or None without Fishers."""
        if not self.fishers:
            return None
        total = None
        for name, (fisher, anchor) in self.fishers.items():
            term = (fisher * (self._named[name] - anchor) ** 2).sum()
            total = term if total is None else total + term
        return self.fisher_alpha * total

    def forward_and_adapt(self, x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            logits = self.model(x)
            if self.e_margin is None:
                self.e_margin = entropy_margin(logits.shape[1])
            entropy = softmax_entropy(logits)
            reliable = entropy < self.e_margin
            probs = logits.detach().float().softmax(dim=1)[reliable]
            selected_entropy = entropy[reliable]
            if self.moving_probs is not None and probs.shape[0] > 0:
                cosine = F.cosine_similarity(self.moving_probs.unsqueeze(0), probs, dim=1)
                novel = cosine.abs() < self.d_margin
                selected_entropy = selected_entropy[novel]
                probs = probs[novel]
            self._update_moving_probs(probs)
            self.stats["reliable"] += int(reliable.sum())
            if selected_entropy.numel() > 0:
                weight = torch.exp(self.e_margin - selected_entropy.detach())
                loss = (selected_entropy * weight).mean()
                penalty = self.fisher_penalty()
                if penalty is not None:
                    loss = loss + penalty
                self.update(loss, selected_entropy.numel())
        return logits.detach()
