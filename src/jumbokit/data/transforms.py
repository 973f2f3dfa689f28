"""Per-task image transforms (PIL image in, normalised (C, H, W) float tensor out) and mixup/cutmix.

Tasks:
- ``"mae"``: RandomResizedCrop(scale 0.2-1) + horizontal flip (MAE's pretraining augmentation).
- ``"supervised"``: RandomResizedCrop(crop_scale) + flip + optional timm RandAugment.
- ``"eval"``: resize to ``img_size / crop_pct`` + center crop (no randomness).

The training crop of ``"mae"`` / ``"supervised"`` is one of ``train_crop="rrc"`` (RandomResizedCrop, above),
``"pad"`` (resize to ``img_size``, then CIFAR-style RandomCrop with ``padding`` zero pixels on each side) or
``"none"`` (the evaluation transform: no crop, flip or RandAugment, like timm's ``no_aug``).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torchvision import transforms as T
from torchvision.transforms import InterpolationMode

from .defaults import INTERPOLATIONS

TASKS = ("mae", "supervised", "eval")
TRAIN_CROPS = ("rrc", "pad", "none")

_INTERPOLATIONS = {name: InterpolationMode[name.upper()] for name in INTERPOLATIONS}


def _interpolation(name: str) -> InterpolationMode:
    if name not in _INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {sorted(_INTERPOLATIONS)}, got {name!r}")
    return _INTERPOLATIONS[name]


def check_task(task: str) -> str:
    """Return ``task`` if known, else raise ``ValueError`` listing the known tasks."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    return task


def build_transform(
    task: str,
    img_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    *,
    crop_scale: tuple[float, float] | None = None,
    ratio: tuple[float, float] | None = None,
    hflip: float = 0.5,
    randaugment: str | None = None,
    crop_pct: float = 0.875,
    interpolation: str = "bicubic",
    train_crop: str = "rrc",
    padding: int = 0,
) -> T.Compose:
    """Build the transform for ``task`` on PIL images already converted to the model's channel mode.

    Args:
        task: "mae" | "supervised" | "eval".
        img_size: output side length in pixels.
        mean, std: per-channel normalisation (length = channels).
        crop_scale: RandomResizedCrop area range; default (0.2, 1) for MAE, (0.08, 1) for supervised.
        ratio: RandomResizedCrop aspect-ratio range (default 3/4 to 4/3).
        hflip: horizontal flip probability (train tasks).
        randaugment: timm RandAugment config string, e.g. "rand-m9-mstd0.5-inc1" (supervised only).
        crop_pct: eval center-crop fraction (resize to img_size / crop_pct, then crop img_size).
        interpolation: "bicubic" | "bilinear" | "nearest".
        train_crop: "rrc" | "pad" | "none" (see the module docstring); ``padding``: pixels for "pad".
    Returns:
        a callable mapping a PIL image to a float tensor (C, img_size, img_size).
    """
    check_task(task)
    interp = _interpolation(interpolation)
    if not 0.0 < crop_pct <= 1.0:
        raise ValueError(f"crop_pct must be in (0, 1], got {crop_pct}")
    if train_crop not in TRAIN_CROPS:
        raise ValueError(f"train_crop must be one of {', '.join(TRAIN_CROPS)}, got {train_crop!r}")
    normalize = [T.ToTensor(), T.Normalize(mean=list(mean), std=list(std))]
    if task == "eval" or train_crop == "none":
        resize_to = int(round(img_size / crop_pct))
        return T.Compose([T.Resize(resize_to, interpolation=interp), T.CenterCrop(img_size), *normalize])
    if train_crop == "pad":
        ops: list = [T.Resize(img_size, interpolation=interp), T.CenterCrop(img_size),
                     T.RandomCrop(img_size, padding=padding)]
    else:
        scale = crop_scale if crop_scale is not None else ((0.2, 1.0) if task == "mae" else (0.08, 1.0))
        ops = [T.RandomResizedCrop(img_size, scale=tuple(scale), ratio=tuple(ratio or (3.0 / 4.0, 4.0 / 3.0)),
                                   interpolation=interp)]
    if hflip > 0:
        ops.append(T.RandomHorizontalFlip(p=hflip))
    if randaugment and task == "supervised":
        ops.append(_rand_augment(randaugment, img_size, mean, interpolation))
    return T.Compose([*ops, *normalize])


def _rand_augment(config: str, img_size: int, mean: Sequence[float], interpolation: str):
    """timm RandAugment on PIL images; fill colour = dataset mean (an int for 1-channel images)."""
    from timm.data import rand_augment_transform

    fill = tuple(int(round(255 * m)) for m in mean)
    hparams = {
        "translate_const": int(img_size * 0.45),
        "img_mean": fill[0] if len(fill) == 1 else fill,
        "interpolation": {"bicubic": 3, "bilinear": 2, "nearest": 0}[interpolation],
    }
    try:
        augment = rand_augment_transform(config, hparams)
    except Exception as err:  # timm raises AssertionError / KeyError on bad strings
        raise ValueError(f"bad RandAugment config {config!r} (expected e.g. 'rand-m9-mstd0.5'): {err}") from err
    for op in getattr(augment, "ops", ()):
        # "inc1" posterize at the top magnitude (10) keeps 0 bits, which recent Pillow refuses with a ValueError;
        # capping the magnitude just below keeps 1 bit there and changes nothing else
        if getattr(op, "name", "") == "PosterizeIncreasing" and op.magnitude_max is None:
            op.magnitude_max = 9.99
    return augment


def make_mixup(
    num_classes: int,
    *,
    mixup: float = 0.0,
    cutmix: float = 0.0,
    label_smoothing: float = 0.0,
    prob: float = 1.0,
    switch_prob: float = 0.5,
):
    """timm ``Mixup`` (batch-level; needs an even batch size) or ``None`` when both alphas are 0.

    The returned callable maps ``(x (B, C, H, W), y (B,))`` to ``(mixed x, soft targets (B, num_classes))``.
    """
    if mixup < 0 or cutmix < 0:
        raise ValueError(f"mixup and cutmix alphas must be >= 0, got mixup={mixup}, cutmix={cutmix}")
    if mixup == 0 and cutmix == 0:
        return None
    from timm.data import Mixup

    return Mixup(
        mixup_alpha=mixup,
        cutmix_alpha=cutmix,
        prob=prob,
        switch_prob=switch_prob,
        label_smoothing=label_smoothing,
        num_classes=num_classes,
    )


def denormalize(x: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Undo normalisation: (B, C, H, W) or (C, H, W) -> values in pixel scale [0, 1] (not clamped)."""
    m = torch.as_tensor(mean, dtype=x.dtype, device=x.device).view(-1, 1, 1)
    s = torch.as_tensor(std, dtype=x.dtype, device=x.device).view(-1, 1, 1)
    return x * s + m
