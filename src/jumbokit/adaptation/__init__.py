"""Test-time adaptation of any LayerNorm/GroupNorm/BatchNorm classifier: SAR, Tent, EATA.

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
from .sar import SAR
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
    softmax_entropy,
)

from .wild import METHODS, MethodSettings, build_method, check_methods

__all__ = [
    "METHODS", "MethodSettings", "build_method", "check_methods", "SAM", "SAR", "EATA", "Tent", "NoAdapt", "AdaptationMethod", "compute_fishers",
    "configure_model", "collect_params", "sar_collect_params", "check_model", "default_lr",
    "entropy_margin", "softmax_entropy",
]
