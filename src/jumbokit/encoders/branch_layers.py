"""The per-branch parameters of a multi-branch block, stacked over the n branches: linear maps, LayerNorm affines
and LayerScales. Both the branched blocks (``jumbokit.encoders.branch_blocks``) and their exact collapse
(``jumbokit.encoders.collapse``) are built on them."""

from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["BranchLinear", "BranchAffine", "BranchScale"]


class BranchLinear(nn.Module):
    """n independent linear maps stored as ``weight`` (n, out, in) and ``bias`` (n, out).

    forward: x (B, T, in) shared by all branches, or (B, n, T, in) one input per branch -> (B, n, T, out).
    """

    def __init__(self, branches: int, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.branches, self.in_features, self.out_features = branches, in_features, out_features
        self.weight = nn.Parameter(torch.empty(branches, out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(branches, out_features)) if bias else None
        nn.init.trunc_normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3:
            out = torch.einsum("bti,noi->bnto", x, self.weight)
        else:
            out = torch.einsum("bnti,noi->bnto", x, self.weight)
        if self.bias is not None:
            out = out + self.bias[None, :, None, :]
        return out

    def extra_repr(self) -> str:
        return f"branches={self.branches}, in={self.in_features}, out={self.out_features}, bias={self.bias is not None}"


class BranchAffine(nn.Module):
    """Per-branch LayerNorm affine over a shared normalised input: (B, T, D) -> (B, n, T, D)."""

    def __init__(self, branches: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(branches, dim))
        self.bias = nn.Parameter(torch.zeros(branches, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, None] * self.weight[None, :, None, :] + self.bias[None, :, None, :]


class BranchScale(nn.Module):
    """Per-branch LayerScale: (B, n, T, D) * gamma (n, D)."""

    def __init__(self, branches: int, dim: int, init_values: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(branches, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma[None, :, None, :]
