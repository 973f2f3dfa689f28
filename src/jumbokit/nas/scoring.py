"""Scoring search candidates: the inherited-weight top-1 (%) of many architectures on one fixed held-out subset,
on the accelerator, with a generation's candidates spread over the processes of a launch.

```python
scorer = CandidateScorer(supernet.to(device), loader, device, autocast=accelerator.autocast)
score = split_across_processes(scorer, accelerator.num_processes)   # every rank gets every candidate's score
nas.evolutionary_search(space, None, budget, score=score, ...)
```
Each candidate's score depends only on its architecture and the fixed batches, never on which process or
which group scored it, so 1 and N processes give the same search.
"""
from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable, Sequence
from typing import Any, Callable, ContextManager

import torch
from torch import nn

from ..training.jobs import launch_queue, run_jobs

logger = logging.getLogger(__name__)

__all__ = ["CandidateScorer", "split_across_processes"]


class CandidateScorer:
    """``scorer(archs) -> [top1 %]``: extracts up to ``group`` subnets at a time from ``supernet`` (on ``device``)
    and runs them all on each (images (B, C, H, W), labels (B,)) batch of ``loader``, so the loader is read once
    per group rather than once per candidate. ``autocast`` returns the precision context of the forward passes
    (e.g. ``accelerator.autocast``); the default is none (fp32)."""

    def __init__(self, supernet: nn.Module, loader: Iterable, device: torch.device | str = "cpu",
                 autocast: Callable[[], ContextManager] | None = None, group: int = 8) -> None:
        if group < 1:
            raise ValueError(f"group must be >= 1, got {group}")
        self.supernet, self.loader, self.device = supernet.eval(), loader, torch.device(device)
        self.autocast = autocast or contextlib.nullcontext
        self.group = group

    def __call__(self, archs: Sequence[dict[str, Any]]) -> list[float]:
        scores: list[float] = []
        for start in range(0, len(archs), self.group):
            scores += self._score_group(archs[start:start + self.group])
        return scores

    @torch.no_grad()
    def _score_group(self, archs: Sequence[dict[str, Any]]) -> list[float]:
        models = [self.supernet.extract(arch).to(self.device).eval() for arch in archs]
        correct = torch.zeros(len(models), dtype=torch.long, device=self.device)
        total = 0
        for batch in self.loader:
            x, y = batch[0].to(self.device, non_blocking=True), batch[1].to(self.device, non_blocking=True)
            with self.autocast():
                for i, model in enumerate(models):
                    correct[i] += (model(x).argmax(dim=-1) == y).sum()
            total += y.numel()
        if total == 0:
            raise ValueError("the scoring loader yielded no samples")
        return [100.0 * c / total for c in correct.tolist()]


def split_across_processes(score: Callable[[list[dict[str, Any]]], list[float]], processes: int,
                           group: int = 8) -> Callable[[list[dict[str, Any]]], list[float]]:
    """Wrap ``score`` so that each call's candidates are cut into runs of consecutive candidates (``group`` at
    most, few enough that every one of ``processes`` processes gets work), each process scores the next run
    whenever it is free (:func:`jumbokit.training.jobs.run_jobs`), and every process returns all the scores in
    candidate order. Every process calls it together."""
    if processes == 1:
        return score

    def gathered(archs: list[dict[str, Any]]) -> list[float]:
        size = max(1, min(group, math.ceil(len(archs) / processes)))
        spans = [(start, min(start + size, len(archs))) for start in range(0, len(archs), size)]
        parts = run_jobs(launch_queue(spans), lambda span: score(archs[span[0]:span[1]]),
                         describe=lambda span: f"scoring candidates {span[0]}-{span[1] - 1}")
        return [value for part in parts for value in part]

    return gathered
