"""Stopping on a held-out split: ``EarlyStop`` (the rule ``fit`` takes) and ``Stopper`` (its state in one run).

Every ``every`` optimizer steps from step ``start`` on (Keras' ``start_from_epoch``: no scoring in the noisy first
steps of warm-up and peak learning rate) ``fit`` scores the model on the split (one of its ``eval_loaders``, on every
process, combined with ``gather_for_metrics``, so every process takes the same decision); training ends once
``patience`` scorings in a row did not beat the best one, and the model goes back to the weights of the best
scoring. The learning-rate schedule keeps the length of the whole budget (the ``epochs`` or ``steps`` asked for),
as in PatchTST's and Keras' early stopping: a run that never stops is the run without the rule. Scoring reads no
random numbers, so the steps up to a stop are those of the same run without it.

The best weights are kept in memory, not in checkpoints: ``fit`` refuses the rule together with checkpoints.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = ["EarlyStop", "Stopper"]

METRICS = {"loss": -1.0, "top1": 1.0}  # the sign of "better": a lower loss, a higher accuracy


@dataclass(frozen=True)
class EarlyStop:
    """The rule: score ``split`` every ``every`` optimizer steps from step ``start`` on by its ``metric`` ("loss":
    mean cross-entropy, lower is better; "top1": accuracy, higher is better); stop after ``patience`` scorings
    without beating the best by more than ``min_delta``; end on the best scoring's weights (``restore_best``)."""

    every: int
    patience: int
    start: int = 0
    split: str = "val"
    metric: str = "loss"
    min_delta: float = 0.0
    restore_best: bool = True

    def __post_init__(self) -> None:
        checks = [("every", self.every, isinstance(self.every, int) and self.every >= 1, "an integer >= 1 (steps)"),
                  ("patience", self.patience, isinstance(self.patience, int) and self.patience >= 1,
                   "an integer >= 1 (scorings)"),
                  ("start", self.start, isinstance(self.start, int) and self.start >= 0, "an integer >= 0 (a step)"),
                  ("metric", self.metric, self.metric in METRICS, f"one of {', '.join(METRICS)}"),
                  ("min_delta", self.min_delta, self.min_delta >= 0, ">= 0")]
        for name, value, ok, expected in checks:
            if not ok:
                raise ValueError(f"EarlyStop.{name} must be {expected}, got {value!r}")

    @property
    def key(self) -> str:
        """The record's key of the scored number (``val_loss``, ``val_top1``)."""
        return f"{self.split}_{self.metric}"


@dataclass
class Stopper:
    """One run's early-stopping state: the scorings so far, the best one and its weights."""

    rule: EarlyStop
    best: float = math.nan
    best_step: int = 0
    stale: int = 0  # scorings in a row that did not beat the best
    stopped: bool = False
    last_step: int = -1
    scorings: list[dict[str, float]] = field(default_factory=list)  # {"step", and each number scored on the split}
    best_state: dict[str, torch.Tensor] | None = field(default=None, repr=False)

    def due(self, step: int) -> bool:
        """Whether the step just finished is one where the rule scores."""
        return step >= self.rule.start and step % self.rule.every == 0

    def observe(self, step: int, metrics: dict[str, Any], model: nn.Module) -> None:
        """Take the scoring at ``step`` (``metrics`` holds the rule's key); keep ``model``'s weights when it is the
        best so far; mark the run stopped when the patience has run out."""
        if self.rule.key not in metrics:
            raise KeyError(f"early stopping scores {self.rule.key!r}, but the evaluation gave "
                           f"{sorted(k for k in metrics if k.startswith(self.rule.split))}")
        value = float(metrics[self.rule.key])
        prefix = f"{self.rule.split}_"
        self.scorings.append({"step": step, **{k: float(v) for k, v in metrics.items()
                                               if k.startswith(prefix) and isinstance(v, (int, float))}})
        self.last_step = step
        sign = METRICS[self.rule.metric]
        if math.isnan(self.best) or sign * (value - self.best) > self.rule.min_delta:
            self.best, self.best_step, self.stale = value, step, 0
            if self.rule.restore_best:
                self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            self.stale += 1
            self.stopped = self.stale >= self.rule.patience

    def restore(self, model: nn.Module) -> None:
        """Load the best scoring's weights into ``model`` (the module that was scored), when the rule keeps them."""
        if self.rule.restore_best and self.best_state is not None:
            model.load_state_dict(self.best_state)

    def summary(self, total_steps: int) -> dict[str, Any]:
        """What the run's final record says of the rule: the best step and value, where training ended (the
        budget when it never stopped), the number of scorings and each one (the curve: the step and every number
        scored on the split, e.g. ``val_loss`` and ``val_top1``, from which another rule's stop can be read up to
        where this run ended, without training again)."""
        return {"rule": asdict(self.rule), "best_step": self.best_step, f"best_{self.rule.key}": self.best,
                "stopped": self.stopped, "last_step": self.last_step, "budget_steps": total_steps,
                "scorings": len(self.scorings), "curve": list(self.scorings)}
