"""A searched architecture as a model to train from scratch: ``best_arch.json`` of ``jumbokit nas-search``."""
from __future__ import annotations

import json
from pathlib import Path

from torch import nn

__all__ = ["load_searched_model"]


def load_searched_model(path: str | Path, num_classes: int, img_size: int, in_chans: int,
                        drop_path: float = 0.0) -> nn.Module:
    """A freshly initialised MultiStageEncoder of the architecture in ``path`` (its search space fixes the patch
    grid) for ``img_size`` px, ``in_chans`` channels and ``num_classes`` classes; raises ``ValueError`` naming
    the file when it is not a ``best_arch.json``."""
    from jumbokit.encoders import build_model

    from .space import SearchSpace

    try:
        payload = json.loads(Path(path).read_text())
        space, arch = SearchSpace.from_dict(payload["space"]), payload["arch"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"--arch {path}: expected the best_arch.json of jumbokit nas-search ({err})") from None
    config = space.config(arch, img_size, in_chans, num_classes)
    return build_model({**config, "drop_path_rate": drop_path})
