"""FLOPs budgets of the search: a budget with a unit ("46.7M", "1.2G"), or the FLOPs of a zoo model."""
from __future__ import annotations

import re

import torch

__all__ = ["parse_flops", "zoo_flops"]

_UNITS = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"


def parse_flops(text: str) -> float:
    """'46.7M', '1.2G' or '800k' -> FLOPs per image. A bare number is refused: 46.7 FLOPs is never meant."""
    text = str(text).strip()
    match = re.fullmatch(_NUMBER + r"\s*([kKMG]?)", text)
    if match and not match.group(2):
        raise ValueError(f"--flops needs a unit: e.g. 46.7M or 1.2G, got {text!r}")
    if not match:
        raise ValueError(f"--flops expects a number with a k/M/G unit (e.g. 46.7M or 1.2G), got {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def zoo_flops(name: str, img_size: int, in_chans: int, num_classes: int) -> int:
    """Forward FLOPs per image of zoo model ``name`` at this input, with the patch size that
    ``jumbokit supervised`` gives it for small images (counted by ``FlopCounterMode`` on the math kernel)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    import jumbokit
    from jumbokit.encoders.zoo import small_image_patch_size

    overrides = dict(img_size=img_size, in_chans=in_chans, num_classes=num_classes)
    patch = small_image_patch_size(name, img_size)
    if patch is not None:
        overrides["patch_size"] = patch
    model = jumbokit.create_model(name, **overrides).eval()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, in_chans, img_size, img_size))
    return counter.get_total_flops()
