"""Rank statistics for comparing models over datasets (Demsar 2006), on scipy; aeon draws the diagram.

Ranks come from ``jumbokit.timeseries.results.rank_values`` (scipy's ``rankdata``: rank 1 = the highest accuracy,
ties share the mean rank). Friedman's test asks whether the mean ranks of three or more models differ at all; the
Nemenyi critical difference is the gap two mean ranks must exceed to differ at level ``alpha``; a two-sided sign
test compares one pair over the draws where they do not tie.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = ["critical_difference_figure", "draws_needed", "friedman", "nemenyi_cd", "sign_test"]


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
