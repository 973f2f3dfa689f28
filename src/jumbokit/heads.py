"""Heads that consume an :class:`~jumbokit.encoders.EncoderOutput`.

The encoder's own ``head`` (a Linear on the pooled feature, with channel concatenation for series) covers
plain classification; this module serves the other use: a probe on a frozen encoder, reading the feature
``select_feature`` chooses.
"""

from __future__ import annotations

import torch
from torch import nn

from .encoders import EncoderOutput
from .encoders.global_tokens import masked_mean

__all__ = ["ProbeHead", "select_feature", "FEATURE_SOURCES"]

FEATURE_SOURCES = ("pooled", "patch_mean")


def select_feature(out: EncoderOutput, source: str = "pooled") -> torch.Tensor:
    """The feature a head reads: the plug-in's pooled feature (``"pooled"``: CLS, Jumbo J*D, ...) or the
    mean patch token (``"patch_mean"``); series features are concatenated over channels -> (B, C*F)."""
    if source == "pooled":
        feature = out.feature
    elif source == "patch_mean":
        feature = masked_mean(out.patches, out.pad_mask)
    else:
        raise ValueError(f"unknown feature source {source!r}; expected one of {FEATURE_SOURCES}")
    if out.channels > 1:
        feature = feature.reshape(-1, out.channels * feature.shape[-1])
    return feature


class ProbeHead(nn.Module):
    """Linear-probe head as in MAE: BatchNorm1d without affine, then Linear (B, F) -> (B, num_classes)."""

    def __init__(self, in_features: int, num_classes: int, source: str = "pooled") -> None:
        super().__init__()
        if source not in FEATURE_SOURCES:
            raise ValueError(f"unknown feature source {source!r}; expected one of {FEATURE_SOURCES}")
        self.source = source
        self.bn = nn.BatchNorm1d(in_features, affine=False, eps=1e-6)
        self.fc = nn.Linear(in_features, num_classes)
        nn.init.trunc_normal_(self.fc.weight, std=0.01)
        nn.init.zeros_(self.fc.bias)

    def forward(self, out: EncoderOutput | torch.Tensor) -> torch.Tensor:
        feature = out if isinstance(out, torch.Tensor) else select_feature(out, self.source)
        return self.fc(self.bn(feature))
