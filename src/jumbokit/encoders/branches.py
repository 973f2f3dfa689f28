"""Progressive-join multi-branch blocks and their exact collapse into a plain Encoder.

An L-layer configuration is trained as L/n blocks of n parallel branches. Each block has one shared
(non-affine) pre-attention normalisation and one shared pre-FFN normalisation; every branch keeps
its own LayerNorm affine (gamma_b, beta_b), which is folded into that branch's projections on collapse.
Branch outputs are summed into the residual stream.

Joining, with lambda in [0, 1] and rescale r = sqrt(1 + (n - 1) lambda^2):

* attention logits, per head:  A'_b = (A_b + lambda * sum_{c != b} A_c) / (r sqrt(d_k)),
  A_b = Q_b K_b^T (biases included);
* value activations (route "b", default): V'_b = (V_b + lambda * sum_{c != b} V_c) / r;
* pre-GELU FFN activations:    h'_b = (h_b + lambda * sum_{c != b} h_c) / r.

At lambda = 1 every branch sees the same softmax S = softmax(sum_b Q_b K_b^T / sqrt(n d_k)), the same
values sum_b V_b / sqrt(n) and the same GELU input, so the block collapses EXACTLY into one plain
block:

* q/k per head: concatenation [Q_1 .. Q_n], [K_1 .. K_n] (width n * d_k per head; the default
  1/sqrt(n d_k) softmax scale of that width is exactly the joined scale). When n * d_k > dim the
  "product" form is narrower: q_h = x G_h + u_h, k_h = x with G_h = sum_b Wq_b Wk_b^T, which is exact
  because the dropped terms depend on the query only and cancel in the softmax;
* values: sum_b Wv_b / sqrt(n) (one branch wide); output projection: sum_b Wo_b;
* FFN: fc1 = sum_b W1_b / sqrt(n), fc2 = sum_b W2_b;
* LayerScale gammas are folded into the branch output projections.

Route "a" (``join_values=False``) joins only the logits and keeps each branch's values: the collapsed
value heads are n times wider (values and output projections concatenated per head).
"""

from __future__ import annotations

import copy
import math
from typing import Callable, Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .blocks import Block, DropPath
from .encoder import DEFAULT_CONFIG, Encoder

__all__ = [
    "JOIN_SCHEDULES",
    "join_schedule_value",
    "join_lambda_at",
    "BranchLinear",
    "BranchAffine",
    "BranchScale",
    "BranchedAttention",
    "BranchedMlp",
    "BranchedBlock",
    "BranchedEncoder",
    "build_branched_encoder",
    "reparameterize",
    "fold_layernorm_into_linear",
    "collapsed_config",
]


# --------------------------------------------------------------------------------------------------
# lambda schedules
# --------------------------------------------------------------------------------------------------

_EXP_RATE = 5.0


def _linear(t: float) -> float:
    return t


def _cosine(t: float) -> float:
    return 0.5 * (1.0 - math.cos(math.pi * t))


def _exponential(t: float) -> float:
    # 1 - exp(-5 t), normalised so that it reaches exactly 1 at the end of the warm-up
    # (the raw form stops at 0.9933 and would jump to 1 when the post-join phase starts).
    return (1.0 - math.exp(-_EXP_RATE * t)) / (1.0 - math.exp(-_EXP_RATE))


def _square_root(t: float) -> float:
    return math.sqrt(t)


JOIN_SCHEDULES: dict[str, Callable[[float], float]] = {
    "linear": _linear,
    "cosine": _cosine,
    "exp": _exponential,
    "sqrt": _square_root,
}
_SCHEDULE_ALIASES = {"exponential": "exp", "square_root": "sqrt", "square-root": "sqrt", "cos": "cosine"}


def _resolve_schedule(schedule: str | Callable[[float], float]) -> Callable[[float], float]:
    if callable(schedule):
        return schedule
    if not isinstance(schedule, str):
        raise TypeError(f"join_schedule must be a name or a callable t -> lambda, got {type(schedule).__name__}")
    key = _SCHEDULE_ALIASES.get(schedule.lower(), schedule.lower())
    if key not in JOIN_SCHEDULES:
        raise ValueError(
            f"unknown join_schedule {schedule!r}; expected one of {sorted(JOIN_SCHEDULES)} "
            f"(aliases: {sorted(_SCHEDULE_ALIASES)}) or a callable t -> lambda"
        )
    return JOIN_SCHEDULES[key]


def join_schedule_value(schedule: str | Callable[[float], float], progress: float) -> float:
    """lambda for a warm-up progress t in [0, 1] (clipped); 0 at t = 0 and 1 at t = 1 for the named schedules."""
    fn = _resolve_schedule(schedule)
    t = min(max(float(progress), 0.0), 1.0)
    if t >= 1.0:
        return 1.0
    return float(min(max(fn(t), 0.0), 1.0))


def join_lambda_at(
    step: int,
    warmup_steps: int,
    schedule: str | Callable[[float], float] = "linear",
    start_step: int = 0,
) -> float:
    """lambda at a training step: 0 before ``start_step``, the schedule over ``warmup_steps``, then 1."""
    if warmup_steps < 0 or start_step < 0:
        raise ValueError(f"join_warmup_steps and join_start_step must be >= 0, got {warmup_steps} and {start_step}")
    if step < start_step:
        return 0.0
    if warmup_steps == 0:
        return 1.0
    return join_schedule_value(schedule, (step - start_step) / warmup_steps)


# --------------------------------------------------------------------------------------------------
# per-branch primitives (weights stacked over branches; layout per branch mirrors nn.Linear)
# --------------------------------------------------------------------------------------------------


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


def _branch_drop_path(x: torch.Tensor, rates: tuple[float, ...], training: bool) -> torch.Tensor:
    """Stochastic depth per sample and per branch. x (B, n, T, D); rates: n drop probabilities."""
    if not training or max(rates) == 0.0:
        return x
    keep = torch.tensor([1.0 - r for r in rates], dtype=x.dtype, device=x.device)
    mask = torch.bernoulli(keep.expand(x.shape[0], -1))  # (B, n)
    mask = mask / keep.clamp_min(1e-12)
    return x * mask[:, :, None, None]


def _join(x: torch.Tensor, lam: torch.Tensor, rescale: bool, branches: int) -> torch.Tensor:
    """x (B, n, ...) -> (x_b + lam * sum_{c != b} x_c) / r, r = sqrt(1 + (n-1) lam^2) if rescale else 1."""
    total = x.sum(dim=1, keepdim=True)
    out = (1.0 - lam) * x + lam * total
    if rescale:
        out = out / torch.sqrt(1.0 + (branches - 1) * lam * lam)
    return out


def _pairwise_sq_cosine(f: torch.Tensor) -> torch.Tensor:
    """Mean over tokens and branch pairs i < j of cos(f_i, f_j)^2. f (B, n, T, D) -> scalar."""
    n = f.shape[1]
    fn = F.normalize(f.float(), dim=-1)
    gram = torch.einsum("bitd,bjtd->btij", fn, fn)
    iu = torch.triu_indices(n, n, offset=1, device=f.device)
    return gram[..., iu[0], iu[1]].pow(2).mean()


# --------------------------------------------------------------------------------------------------
# branched attention / FFN / block
# --------------------------------------------------------------------------------------------------


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
        logits = _join(logits, lam, self.rescale, n) * (d**-0.5)
        if attn_mask is not None:
            logits = logits.masked_fill(~attn_mask[:, None], float("-inf"))
        attn = self.attn_drop(logits.softmax(dim=-1))
        if self.join_values:
            v = _join(v, lam, self.rescale, n)
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
        h = _join(self.fc1(self.norm(x)), lam, self.rescale, self.branches)
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
            self.diversity.append(_pairwise_sq_cosine(out))
        out = _branch_drop_path(out, self.drop_path_rates, self.training)
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
        form = _qk_form(qk_form, n, d, self.dim)
        qk_head = n * d if form == "concat" else self.dim
        v_dim = self.dim if self.attn.join_values else n * self.dim
        return H * qk_head, v_dim

    def collapsed_state(self, qk_form: str = "auto", check: bool = True) -> dict[str, torch.Tensor]:
        """Tensors of the equivalent plain block (``Block`` names; LN affine identity, no LayerScale)."""
        if check:
            _check_joined(self)
        return _collapse_block(self, _qk_form(qk_form, self.branches, self.dim // self.num_heads, self.dim))

    def fuse(self) -> nn.Module:
        """The equivalent plain block (timm ``reparameterize_model`` calls this). Needs lambda = 1."""
        _check_joined(self)
        qk_dim, v_dim = self.collapsed_widths()
        block = _plain_block(self.dim, self.num_heads, self.mlp_hidden, qk_dim, v_dim, self.layer_idx,
                             self.norm1.eps)
        block.load_state_dict(self.collapsed_state(check=False))
        return block.to(device=self.join_lambda.device).train(self.training)


def _check_joined(block: BranchedBlock) -> None:
    lam = float(block.join_lambda)
    if lam != 1.0:
        raise ValueError(
            f"cannot collapse block {block.layer_idx}: its branches are joined with lambda={lam:.4g}, the exact "
            "collapse needs lambda=1 (finish the join warm-up, or call set_join(1.0) and fine-tune first)"
        )


def _qk_form(qk_form: str, branches: int, head_dim: int, dim: int) -> str:
    if qk_form not in ("auto", "concat", "product"):
        raise ValueError(f"unknown qk_form {qk_form!r}; expected 'auto', 'concat' or 'product'")
    if qk_form == "auto":
        return "concat" if branches * head_dim <= dim else "product"
    return qk_form


@torch.no_grad()
def _collapse_block(block: BranchedBlock, qk_form: str) -> dict[str, torch.Tensor]:
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


def _plain_block(
    dim: int, num_heads: int, mlp_hidden: int, qk_dim: int, v_dim: int, layer_idx: int, eps: float
) -> nn.Module:
    """A plain ``Block`` whose attention has the collapsed widths (LayerScale off, qkv bias on)."""
    block = Block(dim, num_heads, mlp_hidden, qkv_bias=True, layer_idx=layer_idx, qk_dim=qk_dim, v_dim=v_dim)
    block.norm1.eps = block.norm2.eps = eps
    return block


# --------------------------------------------------------------------------------------------------
# the encoder
# --------------------------------------------------------------------------------------------------

class BranchedEncoder(Encoder):
    """Training form of an L-layer config: L/n blocks of n progressively joined branches.

    Same tokenizer, global tokens, norm, head and ``forward_features`` / ``forward_head`` / ``forward``
    API as ``Encoder``. ``config`` is the L-layer config; ``reparameterize()`` returns the plain
    L/n-layer ``Encoder`` once lambda = 1.
    """

    def __init__(
        self,
        config: dict,
        branches: int,
        join_schedule: str | Callable[[float], float] = "linear",
        join_warmup_steps: int = 10_000,
        join_start_step: int = 0,
        diversity_weight: float = 0.0,
        join_values: bool = True,
        join_rescale: bool = True,
        join_lambda: float = 0.0,
    ) -> None:
        cfg = {**DEFAULT_CONFIG, **config}
        depth = int(cfg["depth"])
        if isinstance(branches, bool) or not isinstance(branches, int) or branches < 2:
            raise ValueError(f"branches must be an integer >= 2, got {branches!r}")
        if depth % branches:
            divisors = [k for k in range(2, depth + 1) if depth % k == 0]
            raise ValueError(f"branches={branches} does not divide depth={depth}; "
                             f"choose one of {divisors} (depth / branches blocks are built)")
        _resolve_schedule(join_schedule)
        if join_warmup_steps < 0 or join_start_step < 0:
            raise ValueError(f"join_warmup_steps and join_start_step must be >= 0, "
                             f"got {join_warmup_steps} and {join_start_step}")
        if diversity_weight < 0:
            raise ValueError(f"diversity_weight must be >= 0, got {diversity_weight}")
        super().__init__(**{**config, "depth": depth // branches})
        self.config = cfg  # the L-layer config
        self.layers, self.branches = depth, branches
        self.join_schedule = join_schedule
        self.join_warmup_steps, self.join_start_step = int(join_warmup_steps), int(join_start_step)
        self.diversity_weight = float(diversity_weight)
        self.join_values, self.join_rescale = bool(join_values), bool(join_rescale)
        self.aux_loss: torch.Tensor | None = None

        dim = int(cfg["dim"])
        mlp_hidden = int(cfg["mlp_hidden"] or round(cfg["mlp_ratio"] * dim))
        rates = torch.linspace(0, cfg["drop_path_rate"], depth).tolist()
        eps = self.blocks[0].norm1.eps if len(self.blocks) else 1e-6
        self.blocks = nn.ModuleList(
            BranchedBlock(
                dim, cfg["num_heads"], mlp_hidden, branches, qkv_bias=cfg["qkv_bias"], drop=cfg["drop_rate"],
                attn_drop=cfg["attn_drop_rate"], drop_path=rates[i * branches:(i + 1) * branches],
                init_values=cfg["init_values"], layer_idx=i, join_values=join_values, rescale=join_rescale,
                norm_eps=eps,
            )
            for i in range(depth // branches)
        )
        self.set_join(join_lambda)

    # ------------------------------------------------------------ joining
    @property
    def join_lambda(self) -> float:
        """Current lambda (0 = independent branches, 1 = fully joined, collapsible)."""
        for block in self.blocks:
            if isinstance(block, BranchedBlock):
                return float(block.join_lambda)
        return 1.0

    def set_join(self, lambda_value: float) -> None:
        """Set lambda in [0, 1] on every block."""
        value = float(lambda_value)
        if not 0.0 <= value <= 1.0 or math.isnan(value):
            raise ValueError(f"join lambda must be in [0, 1], got {lambda_value}")
        for block in self.blocks:
            if isinstance(block, BranchedBlock):
                block.join_lambda.fill_(value)

    def update_join(self, step: int) -> float:
        """Set lambda from the schedule at a training step (call once per step); returns it."""
        value = join_lambda_at(step, self.join_warmup_steps, self.join_schedule, self.join_start_step)
        self.set_join(value)
        return value

    # ------------------------------------------------------------ forward
    def forward_features(self, x, keep=None, pad_mask=None):
        """As ``Encoder.forward_features``; also sets ``aux_loss`` (weighted diversity term or None)."""
        collect = self.diversity_weight > 0 and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            if isinstance(block, BranchedBlock):
                block.collect_diversity, block.diversity = collect, []
        try:
            out = super().forward_features(x, keep=keep, pad_mask=pad_mask)
        finally:
            terms = []
            for block in self.blocks:
                if isinstance(block, BranchedBlock):
                    terms.extend(block.diversity)
                    block.collect_diversity, block.diversity = False, []
        self.aux_loss = self.diversity_weight * torch.stack(terms).mean() if terms else None
        return out

    def no_weight_decay(self) -> set[str]:
        """Tokens, position embeddings, and the per-branch norm affines, LayerScales and biases."""
        names = set(super().no_weight_decay())
        for name, param in self.named_parameters():
            if name.startswith("blocks.") and (
                name.endswith(".bias") or ".norm." in name or name.endswith(".gamma")
            ):
                names.add(name)
        return names

    # ------------------------------------------------------------ save / load / collapse
    def branch_options(self) -> dict:
        schedule = self.join_schedule
        if callable(schedule):
            schedule = getattr(schedule, "__name__", "custom")
        return {
            "branches": self.branches, "join_schedule": schedule,
            "join_warmup_steps": self.join_warmup_steps, "join_start_step": self.join_start_step,
            "diversity_weight": self.diversity_weight, "join_values": self.join_values,
            "join_rescale": self.join_rescale,
        }

    def saved_config(self) -> dict:
        """JSON-able config that ``jumbokit.load`` rebuilds this training form from."""
        if callable(self.join_schedule):
            raise ValueError("a model with a custom (callable) join_schedule cannot be saved by name; "
                             "use one of " + ", ".join(sorted(JOIN_SCHEDULES)))
        return {**copy.deepcopy(self.config), "branched": self.branch_options()}

    def plain_config(self) -> dict:
        return copy.deepcopy(self.config)

    def collapsed_config(self, qk_form: str = "auto") -> dict:
        """Config of the plain L/n-layer encoder ``reparameterize`` returns."""
        return collapsed_config(self.config, self.branches, self.join_values, qk_form)

    def reparameterize(self, qk_form: str = "auto") -> nn.Module:
        """The plain L/n-layer ``Encoder`` equal to this model at lambda = 1 (this model is unchanged).

        qk_form: "concat" (q/k heads n*d_k wide), "product" (q/k heads D wide, k = x), or "auto"
        (the narrower). Raises ``ValueError`` while lambda < 1.
        """
        for block in self.blocks:
            if isinstance(block, BranchedBlock):
                _check_joined(block)
        config = self.collapsed_config(qk_form)
        plain = Encoder(**config)
        state = {k: v for k, v in self.state_dict().items() if not k.startswith("blocks.")}
        for i, block in enumerate(self.blocks):
            if isinstance(block, BranchedBlock):
                block_state = block.collapsed_state(qk_form, check=False)
            else:  # already fused in place (timm reparameterize_model)
                block_state = block.state_dict()
            state.update({f"blocks.{i}.{k}": v for k, v in block_state.items()})
        from .io import load_state_dict_checked

        load_state_dict_checked(plain, state, source="collapsed branched encoder")
        device = self.patch_embed.proj.weight.device
        return plain.to(device).train(self.training)


def collapsed_config(config: dict, branches: int, join_values: bool = True, qk_form: str = "auto") -> dict:
    """Plain L/n-layer config of a collapsed model: depth L/n, qkv bias on (folded LN shifts), no LayerScale
    (folded), and the attention widths ``qk_dim`` (n*d_k or D per head) / ``v_dim`` (D, or n*D for route a)."""
    cfg = {**DEFAULT_CONFIG, **config}
    dim, heads, depth = int(cfg["dim"]), int(cfg["num_heads"]), int(cfg["depth"])
    if depth % branches:
        raise ValueError(f"branches={branches} does not divide depth={depth}")
    head_dim = dim // heads
    form = _qk_form(qk_form, branches, head_dim, dim)
    qk_head = branches * head_dim if form == "concat" else dim
    out = dict(cfg)
    if cfg["global_tokens"] == "jumbo" and out.get("jumbo_init_values") is None:  # the Jumbo FFN's LayerScale
        # stays: per-layer scales cannot fold into an FFN shared by all layers
        out["jumbo_init_values"] = cfg["init_values"]
    out.update(depth=depth // branches, qkv_bias=True, init_values=None,
               mlp_hidden=int(cfg["mlp_hidden"] or round(cfg["mlp_ratio"] * dim)))
    out["qk_dim"] = heads * qk_head
    out["v_dim"] = dim if join_values else branches * dim
    return out


def build_branched_encoder(config: dict, branches: int = 2, **join_options) -> nn.Module:
    """Progressive-join training form of an L-layer encoder config: L/``branches`` blocks of ``branches``.

    join_schedule: "linear" | "cosine" | "exp" | "sqrt" or a callable t -> lambda over t in [0, 1];
    lambda rises over ``join_warmup_steps`` steps from ``join_start_step`` (seed default 10k) and stays 1.
    diversity_weight: weight of the mean squared cosine similarity between branch outputs (the seed
    uses 0.05); the weighted term is left in ``model.aux_loss`` after each training forward.
    join_values: route (b), join the value activations too (default; values stay one branch wide after the
    collapse); False = route (a), only logits joined, collapsed value heads n times wider.
    The options and their defaults are those of :class:`BranchedEncoder`.
    """
    return BranchedEncoder(dict(config), branches, **join_options)


def reparameterize(model: nn.Module, qk_form: str = "auto") -> nn.Module:
    """Collapse a lambda = 1 branched encoder into its plain L/n-layer ``Encoder``; a plain one is returned as is."""
    if isinstance(model, BranchedEncoder):
        return model.reparameterize(qk_form)
    if isinstance(model, Encoder):
        return model
    raise TypeError(f"expected a jumbokit Encoder or BranchedEncoder, got {type(model).__name__}")
