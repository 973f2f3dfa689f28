"""Level and scale of each channel, kept as a feature while the channel itself is normalised (RevIN-style).

Normalising every series by its own mean and standard deviation lets one set of weights read series of any
amplitude, but it throws away the level and the amplitude, which on some sets carry the class (PLAID: a
random forest on three scale statistics alone, log std, mean and max |x|, scores 80% of the official test
set). :class:`LevelScale` normalises each channel of each series inside the model and hands its observed
mean and standard deviation back as an embedding added to every token of that channel:

    steps (B, C, L') -> per channel: mean m, std s over the observed steps
                     -> (x - m) / s  (missing steps stay 0)                  -> the patch projection, stem, trunk
                     -> Linear(2, D)([asinh(m), log(s)])  (B*C, 1, D)        -> added to the channel's N tokens

Feed it series normalised with training-split statistics (``--normalize train``), which keep the differences
between series; per-series normalisation beforehand would leave it (0, 0) to read.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["LevelScale", "level_scale_flops", "observed_mean_var"]

STD_FLOOR = 1e-5  # a constant channel keeps its level and gets log(STD_FLOOR) as its scale


def observed_mean_var(values: torch.Tensor, observed: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (population) variance of each (B, C) row's observed steps: (B, C, L) -> two (B, C, 1).

    ``values`` holds missing steps as 0; ``observed``: (B, C, L) bool or None (all observed). A row with no
    observed step gives 0 and 0."""
    if observed is None:
        mean = values.mean(-1, keepdim=True)
        return mean, (values - mean).pow(2).mean(-1, keepdim=True)
    seen = observed.to(values.dtype)
    count = seen.sum(-1, keepdim=True).clamp_min(1.0)
    mean = (values * seen).sum(-1, keepdim=True) / count
    return mean, ((values - mean).pow(2) * seen).sum(-1, keepdim=True) / count


class LevelScale(nn.Module):
    """(B, C, L') steps -> (normalised steps (B, C, L'), level/scale embedding (B*C, 1, D)).

    ``observed``: (B, C, L') bool (True = observed) or None when nothing is missing."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(2, dim)

    def forward(self, values: torch.Tensor, observed: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, chans, _ = values.shape
        mean, var = observed_mean_var(values, observed)
        std = var.add(STD_FLOOR * STD_FLOOR).sqrt()
        normalised = (values - mean) / std
        if observed is not None:
            normalised = normalised * observed.to(values.dtype)
        stats = torch.cat([torch.asinh(mean), torch.log(std)], dim=-1)  # (B, C, 2)
        return normalised, self.proj(stats.reshape(batch * chans, 1, 2))


def level_scale_flops(dim: int) -> int:
    """Forward FLOPs of :class:`LevelScale` per channel-series, as FlopCounterMode counts them (the projection)."""
    return 2 * 2 * dim
