"""``build_dataset(spec, split, task, img_size, in_chans)`` and ``make_loader``.

Dataset specs (one string, the ``--dataset`` flag):
- ``digits``: scikit-learn's bundled 8x8 digits (1,797 images), fixed stratified split 1,257 / 180 / 360,
  upsampled to ``img_size`` (default 32), 1 channel (3 on request, replicated).
- ``folder:PATH``: torchvision ImageFolder tree; ``PATH/train``, ``PATH/val`` (ImageNet layout) or a plain
  ``PATH/<class>/<image>`` tree that then serves every split.
- ``hf:NAME[:SPLIT]``: Hugging Face ``datasets``; NAME is a local ``imagefolder`` directory or a hub name
  (online); SPLIT pins the split used whatever split is requested.
"""
from __future__ import annotations

import json
import math
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from .errors import CorruptImageError, DataError
from .sources import DigitsSource, FolderSource, HFSource, check_split
from .transforms import build_transform, check_task

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# digits: statistics of the 32 px upsampled training split, pixel scale [0, 1]
DIGITS_MEAN = (0.309,)
DIGITS_STD = (0.349,)


@dataclass(frozen=True)
class DatasetSpec:
    """Parsed ``--dataset`` string: ``kind`` in {"digits", "folder", "hf"}, ``path`` (folder dir / HF name),
    ``hf_split`` (pinned HF split or None)."""

    kind: str
    path: str | None = None
    hf_split: str | None = None

    def __str__(self) -> str:
        if self.kind == "digits":
            return "digits"
        if self.kind == "folder":
            return f"folder:{self.path}"
        return f"hf:{self.path}" + (f":{self.hf_split}" if self.hf_split else "")


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
    "folder": DatasetDefaults(224, 3, IMAGENET_MEAN, IMAGENET_STD, 0.875, 0.5, (0.08, 1.0), (0.2, 1.0)),
    "hf": DatasetDefaults(224, 3, IMAGENET_MEAN, IMAGENET_STD, 0.875, 0.5, (0.08, 1.0), (0.2, 1.0)),
}

_SPEC_HELP = "expected 'digits', 'folder:PATH' or 'hf:NAME[:split]'"


def parse_dataset_spec(spec: str | DatasetSpec) -> DatasetSpec:
    """Parse a ``--dataset`` string; raises ``DataError`` for unknown kinds."""
    if isinstance(spec, DatasetSpec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise DataError(f"unknown dataset {spec!r}: {_SPEC_HELP}")
    spec = spec.strip()
    kind, _, rest = spec.partition(":")
    if kind == "digits" and not rest:
        return DatasetSpec("digits")
    if kind == "folder":
        if not rest:
            raise DataError(f"dataset 'folder:' needs a path, e.g. folder:/data/imagenet ({_SPEC_HELP})")
        return DatasetSpec("folder", rest)
    if kind == "hf":
        if not rest:
            raise DataError(f"dataset 'hf:' needs a name or local folder, e.g. hf:./my_images ({_SPEC_HELP})")
        if Path(rest).expanduser().is_dir() or ":" not in rest:
            return DatasetSpec("hf", rest)
        name, _, split = rest.rpartition(":")
        return DatasetSpec("hf", name, split or None)
    raise DataError(f"unknown dataset {spec!r}: {_SPEC_HELP}")


def dataset_defaults(spec: str | DatasetSpec) -> DatasetDefaults:
    """The per-dataset-kind defaults (size, channels, normalisation, augmentation) of a ``--dataset`` string."""
    return DEFAULTS[parse_dataset_spec(spec).kind]


def normalization(spec: str | DatasetSpec, in_chans: int | None = None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Default (mean, std) for a dataset at ``in_chans`` channels (3-channel constants averaged for 1 channel;
    1-channel constants repeated for 3)."""
    d = dataset_defaults(spec)
    return _fit_channels(d.mean, in_chans or d.in_chans), _fit_channels(d.std, in_chans or d.in_chans)


def _fit_channels(values: Sequence[float], in_chans: int) -> tuple[float, ...]:
    values = tuple(float(v) for v in values)
    if len(values) == in_chans:
        return values
    if len(values) == 1:
        return values * in_chans
    if in_chans == 1:
        return (round(sum(values) / len(values), 4),)
    raise DataError(f"normalisation has {len(values)} channels, cannot use it for {in_chans} channels")


def _check_in_chans(in_chans: int) -> int:
    if in_chans not in (1, 3):
        raise DataError(f"images are loaded as 1 (grayscale) or 3 (RGB) channels, got in_chans={in_chans}")
    return in_chans


class ImageDataset(Dataset):
    """A transformed image classification split: ``ds[i] -> (image (C, H, W) float, label int)``.

    Attributes: ``num_classes``, ``classes``, ``targets``, ``mean``, ``std``, ``in_chans``, ``img_size``,
    ``spec``, ``split``, ``task``, ``skipped`` (unreadable files left out), ``info()`` (JSON-able record).
    Images are converted to the requested channel mode (grayscale <-> RGB) when loaded.
    """

    def __init__(
        self,
        source,
        spec: DatasetSpec,
        split: str,
        task: str,
        img_size: int,
        in_chans: int,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        transform,
        *,
        crop_pct: float,
        interpolation: str,
        skip_corrupt: bool = False,
        indices: Sequence[int] | None = None,
    ):
        self.source = source
        self.spec = spec
        self.split = split
        self.task = task
        self.img_size = img_size
        self.in_chans = in_chans
        self.mean = mean
        self.std = std
        self.transform = transform
        self.crop_pct = crop_pct
        self.interpolation = interpolation
        self.skip_corrupt = skip_corrupt
        self.classes: list[str] = list(source.classes)
        self.num_classes = len(self.classes)
        self.indices = list(range(len(source))) if indices is None else list(indices)
        self.skipped: list[str] = []
        self._mode = "L" if in_chans == 1 else "RGB"
        if source.native_chans != in_chans:
            self.channel_note = (
                f"images converted from {source.native_chans} to {in_chans} channel(s) "
                f"({'replicated gray' if in_chans == 3 else 'luminance'})"
            )
        else:
            self.channel_note = ""

    @property
    def targets(self) -> list[int]:
        return [self.source.targets[i] for i in self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def load_image(self, i: int):
        """Raw PIL image of sample ``i`` converted to the channel mode; raises ``CorruptImageError``."""
        j = self.indices[i]
        try:
            img = self.source.load(j)
            return img.convert(self._mode) if img.mode != self._mode else img
        except Exception as err:
            raise CorruptImageError(
                f"cannot read image file {self.source.describe(j)} ({type(err).__name__}: {err}); "
                f"fix or delete it, or pass skip_corrupt=True (--skip-corrupt) to skip unreadable files"
            ) from None

    def __getitem__(self, item: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        """``item``: an index, or ``(index, sample_seed)`` from a seeded ``EpochSampler``; with a seed the random
        transform draws from its own RNG streams (torch, random, numpy), so augmentation depends only on
        (seed, epoch, position) and not on the order in which workers or resumed runs load samples."""
        i, sample_seed = item if isinstance(item, tuple) else (item, None)
        if not self.skip_corrupt:
            img = self.load_image(i)
        else:  # unreadable files found only now (the upfront scan missed them) are replaced by the next one
            for attempt in range(min(len(self), 16)):
                k = (i + attempt) % len(self)
                try:
                    img = self.load_image(k)
                    i = k
                    break
                except CorruptImageError as err:
                    warnings.warn(f"skipping unreadable image: {err}")
            else:
                raise CorruptImageError(f"16 consecutive unreadable images from index {i} in {self.spec}")
        label = self.source.targets[self.indices[i]]
        if sample_seed is None:
            return self.transform(img), label
        return _seeded_call(self.transform, img, sample_seed), label

    def scan(self, num_threads: int = 8, progress: bool = True) -> list[str]:
        """Decode every image once; drop unreadable ones from the dataset. Returns their descriptions."""
        from tqdm.auto import tqdm

        def ok(k: int) -> bool:
            try:
                self.load_image(k)
                return True
            except CorruptImageError:
                return False

        with ThreadPoolExecutor(max_workers=num_threads) as pool:
            good = list(
                tqdm(
                    pool.map(ok, range(len(self))),
                    total=len(self),
                    desc=f"checking {self.split} images",
                    disable=not progress or len(self) < 2000,
                )
            )
        bad = [self.source.describe(self.indices[k]) for k, g in enumerate(good) if not g]
        self.indices = [j for j, g in zip(self.indices, good) if g]
        self.skipped.extend(bad)
        if not self.indices:
            raise DataError(f"every image of split {self.split!r} of {self.spec} is unreadable (first: {bad[0]})")
        return bad

    def info(self) -> dict:
        """JSON-able record of what a model trained on this data needs (normalisation, classes, sizes)."""
        return {
            "dataset": str(self.spec),
            "split": self.split,
            "task": self.task,
            "num_samples": len(self),
            "img_size": self.img_size,
            "in_chans": self.in_chans,
            "mean": list(self.mean),
            "std": list(self.std),
            "crop_pct": self.crop_pct,
            "interpolation": self.interpolation,
            "num_classes": self.num_classes,
            "classes": self.classes,
            "skipped_files": len(self.skipped),
        }

    def __repr__(self) -> str:
        return (
            f"ImageDataset({self.spec}, split={self.split}, task={self.task}, n={len(self)}, "
            f"classes={self.num_classes}, {self.in_chans}x{self.img_size}x{self.img_size})"
        )


def build_dataset(
    spec: str | DatasetSpec,
    split: str = "train",
    task: str = "supervised",
    img_size: int | None = None,
    in_chans: int | None = None,
    *,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    crop_scale: tuple[float, float] | None = None,
    hflip: float | None = None,
    randaugment: str | None = None,
    crop_pct: float | None = None,
    interpolation: str = "bicubic",
    skip_corrupt: bool = False,
    max_samples: int | None = None,
    seed: int = 0,
    hf_cache_dir: str | None = None,
    progress: bool = True,
) -> ImageDataset:
    """Build one split of an image dataset with the transform for ``task``.

    Args:
        spec: "digits" | "folder:PATH" | "hf:NAME[:split]".
        split: "train" | "val" | "test".
        task: "mae" | "supervised" | "eval" (transform family, see ``jumbokit.data.transforms``).
        img_size: output side (default 32 for digits, 224 otherwise).
        in_chans: 1 or 3 (default: the dataset's own: 1 for digits, 3 otherwise); images are converted.
        mean, std: override the normalisation (adaptation code passes the source model's values).
        crop_scale, hflip, randaugment: training augmentation (defaults per dataset, see ``DEFAULTS``).
        crop_pct: eval center-crop fraction (default 1.0 for digits, 0.875 otherwise).
        skip_corrupt: decode every file up front and leave out unreadable ones (``ds.skipped``), instead of
            raising ``CorruptImageError`` naming the file when it is reached.
        max_samples: keep a seeded random subset of this many samples (quick runs, tests).
    Returns:
        ImageDataset, items ``(float tensor (in_chans, img_size, img_size), int label)``.
    """
    parsed = parse_dataset_spec(spec)
    check_split(split)
    check_task(task)
    d = DEFAULTS[parsed.kind]
    img_size = int(img_size or d.img_size)
    if img_size < 1:
        raise DataError(f"img_size must be a positive number of pixels, got {img_size}")
    in_chans = _check_in_chans(int(in_chans or d.in_chans))
    mean = _fit_channels(mean if mean is not None else d.mean, in_chans)
    std = _fit_channels(std if std is not None else d.std, in_chans)
    crop_pct = float(crop_pct if crop_pct is not None else d.crop_pct)

    if parsed.kind == "digits":
        source = DigitsSource(split, img_size)
    elif parsed.kind == "folder":
        source = FolderSource(parsed.path, split)
    else:
        source = HFSource(parsed.path, split, parsed.hf_split, cache_dir=hf_cache_dir)

    transform = build_transform(
        task,
        img_size,
        mean,
        std,
        crop_scale=crop_scale if crop_scale is not None else d.crop_scale_for(task),
        hflip=hflip if hflip is not None else d.hflip,
        randaugment=randaugment,
        crop_pct=crop_pct,
        interpolation=interpolation,
    )
    indices = None
    if max_samples is not None:
        if max_samples < 1:
            raise DataError(f"max_samples must be >= 1, got {max_samples}")
        if max_samples < len(source):
            g = torch.Generator().manual_seed(seed)
            indices = sorted(torch.randperm(len(source), generator=g)[:max_samples].tolist())
    ds = ImageDataset(
        source, parsed, split, task, img_size, in_chans, mean, std, transform,
        crop_pct=crop_pct, interpolation=interpolation, skip_corrupt=skip_corrupt, indices=indices,
    )
    if skip_corrupt and not source.in_memory:
        bad = ds.scan(progress=progress)
        if bad:
            warnings.warn(
                f"skipped {len(bad)} unreadable image file(s) of {len(bad) + len(ds)} in {parsed} "
                f"split {split!r} (first: {bad[0]})"
            )
    return ds


def _seeded_call(fn, arg, seed: int):
    """``fn(arg)`` with torch / random / numpy RNGs seeded by ``seed``; the callers' RNG states are restored."""
    import random

    import numpy as np

    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        # the CPU generator only: torch.manual_seed would also queue a (lazy) CUDA seeding, whose recorded stack
        # trace cost more than the transform itself
        torch.default_generator.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        try:
            return fn(arg)
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


class EpochSampler(Sampler):
    """Shuffles with a permutation seeded by ``(seed, epoch)``: the order depends only on the epoch, so a resumed
    run sees exactly the batches an uninterrupted one would. Call ``set_epoch(e)`` before each epoch.

    With ``sample_seeds=True`` it yields ``(index, sample_seed)`` pairs (for ``ImageDataset``), making the random
    augmentation of every sample a function of (seed, epoch, position) too.
    """

    def __init__(self, num_samples: int, seed: int = 0, shuffle: bool = True, sample_seeds: bool = False):
        self.num_samples = num_samples
        self.seed = seed
        self.shuffle = shuffle
        self.sample_seeds = sample_seeds
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(self.num_samples, generator=g) if self.shuffle else torch.arange(self.num_samples)
        if not self.sample_seeds:
            return iter(order.tolist())
        seeds = torch.randint(0, 2**31 - 1, (self.num_samples,), generator=g)
        return iter(zip(order.tolist(), seeds.tolist()))

    def __len__(self) -> int:
        return self.num_samples


def make_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    train: bool | None = None,
    num_workers: int | None = None,
    seed: int = 0,
    drop_last: bool | None = None,
    pin_memory: bool | None = None,
    world_size: int = 1,
) -> DataLoader:
    """DataLoader for ``dataset``; training loaders shuffle with an ``EpochSampler`` and drop the last partial batch.

    Args:
        train: shuffle + drop_last (default: ``dataset.task != "eval"``).
        num_workers: default 0 for in-memory data (digits), else min(8, cpu count).
        world_size: processes sharing the data (a train batch must fit ``world_size`` times in the data).
    Raises:
        DataError: batch size < 1, or (training) larger than the dataset.
    """
    n = len(dataset)
    if batch_size < 1:
        raise DataError(f"batch size must be >= 1, got {batch_size}")
    if n == 0:
        raise DataError(f"dataset {dataset!r} is empty")
    if train is None:
        train = getattr(dataset, "task", "supervised") != "eval"
    if drop_last is None:
        drop_last = train
    if train and batch_size * world_size > n:
        raise DataError(
            f"batch size {batch_size}{f' x {world_size} processes' if world_size > 1 else ''} is larger than the "
            f"{n} training samples of {getattr(dataset, 'spec', 'the dataset')}; pass a batch size <= {n // world_size}"
        )
    if num_workers is None:
        in_memory = getattr(getattr(dataset, "source", None), "in_memory", False)
        num_workers = 0 if in_memory else min(8, os.cpu_count() or 1)
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=EpochSampler(n, seed=seed, shuffle=train, sample_seeds=train and isinstance(dataset, ImageDataset)),
        generator=torch.Generator().manual_seed(seed),  # worker seeds drawn here, not from the global RNG
        drop_last=drop_last,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
    )


def steps_per_epoch(num_samples: int, batch_size: int, drop_last: bool = True) -> int:
    """Batches per epoch for ``num_samples`` samples."""
    return num_samples // batch_size if drop_last else math.ceil(num_samples / batch_size)


def read_data_info(run_dir: str | os.PathLike) -> dict:
    """The ``data`` record (dataset, mean, std, classes, img_size, in_chans, crop_pct) saved in a run's
    ``config.json`` by the training recipes; raises ``DataError`` if absent."""
    path = Path(run_dir)
    if path.is_file() or path.suffix in (".safetensors", ".json"):
        path = path.parent
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise DataError(f"{path} has no config.json (expected a run directory written by a jumbokit recipe)")
    cfg = json.loads(cfg_file.read_text())
    if "data" not in cfg:
        raise DataError(f"{cfg_file} has no 'data' record (dataset normalisation and classes)")
    return cfg["data"]
