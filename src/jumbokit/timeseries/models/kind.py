"""The ``"series"`` tokenizer kind: what ``Encoder(tokenizer="series", ...)`` builds from the
:class:`~jumbokit.timeseries.models.config.SeriesModelConfig` options in its config.

- the tokenizer: :class:`~jumbokit.timeseries.models.tokenizer.SeriesPatchTokenizer` (patching, conv stem, trunk,
  token statistics, level and scale);
- plug-ins beside the blocks: ``rel_pos`` (:class:`~jumbokit.timeseries.models.rel_pos.RelativePositionBias`,
  ``rel_pos_bias``) and ``length_embed`` (:class:`~jumbokit.timeseries.models.length.LengthEmbed`);
- the auxiliary head ``trunk_head`` (:class:`~jumbokit.timeseries.models.trunk_head.TrunkHead`);
- FLOPs: :func:`~jumbokit.timeseries.models.flops.series_flops`.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ...encoders.extras import TokenizerKind, register_tokenizer
from .config import SeriesModelConfig
from .flops import series_flops, series_num_patches
from .length import LengthEmbed
from .rel_pos import RelativePositionBias
from .tokenizer import SeriesPatchTokenizer
from .trunk_head import TrunkHead

__all__ = ["SERIES_OPTIONS", "build_series_tokenizer"]

SERIES_OPTIONS: dict[str, Any] = SeriesModelConfig().encoder_options()


def build_series_tokenizer(cfg: dict[str, Any]) -> SeriesPatchTokenizer:
    """The tokenizer of a full series encoder config."""
    missing = [k for k in ("seq_len", "patch_len", "stride") if cfg[k] is None]
    if missing:
        raise ValueError(f"a series encoder needs {missing}; got seq_len={cfg['seq_len']}, "
                         f"patch_len={cfg['patch_len']}, stride={cfg['stride']}")
    SeriesModelConfig.from_options(cfg)  # the rules between series options (a trunk option needs a trunk)
    return SeriesPatchTokenizer(
        cfg["seq_len"], cfg["patch_len"], cfg["stride"], cfg["in_chans"], int(cfg["dim"]), pad_end=cfg["pad_end"],
        conv_stem=cfg["conv_stem"], trunk=cfg["trunk"], trunk_width=cfg["trunk_width"],
        trunk_depth=cfg["trunk_depth"], trunk_diff=cfg["trunk_diff"], token_stats=cfg["token_stats"],
        trunk_mix=cfg["trunk_mix"], level_scale=cfg["level_scale"],
    )


def _extras(cfg: dict[str, Any], num_global: int) -> dict[str, nn.Module]:
    extras: dict[str, nn.Module] = {}
    if cfg["rel_pos_bias"]:
        num_patches = series_num_patches(cfg)
        extras["rel_pos"] = RelativePositionBias(cfg["num_heads"], num_patches, num_global)
    if cfg["length_embed"]:
        extras["length_embed"] = LengthEmbed(cfg["seq_len"], num_global, int(cfg["dim"]))
    return extras


def _aux_head(cfg: dict[str, Any], num_classes: int) -> TrunkHead | None:
    if not cfg["trunk_head"] or num_classes <= 0:
        return None
    return TrunkHead(int(cfg["dim"]), int(cfg["in_chans"]), num_classes, cfg["head_drop_rate"])


register_tokenizer("series", TokenizerKind(
    options=SERIES_OPTIONS, build=build_series_tokenizer, flops=series_flops, num_patches=series_num_patches,
    channel_independent=True, extras=_extras, aux_head_name="trunk_head", aux_head=_aux_head,
))
