"""Run the adaptation jobs of one evaluation: every (severity, method) pair adapts a fresh copy of the source
on the severity's test streams. Jobs are whole runs; under several processes each rank takes every
``num_processes``-th job and the records are gathered by the caller.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

from .wild import MethodSettings, build_episodes, build_method, run_episodes

logger = logging.getLogger(__name__)

__all__ = ["METHOD_LABELS", "StreamOptions", "run_job", "run_jobs"]

METHOD_LABELS = {"none": "No adapt", "tent": "Tent", "eata": "EATA", "sar": "SAR"}


@dataclass
class StreamOptions:
    """How the test streams are drawn (see :func:`jumbokit.adaptation.wild.build_episodes`)."""

    setting: str = "normal"
    batch_size: int = 64
    seed: int = 0
    imbalance_ratio: float = 500000.0
    stream_length: int | None = None
    num_workers: int = 0


def _clean_batches(clean: Dataset, seed: int, num_workers: int, device: torch.device) -> Iterator:
    """Shuffled clean (x, y) batches of 64 on ``device`` (EATA's Fisher)."""
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(clean, batch_size=64, shuffle=True, generator=generator, num_workers=num_workers)
    return ((x.to(device), y) for x, y in loader)


def run_job(model: nn.Module, method: str, severity: int, domains: dict[str, Dataset], num_classes: int,
            settings: MethodSettings, stream: StreamOptions, clean: Dataset | None = None,
            device: torch.device | str = "cpu", progress: bool = False) -> dict[str, Any]:
    """Adapt a copy of ``model`` with ``method`` on the streams of ``domains`` (corruption -> dataset).

    Returns a record: severity, method, per-corruption ``correct`` / ``total`` counts, adaptation
    ``seconds``, ``nan_batches`` and the method's counters (``stats``)."""
    device = torch.device(device)
    clean_batches = None
    if method == "eata" and clean is not None:
        clean_batches = _clean_batches(clean, stream.seed, stream.num_workers, device)
    adapter = build_method(method, model, stream.batch_size, num_classes, settings, clean_batches)
    episodes = build_episodes(stream.setting, domains, stream.batch_size, seed=stream.seed,
                              imbalance_ratio=stream.imbalance_ratio, stream_length=stream.stream_length,
                              num_workers=stream.num_workers)
    result = run_episodes(adapter, episodes, device, progress=progress,
                          desc=f"{METHOD_LABELS.get(method, method)} sev {severity}")
    logger.debug("%s severity %d: %d images in %.1f s", method, severity, sum(result.total.values()),
                 result.seconds)
    return {"severity": severity, "method": method, "correct": result.correct, "total": result.total,
            "seconds": result.seconds, "nan_batches": result.nan_batches, "stats": result.stats}


def run_jobs(model: nn.Module, jobs: Sequence[tuple[int, str]], domains: dict[int, dict[str, Dataset]],
             num_classes: int, settings: MethodSettings, stream: StreamOptions, clean: Dataset | None = None,
             device: torch.device | str = "cpu", progress: bool = False, rank: int = 0,
             world_size: int = 1) -> list[dict[str, Any]]:
    """Records of this rank's share of ``jobs`` ((severity, method) pairs), in job order."""
    return [run_job(model, method, severity, domains[severity], num_classes, settings, stream, clean, device,
                    progress) for severity, method in list(jobs)[rank::world_size]]
