"""Per-dataset-kind defaults (image size, channels, normalisation, augmentation) and channel fitting.

Four kinds of defaults exist: ``digits`` (the embedded set), ``fashion-mnist`` (fixed, like the digits),
ImageNet-style ``folder:`` / ``hf:`` data, and small images (``folder:`` / ``hf:`` data whose files are at most
``SMALL_IMAGE_MAX_SIDE`` px on the longer side), whose defaults are chosen from the files by ``jumbokit.data.choices``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .errors import DataError
from .spec import parse_dataset_spec

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# digits: statistics of the 32 px upsampled training split, pixel scale [0, 1]
DIGITS_MEAN = (0.309,)
DIGITS_STD = (0.349,)
# fashion-mnist: statistics of the 55,000 training images padded to 32 px, pixel scale [0, 1]
FASHION_MNIST_MEAN = (0.2188,)
FASHION_MNIST_STD = (0.3317,)
BUILTIN_KINDS = ("digits", "fashion-mnist")  # datasets with fixed defaults: no files are probed

SMALL_IMAGE_MAX_SIDE = 64  # files up to this many pixels on the longer side get the small-image defaults
INTERPOLATIONS = ("bicubic", "bilinear", "nearest")  # resize filters (torchvision InterpolationMode names)
PROBE_FILES = 16  # files opened to detect small images and their channels
STATS_SAMPLES = 1000  # training images the small-image normalisation is computed from
STATS_SEED = 0  # fixed, so that every run and evaluation of the same data gets the same statistics
PAD_FRACTION = 8  # small images: pad-and-crop by img_size / PAD_FRACTION pixels


@dataclass(frozen=True)
class DatasetDefaults:
    """Per-dataset-kind defaults for image size, channels, normalisation and augmentation."""

    img_size: int
    in_chans: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    crop_pct: float  # eval: resize to img_size / crop_pct, center crop img_size
    hflip: float  # training flip probability (supervised and MAE)
    crop_scale: tuple[float, float]  # supervised RandomResizedCrop area range
    mae_crop_scale: tuple[float, float]  # MAE RandomResizedCrop area range (MAE's ImageNet recipe: 0.2-1)

    def crop_scale_for(self, task: str) -> tuple[float, float] | None:
        """Training crop range of ``task`` ("supervised" | "mae"); None for evaluation."""
        return {"supervised": self.crop_scale, "mae": self.mae_crop_scale}.get(task)


DEFAULTS = {
    # digits are tiny, centred and not mirror-symmetric: full-frame eval crop, no flip, mild crops
    "digits": DatasetDefaults(32, 1, DIGITS_MEAN, DIGITS_STD, 1.0, 0.0, (0.7, 1.0), (0.5, 1.0)),
    # Fashion-MNIST: 28 px photos padded to 32 px, centred, gray: the digits' crops, no flip, its own statistics
    "fashion-mnist": DatasetDefaults(32, 1, FASHION_MNIST_MEAN, FASHION_MNIST_STD, 1.0, 0.0, (0.7, 1.0), (0.5, 1.0)),
    "folder": DatasetDefaults(224, 3, IMAGENET_MEAN, IMAGENET_STD, 0.875, 0.5, (0.08, 1.0), (0.2, 1.0)),
    "hf": DatasetDefaults(224, 3, IMAGENET_MEAN, IMAGENET_STD, 0.875, 0.5, (0.08, 1.0), (0.2, 1.0)),
}


def dataset_defaults(spec) -> DatasetDefaults:
    """The per-dataset-kind defaults (size, channels, normalisation, augmentation) of a ``--dataset`` string
    (ImageNet-style ones for ``folder:`` / ``hf:``; small files get others, see ``jumbokit.data.choices``)."""
    return DEFAULTS[parse_dataset_spec(spec).kind]


def normalization(spec, in_chans: int | None = None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Default (mean, std) for a dataset kind at ``in_chans`` channels (3-channel constants averaged for 1 channel;
    1-channel constants repeated for 3)."""
    d = dataset_defaults(spec)
    return fit_channels(d.mean, in_chans or d.in_chans), fit_channels(d.std, in_chans or d.in_chans)


def fit_channels(values: Sequence[float], in_chans: int) -> tuple[float, ...]:
    """``values`` for ``in_chans`` channels: kept, one value repeated, or 3 values averaged to 1."""
    values = tuple(float(v) for v in values)
    if len(values) == in_chans:
        return values
    if len(values) == 1:
        return values * in_chans
    if in_chans == 1:
        return (round(sum(values) / len(values), 4),)
    raise DataError(f"normalisation has {len(values)} channels, cannot use it for {in_chans} channels")


def check_in_chans(in_chans: int) -> int:
    """``in_chans`` if it is 1 or 3, else ``DataError``."""
    if in_chans not in (1, 3):
        raise DataError(f"images are loaded as 1 (grayscale) or 3 (RGB) channels, got in_chans={in_chans}")
    return in_chans
