"""Analytic FLOPs and parameter counts of the encoder, and the Jumbo paper's Proposition 1.

FLOPs count matrix multiplications only (2 FLOPs per multiply-add), which is what
``torch.utils.flop_counter.FlopCounterMode`` counts; norms, softmax and GELU are left out.
Proposition 1 of the Jumbo paper (Appendix A.3.3) counts multiply-adds: half of these FLOPs.
Kept analytic beside ``FlopCounterMode`` (the tests hold the two equal): a config's cost, e.g. the NAS search's
budget over thousands of candidates, is known without building or running a model, per layer and to the digit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torch import nn

from .extras import tokenizer_kind
from .global_kinds import kind_of
from .stages import multistage_config_check, stage_grids

__all__ = ["LayerFlops", "layer_flops", "global_token_count", "encoder_flops", "multistage_flops",
           "matching_registers", "count_params", "prop1_layer_macs"]


@dataclass
class LayerFlops:
    """Forward FLOPs of one transformer layer, split by part."""

    qkv_proj: int
    attention: int
    patch_ffn: int
    global_ffn: int

    @property
    def total(self) -> int:
        return self.qkv_proj + self.attention + self.patch_ffn + self.global_ffn


def global_token_count(global_tokens: str | None = None, num_registers: int = 0, class_token: bool = True,
                       jumbo_multiplier: int = 0, **options: Any) -> int:
    """G, the tokens a plug-in puts ahead of the patch tokens (``global_tokens``: a registered kind, None = the
    default kind; ``options``: further options of the kind)."""
    cfg = _kind_config(global_tokens, num_registers=num_registers, class_token=class_token,
                       jumbo_multiplier=jumbo_multiplier, **options)
    return kind_of(cfg).num_tokens(cfg)


def _kind_config(global_tokens: str | None, **options: Any) -> dict[str, Any]:
    return {**options, **({} if global_tokens is None else {"global_tokens": global_tokens})}


def layer_flops(
    dim: int,
    num_patches: int,
    global_tokens: str | None = None,
    num_registers: int = 0,
    class_token: bool = True,
    jumbo_multiplier: int = 0,
    mlp_hidden: int | None = None,
    jumbo_mlp_ratio: float = 4.0,
    qk_dim: int | None = None,
    v_dim: int | None = None,
    **options: Any,
) -> LayerFlops:
    """FLOPs of one layer for one sample with ``num_patches`` patch tokens of width ``dim``.

    global_tokens: a registered kind (None = the default kind), with its options (``num_registers``, ...;
    ``options``: those of other kinds). qk_dim / v_dim: total q/k and value widths when they differ from ``dim``
    (collapsed branches).
    """
    cfg = _kind_config(global_tokens, num_registers=num_registers, class_token=class_token,
                       jumbo_multiplier=jumbo_multiplier, jumbo_mlp_ratio=jumbo_mlp_ratio, **options)
    return _layer_flops(dim, num_patches, cfg, mlp_hidden, qk_dim, v_dim)


def _layer_flops(dim: int, num_patches: int, cfg: dict[str, Any], mlp_hidden: int | None = None,
                 qk_dim: int | None = None, v_dim: int | None = None) -> LayerFlops:
    """:func:`layer_flops` of the global-token kind (and its options) a config names."""
    kind = kind_of(cfg)
    hidden = mlp_hidden if mlp_hidden is not None else 4 * dim
    qk, v = qk_dim or dim, v_dim or dim
    n = num_patches + kind.num_tokens(cfg)
    qkv_proj = 2 * n * dim * (2 * qk + v) + 2 * n * v * dim
    attention = 2 * n * n * qk + 2 * n * n * v  # q @ k^T and attn @ v
    ffn_tokens = num_patches if kind.has_own_ffn else n  # a kind with an FFN of its own keeps its tokens out
    patch_ffn = 2 * 2 * ffn_tokens * dim * hidden
    return LayerFlops(qkv_proj, attention, patch_ffn, kind.ffn_flops(cfg, dim))


def encoder_flops(model_or_config: nn.Module | dict[str, Any], num_patches: int | None = None,
                  channels: int | None = None) -> int:
    """Forward FLOPs of the encoder blocks plus patch embedding and head, per input sample.

    For series models the count covers all ``channels`` (each channel is a sequence). Multi-stage configs
    go to :func:`multistage_flops` (``num_patches`` and ``channels`` do not apply to them).
    """
    config = model_or_config.config if isinstance(model_or_config, nn.Module) else model_or_config
    if config.get("encoder") == "multistage":
        return multistage_flops(config)
    dim, depth = config["dim"], config["depth"]
    hidden = config.get("mlp_hidden") or int(round(config.get("mlp_ratio", 4.0) * dim))
    if num_patches is None:
        num_patches = _num_patches(config)
    per_layer = _layer_flops(dim, num_patches, config, hidden, config.get("qk_dim"), config.get("v_dim")).total
    kind = tokenizer_kind(config.get("tokenizer", "image"))
    sequences = 1
    if kind.channel_independent:
        sequences = channels if channels is not None else config.get("in_chans", 1)
    return sequences * depth * per_layer + kind.flops(config, num_patches, sequences)


def multistage_flops(model_or_config: nn.Module | dict[str, Any], img_size: int | tuple[int, int] | None = None,
                     head: bool = True) -> int:
    """Forward FLOPs of a multi-stage ViT-Res encoder per image (stem, blocks, reductions, head).

    Counts what ``FlopCounterMode`` counts: convolutions and matrix multiplies at 2 FLOPs per multiply-add
    (BatchNorm, LayerNorm, pooling, softmax and GELU are left out). ``img_size`` defaults to the config's;
    ``head`` adds the classifier when ``num_classes > 0``. MACs as the ViT-ResNAS paper reports them are half of this.
    """
    config = model_or_config.config if isinstance(model_or_config, nn.Module) else model_or_config
    cfg = multistage_config_check(config)
    dims, in_chans = cfg["dims"], cfg["in_chans"]
    grids = stage_grids(img_size or cfg["img_size"], cfg["patch_size"], len(dims), cfg["stem"])
    ph, pw = (cfg["patch_size"], cfg["patch_size"]) if isinstance(cfg["patch_size"], int) else cfg["patch_size"]
    n0 = grids[0][0] * grids[0][1]
    if cfg["stem"] == "conv":
        c = cfg["stem_chans"]
        half = (grids[0][0] * ph // 2) * (grids[0][1] * pw // 2)  # the stride-2 conv's output pixels
        flops = 2 * half * c * 9 * (in_chans + 2 * c) + 2 * n0 * dims[0] * c * (ph // 2) * (pw // 2)
    else:
        flops = 2 * n0 * dims[0] * in_chans * ph * pw
    kind = kind_of(cfg)
    g = kind.num_tokens(cfg)
    for s, dim in enumerate(dims):
        patches = grids[s][0] * grids[s][1]
        if s:
            flops += 2 * patches * dim * 9 * dims[s - 1] + 2 * g * dims[s - 1] * dim  # RSR conv + token linear
        for heads, hidden in zip(cfg["heads"][s], cfg["mlp_hidden"][s]):
            inner = int(heads) * int(cfg["head_dims"][s])
            flops += _layer_flops(dim, patches, cfg, int(hidden), inner, inner).total
    if head and cfg["num_classes"] > 0:
        # the pooled feature: the kind's (e.g. the J*D Jumbo vector), or the mean patch token
        width = dims[-1] if cfg["global_pool"] == "avg" else kind.feature_dim(cfg, dims[-1])
        flops += 2 * width * cfg["num_classes"]
    return flops


def _num_patches(config: dict[str, Any]) -> int:
    return tokenizer_kind(config.get("tokenizer", "image")).num_patches(config)


def prop1_layer_macs(dim: int, num_patches: int, registers: int = 0, jumbo_multiplier: int = 0) -> int:
    """Per-layer multiply-adds as Proposition 1 writes them (FFN hidden 2D, global tokens only).

    Registers: 4(P+R)D^2 + 2(P+R)^2 D + 4(P+R)D^2; Jumbo: 4(P+J)D^2 + 2(P+J)^2 D + 4PD^2 + 4J^2 D^2.
    """
    p, d = num_patches, dim
    if jumbo_multiplier:
        j = jumbo_multiplier
        return 4 * (p + j) * d * d + 2 * (p + j) ** 2 * d + 4 * p * d * d + 4 * j * j * d * d
    n = p + registers
    return 4 * n * d * d + 2 * n * n * d + 4 * n * d * d


def matching_registers(dim: int, num_patches: int, jumbo_multiplier: int) -> float:
    """Registers R giving the per-layer FLOPs of a Jumbo model with multiplier J (Proposition 1).

    R = -(2D + P) + sqrt((2D + P)^2 + (1 + 2D) J^2 + 2 (D + P) J), FFN hidden 2D. Round it for a model.
    """
    d, p, j = dim, num_patches, jumbo_multiplier
    return -(2 * d + p) + math.sqrt((2 * d + p) ** 2 + (1 + 2 * d) * j * j + 2 * (d + p) * j)


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of (unique) parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
