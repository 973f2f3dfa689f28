"""Multi-head self-attention with a fused qkv projection on ``F.scaled_dot_product_attention``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .tokenizers import exporting

__all__ = ["Attention"]


class Attention(nn.Module):
    """Fused-qkv attention: (B, T, D) -> (B, T, D).

    ``qkv`` is Linear(D, 2 * qk_dim + v_dim) laid out [q heads | k heads | v heads] (timm's layout when
    qk_dim = v_dim = D); ``proj`` is Linear(v_dim, D). The softmax scale is 1/sqrt(qk_dim / num_heads).
    An inner width other than D (qk_dim = v_dim = heads * head_dim) gives the multi-stage encoders their
    fixed head width; wider q/k heads than value heads come from collapsing progressive-join branches.
    ``attn_mask`` is a bool tensor broadcastable to (B, heads, T, T), True = may attend.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        qk_dim: int | None = None,
        v_dim: int | None = None,
    ) -> None:
        super().__init__()
        qk_name = "qk_dim" if qk_dim else "width"
        qk_dim, v_dim = int(qk_dim or dim), int(v_dim or dim)
        if num_heads < 1:
            raise ValueError(f"attention needs num_heads >= 1, got {num_heads}")
        for name, width in ((qk_name, qk_dim), ("v_dim", v_dim)):
            if width % num_heads:
                raise ValueError(f"{name} {width} is not divisible by the number of heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = qk_dim // num_heads
        self.qk_dim, self.v_dim = qk_dim, v_dim
        self.uniform = qk_dim == v_dim
        self.qkv = nn.Linear(dim, 2 * qk_dim + v_dim, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(v_dim, dim)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, length, dim = x.shape
        drop = self.attn_drop if self.training else 0.0
        if self.uniform:
            qkv = self.qkv(x).reshape(batch, length, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            x = attention(q, k, v, attn_mask, drop)
            return self.proj_drop(self.proj(x.transpose(1, 2).reshape(batch, length, self.v_dim)))
        q, k, v = self.qkv(x).split([self.qk_dim, self.qk_dim, self.v_dim], dim=-1)
        q, k, v = (t.reshape(batch, length, self.num_heads, -1).transpose(1, 2) for t in (q, k, v))
        qk_head, v_head = q.shape[-1], v.shape[-1]
        pad = not exporting()  # an exported graph spells attention out as matmuls, which take unequal widths
        if pad and v_head < qk_head:  # fused kernels want equal head widths; zero value columns change nothing
            v = F.pad(v, (0, qk_head - v_head))
        elif pad and v_head > qk_head:  # zero q/k columns leave the logits unchanged; keep the scale of the real width
            q, k = F.pad(q, (0, v_head - qk_head)), F.pad(k, (0, v_head - qk_head))
        x = attention(q, k, v, attn_mask, drop, qk_head**-0.5)
        x = x[..., :v_head].transpose(1, 2).reshape(batch, length, self.v_dim)
        return self.proj_drop(self.proj(x))

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, qk_dim={self.qk_dim}, v_dim={self.v_dim}"


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, drop: float,
              scale: float | None = None) -> torch.Tensor:
    """(B, H, T, d) scaled dot-product attention; ``mask``: bool (True = may attend) or an additive float bias;
    ``scale``: None = 1 / sqrt(d).

    An exported graph with a float bias spells the attention out (softmax of the biased logits): the exporter's
    decomposition of the fused operator with a float mask gives an output whose strides it then mis-states."""
    if exporting() and mask is not None and mask.is_floating_point():
        weights = torch.softmax((q * (scale or q.shape[-1] ** -0.5)) @ k.transpose(-2, -1) + mask, dim=-1)
        return weights @ v
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop, scale=scale)
