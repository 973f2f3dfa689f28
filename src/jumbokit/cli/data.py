"""The data and augmentation flags every image front door shares, and the settings they parse to.

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
import logging
import textwrap
from dataclasses import asdict, dataclass, fields
from typing import Any

from .defaults import PAD_FRACTION, SMALL_IMAGE_MAX_SIDE, STATS_SAMPLES
from .transforms import _INTERPOLATIONS

logger = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class DataSettings:
    """Parsed data flags; None means "the dataset's default" (see ``jumbokit.data.choices``)."""

    dataset: str = "digits"
    img_size: int | None = None
    in_chans: int | None = None
    num_workers: int | None = None
    skip_corrupt: bool = False
    max_train_samples: int | None = None
    val_split: float | None = None
    test_split: float | None = None
    scale: tuple[float, float] | None = None
    ratio: tuple[float, float] | None = None
    hflip: float | None = None
    no_aug: bool = False
    randaugment: str | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    crop_pct: float | None = None
    interpolation: str | None = None

    def __post_init__(self) -> None:
        check_data_settings(self)

    @property
    def holdout(self):
        """The ``Holdout`` of ``--val-split`` / ``--test-split`` (split seed 0, whatever the run's seed, so runs
        with other seeds score the same images), or None."""
        from .sources import Holdout

        if not self.val_split and not self.test_split:
            return None
        return Holdout(val=self.val_split or 0.0, test=self.test_split or 0.0, seed=HOLDOUT_SEED)

    def build(self, split: str, task: str, *, seed: int = 0, like=None, progress: bool = True, **overrides: Any):
        """``build_dataset`` of ``split`` for ``task`` with these settings. ``like``: a built (training) dataset
        whose size, channels, normalisation and eval crop are reused; ``--max-train-samples`` applies to the
        "train" split only; ``overrides``: ``build_dataset`` keywords that replace a setting."""
        from .dataset import build_dataset

        kwargs: dict[str, Any] = dict(holdout=self.holdout,
            img_size=self.img_size, in_chans=self.in_chans, mean=self.mean, std=self.std, crop_scale=self.scale,
            ratio=self.ratio, hflip=self.hflip, randaugment=self.randaugment, no_aug=self.no_aug,
            crop_pct=self.crop_pct, interpolation=self.interpolation, skip_corrupt=self.skip_corrupt,
            max_samples=self.max_train_samples if split == "train" else None, seed=seed, progress=progress,
        )
        if like is not None:
            kwargs.update(img_size=like.img_size, in_chans=like.in_chans, mean=like.mean, std=like.std,
                          crop_pct=like.crop_pct, interpolation=like.interpolation)
        kwargs.update(overrides)
        return build_dataset(self.dataset, split, task, **kwargs)

    def build_evals(self, train, splits: tuple[str, ...] = ("val", "test")) -> dict:
        """{split: evaluation dataset like ``train``} of the ``splits`` the dataset has (missing ones logged).

        Raises ``DataError`` when a split's classes are not the training split's (same names, same order): its
        labels would be read as other classes."""
        from .errors import SplitNotFoundError

        sets = {}
        for split in splits:
            try:
                sets[split] = self.build(split, "eval", like=train)
            except SplitNotFoundError as err:
                logger.info(f"no {split} split ({err}); skipping it")
                continue
            check_same_classes(train, sets[split])
        return sets

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


HOLDOUT_SEED = 0


def check_same_classes(train, other) -> None:
    """Raise ``DataError`` unless dataset ``other`` has ``train``'s classes in the same order."""
    from .errors import DataError

    if list(other.classes) == list(train.classes):
        return
    extra = [c for c in other.classes if c not in train.classes]
    missing = [c for c in train.classes if c not in other.classes]
    detail = "; ".join(part for part in (
        f"classes not in training: {_names(extra)}" if extra else "",
        f"training classes it lacks: {_names(missing)}" if missing else "") if part) or "the same names in another order"
    raise DataError(f"the {other.split!r} split of {other.spec} has classes {_names(other.classes)}, the training "
                    f"split {_names(train.classes)} ({detail}); its labels would be scored as other classes. Give "
                    "every split the same class folders")


def check_classification_data(train, evals: dict, dataset: str) -> None:
    """What a supervised classifier needs: two classes or more and a held-out split to score (the training
    images are never scored as if held out). Raises ``DataError`` naming the fix."""
    from .errors import DataError

    if train.num_classes < 2:
        raise DataError(f"{dataset} has {train.num_classes} class ({_names(train.classes)}); a classifier needs at "
                        "least 2 class folders")
    if not evals:
        raise DataError(f"{dataset} has no validation or test split to score the model on; pass --val-split 0.1 "
                        "(a seeded stratified 10% of the training images held out) or give it val/ and test/ "
                        "folders")


def _names(names, n: int = 6) -> str:
    names = list(names)
    return "[" + ", ".join(map(str, names[:n])) + (f", ... ({len(names)} in all)" if len(names) > n else "") + "]"


def check_data_settings(s: DataSettings) -> None:
    """Raise ``ValueError`` naming the flag for out-of-range or contradictory values."""
    if s.scale is not None and not 0 < s.scale[0] <= s.scale[1] <= 1:
        raise ValueError(f"--scale expects LO HI with 0 < LO <= HI <= 1, got {' '.join(map(str, s.scale))}")
    if s.ratio is not None and not 0 < s.ratio[0] <= s.ratio[1]:
        raise ValueError(f"--ratio expects LO HI with 0 < LO <= HI, got {' '.join(map(str, s.ratio))}")
    if s.hflip is not None and not 0 <= s.hflip <= 1:
        raise ValueError(f"--hflip expects a probability in [0, 1], got {s.hflip}")
    if s.crop_pct is not None and not 0 < s.crop_pct <= 1:
        raise ValueError(f"--crop-pct expects a fraction in (0, 1], got {s.crop_pct}")
    for name, values in (("mean", s.mean), ("std", s.std)):
        if values is not None and len(values) not in (1, 3):
            raise ValueError(f"--{name} expects 1 value or 3 (one per RGB channel), got {len(values)}")
    if s.std is not None and min(s.std) <= 0:
        raise ValueError(f"--std values must be > 0, got {' '.join(map(str, s.std))}")
    if s.img_size is not None and s.img_size < 1:
        raise ValueError(f"--img-size expects a positive number of pixels, got {s.img_size}")
    if s.max_train_samples is not None and s.max_train_samples < 1:
        raise ValueError(f"--max-train-samples expects a count >= 1, got {s.max_train_samples}")
    for name, fraction in (("val-split", s.val_split), ("test-split", s.test_split)):
        if fraction is not None and not 0 <= fraction < 1:
            raise ValueError(f"--{name} expects a fraction in [0, 1), e.g. 0.1, got {fraction}")
    if (s.val_split or 0) + (s.test_split or 0) >= 1:
        raise ValueError(f"--val-split {s.val_split} + --test-split {s.test_split} leave no training images; their "
                         "sum must be below 1")
    if (s.val_split or s.test_split) and not s.dataset.startswith("folder:"):
        raise ValueError(f"--val-split / --test-split carve held-out splits from a folder: dataset; {s.dataset} has "
                         "its own splits")
    if s.num_workers is not None and s.num_workers < 0:
        raise ValueError(f"--num-workers expects a count >= 0, got {s.num_workers}")
    if s.no_aug:
        clash = [f"--{k}" for k in ("scale", "ratio", "hflip", "randaugment") if getattr(s, k) is not None]
        if clash:
            raise ValueError(f"--no-aug turns training augmentation off; drop {', '.join(clash)}")


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
    aug.add_argument("--interpolation", default=None, choices=sorted(_INTERPOLATIONS),
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
