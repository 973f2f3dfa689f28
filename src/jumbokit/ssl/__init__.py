"""Self-supervised pretraining and probing: MAE around any image encoder, linear probes on frozen features."""

from . import features, linear_probe, mae, mae_run, probe_run
from .features import *  # noqa: F401,F403  (the names in features.__all__)
from .linear_probe import *  # noqa: F401,F403  (the names in linear_probe.__all__)
from .mae import *  # noqa: F401,F403  (the names in mae.__all__)
from .mae_run import *  # noqa: F401,F403  (the names in mae_run.__all__)
from .probe_run import *  # noqa: F401,F403  (the names in probe_run.__all__)

__all__ = [*mae.__all__, *linear_probe.__all__, *features.__all__, *mae_run.__all__, *probe_run.__all__]
