"""Analytic forward FLOPs of the series tokenizer and its plug-ins (``encoder_flops`` adds the transformer).

Counted as ``torch.utils.flop_counter.FlopCounterMode`` counts them: convolutions and matrix multiplies at
2 FLOPs per multiply-add; norms, activations and pooling are left out.
"""

from __future__ import annotations

from typing import Any

from ...encoders.global_kinds import kind_of
from .length import length_embed_flops
from .scale import level_scale_flops
from .tokenizer import conv_stem_flops, series_patch_count
from .trunk import token_stats_flops, trunk_flops

__all__ = ["series_flops", "series_num_patches"]


def series_num_patches(config: dict[str, Any]) -> int:
    """Patches per channel of a series of the config's ``seq_len`` steps."""
    return series_patch_count(config["seq_len"], config["patch_len"], config["stride"], config.get("pad_end", True))


def series_flops(config: dict[str, Any], num_patches: int, sequences: int) -> int:
    """Tokenizer FLOPs per sample of ``sequences`` channels: per channel the linear patch projection plus the
    optional conv stem, channel-independent trunk, token statistics, level/scale and length embeddings; a
    channel-mixing trunk runs once over all channels."""
    dim = int(config["dim"])
    embed = 2 * num_patches * dim * config["patch_len"]
    if config.get("conv_stem", 0):
        embed += conv_stem_flops(config["conv_stem"], _padded_steps(config), num_patches, dim)
    if config.get("trunk") and not config.get("trunk_mix"):
        embed += _trunk_flops(config, num_patches, dim)
    if config.get("token_stats"):
        embed += token_stats_flops(num_patches, dim)
    if config.get("level_scale"):
        embed += level_scale_flops(dim)
    if config.get("length_embed"):
        embed += length_embed_flops(kind_of(config).num_tokens(config), dim)
    total = sequences * embed
    if config.get("trunk") and config.get("trunk_mix"):  # one trunk pass per sample over all its channels
        total += _trunk_flops(config, num_patches, dim, sequences)
    return total


def _trunk_flops(config: dict[str, Any], num_patches: int, dim: int, in_series: int = 1) -> int:
    """One pass of the series trunk over ``in_series`` series (a channel, or all channels when mixing)."""
    return trunk_flops(config["trunk"], config.get("trunk_width", 16), config.get("trunk_depth", 3),
                       _padded_steps(config), num_patches, dim, bool(config.get("trunk_diff", False)), in_series)


def _padded_steps(config: dict[str, Any]) -> int:
    """The steps the series convolutions run over: the series plus the end padding of one stride."""
    return config["seq_len"] + (config["stride"] if config.get("pad_end", True) else 0)
