"""Self-supervised pretraining and probing: MAE around any image encoder, linear probes on frozen features."""

from . import linear_probe, mae
from .linear_probe import *  # noqa: F401,F403  (the names in linear_probe.__all__)
from .mae import *  # noqa: F401,F403  (the names in mae.__all__)

__all__ = [*mae.__all__, *linear_probe.__all__]
