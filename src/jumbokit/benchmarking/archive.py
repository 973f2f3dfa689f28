"""Comparisons of models over many sets, as the archive benchmarks report them.

``rows`` is ``{set: {model: summary row}}`` with each row's ``test_top1`` (and ``wall_seconds`` where recorded), the
shape ``benchmarks/ucr_archive.py`` reads from tstrain's sweeps and ``benchmarks/ucr_seeds.py`` averages over
seeds. Accuracy, ranks (rank 1 = best, ties share), wins / ties / losses against MiniRocket with the sign test,
Friedman's test and the Nemenyi critical difference (:mod:`.stats`), paired differences with their intervals, and
the targets a result is held to (a target on a difference is met beyond the noise only when its interval clears 0).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from ..timeseries.baselines import BASELINES
from ..timeseries.fusion import SEPARATOR
from ..timeseries.results import rank_values
from ..training.rundir import atomic_save_figure, markdown_table
from . import stats

__all__ = ["MEMORY_LIMIT_MIB", "REFERENCE", "compare", "group_figures", "mean_target", "memory_line", "pair_line",
           "pair_stats", "summary_table", "target_lines"]

REFERENCE = "minirocket"  # the baseline every model's wins / ties / losses are counted against


def compare(rows: dict, models: list[str]) -> dict:
    """Mean accuracy, mean rank, wins / ties / losses against MiniRocket, Friedman and Nemenyi, over the sets
    where every model has a result."""
    sets = [s for s in rows if all(m in rows[s] for m in models)]
    acc = np.array([[rows[s][m]["test_top1"] for m in models] for s in sets])
    ranks = np.array([rank_values(a) for a in acc])
    friedman = stats.friedman(ranks) if len(sets) > 1 else None
    result = {"sets": sets, "models": models, "accuracy": acc.tolist(), "ranks": ranks.tolist(),
              "mean_accuracy": dict(zip(models, acc.mean(axis=0).tolist())),
              "mean_rank": dict(zip(models, ranks.mean(axis=0).tolist())),
              "friedman": None if friedman is None else {"chi2": friedman[0], "p": friedman[1]},
              "nemenyi_cd": stats.nemenyi_cd(len(models), len(sets)), "against_minirocket": {}}
    if REFERENCE in models:
        ref = models.index(REFERENCE)
        for j, m in enumerate(models):
            if j != ref:
                wins, losses, p = stats.sign_test(ranks[:, j], ranks[:, ref])
                result["against_minirocket"][m] = {"wins": wins, "ties": len(sets) - wins - losses,
                                                   "losses": losses, "sign_test_p": p}
    return result


def group_figures(groups: list[dict], json_path: Path, what: str = "") -> None:
    """The critical-difference diagram of each ``--group`` table (:func:`compare`) of three or more models over two
    or more sets, saved beside the record as ``<stem>_group<i>_cd.png``; its file name goes into the group
    (``"figure"``). ``what``: words after the set count in the title (e.g. ", mean over seeds")."""
    for i, group in enumerate(groups, 1):
        if len(group["sets"]) > 1 and len(group["models"]) > 2:
            fig = stats.critical_difference_figure(np.array(group["ranks"]), group["models"],
                                                   f"UCR 2018, {len(group['sets'])} sets{what}: mean rank (bar: no "
                                                   "difference at 5%)")
            group["figure"] = atomic_save_figure(json_path.with_name(f"{json_path.stem}_group{i}_cd.png"), fig).name


def summary_table(result: dict) -> str:
    """Mean accuracy, mean rank and wins / ties / losses against MiniRocket of :func:`compare`'s models, with its
    Friedman test and critical difference."""
    summary = [{"model": m, "mean test top-1 (%)": result["mean_accuracy"][m], "mean rank": result["mean_rank"][m],
                **({"vs MiniRocket (W/T/L, sign p)": "{wins}/{ties}/{losses}, p {sign_test_p:.3f}".format(
                    **result["against_minirocket"][m])} if m in result["against_minirocket"] else {})}
               for m in result["models"]]
    fr = result["friedman"]
    return "\n".join([markdown_table(summary, formats={"mean test top-1 (%)": ".2f", "mean rank": ".2f"}),
                      "Friedman: " + ("needs three models and two sets" if fr is None else
                                      f"chi2 {fr['chi2']:.2f}, p {fr['p']:.4f}")
                      + f"; Nemenyi critical difference at 5%: {result['nemenyi_cd']:.2f} ranks."])


def pair_stats(rows: dict, a: str, b: str, costs: dict | None = None) -> dict:
    """A - B over the sets both have: mean accuracy difference with the paired t-test (``stats.paired_test``, two
    models equal as the null), wins / ties / losses with the sign test, and each one's recorded seconds per set."""
    sets = [s for s in rows if a in rows[s] and b in rows[s]]
    acc_a = np.array([rows[s][a]["test_top1"] for s in sets])
    acc_b = np.array([rows[s][b]["test_top1"] for s in sets])
    test = stats.paired_test(acc_a, acc_b)
    wins, losses, p = stats.sign_test(acc_b, acc_a)  # ranks: lower is better, so a's accuracy plays b's rank
    seconds = {m: [rows[s][m].get("wall_seconds") or 0.0 for s in sets] for m in (a, b)}
    return {"a": a, "b": b, "sets": len(sets), "mean_a": float(acc_a.mean()) if sets else None,
            "mean_b": float(acc_b.mean()) if sets else None, "mean_difference": test.mean,
            "ci95": [test.low, test.high], "t_test_p": test.p, "wins": wins, "ties": len(sets) - wins - losses,
            "losses": losses, "sign_test_p": p,
            "seconds": {m: {"total": float(sum(v)), "median": float(np.median(v)) if v else None,
                            "max": float(max(v)) if v else None} for m, v in seconds.items()}}


def pair_line(pair: dict) -> str:
    """One sentence of a paired comparison."""
    a, b = pair["a"], pair["b"]
    low, high = pair["ci95"]
    beyond = pair["t_test_p"] < 0.05 or low > 0 or high < 0
    verdict = "beyond the noise" if beyond else "inside the noise"
    return (f"{a} - {b} over {pair['sets']} sets: {pair['mean_difference']:+.2f} points (95% interval {low:+.2f} to "
            f"{high:+.2f}, paired t one-sided p of {a} > {b} {pair['t_test_p']:.3f}: {verdict}); "
            f"W/T/L {pair['wins']}/{pair['ties']}/{pair['losses']} (sign p {pair['sign_test_p']:.3f}); "
            f"seconds {pair['seconds'][a]['total']:.0f} vs "
            f"{pair['seconds'][b]['total']:.0f} in all, median {pair['seconds'][a]['median']:.1f} vs "
            f"{pair['seconds'][b]['median']:.1f}, max {pair['seconds'][a]['max']:.0f} vs "
            f"{pair['seconds'][b]['max']:.0f}.")


def mean_target(rows: dict, model: str, reference: str) -> str:
    """One target line: ``model``'s mean accuracy at least ``reference``'s, over the sets both have, with the paired
    difference's interval (a target is met beyond the noise only when the interval clears 0)."""
    pair = pair_stats(rows, model, reference)
    low, high = pair["ci95"]
    if low > 0:
        verdict = "met beyond the noise"
    elif high < 0:
        verdict = "missed beyond the noise"
    else:  # the interval holds 0: level within the noise, whichever side the mean fell
        verdict = f"not met: {'ahead' if pair['mean_difference'] >= 0 else 'behind'} inside the noise"
    return (f"Target, {model} mean >= {reference} mean: {verdict} ({pair['mean_a']:.2f} vs {pair['mean_b']:.2f} over "
            f"{pair['sets']} sets; difference {pair['mean_difference']:+.2f}, 95% interval {low:+.2f} to {high:+.2f}).")


def target_lines(rows: dict, headline: dict, everything: dict) -> list[str]:
    """The issue's targets: the headline model's mean at least MultiRocket's with the best mean rank of the headline
    table, and every run model without ROCKET features (no baseline, no fused row) at least MiniRocket's mean."""
    lines = []
    first = headline["models"][0]
    if "multirocket" in headline["models"]:
        lines.append(mean_target(rows, first, "multirocket"))
    ranks = headline["mean_rank"]
    best = min(ranks, key=ranks.get)
    runner_up = min((r for m, r in ranks.items() if m != first), default=None)
    if runner_up is not None:
        gap = runner_up - ranks[first]
        beyond = abs(gap) > headline["nemenyi_cd"]
        if best == first and gap > 0:  # best only beyond the critical difference counts as met
            verdict = "met" if beyond else "not met: best, inside the critical difference"
        else:
            verdict = "missed" if beyond else "not met: behind, inside the critical difference"
        lines.append(f"Target, {first} with the best mean rank of the {len(ranks)}: {verdict} ({first} "
                     f"{ranks[first]:.2f}, next best {runner_up:.2f}; a gap {'beyond' if beyond else 'inside'} the "
                     f"critical difference {headline['nemenyi_cd']:.2f}).")
    for m in everything["models"]:
        if m not in BASELINES and SEPARATOR not in m and "minirocket" in everything["models"]:
            lines.append(mean_target(rows, m, "minirocket"))
    return lines


MEMORY_LIMIT_MIB = 8 * 1024  # the bound on a set's peak memory


def memory_line(costs: dict) -> str:
    """Peak resident memory over the sets (each set's tstrain process), against :data:`MEMORY_LIMIT_MIB`."""
    peaks = {s: c["peak_rss_mib"] for s, c in costs.items() if c.get("peak_rss_mib")}
    if not peaks:
        return "Peak memory per set: not recorded (an earlier version ran every set in one process)."
    top = max(peaks, key=peaks.get)
    over = sorted(s for s, v in peaks.items() if v > MEMORY_LIMIT_MIB)
    return (f"Peak memory per set ({len(peaks)} of {len(costs)} sets recorded): median "
            f"{statistics.median(peaks.values()):,.0f} MiB, largest {peaks[top]:,.0f} MiB ({top}); "
            + (f"over {MEMORY_LIMIT_MIB:,} MiB: {', '.join(over)}." if over else
               f"every set within {MEMORY_LIMIT_MIB:,} MiB."))
