"""Rank statistics for comparing models over datasets (Demsar 2006), on scipy; aeon draws the diagram.

Ranks come from ``jumbokit.timeseries.results.rank_values`` (rank 1 = the highest accuracy,
ties share the mean rank). Friedman's test asks whether the mean ranks of three or more models differ at all; the
Nemenyi critical difference is the gap two mean ranks must exceed to differ at level ``alpha``; a two-sided sign
test compares one pair over the draws where they do not tie.

A target on a difference (Jumbo - registers >= +1.0 point; a hybrid within 1 point of MiniRocket, i.e. its
difference >= -1.0) is *met* only beyond the noise: :func:`paired_test` runs a one-sided paired t-test of the
differences over seeds (or sets) against the target and gives their 95% interval; the target is met when p < 0.05 or
the whole interval lies beyond it. Otherwise the difference is *inside the noise*, reported with its p-value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

__all__ = ["PairedTest", "critical_difference_figure", "draws_needed", "format_p", "friedman", "nemenyi_cd",
           "paired_test", "sign_test"]


def friedman(ranks: np.ndarray) -> tuple[float, float] | None:
    """Friedman's chi-squared and p-value over a (datasets, models) rank matrix; None for fewer than three
    models (then the sign test of the one pair is the test)."""
    if ranks.shape[1] < 3:
        return None
    result = stats.friedmanchisquare(*ranks.T)
    return float(result.statistic), float(result.pvalue)


def nemenyi_cd(models: int, datasets: int, alpha: float = 0.05) -> float:
    """The Nemenyi critical difference: q_alpha (the studentized range over sqrt 2) * sqrt(k (k + 1) / 6 N)."""
    q = stats.studentized_range.ppf(1 - alpha, models, np.inf) / np.sqrt(2.0)
    return float(q * np.sqrt(models * (models + 1) / (6.0 * datasets)))


def sign_test(a_ranks: np.ndarray, b_ranks: np.ndarray) -> tuple[int, int, float]:
    """(draws a ranks ahead of b, draws b ranks ahead, the two-sided sign test's p-value); ties left out."""
    ahead, behind = int((a_ranks < b_ranks).sum()), int((a_ranks > b_ranks).sum())
    p = stats.binomtest(ahead, ahead + behind).pvalue if ahead + behind else 1.0
    return ahead, behind, float(p)


def draws_needed(ahead: int, behind: int, draws: int, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Draws a two-sided sign test at ``alpha`` would need to find the observed share of leads with ``power``
    (normal approximation, ties as often as now); None when neither side leads more often."""
    if ahead == behind:
        return None
    share = max(ahead, behind) / (ahead + behind)
    z_alpha, z_power = stats.norm.ppf(1 - alpha / 2), stats.norm.ppf(power)
    untied = ((z_alpha * 0.5 + z_power * np.sqrt(share * (1 - share))) / (share - 0.5)) ** 2
    return int(np.ceil(untied * draws / (ahead + behind)))


def critical_difference_figure(ranks: np.ndarray, models: list[str], title: str, alpha: float = 0.05):
    """aeon's critical-difference diagram (Nemenyi at ``alpha``: models joined by a bar do not differ) of a
    (datasets, models) rank matrix; returns the matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    from aeon.visualisation import plot_critical_difference

    fig, ax = plot_critical_difference(ranks, models, lower_better=True, test="nemenyi", alpha=alpha)
    ax.set_title(title, fontsize=9)
    return fig


def format_p(p: float) -> str:
    """``p 0.17``, ``p 0.031``, ``p < 0.001``; ``p n/a`` for nan."""
    if p is None or not np.isfinite(p):
        return "p n/a"
    if p < 0.001:
        return "p < 0.001"
    return f"p {p:.3f}" if p < 0.1 else f"p {p:.2f}"


@dataclass(frozen=True)
class PairedTest:
    """A paired difference against a target: ``n`` pairs, their ``mean`` difference and standard deviation ``sd``
    (ddof 1), the 95% interval (``low``, ``high``) of the mean, the one-sided ``p`` of "the difference is not
    beyond the target" and whether the target is ``met`` (p < alpha or the interval beyond it)."""

    n: int
    mean: float
    sd: float
    low: float
    high: float
    target: float
    greater: bool
    p: float
    met: bool
    alpha: float = 0.05

    @property
    def verdict(self) -> str:
        """``met (p 0.004)``, ``inside the noise (p 0.31)``, ``missed (p 0.98)`` when the mean itself is short of
        the target, or ``untestable (...)`` for fewer than two pairs or pairs that do not vary."""
        if self.n < 2 or not np.isfinite(self.p):
            why = f"{self.n} pair" if self.n < 2 else f"no spread over {self.n} pairs"
            return f"untestable ({why})"
        if self.met:
            return f"met ({format_p(self.p)})"
        beyond = self.mean > self.target if self.greater else self.mean < self.target
        return f"{'inside the noise' if beyond else 'missed'} ({format_p(self.p)})"

    def summary(self, digits: int = 2) -> str:
        """``+1.42 ± 1.17 (95% CI -1.49 to +4.33, n 3)``."""
        return (f"{self.mean:+.{digits}f} ± {self.sd:.{digits}f} (95% CI {self.low:+.{digits}f} to "
                f"{self.high:+.{digits}f}, n {self.n})")

    def as_dict(self) -> dict[str, float | int | bool | str]:
        return {"n": self.n, "mean": self.mean, "sd": self.sd, "ci95": [self.low, self.high], "target": self.target,
                "greater": self.greater, "p": self.p, "met": self.met, "verdict": self.verdict}


def paired_test(a: Sequence[float], b: Sequence[float] | None = None, target: float = 0.0, greater: bool = True,
                alpha: float = 0.05) -> PairedTest:
    """Is ``a - b`` beyond ``target`` over its pairs (seeds or sets), beyond the noise?

    Parameters
    ----------
    a, b : sequences of float
        Paired values (the same seed or set at the same position); without ``b``, ``a`` holds the differences.
    target : float
        What the difference must exceed (``greater``), or stay under (``greater=False``).
    alpha : float
        The test's level; the interval is the two-sided (1 - 0.05) one, 95%, whatever ``alpha``.

    Returns
    -------
    PairedTest
        One-sided paired t-test of H0 "mean difference <= target" (``>=`` with ``greater=False``); met when its
        p < ``alpha`` or the 95% interval lies wholly beyond the target. Fewer than two pairs, or differences that
        are all equal, cannot be tested: p is nan and the target not met.
    """
    if np.ndim(a) != 1 or (b is not None and np.shape(a) != np.shape(b)):
        raise ValueError(f"expected two paired 1-D sequences of one length, got shapes {np.shape(a)} and "
                         f"{np.shape(b) if b is not None else None}")
    diffs = np.asarray(a, dtype=float) - (0.0 if b is None else np.asarray(b, dtype=float))
    n = int(diffs.size)
    mean = float(diffs.mean()) if n else math.nan
    sd = float(diffs.std(ddof=1)) if n > 1 else math.nan
    if n < 2 or sd == 0.0:
        return PairedTest(n, mean, 0.0 if n > 1 else math.nan, mean, mean, float(target), greater, math.nan, False,
                          alpha)
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(0.975, n - 1)) * se
    result = stats.ttest_1samp(diffs, float(target), alternative="greater" if greater else "less")
    p = float(result.pvalue)
    low, high = mean - half, mean + half
    met = p < alpha or (low > target if greater else high < target)
    return PairedTest(n, mean, sd, low, high, float(target), greater, p, bool(met), alpha)
