"""Pre-norm transformer block, MLP, stochastic depth and LayerScale."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .attention import Attention

__all__ = ["Block", "Mlp", "DropPath", "LayerScale", "masked_layer_norm", "run_block"]


def masked_layer_norm(x: torch.Tensor, mask: torch.Tensor | None, count: torch.Tensor | None,
                      weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """LayerNorm over the active channels of x (..., C): mask (B, 1, C) or (B, C) of 0/1, count = active
    channels (B, 1, 1) or (B, 1). Two-pass mean and variance (fp32-stable); inactive outputs are 0.
    Without a mask this is ``F.layer_norm``."""
    if mask is None:
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    mean = (x * mask).sum(-1, keepdim=True) / count
    centred = (x - mean) * mask
    var = centred.square().sum(-1, keepdim=True) / count
    return (centred * torch.rsqrt(var + eps) * weight + bias) * mask


class DropPath(nn.Module):
    """Stochastic depth: zero whole samples of a residual branch with probability ``p`` (training only)."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep

    def extra_repr(self) -> str:
        return f"p={self.p}"


class LayerScale(nn.Module):
    """Per-channel residual scale (CaiT / DINOv2); named ``gamma`` as in timm."""

    def __init__(self, dim: int, init_values: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init_values)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class Mlp(nn.Module):
    """Two-layer GELU MLP: (..., D) -> (..., D)."""

    def __init__(self, dim: int, hidden: int, drop: float = 0.0, out_dim: int | None = None) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.drop = nn.Dropout(drop) if drop > 0 else nn.Identity()
        self.fc2 = nn.Linear(hidden, out_dim or dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class Block(nn.Module):
    """Pre-norm block: x + attn(norm1(x)); then the FFN.

    Global tokens share the patch FFN unless the global-token plug-in brings its own (Jumbo): then the
    first ``G`` tokens skip the patch FFN and go through ``global_tokens.ffn(g, layer_idx, drop_path)``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_hidden: int,
        qkv_bias: bool = True,
        drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        init_values: float | None = None,
        layer_idx: int = 0,
        qk_dim: int | None = None,
        v_dim: int | None = None,
    ) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=drop,
                              qk_dim=qk_dim, v_dim=v_dim)
        self.ls1 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, mlp_hidden, drop=drop)
        self.ls2 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        global_tokens: nn.Module | None = None,
        inplace: bool = False,
    ) -> torch.Tensor:
        """x: (B, G + N, D) -> (B, G + N, D).

        global_tokens: the encoder's global-token plug-in (``global_tokens.GlobalTokens``: ``num_tokens``,
            ``has_own_ffn``, ``ffn``); typed as a module so this file does not import the plug-ins.
        inplace: add the residuals into ``x`` itself (inference only: the encoder sets it when autograd is
        off and ``x`` is its own buffer); saves an allocation and a copy per residual.
        """
        if inplace:
            return self._forward_inplace(x, attn_mask, global_tokens)
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_mask)))
        if global_tokens is None or not global_tokens.has_own_ffn:
            return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        num_global = global_tokens.num_tokens
        # one split, not two slices: its backward is one concatenation instead of two zero-filled full-size
        # gradients added together
        g, p = x.split([num_global, x.shape[1] - num_global], dim=1)
        p = p + self.drop_path2(self.ls2(self.mlp(self.norm2(p))))
        g = global_tokens.ffn(g, self.layer_idx, self.drop_path2)
        return torch.cat([g, p], dim=1)

    def _forward_inplace(self, x, attn_mask, global_tokens):
        x.add_(self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_mask))))
        if global_tokens is None or not global_tokens.has_own_ffn:
            return x.add_(self.drop_path2(self.ls2(self.mlp(self.norm2(x)))))
        num_global = global_tokens.num_tokens
        p = x[:, num_global:]
        p.add_(self.drop_path2(self.ls2(self.mlp(self.norm2(p)))))
        x[:, :num_global] = global_tokens.ffn(x[:, :num_global], self.layer_idx, self.drop_path2)
        return x


def run_block(block: Block, x: torch.Tensor, attn_mask: torch.Tensor | None, global_tokens: nn.Module | None,
              checkpointing: bool = False, inplace: bool = False) -> torch.Tensor:
    """``block(x, attn_mask, global_tokens, inplace=inplace)``; with ``checkpointing`` and autograd on, the block's
    activations are recomputed in the backward pass instead of kept (timm's ``set_grad_checkpointing``: the same
    gradients for less memory)."""
    if checkpointing and torch.is_grad_enabled():
        return checkpoint(block, x, attn_mask, global_tokens, use_reentrant=False)
    return block(x, attn_mask, global_tokens, inplace=inplace)


class TimmTrainingAPI:
    """What timm's training scripts call on a model, shared by the plain and the multi-stage encoder (a mixin
    before ``nn.Module``; the model runs its blocks through :func:`run_block` with ``self.grad_checkpointing``)."""

    grad_checkpointing = False
    head: nn.Module

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in the backward pass instead of keeping them (training with autograd
        only; the gradients are the same)."""
        self.grad_checkpointing = bool(enable)

    def get_classifier(self) -> nn.Module:
        return self.head

