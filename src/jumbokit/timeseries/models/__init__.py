"""Series models: everything a series model has that an image model has not, on the shared encoder core.

- ``config``: :class:`SeriesModelConfig`, the series-model options (one dataclass, help text per field);
- ``tokenizer``: :class:`SeriesPatchTokenizer` (PatchTST patching) with its conv stem, ``trunk`` (InceptionTime /
  ResNet front end, token statistics), ``scale`` (level and scale) and ``length`` (length embedding) features;
- ``rel_pos`` and ``trunk_head``: the plug-ins a series encoder adds around its blocks and heads;
- ``kind``: the ``"series"`` tokenizer kind that makes ``Encoder(tokenizer="series", ...)`` build all of the above;
- ``flops``: their analytic FLOPs;
- ``patchtst``: the PatchTST family in the zoo (``patchtst``, ``patchtst_registers``, ``patchtst_jumbo``,
  ``series_cnn``) and its patch geometry;
- ``rocket``: the ROCKET hybrid ``patchtst_jumbo_rocket`` (aeon's MiniRocket, imported only when used).

Import direction: this package imports ``jumbokit.encoders``; the encoder core never imports it.
"""

from .config import ENCODER_KEYS, SeriesModelConfig
from .kind import SERIES_OPTIONS
from .patchtst import (HEAD_FEATURES, HYBRID_MODELS, JUMBO_MODELS, JUMBO_MULTIPLIER, JUMBO_MULTIPLIER_MODELS,
                       PATCHTST_BASE, PATCHTST_MODELS, REFERENCE_MODELS, SERIES_MODELS, capped_patch_geometry,
                       check_reference_model, max_patches, patch_geometry, width_options)
from .rocket import RocketHybrid, build_rocket_hybrid
from .tokenizer import SeriesPatchTokenizer, series_patch_count
from .trunk import TRUNKS

__all__ = ["SeriesModelConfig", "ENCODER_KEYS", "SERIES_OPTIONS", "SeriesPatchTokenizer", "series_patch_count",
           "TRUNKS", "PATCHTST_MODELS", "REFERENCE_MODELS", "HYBRID_MODELS", "SERIES_MODELS", "JUMBO_MODELS",
           "JUMBO_MULTIPLIER_MODELS", "PATCHTST_BASE", "JUMBO_MULTIPLIER", "HEAD_FEATURES", "check_reference_model",
           "width_options", "patch_geometry", "capped_patch_geometry", "max_patches", "RocketHybrid",
           "build_rocket_hybrid"]
