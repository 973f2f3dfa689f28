"""The multi-branch training form of a transformer block: n parallel branches over one shared normalisation
per sub-layer, joined progressively (see ``jumbokit.encoders.branches``); weights are stacked over branches."""

from __future__ import annotations

from typing import Iterable

import torch
import torch.nn as nn

from .blocks import DropPath
from .branch_layers import BranchAffine, BranchLinear, BranchScale
from .collapse import check_joined, collapse_block, plain_block, resolve_qk_form
from .join import join_branches, pairwise_sq_cosine

__all__ = ["BranchedAttention", "BranchedMlp", "BranchedBlock", "branch_drop_path"]


def branch_drop_path(x: torch.Tensor, rates: tuple[float, ...], training: bool) -> torch.Tensor:
    """Stochastic depth per sample and per branch. x (B, n, T, D); rates: n drop probabilities."""
    if not training or max(rates) == 0.0:
        return x
    keep = torch.tensor([1.0 - r for r in rates], dtype=x.dtype, device=x.device)
    mask = torch.bernoulli(keep.expand(x.shape[0], -1))  # (B, n)
    mask = mask / keep.clamp_min(1e-12)
    return x * mask[:, :, None, None]


class BranchedAttention(nn.Module):
    """n attention branches over one shared normalised input, with joined logits (and values).

    forward(x (B, T, D) non-affine-normalised, lam scalar tensor, attn_mask (B, 1, 1, T) bool True = attend)
    -> per-branch outputs (B, n, T, D) (before LayerScale / drop path).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        branches: int,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        join_values: bool = True,
        rescale: bool = True,
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim ({dim}) must be divisible by num_heads ({num_heads})")
        self.dim, self.num_heads, self.branches = dim, num_heads, branches
        self.head_dim = dim // num_heads
        self.join_values, self.rescale = join_values, rescale
        self.norm = BranchAffine(branches, dim)
        self.qkv = BranchLinear(branches, dim, 3 * dim, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = BranchLinear(branches, dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor, lam: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, D = x.shape
        n, H, d = self.branches, self.num_heads, self.head_dim
        qkv = self.qkv(self.norm(x))  # (B, n, T, 3D)
        q, k, v = qkv.view(B, n, T, 3, H, d).permute(3, 0, 1, 4, 2, 5).unbind(0)  # (B, n, H, T, d)
        logits = q @ k.transpose(-2, -1)  # (B, n, H, T, T)
        logits = join_branches(logits, lam, self.rescale, n) * (d**-0.5)
        if attn_mask is not None:
            logits = logits.masked_fill(~attn_mask[:, None], float("-inf"))
        attn = self.attn_drop(logits.softmax(dim=-1))
        if self.join_values:
            v = join_branches(v, lam, self.rescale, n)
        out = (attn @ v).permute(0, 1, 3, 2, 4).reshape(B, n, T, D)
        # blockwise output projection: per branch (sum over heads == concat + proj)
        return self.proj_drop(self.proj(out))


class BranchedMlp(nn.Module):
    """n FFN branches with joined pre-GELU activations. x (B, T, D) normalised -> (B, n, T, D)."""

    def __init__(
        self, dim: int, hidden: int, branches: int, drop: float = 0.0, rescale: bool = True
    ) -> None:
        super().__init__()
        self.branches, self.rescale = branches, rescale
        self.norm = BranchAffine(branches, dim)
        self.fc1 = BranchLinear(branches, dim, hidden)
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = BranchLinear(branches, hidden, dim)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        h = join_branches(self.fc1(self.norm(x)), lam, self.rescale, self.branches)
        return self.drop2(self.fc2(self.drop1(self.act(h))))


class BranchedBlock(nn.Module):
    """n parallel pre-norm branches over one shared normalisation per sub-layer; outputs summed.

    forward(x (B, G+N, D), attn_mask, global_tokens) -> (B, G+N, D), the same signature as ``Block``.
    A Jumbo plug-in's tokens skip the branched patch FFN and go once through its shared FFN.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_hidden: int,
        branches: int,
        qkv_bias: bool = True,
        drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: Iterable[float] = (),
        init_values: float | None = None,
        layer_idx: int = 0,
        join_values: bool = True,
        rescale: bool = True,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.layer_idx, self.branches, self.dim = layer_idx, branches, dim
        self.num_heads, self.mlp_hidden = num_heads, mlp_hidden
        rates = tuple(float(r) for r in drop_path) or (0.0,) * branches
        if len(rates) != branches:
            raise ValueError(f"expected {branches} drop-path rates (one per branch), got {len(rates)}")
        self.drop_path_rates = rates
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps, elementwise_affine=False)
        self.attn = BranchedAttention(dim, num_heads, branches, qkv_bias, attn_drop, drop, join_values, rescale)
        self.ls1 = BranchScale(branches, dim, init_values) if init_values else None
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps, elementwise_affine=False)
        self.mlp = BranchedMlp(dim, mlp_hidden, branches, drop, rescale)
        self.ls2 = BranchScale(branches, dim, init_values) if init_values else None
        # the Jumbo FFN runs once per block: stochastic depth at the mean rate of the block's branches
        self.drop_path_global = DropPath(sum(rates) / branches)
        self.register_buffer("join_lambda", torch.zeros(()))
        self.collect_diversity = False
        self.diversity: list[torch.Tensor] = []

    def _merge(self, out: torch.Tensor, scale: BranchScale | None) -> torch.Tensor:
        """(B, n, T, D) branch outputs -> LayerScale, per-branch drop path, diversity term -> sum (B, T, D)."""
        if scale is not None:
            out = scale(out)
        if self.collect_diversity:
            self.diversity.append(pairwise_sq_cosine(out))
        out = branch_drop_path(out, self.drop_path_rates, self.training)
        return out.sum(dim=1)

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, global_tokens: nn.Module | None = None,
        inplace: bool = False,
    ) -> torch.Tensor:
        lam = self.join_lambda.to(x.dtype)
        x = x + self._merge(self.attn(self.norm1(x), lam, attn_mask), self.ls1)
        if global_tokens is None or not getattr(global_tokens, "has_own_ffn", False):
            return x + self._merge(self.mlp(self.norm2(x), lam), self.ls2)
        num_global = global_tokens.num_tokens
        g, p = x.split([num_global, x.shape[1] - num_global], dim=1)
        p = p + self._merge(self.mlp(self.norm2(p), lam), self.ls2)
        g = global_tokens.ffn(g, self.layer_idx, self.drop_path_global)
        return torch.cat([g, p], dim=1)

    # ---------------------------------------------------------------- collapse
    def collapsed_widths(self, qk_form: str = "auto") -> tuple[int, int]:
        """(qk_dim, v_dim): total q/k and value widths of the collapsed attention."""
        n, d, H = self.branches, self.dim // self.num_heads, self.num_heads
        form = resolve_qk_form(qk_form, n, d, self.dim)
        qk_head = n * d if form == "concat" else self.dim
        v_dim = self.dim if self.attn.join_values else n * self.dim
        return H * qk_head, v_dim

    def collapsed_state(self, qk_form: str = "auto", check: bool = True) -> dict[str, torch.Tensor]:
        """Tensors of the equivalent plain block (``Block`` names; LN affine identity, no LayerScale)."""
        if check:
            check_joined(self)
        return collapse_block(self, resolve_qk_form(qk_form, self.branches, self.dim // self.num_heads, self.dim))

    def fuse(self) -> nn.Module:
        """The equivalent plain block (timm ``reparameterize_model`` calls this). Needs lambda = 1."""
        check_joined(self)
        qk_dim, v_dim = self.collapsed_widths()
        block = plain_block(self.dim, self.num_heads, self.mlp_hidden, qk_dim, v_dim, self.layer_idx,
                             self.norm1.eps)
        block.load_state_dict(self.collapsed_state(check=False))
        return block.to(device=self.join_lambda.device).train(self.training)
