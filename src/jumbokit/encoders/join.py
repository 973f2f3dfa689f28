"""Progressive join: the lambda schedules (0 = independent branches, 1 = fully joined) and the join of
per-branch activations, ``(x_b + lambda * sum_{c != b} x_c) / r`` with ``r = sqrt(1 + (n - 1) lambda^2)``."""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

__all__ = ["JOIN_SCHEDULES", "join_schedule_value", "join_lambda_at", "resolve_schedule", "join_branches",
           "pairwise_sq_cosine"]

_EXP_RATE = 5.0


def _linear(t: float) -> float:
    return t


def _cosine(t: float) -> float:
    return 0.5 * (1.0 - math.cos(math.pi * t))


def _exponential(t: float) -> float:
    # 1 - exp(-5 t), normalised so that it reaches exactly 1 at the end of the warm-up
    # (the raw form stops at 0.9933 and would jump to 1 when the post-join phase starts).
    return (1.0 - math.exp(-_EXP_RATE * t)) / (1.0 - math.exp(-_EXP_RATE))


def _square_root(t: float) -> float:
    return math.sqrt(t)


JOIN_SCHEDULES: dict[str, Callable[[float], float]] = {
    "linear": _linear,
    "cosine": _cosine,
    "exp": _exponential,
    "sqrt": _square_root,
}
_SCHEDULE_ALIASES = {"exponential": "exp", "square_root": "sqrt", "square-root": "sqrt", "cos": "cosine"}


def resolve_schedule(schedule: str | Callable[[float], float]) -> Callable[[float], float]:
    if callable(schedule):
        return schedule
    if not isinstance(schedule, str):
        raise TypeError(f"join_schedule must be a name or a callable t -> lambda, got {type(schedule).__name__}")
    key = _SCHEDULE_ALIASES.get(schedule.lower(), schedule.lower())
    if key not in JOIN_SCHEDULES:
        raise ValueError(
            f"unknown join_schedule {schedule!r}; expected one of {sorted(JOIN_SCHEDULES)} "
            f"(aliases: {sorted(_SCHEDULE_ALIASES)}) or a callable t -> lambda"
        )
    return JOIN_SCHEDULES[key]


def join_schedule_value(schedule: str | Callable[[float], float], progress: float) -> float:
    """lambda for a warm-up progress t in [0, 1] (clipped); 0 at t = 0 and 1 at t = 1 for the named schedules."""
    fn = resolve_schedule(schedule)
    t = min(max(float(progress), 0.0), 1.0)
    if t >= 1.0:
        return 1.0
    return float(min(max(fn(t), 0.0), 1.0))


def join_lambda_at(
    step: int,
    warmup_steps: int,
    schedule: str | Callable[[float], float] = "linear",
    start_step: int = 0,
) -> float:
    """lambda at a training step: 0 before ``start_step``, the schedule over ``warmup_steps``, then 1."""
    if warmup_steps < 0 or start_step < 0:
        raise ValueError(f"join_warmup_steps and join_start_step must be >= 0, got {warmup_steps} and {start_step}")
    if step < start_step:
        return 0.0
    if warmup_steps == 0:
        return 1.0
    return join_schedule_value(schedule, (step - start_step) / warmup_steps)



def join_branches(x: torch.Tensor, lam: torch.Tensor, rescale: bool, branches: int) -> torch.Tensor:
    """x (B, n, ...) -> (x_b + lam * sum_{c != b} x_c) / r, r = sqrt(1 + (n-1) lam^2) if rescale else 1."""
    total = x.sum(dim=1, keepdim=True)
    out = (1.0 - lam) * x + lam * total
    if rescale:
        out = out / torch.sqrt(1.0 + (branches - 1) * lam * lam)
    return out


def pairwise_sq_cosine(f: torch.Tensor) -> torch.Tensor:
    """Mean over tokens and branch pairs i < j of cos(f_i, f_j)^2. f (B, n, T, D) -> scalar."""
    n = f.shape[1]
    fn = F.normalize(f.float(), dim=-1)
    gram = torch.einsum("bitd,bjtd->btij", fn, fn)
    iu = torch.triu_indices(n, n, offset=1, device=f.device)
    return gram[..., iu[0], iu[1]].pow(2).mean()

