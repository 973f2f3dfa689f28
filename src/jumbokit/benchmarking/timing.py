"""Timing: warm-up calls, then timed rounds interleaved across the things compared.

Rounds interleave the calls (A B C, A B C, ...; or A B C, C B A, ... with ``alternate``) so drift of a shared
machine's speed hits every call alike; each call is warmed up first. A round times ``iters`` calls in a row and
records seconds per call. Which statistic a benchmark reports (the median round, the fastest) is its own choice:
:class:`Timing` gives both, with the spread.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Hashable, Mapping

__all__ = ["Timing", "calls_per_round", "time_interleaved"]


@dataclass(frozen=True)
class Timing:
    """Seconds per call, one value per round."""

    rounds: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.rounds)

    @property
    def fastest(self) -> float:
        return min(self.rounds)

    @property
    def spread(self) -> float:
        """(slowest - fastest) / median: how noisy the machine was."""
        return (max(self.rounds) - min(self.rounds)) / self.median

    def summary(self, digits: int = 6) -> dict[str, float | int]:
        return {"median_s": round(self.median, digits), "fastest_s": round(self.fastest, digits),
                "spread": round(self.spread, 4), "rounds": len(self.rounds)}


def time_interleaved(calls: Mapping[Hashable, Callable[[], object]], repeats: int, iters: int = 1, warmup: int = 1,
                     alternate: bool = False, settle: float = 0.0,
                     sync: Callable[[], None] | None = None) -> dict[Hashable, Timing]:
    """Time each of ``calls`` in ``repeats`` interleaved rounds of ``iters`` calls, after ``warmup`` calls each.

    Parameters
    ----------
    calls : mapping
        Name -> a call with no arguments (close over the model and its input).
    repeats : int
        Timed rounds; each round times every call once, in order (reversed every other round with
        ``alternate``: the first call of a round can run measurably faster).
    iters : int
        Calls per timed block; the block's time is divided by ``iters``.
    warmup : int
        Untimed calls of each, before the first round.
    settle : float
        Seconds of pause before each timed block (worker threads of the previous call stop spinning).
    sync : callable, optional
        Called before starting and before stopping the clock (``torch.cuda.synchronize`` on a GPU).

    Returns
    -------
    dict
        Name -> :class:`Timing` (seconds per call, one value per round).
    """
    if repeats < 1 or iters < 1 or warmup < 0:
        raise ValueError(f"expected repeats >= 1, iters >= 1, warmup >= 0, got {repeats}, {iters}, {warmup}")
    for call in calls.values():
        for _ in range(warmup):
            call()
    seconds: dict[Hashable, list[float]] = {key: [] for key in calls}
    order = list(calls.items())
    for round_idx in range(repeats):
        for key, call in (order[::-1] if alternate and round_idx % 2 else order):
            if settle:
                time.sleep(settle)
            if sync is not None:
                sync()
            start = time.perf_counter()
            for _ in range(iters):
                call()
            if sync is not None:
                sync()
            seconds[key].append((time.perf_counter() - start) / iters)
    return {key: Timing(tuple(values)) for key, values in seconds.items()}


def calls_per_round(calls: Mapping[Hashable, Callable[[], object]], seconds: float, minimum: int = 1,
                    sync: Callable[[], None] | None = None, maximum: int = 10_000) -> int:
    """How many calls a timed round needs for the fastest of ``calls`` to take at least ``seconds``.

    Times one call of each (warm them up first: a first call compiles, allocates, tunes); a round of a few
    milliseconds on a GPU is mostly launch jitter and clock noise, so rounds are lengthened to a fixed amount of
    work. Returns at least ``minimum`` (and at most ``maximum``); ``seconds <= 0`` returns ``minimum``."""
    if seconds <= 0 or not calls:
        return minimum
    fastest = float("inf")
    for call in calls.values():
        if sync is not None:
            sync()
        start = time.perf_counter()
        call()
        if sync is not None:
            sync()
        fastest = min(fastest, time.perf_counter() - start)
    return min(maximum, max(minimum, math.ceil(seconds / max(fastest, 1e-9))))
