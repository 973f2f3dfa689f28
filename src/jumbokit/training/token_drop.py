"""Token-drop training (the Jumbo paper's schedule): a classification loss whose forward keeps a random subset of
patch tokens, with a drop rate falling linearly over training."""
from __future__ import annotations

import torch
from accelerate.utils import extract_model_from_parallel
from torch import nn

__all__ = ["TokenDropLoss", "num_patches"]


class TokenDropLoss:
    """``loss_fn`` for ``fit``: classification loss with an optional linearly decaying token-drop rate.

    ``fit`` calls ``on_step(step, total_steps)`` before every optimizer step; the drop rate at progress
    p = step / total_steps is ``start + (end - start) * p`` and K = round(N * (1 - rate)) of the N patches are kept
    (a random subset per sample, through the encoder's ``keep``). ``token_drop=None`` keeps every token.
    """

    def __init__(self, criterion: nn.Module | None, mixup, token_drop: tuple[float, float] | None):
        from . import classification_loss

        if token_drop is not None and not all(0.0 <= r < 1.0 for r in token_drop):
            raise ValueError(f"token-drop rates must be in [0, 1), got {list(token_drop)}")
        self.token_drop = None if token_drop is None else tuple(token_drop)
        self.progress = 0.0
        self.inner = classification_loss(criterion=criterion, mixup=mixup, forward=self.forward)

    def on_step(self, step: int, total_steps: int) -> None:
        self.progress = step / max(1, total_steps)

    def drop_rate(self) -> float:
        if self.token_drop is None:
            return 0.0
        start, end = self.token_drop
        return start + (end - start) * self.progress

    def forward(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """Logits (B, classes) of images ``x`` (B, C, H, W) with the current share of patch tokens kept."""
        from jumbokit.encoders import random_keep

        rate = self.drop_rate()
        if rate <= 0:
            return model(x)
        n = num_patches(model, x)
        kept = max(1, min(n, round(n * (1.0 - rate))))
        keep, _ = random_keep(x.shape[0], n, kept, device=x.device)
        return model(x, keep=keep)

    def __call__(self, model: nn.Module, batch):
        loss, logs = self.inner(model, batch)
        if self.token_drop is not None:
            logs["token_drop"] = self.drop_rate()
        return loss, logs


def num_patches(model: nn.Module, x: torch.Tensor) -> int:
    """Patch tokens of input ``x`` (B, C, H, W) (the input may differ from the configured img_size)."""
    inner = extract_model_from_parallel(model)
    tokenizer = getattr(inner, "patch_embed", None)
    if not hasattr(tokenizer, "grid_for"):
        return int(inner.num_patches)
    grid_h, grid_w = tokenizer.grid_for(x.shape[-2], x.shape[-1])
    return grid_h * grid_w
