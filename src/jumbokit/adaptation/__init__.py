"""Test-time adaptation of any LayerNorm/GroupNorm/BatchNorm classifier: SAR, Tent, EATA.

Models with transformer blocks (ViTs, multi-stage ViTs with a BatchNorm conv stem) are adapted
LayerNorm-only by default; their BatchNorm layers keep the source statistics (see ``norm_layers``).

```python
from jumbokit.adaptation import SAR, Tent, EATA, NoAdapt, compute_fishers
adapted = SAR(model, batch_size=64)       # configures the model, builds SAM(SGD) on the norm affines
logits = adapted(images)                  # adapts on the batch and predicts (B, num_classes)
adapted.reset()                           # back to the source weights and optimizer state
```
Corrupted test sets live in :mod:`jumbokit.adaptation.corruptions`, the test streams of the
standard and wild settings in :mod:`jumbokit.adaptation.wild`.
"""
from .eata import EATA, compute_fishers
from .sam import SAM
from .sar import SAR, recovery_threshold
from .sar import collect_params as sar_collect_params
from .tent import (
    AdaptationMethod,
    NoAdapt,
    Tent,
    check_model,
    collect_params,
    configure_model,
    default_lr,
    entropy_margin,
    norm_layers,
    softmax_entropy,
    transformer_blocks,
)

from .wild import METHODS, MethodSettings, build_method, check_methods

__all__ = [
    "METHODS", "MethodSettings", "build_method", "check_methods", "SAM", "SAR", "EATA", "Tent", "NoAdapt", "AdaptationMethod", "compute_fishers",
    "configure_model", "collect_params", "sar_collect_params", "check_model", "default_lr",
    "entropy_margin", "softmax_entropy", "norm_layers", "transformer_blocks", "recovery_threshold",
]
