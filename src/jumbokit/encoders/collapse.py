"""The exact collapse of a fully joined (lambda = 1) branched block into one plain ``Block``: per-branch
LayerNorm affines folded into the projections, q/k concatenated per head (or the narrower product form), values,
FFN and output projections summed, LayerScale folded; arithmetic in float64."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from .blocks import Block
from .branch_layers import BranchAffine, BranchLinear, BranchScale
from .encoder import DEFAULT_CONFIG
from .global_kinds import kind_of

__all__ = ["fold_layernorm_into_linear", "collapsed_config", "collapse_block", "check_joined", "resolve_qk_form",
           "plain_block"]


# ``block`` below is a ``jumbokit.encoders.branch_blocks.BranchedBlock`` (which imports this module to collapse
# itself): read through its branches, heads, join_lambda, attn, mlp, ls1 and ls2


def check_joined(block: nn.Module) -> None:
    lam = float(block.join_lambda)
    if lam != 1.0:
        raise ValueError(
            f"cannot collapse block {block.layer_idx}: its branches are joined with lambda={lam:.4g}, the exact "
            "collapse needs lambda=1 (finish the join warm-up, or call set_join(1.0) and fine-tune first)"
        )


def resolve_qk_form(qk_form: str, branches: int, head_dim: int, dim: int) -> str:
    if qk_form not in ("auto", "concat", "product"):
        raise ValueError(f"unknown qk_form {qk_form!r}; expected 'auto', 'concat' or 'product'")
    if qk_form == "auto":
        return "concat" if branches * head_dim <= dim else "product"
    return qk_form


@torch.no_grad()
def collapse_block(block: nn.Module, qk_form: str) -> dict[str, torch.Tensor]:
    """Exact plain-block weights of a lambda=1 branched block; arithmetic in float64."""
    attn, mlp = block.attn, block.mlp
    n, H, D = block.branches, block.num_heads, block.dim
    d = D // H
    dtype = attn.qkv.weight.dtype
    f64 = torch.float64
    r_attn = math.sqrt(n) if attn.rescale else 1.0
    r_mlp = math.sqrt(n) if mlp.rescale else 1.0

    def fold(linear: BranchLinear, affine: BranchAffine) -> tuple[torch.Tensor, torch.Tensor]:
        w, b = linear.weight.to(f64), _bias(linear).to(f64)
        return fold_layernorm_into_linear(w, b, affine.weight.to(f64), affine.bias.to(f64))

    def gammas(scale: BranchScale | None) -> torch.Tensor:
        return scale.gamma.to(f64) if scale is not None else torch.ones(n, D, dtype=f64, device=attn.qkv.weight.device)

    # ---- attention: per branch (n, 3D, D) with the LN affine folded in
    w, b = fold(attn.qkv, attn.norm)
    wq, wk, wv = w.view(n, 3, H, d, D).unbind(1)  # (n, H, d, D)
    bq, bk, bv = b.view(n, 3, H, d).unbind(1)  # (n, H, d)
    target_scale = 1.0 / (r_attn * math.sqrt(d))  # joined softmax scale at lambda = 1
    if qk_form == "concat":
        qk_head = n * d
        q_w = wq.permute(1, 0, 2, 3).reshape(H * qk_head, D)
        q_b = bq.permute(1, 0, 2).reshape(H * qk_head)
        k_w = wk.permute(1, 0, 2, 3).reshape(H * qk_head, D)
        k_b = bk.permute(1, 0, 2).reshape(H * qk_head)
    else:  # q_h = x G_h + u_h, k_h = x: drops only query-only terms, which the softmax ignores
        qk_head = D
        q_w = torch.einsum("nhkj,nhki->hji", wk, wq).reshape(H * D, D)  # P_h = sum_b Wk_b^T Wq_b
        q_b = torch.einsum("nhkj,nhk->hj", wk, bq).reshape(H * D)  # u_h = sum_b Wk_b^T bq_b
        k_w = torch.eye(D, dtype=f64, device=w.device).repeat(H, 1)
        k_b = torch.zeros(H * D, dtype=f64, device=w.device)
    q_factor = target_scale * math.sqrt(qk_head)  # the plain attention scales by 1/sqrt(qk_head)
    q_w, q_b = q_w * q_factor, q_b * q_factor

    g1 = gammas(block.ls1)
    wo, bo = attn.proj.weight.to(f64) * g1[:, :, None], _bias(attn.proj).to(f64) * g1  # (n, D, D), (n, D)
    if attn.join_values:
        v_w, v_b = wv.sum(0).reshape(D, D) / r_attn, bv.sum(0).reshape(D) / r_attn
        p_w = wo.sum(0)
    else:  # route (a): per-head values of all branches side by side, projections stacked to match
        v_w = wv.permute(1, 0, 2, 3).reshape(H * n * d, D)
        v_b = bv.permute(1, 0, 2).reshape(H * n * d)
        p_w = wo.view(n, D, H, d).permute(1, 2, 0, 3).reshape(D, H * n * d)
    p_b = bo.sum(0)

    # ---- FFN
    w1, b1 = fold(mlp.fc1, mlp.norm)
    g2 = gammas(block.ls2)
    w2, b2 = mlp.fc2.weight.to(f64) * g2[:, :, None], _bias(mlp.fc2).to(f64) * g2

    ones, zeros = torch.ones(D, dtype=f64), torch.zeros(D, dtype=f64)
    state = {
        "norm1.weight": ones, "norm1.bias": zeros,
        "attn.qkv.weight": torch.cat([q_w, k_w, v_w], 0), "attn.qkv.bias": torch.cat([q_b, k_b, v_b], 0),
        "attn.proj.weight": p_w, "attn.proj.bias": p_b,
        "norm2.weight": ones, "norm2.bias": zeros,
        "mlp.fc1.weight": w1.sum(0) / r_mlp, "mlp.fc1.bias": b1.sum(0) / r_mlp,
        "mlp.fc2.weight": w2.sum(0), "mlp.fc2.bias": b2.sum(0),
    }
    device = attn.qkv.weight.device
    return {k: v.to(device=device, dtype=dtype).contiguous() for k, v in state.items()}


def _bias(linear: BranchLinear) -> torch.Tensor:
    if linear.bias is not None:
        return linear.bias
    return torch.zeros(linear.branches, linear.out_features, dtype=linear.weight.dtype, device=linear.weight.device)


def fold_layernorm_into_linear(
    weight: torch.Tensor, bias: torch.Tensor | None, gamma: torch.Tensor, beta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold a LayerNorm affine into the following linear map.

    W (gamma * z + beta) + b = (W diag gamma) z + (W beta + b), z the normalised input.

    weight (..., out, in), bias (..., out) or None, gamma / beta (..., in) -> (weight', bias').
    """
    new_weight = weight * gamma[..., None, :]
    new_bias = (weight @ beta[..., :, None]).squeeze(-1)
    if bias is not None:
        new_bias = new_bias + bias
    return new_weight, new_bias


def plain_block(
    dim: int, num_heads: int, mlp_hidden: int, qk_dim: int, v_dim: int, layer_idx: int, eps: float
) -> nn.Module:
    """A plain ``Block`` whose attention has the collapsed widths (LayerScale off, qkv bias on)."""
    block = Block(dim, num_heads, mlp_hidden, qkv_bias=True, layer_idx=layer_idx, qk_dim=qk_dim, v_dim=v_dim)
    block.norm1.eps = block.norm2.eps = eps
    return block


# --------------------------------------------------------------------------------------------------
# the encoder


def collapsed_config(config: dict, branches: int, join_values: bool = True, qk_form: str = "auto") -> dict:
    """Plain L/n-layer config of a collapsed model: depth L/n, qkv bias on (folded LN shifts), no LayerScale
    (folded), and the attention widths ``qk_dim`` (n*d_k or D per head) / ``v_dim`` (D, or n*D for route a)."""
    cfg = {**DEFAULT_CONFIG, **config}
    dim, heads, depth = int(cfg["dim"]), int(cfg["num_heads"]), int(cfg["depth"])
    if depth % branches:
        raise ValueError(f"branches={branches} does not divide depth={depth}")
    head_dim = dim // heads
    form = resolve_qk_form(qk_form, branches, head_dim, dim)
    qk_head = branches * head_dim if form == "concat" else dim
    out = dict(cfg)
    out.update(kind_of(cfg).collapsed_options(cfg))  # what the global-token kind keeps (e.g. the Jumbo FFN's scale)
    out.update(depth=depth // branches, qkv_bias=True, init_values=None,
               mlp_hidden=int(cfg["mlp_hidden"] or round(cfg["mlp_ratio"] * dim)))
    out["qk_dim"] = heads * qk_head
    out["v_dim"] = dim if join_values else branches * dim
    return out
