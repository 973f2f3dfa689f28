"""What a dataset is trained and evaluated with: size, channels, normalisation, crops and flips.

``resolve_choices`` turns the caller's values (None = choose) into a ``DataChoices`` by the rule of the dataset's
kind: ``digits`` and ``fashion-mnist`` keep their fixed defaults; ``folder:`` / ``hf:`` data whose files are small
(longer side <= ``SMALL_IMAGE_MAX_SIDE`` px in ``PROBE_FILES`` files spread over the split) gets small-image defaults:
size and channels from the files, full-frame evaluation, normalisation statistics of a seeded sample of the training split,
and for colour files CIFAR-style pad-and-crop by img_size / 8 with flips, for gray files the digits' crops
(RandomResizedCrop 0.7-1, MAE 0.5-1) without flips; other data gets ImageNet's defaults. A value
the caller gives always wins.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import torch

from .defaults import (
    BUILTIN_KINDS,
    DEFAULTS,
    PAD_FRACTION,
    PROBE_FILES,
    SMALL_IMAGE_MAX_SIDE,
    STATS_SAMPLES,
    STATS_SEED,
    check_in_chans,
    fit_channels,
)
from .errors import DataError

logger = logging.getLogger(__name__)

_GRAY_MODES = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F"}


@dataclass(frozen=True)
class FileProbe:
    """What a few files of a split showed: the largest longer side (px) and 1 (all gray) or 3 channels."""

    max_side: int
    in_chans: int
    files: int

    @property
    def small(self) -> bool:
        return self.max_side <= SMALL_IMAGE_MAX_SIDE


@dataclass(frozen=True)
class DataChoices:
    """Resolved data settings. ``rule``: "digits" | "small" | "imagenet"; ``train_crop``: "rrc"
    (RandomResizedCrop(scale, ratio)) | "pad" (pad-and-crop by ``padding`` px) | "none" (``--no-aug``);
    ``mean``/``std`` None until computed; ``stats``: where they come from ("digits", "imagenet", "given", "data")."""

    rule: str
    img_size: int
    in_chans: int
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    crop_pct: float
    interpolation: str
    train_crop: str
    scale: tuple[float, float] | None
    ratio: tuple[float, float] | None
    padding: int
    hflip: float
    randaugment: str | None
    stats: str

    def transform_kwargs(self) -> dict:
        """Keywords of ``build_transform`` (after ``img_size``, ``mean``, ``std``)."""
        return dict(crop_scale=self.scale, ratio=self.ratio, hflip=self.hflip, randaugment=self.randaugment,
                    crop_pct=self.crop_pct, interpolation=self.interpolation, train_crop=self.train_crop,
                    padding=self.padding)

    def describe(self) -> str:
        """One line: the training augmentation and where the normalisation comes from."""
        if self.train_crop == "none":
            crop = "no augmentation"
        elif self.train_crop == "pad":
            crop = f"pad-and-crop {self.padding} px"
        else:
            ratio = self.ratio or (0.75, 1.33)
            crop = f"RandomResizedCrop {self.scale[0]:g}-{self.scale[1]:g} (ratio {ratio[0]:g}-{ratio[1]:g})"
        flip = f", flip {self.hflip:g}" if self.hflip else (", no flip" if self.train_crop != "none" else "")
        extra = f", RandAugment {self.randaugment}" if self.randaugment else ""
        return (f"{self.rule} defaults: {self.in_chans}x{self.img_size}px, {crop}{flip}{extra}, eval crop-pct "
                f"{self.crop_pct:g}, mean/std {self.stats}")

    def augmentation(self) -> dict:
        """JSON-able record of the training augmentation."""
        keys = ("train_crop", "scale", "ratio", "padding", "hflip", "randaugment")
        record = {k: v for k, v in asdict(self).items() if k in keys}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in record.items()}


def is_gray(img) -> bool:
    """True for a gray PIL image: a gray mode, or colour channels that are all equal."""
    if img.mode in _GRAY_MODES:
        return True
    rgb = np.asarray(img.convert("RGB"))
    return bool((rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all())


def probe_files(source, count: int = PROBE_FILES) -> FileProbe:
    """Open ``count`` files spread evenly over ``source`` (unreadable ones are passed over)."""
    n = len(source)
    picks = sorted({int(i) for i in np.linspace(0, n - 1, num=min(count, n))})
    sides, grays = [], []
    for i in picks:
        try:
            img = source.load(i)
        except Exception:  # unreadable files are reported when they are loaded for training
            continue
        sides.append(max(img.size))
        grays.append(is_gray(img))
    if not sides:
        raise DataError(f"none of the {len(picks)} files checked could be read (first: {source.describe(picks[0])})")
    return FileProbe(max(sides), 1 if all(grays) else 3, len(sides))


def resolve_choices(
    kind: str,
    task: str,
    probe: FileProbe | None,
    *,
    img_size: int | None = None,
    in_chans: int | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    crop_scale: Sequence[float] | None = None,
    ratio: Sequence[float] | None = None,
    hflip: float | None = None,
    randaugment: str | None = None,
    no_aug: bool = False,
    crop_pct: float | None = None,
    interpolation: str | None = None,
) -> DataChoices:
    """The settings for dataset kind ``kind`` ("digits" | "fashion-mnist" | "folder" | "hf") and ``task``;
    ``probe`` (the files' sizes and channels, None for the built-in sets) decides the small-image rule. Given
    values always win."""
    d = DEFAULTS[kind]
    builtin = kind in BUILTIN_KINDS
    small = not builtin and probe is not None and probe.small
    rule = kind if builtin else ("small" if small else "imagenet")
    size = int(img_size or (probe.max_side if small else d.img_size))
    if size < 1:
        raise DataError(f"img_size must be a positive number of pixels, got {size}")
    chans = check_in_chans(int(in_chans or (probe.in_chans if small else d.in_chans)))
    default_mean, default_std = (None, None) if small else (d.mean, d.std)  # small: computed from the data
    mean_t = fit_channels(mean, chans) if mean is not None else _maybe_fit(default_mean, chans)
    std_t = fit_channels(std, chans) if std is not None else _maybe_fit(default_std, chans)
    given = [name for name, v in (("mean", mean), ("std", std)) if v is not None]
    stats = "given" if len(given) == 2 else ("data" if small else rule)
    if len(given) == 1:
        stats = f"{given[0]} given, {'std' if given[0] == 'mean' else 'mean'} {stats}"
    gray_small = small and probe.in_chans == 1  # digit- and character-like: the digits' mild crops
    if no_aug:
        train_crop = "none"
    elif small and not gray_small and crop_scale is None and ratio is None:
        train_crop = "pad"
    else:
        train_crop = "rrc"
    scale_defaults = DEFAULTS["digits"] if gray_small else d
    scale = tuple(crop_scale) if crop_scale is not None else scale_defaults.crop_scale_for(task)
    flip_default = (0.5 if probe.in_chans == 3 else 0.0) if small else d.hflip
    return DataChoices(
        rule=rule, img_size=size, in_chans=chans, mean=mean_t, std=std_t,
        crop_pct=float(crop_pct if crop_pct is not None else (1.0 if small else d.crop_pct)),
        interpolation=interpolation or "bicubic", train_crop=train_crop,
        scale=scale if train_crop == "rrc" else None,
        ratio=tuple(ratio) if ratio is not None and train_crop == "rrc" else None,
        padding=max(1, round(size / PAD_FRACTION)) if train_crop == "pad" else 0,
        hflip=0.0 if no_aug else float(hflip if hflip is not None else flip_default),
        randaugment=None if no_aug else randaugment, stats=stats,
    )


def _maybe_fit(values: Sequence[float] | None, in_chans: int) -> tuple[float, ...] | None:
    return None if values is None else fit_channels(values, in_chans)


def image_statistics(
    source,
    in_chans: int,
    img_size: int,
    *,
    crop_pct: float = 1.0,
    interpolation: str = "bicubic",
    samples: int = STATS_SAMPLES,
    seed: int = STATS_SEED,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel (mean, std) on the [0, 1] pixel scale of up to ``samples`` images of ``source`` (a seeded
    subset), after the evaluation geometry (resize, center crop) and channel conversion; rounded to 4 decimals."""
    from .transforms import build_transform

    geometry = build_transform("eval", img_size, (0.0,) * in_chans, (1.0,) * in_chans, crop_pct=crop_pct,
                               interpolation=interpolation)
    n = len(source)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:samples].tolist()
    mode = "L" if in_chans == 1 else "RGB"
    total = torch.zeros(in_chans, dtype=torch.float64)
    squares = torch.zeros(in_chans, dtype=torch.float64)
    pixels = 0
    for i in sorted(order):
        try:
            img = source.load(i)
        except Exception:  # unreadable files are reported when they are loaded for training
            continue
        x = geometry(img.convert(mode) if img.mode != mode else img).double().flatten(1)  # (C, H*W)
        total += x.sum(1)
        squares += (x * x).sum(1)
        pixels += x.shape[1]
    if not pixels:
        raise DataError(f"no readable image among {len(order)} sampled for the normalisation statistics")
    mean = total / pixels
    std = (squares / pixels - mean * mean).clamp_min(1e-12).sqrt()
    return tuple(round(float(v), 4) for v in mean), tuple(round(max(float(v), 1e-4), 4) for v in std)
