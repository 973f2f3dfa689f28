"""Raw image sources: scikit-learn digits (embedded), ImageFolder trees (torchvision's ``ImageFolder``), Hugging
Face datasets.

A source knows its samples and classes and loads one raw PIL image at a time; it applies no transform.
Every source has ``classes`` (list[str]), ``targets`` (list[int]), ``__len__``, ``load(i) -> PIL.Image``,
``describe(i) -> str`` (the file or row, for error messages), ``in_memory`` and ``native_chans``.
"""
from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from .errors import DataError, SplitNotFoundError

# the image files an ImageFolder tree holds: torchvision's list (tests/test_data.py keeps the two equal), spelled
# out so that importing the data package does not import torchvision (seconds that a time-series process never uses)
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

SPLITS = ("train", "val", "test")
# directory / hub split names tried for each requested split, in order
SPLIT_ALIASES = {
    "train": ("train",),
    "val": ("val", "validation", "valid"),
    "test": ("test", "val", "validation", "valid"),
}


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return split


# --------------------------------------------------------------------------------------------------- digits

DIGITS_SPLIT_SIZES = {"train": 1257, "val": 180, "test": 360}
DIGITS_SEED = 0


def digits_split_indices() -> dict[str, np.ndarray]:
    """Fixed stratified split of scikit-learn's 1,797 digits: 1,257 train / 180 val / 360 test indices."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    targets = load_digits().target
    idx = np.arange(len(targets))
    rest, test = train_test_split(
        idx, test_size=DIGITS_SPLIT_SIZES["test"], stratify=targets, random_state=DIGITS_SEED
    )
    train, val = train_test_split(
        rest, test_size=DIGITS_SPLIT_SIZES["val"], stratify=targets[rest], random_state=DIGITS_SEED
    )
    return {"train": np.sort(train), "val": np.sort(val), "test": np.sort(test)}


class DigitsSource:
    """scikit-learn's bundled 8x8 digits, upsampled (bicubic) once to ``img_size`` and kept in memory."""

    in_memory = True
    native_chans = 1

    def __init__(self, split: str, img_size: int = 32):
        from sklearn.datasets import load_digits

        check_split(split)
        bunch = load_digits()
        indices = digits_split_indices()[split]
        self.split = split
        self.classes = [str(c) for c in range(10)]
        self.targets = [int(t) for t in bunch.target[indices]]
        self.indices = indices
        pixels = np.round(bunch.images[indices] * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)  # (N, 8, 8)
        self.images = [
            Image.fromarray(p, mode="L").resize((img_size, img_size), Image.Resampling.BICUBIC) for p in pixels
        ]

    def __len__(self) -> int:
        return len(self.images)

    def load(self, i: int) -> Image.Image:
        return self.images[i]

    def describe(self, i: int) -> str:
        return f"digits[{int(self.indices[i])}]"


# --------------------------------------------------------------------------------------------------- folders


def _is_image_path(path: str) -> bool:
    name = os.path.basename(path)
    return name.lower().endswith(IMG_EXTENSIONS) and not name.startswith(".")


def _class_dirs(root: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))


def resolve_split_dir(root: Path, split: str) -> Path:
    """Pick ``root/<split alias>`` if it exists; a plain class-folder root is the training split only (its held-out
    splits come from ``Holdout``: ``--val-split`` / ``--test-split``)."""
    for alias in SPLIT_ALIASES[split]:
        if (root / alias).is_dir():
            if alias != split and split == "test":
                warnings.warn(f"{root} has no 'test' folder; using '{alias}' as the test split", stacklevel=3)
            return root / alias
    subdirs = _class_dirs(root)
    split_like = [d for d in subdirs if d in {"train", "val", "validation", "valid", "test"}]
    if split_like:
        raise SplitNotFoundError(
            f"{root} has split folders {split_like} but none for split {split!r} "
            f"(looked for {', '.join(SPLIT_ALIASES[split])})"
        )
    if split != "train":  # scoring the training images as if held out would be a silent wrong result
        raise SplitNotFoundError(
            f"{root} holds class folders only (no train/val/test folders), so it has no {split!r} split of its own; "
            f"pass --{split}-split 0.1 to hold out a seeded stratified 10% of its images as {split!r}"
        )
    return root


def has_split_dir(root: str | os.PathLike, split: str, *, aliases: bool = True) -> bool:
    """Whether folder dataset ``root`` has its own folder for ``split`` (``aliases``: any of its alias names)."""
    names = SPLIT_ALIASES[split] if aliases else (split,)
    return any((Path(root).expanduser() / name).is_dir() for name in names)


@dataclass(frozen=True)
class Holdout:
    """Validation and test splits carved from a dataset's training images: a seeded, stratified partition.

    ``val`` / ``test`` are fractions of the training split (0 = not carved); every class keeps at least one training
    image, and each carved split gets ``round(fraction * n)`` images of a class of ``n`` (at least one when the
    class has two or more). The partition depends only on the targets and ``seed``.

    >>> parts = Holdout(val=0.5).partition([0, 0, 1, 1])   # one image of each class held out
    >>> len(parts["train"]), len(parts["val"]), len(parts["test"])
    (2, 2, 0)
    """

    val: float = 0.0
    test: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name, fraction in (("val", self.val), ("test", self.test)):
            if not 0.0 <= fraction < 1.0:
                raise DataError(f"--{name}-split expects a fraction in [0, 1), e.g. 0.1, got {fraction}")
        if self.val + self.test >= 1.0:
            raise DataError(f"--val-split {self.val} + --test-split {self.test} leave no training images; their sum "
                            "must be below 1")

    @property
    def carved(self) -> tuple[str, ...]:
        """The splits this holdout makes."""
        return tuple(s for s, f in (("val", self.val), ("test", self.test)) if f > 0)

    def to_dict(self) -> dict[str, float | int]:
        return {"val": self.val, "test": self.test, "seed": self.seed}

    def partition(self, targets: Sequence[int]) -> dict[str, list[int]]:
        """``{"train": [...], "val": [...], "test": [...]}``: sorted indices into ``targets``."""
        import torch

        targets = np.asarray(targets, dtype=np.int64)
        by_class = np.argsort(targets, kind="stable")  # one pass: each class's indices, in increasing order
        starts = np.searchsorted(targets[by_class], np.unique(targets))
        parts: dict[str, list[int]] = {"train": [], "val": [], "test": []}
        g = torch.Generator().manual_seed(self.seed)
        for members in np.split(by_class, starts[1:]):
            order = members[torch.randperm(len(members), generator=g).numpy()].tolist()
            spare = len(order) - 1  # one image of every class stays for training
            counts = {}
            for split, fraction in (("val", self.val), ("test", self.test)):
                want = round(fraction * len(order))
                counts[split] = min(spare, max(want, 1 if fraction > 0 and len(order) >= 2 else 0))
                spare -= counts[split]
            start = 0
            for split in ("val", "test"):
                parts[split] += order[start:start + counts[split]]
                start += counts[split]
            parts["train"] += order[start:]
        return {k: sorted(v) for k, v in parts.items()}


# --------------------------------------------------------------------------------------------------- HF datasets


@dataclass
class _HFColumns:
    image: str
    label: str


def _hf_columns(features) -> _HFColumns:
    import datasets

    image_cols = [k for k, v in features.items() if isinstance(v, datasets.Image)]
    label_cols = [k for k, v in features.items() if isinstance(v, datasets.ClassLabel)]
    if not image_cols:
        raise DataError(f"Hugging Face dataset has no image column (columns: {list(features)})")
    if not label_cols:
        label_cols = [k for k in ("label", "labels", "fine_label") if k in features]
    if not label_cols:
        raise DataError(f"Hugging Face dataset has no label column (columns: {list(features)})")
    return _HFColumns(image=image_cols[0], label=label_cols[0])


class HFSource:
    """A Hugging Face ``datasets`` image classification split (local ``imagefolder`` dir or a hub name).

    Images are decoded here with PIL (not by ``datasets``) so unreadable files get the same handling as folders.
    """

    in_memory = False
    native_chans = 3

    def __init__(self, name: str, split: str, hf_split: str | None = None, cache_dir: str | None = None):
        import datasets

        check_split(split)
        self.name = name
        try:
            if Path(name).expanduser().is_dir():
                dsd = datasets.load_dataset("imagefolder", data_dir=str(Path(name).expanduser()), cache_dir=cache_dir)
            else:
                dsd = datasets.load_dataset(name, cache_dir=cache_dir)
        except DataError:
            raise
        except Exception as err:
            where = "local folder" if Path(name).expanduser().is_dir() else "hub dataset (needs network access)"
            raise DataError(f"could not load Hugging Face {where} {name!r}: {type(err).__name__}: {err}") from err
        available = list(dsd.keys())
        if hf_split is not None:
            if hf_split not in dsd:
                raise SplitNotFoundError(f"Hugging Face dataset {name!r} has splits {available}, not {hf_split!r}")
            chosen = hf_split
        else:
            chosen = next((a for a in SPLIT_ALIASES[split] if a in dsd), None)
            if chosen is None:
                raise SplitNotFoundError(
                    f"Hugging Face dataset {name!r} has splits {available}; none matches {split!r} "
                    f"(pin one with hf:{name}:{available[0]})"
                )
        ds = dsd[chosen]
        self.hf_split = chosen
        cols = _hf_columns(ds.features)
        self.columns = cols
        label_feature = ds.features[cols.label]
        targets = [int(t) for t in ds[cols.label]]
        if hasattr(label_feature, "names"):
            self.classes = list(label_feature.names)
        else:
            self.classes = [str(c) for c in sorted(set(targets))]
        if any(t < 0 for t in targets):
            raise DataError(f"split {chosen!r} of {name!r} has unlabeled samples (label -1); choose a labeled split")
        if len(ds) == 0:
            raise DataError(f"split {chosen!r} of Hugging Face dataset {name!r} is empty")
        self.targets = targets
        self.ds = ds.cast_column(cols.image, datasets.Image(decode=False))

    def __len__(self) -> int:
        return len(self.targets)

    def _raw(self, i: int) -> dict:
        return self.ds[int(i)][self.columns.image]

    def load(self, i: int) -> Image.Image:
        raw = self._raw(i)
        if raw.get("bytes") is not None:
            img = Image.open(io.BytesIO(raw["bytes"]))
        else:
            img = Image.open(raw["path"])
        img.load()
        return img

    def describe(self, i: int) -> str:
        try:
            raw = self._raw(i)
        except Exception:
            raw = {}
        return raw.get("path") or f"{self.name}[{self.hf_split}][{i}]"
