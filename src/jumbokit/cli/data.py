"""The data and augmentation flags every image front door shares, and the ``DataSettings`` they parse to.

```python
parser = argparse.ArgumentParser()
add_data_args(parser)                          # --dataset, --img-size, ..., --scale, --hflip, --mean, ...
settings = data_settings_from_args(parser.parse_args())
train = settings.build("train", "supervised", seed=0)
val = settings.build("val", "eval", like=train)  # the training set's size, channels and normalisation
```

Flag names follow timm's ``train.py`` where timm has the idea (``--scale``, ``--ratio``, ``--hflip``,
``--no-aug``, ``--mean``, ``--std``, ``--crop-pct``, ``--interpolation``); ``--randaugment`` takes timm's
RandAugment strings (timm calls the flag ``--aa``).
"""
from __future__ import annotations

import argparse
import textwrap
from dataclasses import fields
from typing import Any

from ..data.defaults import INTERPOLATIONS, PAD_FRACTION, SMALL_IMAGE_MAX_SIDE, STATS_SAMPLES
from ..data.settings import DataSettings

AUGMENTATION_HELP = textwrap.fill(
    "Defaults per dataset: digits keeps its own (crops 0.7-1, MAE 0.5-1; no flip; its statistics; full frame), "
    "fashion-mnist the same with its statistics (28 px padded to 32). "
    f"folder:/hf: data whose files are small (at most {SMALL_IMAGE_MAX_SIDE} px on the longer side, a few files "
    "checked) gets small-image defaults: size and channels from the files (gray files -> 1 channel), "
    f"full-frame evaluation, mean/std of {STATS_SAMPLES} training images (saved in the run's config.json for "
    f"evaluation), and for colour files pad-and-crop by img_size/{PAD_FRACTION} px with flips, for gray files the "
    "digits' crops without flips. Other data gets "
    "ImageNet's: RandomResizedCrop 0.08-1 (MAE 0.2-1), flip 0.5, ImageNet statistics, crop-pct 0.875. "
    "Each flag below overrides its own choice only.", width=78
)


def add_data_args(
    parser: argparse.ArgumentParser,
    *,
    dataset: str = "digits",
    img_size: int | None = None,
    augment: bool = True,
    **defaults: Any,
) -> argparse.ArgumentParser:
    """Add the "data" group (and, with ``augment``, the "augmentation and normalisation" group) to ``parser``.

    ``dataset`` / ``img_size`` are the command's defaults; ``defaults`` sets the command's own default of any
    other flag by its dest (``hflip=0.0``), shown in its help line.
    """
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", default=dataset, metavar="SPEC",
                      help="digits | fashion-mnist[:DIR] (IDX files in DIR, else Debian's dataset-fashion-mnist, "
                           "else a download) | folder:PATH (ImageFolder tree: PATH/train, PATH/val) | "
                           "hf:NAME[:split] (Hugging Face: local imagefolder dir or hub name) (default: %(default)s)")
    data.add_argument("--img-size", type=int, default=img_size, metavar="PX",
                      help="input side in pixels (default: " + (f"{img_size}" if img_size else
                           "32 for digits and fashion-mnist, the files' size for small images, else 224") + ")")
    data.add_argument("--in-chans", type=int, default=None, choices=(1, 3),
                      help="image channels, images are converted (default: the checkpoint's, else 1 for digits "
                           "and gray small images, else 3)")
    data.add_argument("--num-workers", type=int, default=None, metavar="N",
                      help="DataLoader workers (default: 0 for digits, min(8, cpus) for files)")
    data.add_argument("--skip-corrupt", action="store_true",
                      help="decode every image first and skip unreadable files, reported with a count (default: off)")
    data.add_argument("--max-train-samples", type=int, default=None, metavar="N",
                      help="train on a seeded random subset of N images of the training split (default: all)")
    data.add_argument("--val-split", type=float, default=None, metavar="F",
                      help="folder: datasets without a val/ folder: hold out a stratified fraction F of the training "
                           "images as the validation split, e.g. 0.1 (split seed 0, stored in the run; default: "
                           "off, the folder's own val/)")
    data.add_argument("--test-split", type=float, default=None, metavar="F",
                      help="folder: datasets without a test/ folder: hold out a stratified fraction F of the "
                           "training images as the test split (default: off)")
    if augment:
        _add_augmentation_args(parser)
    _apply_defaults(parser, defaults)
    return parser


def _add_augmentation_args(parser: argparse.ArgumentParser) -> None:
    aug = parser.add_argument_group("augmentation and normalisation", AUGMENTATION_HELP)
    aug.add_argument("--scale", type=float, nargs=2, default=None, metavar=("LO", "HI"),
                     help="train with RandomResizedCrop of this area range, e.g. 0.5 1 (default: see above)")
    aug.add_argument("--ratio", type=float, nargs=2, default=None, metavar=("LO", "HI"),
                     help="RandomResizedCrop aspect-ratio range (default: 0.75 1.33)")
    aug.add_argument("--hflip", type=float, default=None, metavar="P",
                     help="horizontal flip probability (default: 0.5; 0 for digits, fashion-mnist and gray small "
                          "images)")
    aug.add_argument("--no-aug", action="store_true",
                     help="train on the evaluation transform: no random crop, flip or RandAugment (default: off)")
    aug.add_argument("--randaugment", default=None, metavar="CONFIG",
                     help="timm RandAugment string, e.g. rand-m9-mstd0.5 (default: off)")
    aug.add_argument("--mean", type=float, nargs="+", default=None, metavar="M",
                     help="normalisation mean, one value or one per channel (default: see above)")
    aug.add_argument("--std", type=float, nargs="+", default=None, metavar="S",
                     help="normalisation std, one value or one per channel (default: see above)")
    aug.add_argument("--crop-pct", type=float, default=None, metavar="F",
                     help="evaluation: resize to img-size / F, then center-crop img-size (default: 0.875; 1, the "
                          "full frame, for digits and small images)")
    aug.add_argument("--interpolation", default=None, choices=sorted(INTERPOLATIONS),
                     help="resize interpolation (default: bicubic)")


def _apply_defaults(parser: argparse.ArgumentParser, defaults: dict[str, Any]) -> None:
    """Set command defaults by dest and state them in the help lines."""
    actions = {a.dest: a for a in parser._actions}
    unknown = sorted(set(defaults) - set(actions))
    if unknown:
        raise TypeError(f"add_data_args: no data flag for {unknown}")
    for dest, value in defaults.items():
        action = actions[dest]
        shown = " ".join(map(str, value)) if isinstance(value, (list, tuple)) else value
        action.help = action.help.split(" (default:")[0] + f" (default: {shown})"
    parser.set_defaults(**defaults)


def data_settings_from_args(args: argparse.Namespace) -> DataSettings:
    """The ``DataSettings`` of parsed flags (flags a parser lacks keep their defaults); raises ``ValueError``
    for bad values before any data is read."""
    values = {}
    for f in fields(DataSettings):
        if hasattr(args, f.name):
            value = getattr(args, f.name)
            values[f.name] = tuple(value) if isinstance(value, list) else value
    return DataSettings(**values)
