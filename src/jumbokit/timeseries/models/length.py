"""Each series' length as a feature of the global tokens (``length_embed=True``).

Under NaN padding a shorter series' tail tokens are masked, so attention never sees where a series ends
except through which position embeddings remain. On some sets the length itself carries the class
(PickupGestureWiimoteZ: a random forest on the length alone scores 34% of the official test set, 10 classes;
PLAID 29% of 11). :class:`LengthEmbed` hands it to the model directly:

    series (B, C, L) -> per channel: span s = last observed step + 1;  r = s / seq_len
                     -> [log r, r - 1] (both 0 for a full-length series)
                     -> (2 -> G * D) projection, zero at the start  -> (B*C, G, D) added to the G global tokens

Both features are 0 for a series of the model's full length, and the projection starts at zero, so on a set
of equal lengths the model computes, trains and initialises (no random draw) exactly as without it.
"""

from __future__ import annotations

import torch
from torch import nn

from ...encoders.extras import EncoderExtra

__all__ = ["LengthEmbed", "last_observed_index", "length_embed_flops", "series_span"]


def last_observed_index(observed: torch.Tensor) -> torch.Tensor:
    """(B, C, L) bool (True = observed) -> (B, C, 1) index of each channel's last observed step (-1 when none)."""
    steps = torch.arange(observed.shape[-1], device=observed.device).expand_as(observed)
    return torch.where(observed, steps, torch.full_like(steps, -1)).amax(-1, keepdim=True)


def series_span(x: torch.Tensor) -> torch.Tensor:
    """(B, C, L) series with NaN for missing steps -> (B*C,) the last observed step + 1 of each channel (0 when
    a channel has no observed step). Missing steps inside a series do not shorten it."""
    return (last_observed_index(~torch.isnan(x)) + 1).reshape(-1)


class LengthEmbed(EncoderExtra):
    """(B, C, L) series -> (B*C, G, D) offsets of the global tokens from each channel's length.

    Args:
        seq_len: the full length (the model's ``seq_len``); a series of this length gets a zero offset.
        num_global: G, the plug-in's global tokens.
        dim: D.
    """

    def __init__(self, seq_len: int, num_global: int, dim: int) -> None:
        super().__init__()
        if num_global < 1:
            raise ValueError("length_embed adds to the global tokens, and this plug-in has none; use cls, "
                             "registers or jumbo")
        self.seq_len, self.num_global, self.dim = int(seq_len), int(num_global), int(dim)
        self.weight = nn.Parameter(torch.zeros(self.num_global * self.dim, 2))  # no random draw: see above

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, L) -> (B*C, 2): [log r, r - 1] with r = span / seq_len (floored at one step)."""
        ratio = series_span(x).clamp_min(1).to(self.weight.dtype) / self.seq_len
        return torch.stack([ratio.log(), ratio - 1.0], dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 2:  # (B, L): one channel
            x = x[:, None]
        offset = nn.functional.linear(self.features(x), self.weight)  # (B*C, G*D)
        return offset.reshape(-1, self.num_global, self.dim)

    def global_offset(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)


def length_embed_flops(num_global: int, dim: int) -> int:
    """Forward FLOPs of :class:`LengthEmbed` per channel-series, as FlopCounterMode counts them (the projection)."""
    return 2 * 2 * num_global * dim
