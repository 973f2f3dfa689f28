"""Training and evaluation loaders: ``EpochSampler`` (order and augmentation depend on (seed, epoch) only) and
``make_loader``.

``EpochSampler`` stays ours: torch's ``RandomSampler`` / ``DistributedSampler`` fix the order but not each sample's
augmentation seed, which a killed and resumed run needs to see the very batches of an uninterrupted one.
"""
from __future__ import annotations

import logging
import math
import os
from typing import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from .dataset import ImageDataset
from .errors import DataError

logger = logging.getLogger(__name__)


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


def fit_batch_size(batch_size: int, num_samples: int, given: bool, world_size: int = 1) -> int:
    """The per-process training batch for ``num_samples`` training samples on ``world_size`` processes (the global
    batch ``batch_size * world_size`` must fit): a default batch shrinks to fit (logged); a batch the user gave that
    does not fit raises ``DataError``."""
    if batch_size * world_size <= num_samples:
        return batch_size
    fitted = max(1, num_samples // world_size)
    on = f" x {world_size} processes" if world_size > 1 else ""
    if given:
        raise DataError(f"--batch-size {batch_size}{on} is larger than the {num_samples} training samples; "
                        f"pass --batch-size <= {fitted}")
    logger.info(f"batch size {fitted}{on} (the default {batch_size}{on} is larger than the {num_samples} training "
                "samples)")
    return fitted


def steps_per_epoch(num_samples: int, batch_size: int, drop_last: bool = True) -> int:
    """Batches per epoch for ``num_samples`` samples."""
    return num_samples // batch_size if drop_last else math.ceil(num_samples / batch_size)
