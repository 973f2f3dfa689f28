"""A learned relative-position bias for attention between patch tokens (a scalar per head and offset, as
ConvTran's eRPE and Swin's bias tables), added to the attention logits of every layer.

Patch tokens i and j get ``table[head, pos_i - pos_j]``; pairs with a global token get 0. The positions are the
patch indices (the kept ones under token drop), so masking keeps each pair's offset. Offsets beyond the table
(inputs with more patches than the model was built for) use the table's end values.
"""

from __future__ import annotations

import torch
from torch import nn

from ...encoders.extras import EncoderExtra

__all__ = ["RelativePositionBias"]


class RelativePositionBias(EncoderExtra):
    """(heads, 2N - 1) learned offsets -> an additive attention bias (B' or 1, heads, G + K, G + K).

    Args:
        num_heads: attention heads of every layer.
        num_patches: N, the patch count the model is built for (offsets -(N-1)..N-1).
        num_global: G, global tokens in front of the patch tokens (bias 0 for their pairs).
    """

    def __init__(self, num_heads: int, num_patches: int, num_global: int) -> None:
        super().__init__()
        self.num_patches, self.num_global = int(num_patches), int(num_global)
        self.table = nn.Parameter(torch.zeros(num_heads, 2 * self.num_patches - 1))

    def forward(self, num_tokens: int, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``num_tokens``: patch tokens in the input (before ``keep``); ``keep``: (B', K) kept patch indices."""
        if keep is None:
            positions = torch.arange(num_tokens, device=self.table.device)[None]
        else:
            positions = keep if keep.ndim == 2 else keep[None]
        offsets = positions[:, :, None] - positions[:, None, :]  # (B' or 1, K, K)
        index = offsets.clamp(-(self.num_patches - 1), self.num_patches - 1) + self.num_patches - 1
        patch_bias = self.table[:, index].transpose(0, 1)  # (B' or 1, heads, K, K)
        g = self.num_global
        return nn.functional.pad(patch_bias, (g, 0, g, 0))  # zeros for pairs with a global token

    def attention_bias(self, num_tokens: int, keep: torch.Tensor | None) -> torch.Tensor:
        return self(num_tokens, keep)
