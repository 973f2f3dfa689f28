"""Test streams of the standard and "wild" test-time adaptation settings (SAR, ICLR 2023, Sec. 4).

* ``normal``: each corruption is its own episode, adapted from the source model, shuffled, batch 64.
* ``mixed``: every corruption of a severity shuffled into one stream, batch 64, never reset.
* ``bs1``: as ``normal`` with batch size 1.
* ``label_shift``: online imbalanced label shift: per corruption, a stream ordered by class blocks
  (a shuffled class order; in block k the label is drawn with probability proportional to the
  ``imbalance_ratio`` for the block's class and to 1 for every other class; images drawn with
  replacement from that class), batch 64, not shuffled.

Every stream yields ``(images, labels, domain ids)``; :func:`run_episodes` feeds them to an
adaptation wrapper and counts accuracy per domain (corruption) and throughput.
"""
from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils.data import ConcatDataset, DataLoader, Dataset, Subset

__all__ = [
    "INPUT_NORMS",
    "METHODS",
    "MethodSettings",
    "build_method",
    "input_normalizer",
    "DEFAULT_BATCH_SIZE",
    "SETTINGS",
    "Episode",
    "StreamResult",
    "build_episodes",
    "label_shift_indices",
    "run_episodes",
]

SETTINGS = ("normal", "mixed", "bs1", "label_shift")
METHODS = ("none", "tent", "eata", "sar")
DEFAULT_BATCH_SIZE = {"normal": 64, "mixed": 64, "bs1": 1, "label_shift": 64}


def check_setting(setting: str) -> str:
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; expected one of {', '.join(SETTINGS)}")
    return setting


class _Tagged(Dataset):
    """Adds a constant domain id to each item: ``(x, y) -> (x, y, domain)``."""

    def __init__(self, data: Dataset, domain: int) -> None:
        self.data = data
        self.domain = domain

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        x, y = self.data[i][:2]
        return x, y, self.domain


@dataclass
class Episode:
    """One test stream: ``loader`` yields (x (B, C, H, W), y (B,), domain (B,)) with domain ids indexing
    ``domains``; ``reset`` restores the source model before the stream starts."""

    name: str
    domains: list[str]
    loader: DataLoader
    reset: bool = True


def _targets(data: Dataset) -> np.ndarray:
    targets = getattr(data, "targets", None)
    if targets is None:
        targets = [int(data[i][1]) for i in range(len(data))]
    return np.asarray(targets, dtype=np.int64)


def label_shift_indices(
    targets: Sequence[int],
    imbalance_ratio: float = 500000.0,
    length: int | None = None,
    seed: int = 0,
) -> np.ndarray:
    """Sample indices of an online imbalanced label-shift stream.

    The classes present in ``targets`` are visited in a seeded random order, ``length // K`` steps
    each (K classes; default length = len(targets)). At each step of the block of class k the label
    is class k with probability r / (r + K - 1) and any other class with 1 / (r + K - 1)
    (r = ``imbalance_ratio``; r = 1 is uniform, r -> inf is pure class order); the image is drawn
    uniformly with replacement among that class's samples. Returns int64 indices (length // K * K,).
    """
    if imbalance_ratio < 1:
        raise ValueError(f"imbalance_ratio must be >= 1, got {imbalance_ratio}")
    targets = np.asarray(targets, dtype=np.int64)
    classes = np.unique(targets)
    k = len(classes)
    length = len(targets) if length is None else int(length)
    per_block = length // k
    if per_block < 1:
        raise ValueError(f"stream length {length} is shorter than the number of classes {k}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(classes)
    minor = 1.0 / (imbalance_ratio + k - 1)
    by_class = {c: np.flatnonzero(targets == c) for c in classes}
    picks = []
    for major in order:
        probs = np.full(k, minor)
        probs[np.searchsorted(classes, major)] = minor * imbalance_ratio
        labels = rng.choice(classes, size=per_block, p=probs / probs.sum())
        for label in labels:
            pool = by_class[label]
            picks.append(pool[rng.integers(len(pool))])
    return np.asarray(picks, dtype=np.int64)


def build_episodes(
    setting: str,
    domains: Mapping[str, Dataset],
    batch_size: int | None = None,
    seed: int = 0,
    imbalance_ratio: float = 500000.0,
    stream_length: int | None = None,
    num_workers: int = 0,
) -> list[Episode]:
    """The streams of ``setting`` over ``domains`` ({corruption name: dataset of (x, y)}).

    ``batch_size=None`` uses the setting's default (64, or 1 for ``bs1``). Shuffling is seeded.
    """
    check_setting(setting)
    if not domains:
        raise ValueError("no corrupted datasets to build a stream from")
    if setting == "bs1" and batch_size not in (None, 1):
        raise ValueError(f"setting 'bs1' adapts on single samples; got batch_size={batch_size}")
    batch = DEFAULT_BATCH_SIZE[setting] if batch_size is None else int(batch_size)
    if batch < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch}")
    names = list(domains)

    def loader(data: Dataset, shuffle: bool, offset: int) -> DataLoader:
        generator = torch.Generator().manual_seed(seed + offset)
        return DataLoader(data, batch_size=batch, shuffle=shuffle, generator=generator,
                          num_workers=num_workers, drop_last=False)

    if setting == "mixed":
        mixed = ConcatDataset([_Tagged(domains[n], i) for i, n in enumerate(names)])
        return [Episode("mixed", names, loader(mixed, True, 0), reset=True)]
    episodes = []
    for i, name in enumerate(names):
        data: Dataset = _Tagged(domains[name], 0)
        shuffle = True
        if setting == "label_shift":
            indices = label_shift_indices(_targets(domains[name]), imbalance_ratio, stream_length, seed + i)
            data, shuffle = Subset(data, indices.tolist()), False
        episodes.append(Episode(name, [name], loader(data, shuffle, i), reset=True))
    return episodes


@dataclass
class StreamResult:
    """Counts of one method over a list of episodes: per-domain correct / total, adaptation time."""

    correct: dict[str, int] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    nan_batches: int = 0
    stats: dict[str, int] = field(default_factory=dict)

    def accuracy(self, domain: str | None = None) -> float:
        """Top-1 accuracy in percent of one domain, or over all samples when ``domain`` is None."""
        if domain is None:
            total = sum(self.total.values())
            return 100.0 * sum(self.correct.values()) / max(total, 1)
        return 100.0 * self.correct.get(domain, 0) / max(self.total.get(domain, 0), 1)

    def mean_accuracy(self) -> float:
        """Mean over domains of the per-domain accuracy (the average column of the tables)."""
        return float(np.mean([self.accuracy(d) for d in self.total])) if self.total else 0.0

    @property
    def images_per_second(self) -> float:
        return sum(self.total.values()) / self.seconds if self.seconds > 0 else 0.0


def run_episodes(
    adapter: torch.nn.Module,
    episodes: Sequence[Episode],
    device: torch.device | str = "cpu",
    progress: bool = False,
    desc: str = "",
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> StreamResult:
    """Feed every episode to ``adapter`` (``forward(x) -> logits``, optional ``reset()``); ``transform`` maps each
    batch first (:func:`input_normalizer`).

    Timing covers the transform and the adapter calls (data loading excluded; CUDA synchronised).
    """
    from tqdm.auto import tqdm

    device = torch.device(device)
    result = StreamResult()
    total_batches = sum(len(e.loader) for e in episodes)
    bar = tqdm(total=total_batches, desc=desc or "adapting", disable=not progress, leave=False)
    for episode in episodes:
        if episode.reset and hasattr(adapter, "reset"):
            adapter.reset()
        for x, y, domain in episode.loader:
            x, y = x.to(device, non_blocking=True), y.to(device)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            logits = adapter(transform(x) if transform is not None else x)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            result.seconds += time.perf_counter() - start
            if not torch.isfinite(logits).all():
                result.nan_batches += 1
            hits = (logits.argmax(dim=1) == y).cpu()
            for d in domain.unique().tolist():
                mask = domain == d
                name = episode.domains[d]
                result.correct[name] = result.correct.get(name, 0) + int(hits[mask].sum())
                result.total[name] = result.total.get(name, 0) + int(mask.sum())
            bar.update(1)
    bar.close()
    result.stats = dict(getattr(adapter, "stats", {}))
    return result


INPUT_NORMS = ("source", "batch", "image")


def _standardize(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    return (x - x.mean(dims, keepdim=True)) / x.std(dims, keepdim=True, correction=0).clamp_min(1e-6)


def input_normalizer(kind: str) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The test-time input statistics of a stream, applied to batches already normalised with the source's
    mean/std: ``source`` keeps them (None: no transform); ``batch`` standardises each test batch by its own
    per-channel mean and standard deviation (what re-estimating normalisation statistics on the test stream does
    at the input; at batch size 1 it is ``image``); ``image`` standardises each image by its own. Clean inputs
    normalised with the data statistics have mean ~0 and std ~1, so a stream without shift is left nearly as
    it is, while a corruption that shifts or rescales every pixel is undone before the model sees it."""
    if kind not in INPUT_NORMS:
        raise ValueError(f"input normalisation: expected one of {', '.join(INPUT_NORMS)}, got {kind!r}")
    if kind == "batch":
        return lambda x: _standardize(x, (0, 2, 3))
    if kind == "image":
        return lambda x: _standardize(x, (2, 3))
    return None


@dataclass
class MethodSettings:
    """Hyper-parameters of the methods (defaults: the papers' values for ViTs).

    ``lr=None``: the SAR reference's rule for ViTs, 0.001 * batch / 64 (SGD, momentum 0.9) for every
    method, doubled for SAR alone at batch size 1; ``e0_factor``: entropy margin
    E0 = e0_factor * ln(num_classes) of SAR and EATA; ``sar_reset_constant=None``: SAR's recovery
    threshold 0.2 * ln(num_classes) / ln(1000) (the reference's 0.2 at 1000 classes).
    """

    lr: float | None = None
    e0_factor: float = 0.4
    sar_rho: float = 0.05
    sar_reset_constant: float | None = None
    sar_exclude_last_blocks: int | None = None
    eata_fisher_alpha: float = 2000.0
    eata_d_margin: float = 0.05
    fisher_size: int = 2000
    episodic: bool = False


def check_methods(methods: str | Sequence[str]) -> list[str]:
    """Parse ``"none,tent,eata,sar"`` (or a list); raises ``ValueError`` naming unknown methods."""
    names = [m.strip().lower() for m in (methods.split(",") if isinstance(methods, str) else methods) if m.strip()]
    aliases = {"no_adapt": "none", "source": "none"}
    names = [aliases.get(m, m) for m in names]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise ValueError(f"unknown method(s) {unknown or methods!r}; expected a comma-separated subset of {','.join(METHODS)}")
    return list(dict.fromkeys(names))


def build_method(
    name: str,
    model: torch.nn.Module,
    batch_size: int,
    num_classes: int,
    settings: MethodSettings | None = None,
    clean_batches: Iterable | None = None,
) -> torch.nn.Module:
    """A fresh adaptation wrapper around a deep copy of ``model`` (the source is left untouched).

    ``clean_batches`` (EATA only): clean images for the Fisher regulariser (``settings.fisher_size``
    samples at most); without them EATA runs without the regulariser.
    """
    from .eata import EATA, compute_fishers
    from .sar import SAR
    from .tent import NoAdapt, Tent, collect_params, entropy_margin

    (name,) = check_methods([name])
    settings = settings or MethodSettings()
    model = copy.deepcopy(model)
    margin = entropy_margin(num_classes, settings.e0_factor)
    if name == "none":
        return NoAdapt(model)
    if name == "tent":
        return Tent(model, lr=settings.lr, batch_size=batch_size, episodic=settings.episodic)
    if name == "sar":
        return SAR(model, lr=settings.lr, batch_size=batch_size, rho=settings.sar_rho, margin_e0=margin,
                   reset_constant=settings.sar_reset_constant,
                   exclude_last_blocks=settings.sar_exclude_last_blocks, episodic=settings.episodic)
    eata = EATA(model, fisher_alpha=settings.eata_fisher_alpha, e_margin=margin, d_margin=settings.eata_d_margin,
                lr=settings.lr, batch_size=batch_size, episodic=settings.episodic)  # configures the model
    if clean_batches is not None:  # the Fisher regulariser on the adapted parameters, at the source weights
        _, names = collect_params(model)
        eata.fishers = compute_fishers(model, clean_batches, names, max_samples=settings.fisher_size)
    return eata
