"""Global-token plug-ins: ``none``, ``cls``, ``registers`` and ``jumbo``, behind one interface.

A plug-in decides which tokens join the patch tokens before the blocks (``join``), whether those tokens
have their own FFN (``has_own_ffn`` / ``ffn``, Jumbo only), and how the encoder's output is pooled into
one feature per sample (``pool``). Parameter names follow timm (``cls_token``, ``reg_token``) and the
Jumbo paper's reference code (``jumbo_token``, ``jumbo_mlp``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .checks import whole_number
from .blocks import LayerScale, Mlp

__all__ = [
    "GlobalTokens",
    "NoGlobalTokens",
    "ClsToken",
    "Registers",
    "Jumbo",
    "LoRALinear",
    "make_global_tokens",
    "masked_mean",
    "GLOBAL_TOKEN_KINDS",
]

GLOBAL_TOKEN_KINDS = ("none", "cls", "registers", "jumbo")


def masked_mean(tokens: torch.Tensor, pad_mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over the token axis of (B, N, D), ignoring tokens where ``pad_mask`` (B, N) is True."""
    if pad_mask is None:
        return tokens.mean(dim=1)
    weights = (~pad_mask).to(tokens.dtype).unsqueeze(-1)
    return (tokens * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)


class GlobalTokens(nn.Module):
    """Interface of the plug-ins.

    num_tokens: G, the tokens that enter attention ahead of the patch tokens.
    feature_dim: width of ``pool``'s output.
    """

    kind = "base"
    num_tokens = 0
    has_own_ffn = False

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.feature_dim = dim

    def tokens(self) -> torch.Tensor | None:
        """The learned global tokens, (1, G, D), or None."""
        return None

    def join(self, patches: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
        """(B, N, D) patch tokens -> (B, G + N, D); ``offset`` (B, G, D), if given, is added to the tokens."""
        tokens = self.tokens()
        if tokens is None:
            if offset is not None:
                raise ValueError(f"the {self.kind!r} plug-in has no global token to add an offset to")
            return patches
        tokens = tokens.expand(patches.shape[0], -1, -1)
        if offset is not None:
            if offset.shape != tokens.shape:
                raise ValueError(f"expected a global-token offset of shape {tuple(tokens.shape)}, "
                                 f"got {tuple(offset.shape)}")
            tokens = tokens + offset
        return torch.cat([tokens, patches], dim=1)

    def ffn(self, g: torch.Tensor, layer_idx: int, drop_path: nn.Module) -> torch.Tensor:
        raise NotImplementedError(f"the {self.kind!r} plug-in uses the patch FFN")

    def pool(self, global_tokens: torch.Tensor, patches: torch.Tensor, pad_mask: torch.Tensor | None) -> torch.Tensor:
        """(B, G, D), (B, N, D) -> (B, feature_dim)."""
        raise NotImplementedError

    def no_weight_decay(self) -> set[str]:
        return {name for name, _ in self.named_parameters(recurse=False)}

    def truncate(self, depth: int) -> None:
        """Keep the per-layer parts of the first ``depth`` layers (an encoder pruned to ``depth`` blocks)."""


class NoGlobalTokens(GlobalTokens):
    """No global token; the feature is the mean of the patch tokens."""

    kind = "none"

    def pool(self, global_tokens, patches, pad_mask):
        return masked_mean(patches, pad_mask)


class ClsToken(GlobalTokens):
    """One CLS token (timm ``cls_token``); the feature is its output.

    learn_tokens=False builds the plug-in without its token (a later stage of a multi-stage encoder,
    whose global tokens arrive from the stage before).
    """

    kind = "cls"
    num_tokens = 1

    def __init__(self, dim: int, learn_tokens: bool = True) -> None:
        super().__init__(dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if learn_tokens else None
        if learn_tokens:
            nn.init.normal_(self.cls_token, std=1e-6)

    def tokens(self) -> torch.Tensor:
        return self.cls_token

    def pool(self, global_tokens, patches, pad_mask):
        return global_tokens[:, 0]


class Registers(GlobalTokens):
    """R register tokens (timm ``reg_token``), after an optional CLS token; registers are discarded at pooling.

    Without a CLS token the feature is the mean of the patch tokens (timm's ``reg*_gap`` models).
    """

    kind = "registers"

    def __init__(self, dim: int, num_registers: int, class_token: bool = True, learn_tokens: bool = True) -> None:
        super().__init__(dim)
        if num_registers < 1:
            raise ValueError(f"registers need num_registers >= 1, got {num_registers}")
        self.num_registers = num_registers
        self.class_token = class_token
        self.num_tokens = num_registers + int(class_token)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if class_token and learn_tokens else None
        self.reg_token = nn.Parameter(torch.zeros(1, num_registers, dim)) if learn_tokens else None
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)
        if self.reg_token is not None:
            nn.init.normal_(self.reg_token, std=1e-6)

    def tokens(self) -> torch.Tensor:
        if self.cls_token is None:
            return self.reg_token
        return torch.cat([self.cls_token, self.reg_token], dim=1)

    def pool(self, global_tokens, patches, pad_mask):
        if self.class_token:
            return global_tokens[:, 0]
        return masked_mean(patches, pad_mask)


class LoRALinear(nn.Module):
    """Low-rank update of a (shared) linear layer: x -> (x A^T) B^T * alpha / r, B zero-initialised."""

    def __init__(self, in_features: int, out_features: int, rank: int, alpha: float | None = None) -> None:
        super().__init__()
        self.rank = rank
        self.scale = (alpha if alpha is not None else rank) / rank
        self.lora_a = nn.Parameter(torch.empty(rank, in_features))
        self.lora_b = nn.Parameter(torch.zeros(out_features, rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.lora_a.t()) @ self.lora_b.t() * self.scale


class JumboLoRA(nn.Module):
    """Per-layer LoRA pair for the shared Jumbo FFN's fc1 and fc2."""

    def __init__(self, width: int, hidden: int, rank: int) -> None:
        super().__init__()
        self.fc1 = LoRALinear(width, hidden, rank)
        self.fc2 = LoRALinear(hidden, width, rank)


class Jumbo(GlobalTokens):
    """The Jumbo token: J*D wide, split into J tokens of width D for attention, with its own FFN.

    After attention the J tokens are concatenated into one (B, J*D) vector, normalised by a per-layer
    LayerNorm(J*D) and passed through ONE FFN shared by all layers (hidden = mlp_ratio * J*D), then split
    back. ``share=False`` gives every layer its own FFN; ``lora_rank > 0`` adds a zero-initialised LoRA per
    layer to the shared FFN (so it starts identical to ``lora_rank=0``). ``init_values`` adds a per-layer
    LayerScale of width J*D to the Jumbo FFN's residual branch, as the blocks' ``ls2`` scales the patch
    FFN (the Jumbo reference code's ``ls3``): ``g + drop_path(ls(ffn(norm(g))))``.

    Pooling: ``"jumbo"`` -> the (B, J*D) vector; ``"jumbo+mean"`` -> that plus the mean patch token
    (the reference code's head input, J*D + D); ``"segments"`` -> the mean of the J segments (B, D), used
    for channel-independent series so the head is as small as a CLS model's.
    """

    kind = "jumbo"
    has_own_ffn = True
    POOLS = ("jumbo", "jumbo+mean", "segments")

    def __init__(
        self,
        dim: int,
        multiplier: int,
        depth: int,
        mlp_ratio: float = 4.0,
        share: bool = True,
        lora_rank: int = 0,
        pool: str = "jumbo",
        drop: float = 0.0,
        learn_tokens: bool = True,
        init_values: float | None = None,
    ) -> None:
        super().__init__(dim)
        if not whole_number(multiplier, 1):
            raise ValueError(f"jumbo_multiplier must be an integer >= 1 (the Jumbo token is J*D wide, J tokens of "
                             f"width D), got jumbo_multiplier={multiplier!r}")
        multiplier = int(multiplier)
        if pool not in self.POOLS:
            raise ValueError(f"unknown jumbo pool {pool!r}; expected one of {self.POOLS}")
        if lora_rank and not share:
            raise ValueError("LoRA adapts the shared Jumbo FFN; it needs share=True")
        self.multiplier = multiplier
        self.num_tokens = multiplier
        self.width = multiplier * dim
        self.hidden = int(round(mlp_ratio * self.width))
        self.share = share
        self.lora_rank = lora_rank
        self.pool_mode = pool
        self.feature_dim = {"jumbo": self.width, "jumbo+mean": self.width + dim, "segments": dim}[pool]
        self.jumbo_token = nn.Parameter(torch.zeros(1, multiplier, dim)) if learn_tokens else None
        if learn_tokens:
            nn.init.trunc_normal_(self.jumbo_token, std=0.02)
        self.jumbo_norms = nn.ModuleList(nn.LayerNorm(self.width, eps=1e-6) for _ in range(depth))
        if share:
            self.jumbo_mlp = Mlp(self.width, self.hidden, drop=drop)
        else:
            self.jumbo_mlp = nn.ModuleList(Mlp(self.width, self.hidden, drop=drop) for _ in range(depth))
        self.jumbo_lora = (
            nn.ModuleList(JumboLoRA(self.width, self.hidden, lora_rank) for _ in range(depth)) if lora_rank else None
        )
        self.jumbo_ls = (
            nn.ModuleList(LayerScale(self.width, init_values) for _ in range(depth)) if init_values else None
        )

    def tokens(self) -> torch.Tensor:
        return self.jumbo_token

    def _mlp(self, x: torch.Tensor, layer_idx: int) -> torch.Tensor:
        if not self.share:
            return self.jumbo_mlp[layer_idx](x)
        mlp = self.jumbo_mlp
        if self.jumbo_lora is None:
            return mlp(x)
        lora = self.jumbo_lora[layer_idx]
        h = mlp.drop(mlp.act(mlp.fc1(x) + lora.fc1(x)))
        return mlp.drop(mlp.fc2(h) + lora.fc2(h))

    def ffn(self, g: torch.Tensor, layer_idx: int, drop_path: nn.Module) -> torch.Tensor:
        """(B, J, D) -> (B, J, D): concatenate, residual Jumbo FFN on the J*D vector, split back."""
        batch = g.shape[0]
        wide = g.reshape(batch, self.width)
        out = self._mlp(self.jumbo_norms[layer_idx](wide), layer_idx)
        if self.jumbo_ls is not None:
            out = self.jumbo_ls[layer_idx](out)
        wide = wide + drop_path(out)
        return wide.reshape(batch, self.multiplier, self.dim)

    def truncate(self, depth: int) -> None:
        for name in ("jumbo_norms", "jumbo_lora", "jumbo_ls") + (() if self.share else ("jumbo_mlp",)):
            layers = getattr(self, name)
            if layers is not None:
                setattr(self, name, layers[:depth])

    def pool(self, global_tokens, patches, pad_mask):
        batch = global_tokens.shape[0]
        if self.pool_mode == "segments":
            return global_tokens.mean(dim=1)
        wide = global_tokens.reshape(batch, self.width)
        if self.pool_mode == "jumbo+mean":
            return torch.cat([wide, masked_mean(patches, pad_mask)], dim=-1)
        return wide


def make_global_tokens(
    kind: str,
    dim: int,
    depth: int,
    num_registers: int = 0,
    class_token: bool = True,
    jumbo_multiplier: int = 0,
    jumbo_mlp_ratio: float = 4.0,
    jumbo_share: bool = True,
    jumbo_lora_rank: int = 0,
    jumbo_pool: str = "jumbo",
    drop: float = 0.0,
    learn_tokens: bool = True,
    init_values: float | None = None,
) -> GlobalTokens:
    """Build a plug-in by name: ``none`` | ``cls`` | ``registers`` | ``jumbo``.

    learn_tokens=False: no learned token parameters (the tokens come from an earlier stage).
    init_values: LayerScale of the Jumbo FFN (pass the blocks' ``init_values`` so both FFNs are scaled).
    """
    if kind == "none":
        return NoGlobalTokens(dim)
    if kind == "cls":
        return ClsToken(dim, learn_tokens=learn_tokens)
    if kind == "registers":
        return Registers(dim, num_registers, class_token=class_token, learn_tokens=learn_tokens)
    if kind == "jumbo":
        return Jumbo(dim, jumbo_multiplier, depth, mlp_ratio=jumbo_mlp_ratio, share=jumbo_share,
                     lora_rank=jumbo_lora_rank, pool=jumbo_pool, drop=drop, learn_tokens=learn_tokens,
                     init_values=init_values)
    raise ValueError(f"unknown global_tokens {kind!r}; expected one of {GLOBAL_TOKEN_KINDS}")
