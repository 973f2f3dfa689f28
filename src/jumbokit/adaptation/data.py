"""The evaluation sets of a test-time adaptation run: the clean split(s) of a dataset, then its corrupted
versions per severity and corruption (generated, or read from an ImageNet-C tree).

```python
spec = CorruptionSpec(dataset="digits", corruptions=("fog",), severities=[5], max_eval_samples=100)
clean = load_clean_sets(spec, source.info, with_fisher=True)
domains = build_corrupted_sets(spec, source.info, clean)   # {5: {"fog": dataset of (C, H, W), label}}
```
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from torch.utils.data import Dataset

from .corruptions import COMMON_CORRUPTIONS, check_imagenet_c

logger = logging.getLogger(__name__)

__all__ = ["CleanSets", "CorruptionSpec", "build_corrupted_sets", "check_class_count", "file_workers", "load_clean_sets"]


@dataclass
class CorruptionSpec:
    """What to corrupt: ``dataset`` (None: the source's own), its ``split``, or an ``imagenet_c`` tree;
    ``max_eval_samples`` a seeded subset of the split; ``passes`` streams over the split, each with fresh
    corruption noise; the clean ``fisher_split`` gives EATA's Fisher (``fisher_size`` samples); ``skip_corrupt``
    leaves out unreadable image files."""

    dataset: str | None = None
    split: str = "test"
    imagenet_c: str | None = None
    corruptions: tuple[str, ...] = COMMON_CORRUPTIONS
    severities: list[int] = field(default_factory=lambda: [5])
    max_eval_samples: int | None = None
    passes: int = 1
    upsample_small: bool = False
    fisher_split: str = "val"
    fisher_size: int = 2000
    skip_corrupt: bool = False
    seed: int = 0

    def check(self) -> None:
        """Raise ValueError / FileNotFoundError on options that cannot work, before anything is loaded."""
        if self.passes < 1:
            raise ValueError(f"--passes must be >= 1, got {self.passes}")
        if self.imagenet_c is not None:
            if self.passes != 1:
                raise ValueError(f"--passes {self.passes} applies to generated corruptions; an ImageNet-C folder "
                                 "is streamed as it is (pass --passes 1)")
            check_imagenet_c(self.imagenet_c, self.corruptions, self.severities)

    def dataset_name(self, info: dict[str, Any]) -> str:
        return self.dataset or info.get("dataset") or "digits"

    def describe(self, info: dict[str, Any]) -> str:
        """One line for the report: where the corrupted images come from."""
        if self.imagenet_c:
            return f"ImageNet-C tree {self.imagenet_c}"
        passes = f", {self.passes} passes with fresh corruption noise" if self.passes > 1 else ""
        return f"corruptions generated from {self.dataset_name(info)} ({self.split} split{passes})"


@dataclass
class CleanSets:
    """The clean split to corrupt (None when an ImageNet-C tree is read without ``dataset``), the clean set
    for EATA's Fisher (or None) and the class names (None when unknown)."""

    test: Dataset | None
    fisher: Dataset | None
    classes: list[str] | None


def _clean_split(spec: CorruptionSpec, info: dict[str, Any], split: str, max_samples: int | None,
                 progress: bool) -> Dataset:
    from jumbokit.data import build_dataset

    return build_dataset(spec.dataset_name(info), split, task="eval", img_size=int(info["img_size"]),
                         in_chans=int(info["in_chans"]), mean=info["mean"], std=info["std"],
                         crop_pct=float(info["crop_pct"]), interpolation=info["interpolation"],
                         max_samples=max_samples, skip_corrupt=spec.skip_corrupt, seed=spec.seed,
                         progress=progress)


def load_clean_sets(spec: CorruptionSpec, info: dict[str, Any], with_fisher: bool,
                    progress: bool = False) -> CleanSets:
    """The clean sets, normalised with the source's ``info``; the Fisher set falls back to ``spec.split``
    when ``spec.fisher_split`` does not exist. Raises ValueError when the class counts disagree."""
    from jumbokit.data import SplitNotFoundError

    test = None
    if spec.imagenet_c is None or spec.dataset is not None:
        test = _clean_split(spec, info, spec.split, spec.max_eval_samples, progress)
    fisher = None
    if with_fisher:
        try:
            fisher = _clean_split(spec, info, spec.fisher_split, spec.fisher_size, progress)
        except SplitNotFoundError:
            fisher = test if test is not None else _clean_split(spec, info, spec.split, spec.fisher_size, progress)
    reference = test if test is not None else fisher
    known = info.get("classes")
    if reference is not None and known and len(reference.classes) != len(known):
        raise ValueError(f"the source was trained on {len(known)} classes, dataset {spec.dataset_name(info)} "
                         f"has {len(reference.classes)}")
    classes = known or (list(reference.classes) if reference is not None else None)
    return CleanSets(test, fisher, classes)


def file_workers(dataset: Dataset | None, requested: int | None) -> int:
    """DataLoader workers for reading ``dataset``: ``requested`` when given, else 0 for in-memory data (digits)
    and otherwise min(8, this process's share of the cores)."""
    if requested is not None:
        return requested
    if dataset is None or getattr(getattr(dataset, "source", None), "in_memory", False):
        return 0
    from jumbokit.training.threads import available_cores, local_processes

    return min(8, max(1, available_cores() // local_processes()))


def check_class_count(outputs: int, classes: list[str] | None, where: str) -> None:
    """Raise ValueError when a model with ``outputs`` logits cannot label ``classes``."""
    if classes and outputs != len(classes):
        raise ValueError(f"the checkpoint predicts {outputs} classes but {where} has {len(classes)}")


def build_corrupted_sets(spec: CorruptionSpec, info: dict[str, Any], clean: CleanSets, progress: bool = False,
                         needed: Iterable[tuple[str, int]] | None = None,
                         num_workers: int = 0) -> dict[int, dict[str, Dataset]]:
    """``{severity: {corruption: dataset}}``: the ImageNet-C tree's folders, or the corruptions of ``clean.test``
    generated now (deterministic per seed, corruption, severity and sample; ``num_workers`` DataLoader workers
    read and corrupt the images). ``needed``: only these (corruption, severity) pairs (default: all of them),
    in the spec's order."""
    from tqdm.auto import tqdm

    from .corruptions import CorruptedDataset, clean_image_transforms, load_imagenet_c

    pairs = [(c, s) for s in spec.severities for c in spec.corruptions]
    if needed is not None:
        wanted = set(needed)
        pairs = [pair for pair in pairs if pair in wanted]
    names = {c for c, _ in pairs}
    domains: dict[int, dict[str, Dataset]] = {}
    if spec.imagenet_c is not None:
        if clean.classes is None:
            raise ValueError("class names are unknown: pass --dataset with the clean dataset so labels line up")
        sets = load_imagenet_c(spec.imagenet_c, clean.classes, [c for c in spec.corruptions if c in names],
                               sorted({s for c, s in pairs}),
                               img_size=int(info["img_size"]), mean=info["mean"], std=info["std"],
                               in_chans=int(info["in_chans"]))
        for (corruption, severity), data in sets.items():
            if (corruption, severity) in pairs:
                domains.setdefault(severity, {})[corruption] = data
        return domains
    geometry, to_tensor = clean_image_transforms(int(info["img_size"]), info["mean"], info["std"],
                                                 float(info["crop_pct"]), info["interpolation"])
    for corruption, severity in tqdm(pairs, desc="corrupting", disable=not progress):
        data = CorruptedDataset(clean.test, corruption, severity, to_tensor, geometry, seed=spec.seed,
                                small_images="upsample" if spec.upsample_small else "error", passes=spec.passes)
        domains.setdefault(severity, {})[corruption] = data.precompute(num_workers=num_workers)
    logger.info("generated %d corrupted sets of %d images", len(pairs), len(clean.test) * spec.passes)
    return domains
