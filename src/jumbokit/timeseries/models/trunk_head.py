"""A second classifier on a series trunk's tokens: deep supervision of the convolutional front end.

With ``trunk_head=True`` a series encoder with a convolutional trunk gets a small head of its own on the mean
of the tokenizer's tokens (before any transformer block), as a ResNet classifier's global average pooling
reads its last feature map. Training adds this head's cross-entropy to the main one (the encoder hands its
logits to :func:`jumbokit.training.classification_loss` through ``take_aux_logits``), so the trunk is pushed to be a
classifier on its own; evaluation returns the log of the two heads' mean class probabilities
(:func:`jumbokit.encoders.extras.mean_probability_logits`), one model that
scores like an ensemble of the trunk alone and the transformer on top of it.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["TrunkHead"]


class TrunkHead(nn.Module):
    """LayerNorm of each channel's mean token, channels concatenated, then one linear layer.

    token_mean: (B*C, D) each channel's mean tokenizer token (:attr:`EncoderOutput.token_mean`) -> logits (B, K).
    """

    def __init__(self, dim: int, channels: int, num_classes: int, drop: float = 0.0) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.drop = nn.Dropout(drop) if drop > 0 else nn.Identity()
        self.fc = nn.Linear(dim * channels, num_classes)
        nn.init.trunc_normal_(self.fc.weight, std=0.02)
        nn.init.zeros_(self.fc.bias)

    def forward(self, token_mean: torch.Tensor, channels: int) -> torch.Tensor:
        feature = self.norm(token_mean)
        return self.fc(self.drop(feature.reshape(-1, channels * feature.shape[-1])))
