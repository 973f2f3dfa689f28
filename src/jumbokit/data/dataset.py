"""``build_dataset(spec, split, task, img_size, in_chans)``: one transformed split of an image dataset.

Dataset specs (one string, the ``--dataset`` flag):
- ``digits``: scikit-learn's bundled 8x8 digits (1,797 images), fixed stratified split 1,257 / 180 / 360,
  upsampled to ``img_size`` (default 32), 1 channel (3 on request, replicated).
- ``fashion-mnist[:DIR]``: Fashion-MNIST's IDX files (``DIR``, else Debian's package, else a download), official
  60,000 / 10,000 split with a fixed stratified validation cut of 5,000 from train, padded to 32 px, 1 channel
  (``jumbokit.data.fashion_mnist``).
- ``folder:PATH``: torchvision ImageFolder tree; ``PATH/train``, ``PATH/val`` (ImageNet layout) or a plain
  ``PATH/<class>/<image>`` tree, which is a training split only: its validation / test images are carved from it
  by ``holdout`` (``--val-split`` / ``--test-split``: seeded, stratified).
- ``hf:NAME[:SPLIT]``: Hugging Face ``datasets``; NAME is a local ``imagefolder`` directory or a hub name
  (online); SPLIT pins the split used whatever split is requested.

Sizes, channels, normalisation and augmentation left out are chosen per dataset kind by
``jumbokit.data.choices.resolve_choices`` (digits: fixed; small files: from the data; else ImageNet's).
"""
from __future__ import annotations

import dataclasses
import json
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import torch
from torch.utils.data import Dataset

from .choices import DataChoices, image_statistics, probe_files, resolve_choices
from .defaults import BUILTIN_KINDS, DEFAULTS
from .errors import CorruptImageError, DataError, SplitNotFoundError
from .fashion_mnist import FashionMNISTSource
from .sources import DigitsSource, HFSource, Holdout, check_split, has_split_dir
from .spec import DatasetSpec, parse_dataset_spec
from .transforms import build_transform, check_task


class ImageDataset(Dataset):
    """A transformed image classification split: ``ds[i] -> (image (C, H, W) float, label int)``.

    Attributes: ``num_classes``, ``classes``, ``targets``, ``mean``, ``std``, ``in_chans``, ``img_size``,
    ``spec``, ``split``, ``task``, ``choices`` (the resolved ``DataChoices``), ``skipped`` (unreadable files left
    out), ``info()`` (JSON-able record).
    Images are converted to the requested channel mode (grayscale <-> RGB) when loaded.
    """

    def __init__(
        self,
        source,
        spec: DatasetSpec,
        split: str,
        task: str,
        choices: DataChoices,
        transform,
        *,
        skip_corrupt: bool = False,
        indices: Sequence[int] | None = None,
    ):
        self.source = source
        self.spec = spec
        self.split = split
        self.task = task
        self.choices = choices
        self.img_size = choices.img_size
        self.in_chans = choices.in_chans
        self.mean = choices.mean
        self.std = choices.std
        self.crop_pct = choices.crop_pct
        self.interpolation = choices.interpolation
        self.transform = transform
        self.skip_corrupt = skip_corrupt
        self.classes: list[str] = list(source.classes)
        self.num_classes = len(self.classes)
        self.indices = list(range(len(source))) if indices is None else list(indices)
        self.skipped: list[str] = []
        self.holdout: Holdout | None = None  # set by build_dataset when its splits were carved from training images
        self._mode = "L" if self.in_chans == 1 else "RGB"
        self.channel_note = ""
        if source.native_chans != self.in_chans:
            self.channel_note = (f"images converted from {source.native_chans} to {self.in_chans} channel(s) "
                                 f"({'replicated gray' if self.in_chans == 3 else 'luminance'})")

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
        """JSON-able record of what a model trained on this data needs (normalisation, classes, sizes) and how it
        was augmented (``augmentation``, training tasks only)."""
        record = {
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
            **({"holdout": self.holdout.to_dict()} if self.holdout is not None else {}),
            "defaults": self.choices.rule,
            "stats": self.choices.stats,
        }
        if self.task != "eval":
            record["augmentation"] = self.choices.augmentation()
        return record

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
    ratio: tuple[float, float] | None = None,
    hflip: float | None = None,
    randaugment: str | None = None,
    no_aug: bool = False,
    crop_pct: float | None = None,
    interpolation: str | None = None,
    skip_corrupt: bool = False,
    max_samples: int | None = None,
    seed: int = 0,
    hf_cache_dir: str | None = None,
    progress: bool = True,
    holdout: Holdout | None = None,
) -> ImageDataset:
    """Build one split of an image dataset with the transform for ``task``.

    Args:
        spec: "digits" | "folder:PATH" | "hf:NAME[:split]".
        split: "train" | "val" | "test".
        task: "mae" | "supervised" | "eval" (transform family, see ``jumbokit.data.transforms``).
        img_size, in_chans, mean, std, crop_scale, ratio, hflip, crop_pct, interpolation: None = the dataset's
            default (see ``jumbokit.data.choices``); images are converted to ``in_chans`` (1 or 3).
        randaugment: timm RandAugment string (supervised); ``no_aug``: train on the evaluation transform.
        skip_corrupt: decode every file up front and leave out unreadable ones (``ds.skipped``), instead of
            raising ``CorruptImageError`` naming the file when it is reached.
        max_samples: keep a seeded random subset of this many samples (quick runs, tests).
        holdout: carve "val" / "test" from the training images of a ``folder:`` dataset (``Holdout``: seeded,
            stratified); "train" is then what is left. A carved split that the folder also has is refused.
    Returns:
        ImageDataset, items ``(float tensor (in_chans, img_size, img_size), int label)``.
    """
    parsed = parse_dataset_spec(spec)
    check_split(split)
    check_task(task)
    source, base = _open_split(parsed, split, img_size, hf_cache_dir, holdout)
    probe = None if parsed.kind in BUILTIN_KINDS else probe_files(source)
    if probe is not None and probe.small:
        source.native_chans = probe.in_chans
    choices = resolve_choices(
        parsed.kind, task, probe, img_size=img_size, in_chans=in_chans, mean=mean, std=std, crop_scale=crop_scale,
        ratio=ratio, hflip=hflip, randaugment=randaugment, no_aug=no_aug, crop_pct=crop_pct,
        interpolation=interpolation,
    )
    choices = _with_statistics(choices, parsed, split, source, hf_cache_dir, holdout)
    transform = build_transform(task, choices.img_size, choices.mean, choices.std, **choices.transform_kwargs())
    ds = ImageDataset(source, parsed, split, task, choices, transform, skip_corrupt=skip_corrupt,
                      indices=_subset(base, max_samples, seed))
    ds.holdout = holdout if holdout is not None and holdout.carved else None
    if skip_corrupt and not source.in_memory:
        _leave_out_unreadable(ds, progress)
    return ds


def _leave_out_unreadable(ds: ImageDataset, progress: bool) -> None:
    """Decode every file of ``ds`` once, drop unreadable ones and warn with their count."""
    bad = ds.scan(progress=progress)
    if bad:
        warnings.warn(f"skipped {len(bad)} unreadable image file(s) of {len(bad) + len(ds)} in {ds.spec} "
                      f"split {ds.split!r} (first: {bad[0]})")


def _open_split(parsed: DatasetSpec, split: str, img_size: int | None, hf_cache_dir: str | None,
                holdout: Holdout | None) -> tuple[Any, list[int]]:
    """(raw source, indices of ``split`` in it): the split's own source and all of it, or, for a split that
    ``holdout`` carves (and for "train" beside it), the training source and that part of its partition."""
    if holdout is None or not holdout.carved:
        source = _open_source(parsed, split, img_size, hf_cache_dir)
        return source, list(range(len(source)))
    if parsed.kind != "folder":
        raise DataError(f"--val-split / --test-split carve held-out splits from a folder: dataset; {parsed} has its "
                        "own splits")
    for carved in holdout.carved:  # test: only a 'test' folder clashes (a val folder stays the val split)
        if has_split_dir(parsed.path, carved, aliases=carved == "val"):
            raise DataError(f"{parsed.path} has its own {carved!r} folder; drop --{carved}-split (it carves "
                            f"{carved!r} from the training images of a folder without one)")
    if split != "train" and split not in holdout.carved:
        return _open_split(parsed, split, img_size, hf_cache_dir, None)
    source = _open_source(parsed, "train", img_size, hf_cache_dir)
    return source, holdout.partition(source.targets)[split]


def _open_source(parsed: DatasetSpec, split: str, img_size: int | None, hf_cache_dir: str | None):
    """The raw image source of ``split``."""
    if parsed.kind in BUILTIN_KINDS:
        size = int(img_size or DEFAULTS[parsed.kind].img_size)
        if size < 1:
            raise DataError(f"img_size must be a positive number of pixels, got {size}")
        if parsed.kind == "fashion-mnist":
            return FashionMNISTSource(split, size, parsed.path)
        return DigitsSource(split, size)
    if parsed.kind == "folder":
        from .folder import FolderSource  # torchvision, imported only for a folder

        return FolderSource(parsed.path, split)
    return HFSource(parsed.path, split, parsed.hf_split, cache_dir=hf_cache_dir)


def _subset(indices: list[int], max_samples: int | None, seed: int) -> list[int]:
    """``indices``, or a seeded random subset of ``max_samples`` of them (sorted)."""
    if max_samples is None:
        return indices
    if max_samples < 1:
        raise DataError(f"max_samples must be >= 1, got {max_samples}")
    if max_samples >= len(indices):
        return indices
    g = torch.Generator().manual_seed(seed)
    return sorted(indices[k] for k in torch.randperm(len(indices), generator=g)[:max_samples].tolist())


def _with_statistics(choices: DataChoices, parsed: DatasetSpec, split: str, source, hf_cache_dir: str | None,
                     holdout: Holdout | None = None):
    """``choices`` with the mean / std it lacks computed from the training split (the split itself if the
    dataset has none; the training part of a ``holdout`` partition); computed once per process for the same data
    and geometry."""
    if choices.mean is not None and choices.std is not None:
        return choices
    train = source
    if split != "train" and not (holdout is not None and split in holdout.carved):
        try:
            train = _open_source(parsed, "train", None, hf_cache_dir)
        except SplitNotFoundError:
            pass
    if holdout is not None and holdout.carved:
        train = _Part(train, holdout.partition(train.targets)["train"])
    key = (str(parsed), split if train is source else "train", len(train), choices.in_chans, choices.img_size,
           choices.crop_pct, choices.interpolation, None if holdout is None else tuple(holdout.to_dict().values()))
    if key not in _STATISTICS:
        _STATISTICS[key] = image_statistics(train, choices.in_chans, choices.img_size, crop_pct=choices.crop_pct,
                                            interpolation=choices.interpolation)
    mean, std = _STATISTICS[key]
    return dataclasses.replace(choices, mean=choices.mean or mean, std=choices.std or std)


_STATISTICS: dict[tuple, tuple] = {}


class _Part:
    """The samples ``indices`` of a raw source, as a source (``len`` and ``load``) for ``image_statistics``."""

    def __init__(self, source, indices: list[int]):
        self.source, self.indices = source, indices

    def __len__(self) -> int:
        return len(self.indices)

    def load(self, i: int):
        return self.source.load(self.indices[i])


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
