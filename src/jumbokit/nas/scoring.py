"""Scoring search candidates: the inherited-weight top-1 (%) of many architectures on one fixed held-out subset,
on the accelerator, with a generation's candidates split across processes.

```python
scorer = CandidateScorer(supernet.to(device), loader, device, autocast=accelerator.autocast)
score = split_across_processes(scorer, accelerator)     # every rank gets every candidate's score
nas.evolutionary_search(space, None, budget, score=score, ...)
```
Each candidate's score depends only on its architecture and the fixed batches, never on which process or
which group scored it, so 1 and N processes give the same search.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Callable, ContextManager

import torch
from torch import nn

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


def split_across_processes(score: Callable[[list[dict[str, Any]]], list[float]],
                           accelerator: Any) -> Callable[[list[dict[str, Any]]], list[float]]:
    """Wrap ``score`` so that process r scores candidates r, r + N, r + 2N, ... of each call and every process
    returns all the scores in candidate order (gathered with ``accelerate.utils.gather_object``)."""
    rank, world = accelerator.process_index, accelerator.num_processes
    if world == 1:
        return score

    def gathered(archs: list[dict[str, Any]]) -> list[float]:
        from accelerate.utils import gather_object

        mine = list(range(rank, len(archs), world))
        local = list(zip(mine, score([archs[i] for i in mine]) if mine else []))
        scores: list[float | None] = [None] * len(archs)
        for index, value in gather_object(local):
            scores[index] = value
        if any(s is None for s in scores):
            raise RuntimeError(f"scores of {scores.count(None)} of {len(archs)} candidates did not arrive")
        return scores  # type: ignore[return-value]

    return gathered
