"""The data settings of a run (dataset, size, channels, held-out splits, augmentation and normalisation), the
checks their values must pass, and the checks of built datasets a classifier relies on (the same classes in every
split, two classes or more, a held-out split to score).

```python
settings = DataSettings(dataset="folder:/data/pets", val_split=0.1, hflip=0.0)
train = settings.build("train", "supervised", seed=0)
evals = settings.build_evals(train)                   # {"val": ...}: like the training set, same classes
check_classification_data(train, evals, settings.dataset)
```

Each field mirrors a command-line flag of the image front doors (``jumbokit.cli.data``), so errors name the flag.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataSettings:
    """A run's data settings; None means "the dataset's default" (see ``jumbokit.data.choices``)."""

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
