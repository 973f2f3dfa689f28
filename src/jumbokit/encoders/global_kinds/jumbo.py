"""The ``jumbo`` kind: the Jumbo token, J*D wide, split into J tokens of width D for attention, with its own FFN."""

from __future__ import annotations

import math
import re
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..blocks import LayerScale, Mlp, masked_layer_norm
from ..checks import whole_number
from .registry import (GlobalTokenKind, GlobalTokens, TokenTable, first_tokens, masked_mean, prefix_mask,
                       register_global_tokens)

__all__ = ["Jumbo", "JumboKind", "LoRALinear", "JumboLoRA", "segment_index"]


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
        self.feature_dim = self.pooled_width(pool, multiplier, dim)
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

    @staticmethod
    def pooled_width(pool: str, multiplier: int, dim: int) -> int:
        """Width of the pooled feature: J*D (``"jumbo"``), J*D + D (``"jumbo+mean"``) or D (``"segments"``)."""
        return {"jumbo": multiplier * dim, "jumbo+mean": multiplier * dim + dim, "segments": dim}[pool]

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


def segment_index(segments: int, width: int, active: int) -> torch.Tensor:
    """Indices of the first ``active`` channels of each of ``segments`` blocks of ``width`` channels."""
    return (torch.arange(segments)[:, None] * width + torch.arange(active)[None, :]).reshape(-1)


def _jumbo_token_init(count: int, width: int) -> torch.Tensor:
    table = torch.zeros(1, count, width)
    nn.init.trunc_normal_(table, std=0.02)
    return table


class JumboKind(GlobalTokenKind):
    """Jumbo: ``jumbo_multiplier`` = J tokens that share one J*D-wide FFN (``jumbo_mlp_ratio``, ``jumbo_share``,
    ``jumbo_lora_rank``, ``jumbo_init_values``: its LayerScale, None = the blocks' ``init_values``), pooled by
    ``jumbo_pool``. timm's blocks have no Jumbo FFN, so it does not map to timm; the search gene "jumbo<J>"."""

    options = {
        "jumbo_multiplier": 0,
        "jumbo_mlp_ratio": 4.0,
        "jumbo_share": True,
        "jumbo_lora_rank": 0,
        "jumbo_pool": "jumbo",
        "jumbo_init_values": None,  # LayerScale of the Jumbo FFN (width J*D); None = init_values
    }
    choices = {"jumbo_pool": Jumbo.POOLS}
    choice_texts = {"jumbo_pool": {"jumbo": "the J*D Jumbo vector",
                                   "jumbo+mean": "the J*D Jumbo vector and the mean patch token"}}
    has_own_ffn = True
    token_params = ("jumbo_token",)
    layer_params = r"jumbo_(?:norms|mlp|lora|ls)\.(\d+)"
    shared_params = r"jumbo_mlp\."
    timm_note = " (no block with a Jumbo FFN)"
    gene_help = "'jumbo<J>'"

    def build(self, cfg, dim, depth, learn_tokens=True):
        scale = self.option(cfg, "jumbo_init_values")
        return Jumbo(dim, self.option(cfg, "jumbo_multiplier"), depth, mlp_ratio=self.option(cfg, "jumbo_mlp_ratio"),
                     share=self.option(cfg, "jumbo_share"), lora_rank=self.option(cfg, "jumbo_lora_rank"),
                     pool=self.option(cfg, "jumbo_pool"), drop=cfg.get("drop_rate", 0.0), learn_tokens=learn_tokens,
                     init_values=cfg.get("init_values") if scale is None else scale)

    def num_tokens(self, cfg):
        return self.option(cfg, "jumbo_multiplier")

    def feature_dim(self, cfg, dim):
        return Jumbo.pooled_width(self.option(cfg, "jumbo_pool"), self.option(cfg, "jumbo_multiplier"), dim)

    def ffn_flops(self, cfg, dim):
        width = self.option(cfg, "jumbo_multiplier") * dim
        return 2 * 2 * width * int(round(self.option(cfg, "jumbo_mlp_ratio") * width))

    def collapsed_options(self, cfg):
        # the Jumbo FFN's LayerScale stays: per-layer scales cannot fold into an FFN shared by all layers
        if self.option(cfg, "jumbo_init_values") is None:
            return {"jumbo_init_values": cfg.get("init_values")}
        return {}

    def parse_gene(self, gene: str) -> dict[str, Any] | None:
        match = re.fullmatch(r"jumbo(\d+)", gene)
        if not match:
            return None
        if int(match.group(1)) < 1:
            raise ValueError(f"unknown global-token gene {gene!r}: a Jumbo gene 'jumbo<J>' needs J >= 1")
        return {"jumbo_multiplier": int(match.group(1))}

    # ------------------------------------------------------------------ the supernet
    def supernet_tokens(self, genes):
        return [TokenTable("jumbo_token", self._most(genes), _jumbo_token_init)]

    def _most(self, genes: list[dict[str, Any]]) -> int:
        return max(self.option(g, "jumbo_multiplier") for g in genes)

    def supernet_stage(self, net, stage, dim, depth, genes):
        width = self._most(genes) * dim
        stage.jumbo_norms = nn.ModuleList(nn.LayerNorm(width, eps=1e-6) for _ in range(depth))
        stage.jumbo_mlp = Mlp(width, int(round(net.space.jumbo_mlp_ratio * width)))

    def supernet_heads(self, net, genes):
        net.jumbo_head = nn.Linear(self._most(genes) * net.max_dims[-1], net.num_classes)

    def supernet_join(self, net, opts):
        return [first_tokens(net.jumbo_token, self.option(opts, "jumbo_multiplier"))]

    def supernet_ffn(self, net, stage, index, g, mask, count, keep, opts):
        """The shared Jumbo FFN at the active widths: the J segments' first ``count`` channels, LayerNorm over them
        only, the hidden units ``round(ratio * J * count)``."""
        jumbo = self.option(opts, "jumbo_multiplier")
        batch, _, width = g.shape
        n = jumbo * width
        wide_mask = mask.expand(-1, jumbo, -1).reshape(batch, 1, n)
        wide = g.reshape(batch, 1, n)
        norm, mlp = stage.jumbo_norms[index], stage.jumbo_mlp
        z = masked_layer_norm(wide, wide_mask, count * jumbo, norm.weight[:n], norm.bias[:n])
        z = F.gelu(F.linear(z, mlp.fc1.weight[:, :n], mlp.fc1.bias))
        units = torch.round(net.space.jumbo_mlp_ratio * jumbo * (count.view(-1))).long()
        z = z * prefix_mask(units, mlp.fc1.out_features)
        wide = wide + F.linear(z, mlp.fc2.weight[:n], mlp.fc2.bias[:n]) * wide_mask * keep
        return wide.reshape(batch, jumbo, width)

    def supernet_logits(self, net, h, num_global, opts):
        jumbo = self.option(opts, "jumbo_multiplier")
        batch, width = h.shape[0], h.shape[-1]
        feature = h[:, :jumbo].reshape(batch, jumbo * width)
        return F.linear(feature, net.jumbo_head.weight[:, : jumbo * width], net.jumbo_head.bias)

    def supernet_extract(self, net, model, opts, dims, kept):
        jumbo = self.option(opts, "jumbo_multiplier")
        model.stages[0].global_tokens.jumbo_token.copy_(first_tokens(net.jumbo_token, jumbo, dims[0]))
        for s, (src, dst) in enumerate(zip(net.stages, model.stages)):
            seg = segment_index(jumbo, net.max_dims[s], dims[s])
            plugin = dst.global_tokens
            units = plugin.hidden
            for k, i in enumerate(kept[s]):
                plugin.jumbo_norms[k].weight.copy_(src.jumbo_norms[i].weight[seg])
                plugin.jumbo_norms[k].bias.copy_(src.jumbo_norms[i].bias[seg])
            mlp = plugin.jumbo_mlp
            mlp.fc1.weight.copy_(src.jumbo_mlp.fc1.weight[:units][:, seg])
            mlp.fc1.bias.copy_(src.jumbo_mlp.fc1.bias[:units])
            mlp.fc2.weight.copy_(src.jumbo_mlp.fc2.weight[seg][:, :units])
            mlp.fc2.bias.copy_(src.jumbo_mlp.fc2.bias[seg])
        model.head.weight.copy_(net.jumbo_head.weight[:, segment_index(jumbo, net.max_dims[-1], dims[-1])])
        model.head.bias.copy_(net.jumbo_head.bias)


register_global_tokens("jumbo", JumboKind())
