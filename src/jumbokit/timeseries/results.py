"""From finished runs to results: validation-based selection, ensembles, one row per (dataset, model), ranks.

Per dataset and model, "best" is the test top-1 accuracy of the run with the best validation top-1 (ties: lower
validation loss, then sweep order) and "avg" is the mean test top-1 over the runs. Accuracies in percent. Models are ranked per
dataset and the ranks averaged over the datasets where every ranked model has a result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from .baselines import BASELINES
from .models import SERIES_MODELS
from .run import RunResult, scores

__all__ = [
    "SummaryRow",
    "SweepResult",
    "selection_order",
    "selection_ranking",
    "ensemble_proba",
    "ensemble_scores",
    "baseline_results",
    "baseline_columns",
    "summarize",
    "rank_models",
    "rank_values",
]

# written only where set: ensembles, baselines and pretraining add them to a row
_OPTIONAL = ("full_test_top1", "ens_test_top1", "ens_val_top1", "ens_k", "padded", "pretrain_seconds",
             "fusion_weight", "steps", "best_step")


@dataclass
class SummaryRow:
    """One (dataset, model or baseline): the selected run's top-1 accuracy (``test_top1``, ``val_top1``), the
    sweep's mean and spread, timings. Accuracies in percent. Baselines have one run and no training settings
    (None)."""

    dataset: str
    model: str
    runs: int
    test_top1: float
    val_top1: float
    avg_test_top1: float
    std_test_top1: float
    max_test_top1: float
    best_lr: float | None
    best_dropout: float | None
    train_seconds: float
    step_ms: float | None
    params: int | None
    patch_len: int | None
    stride: int | None
    num_patches: int | None
    global_tokens: int | None
    wall_seconds: float
    full_test_top1: float | None = None  # baselines: on the whole official test set
    ens_test_top1: float | None = None  # the top-k ensemble's (a baseline's own accuracy for baselines)
    ens_val_top1: float | None = None
    ens_k: int | None = None
    padded: bool | None = None  # baselines: series zero-padded to equal length
    pretrain_seconds: float | None = None
    fusion_weight: float | None = None  # fused rows: the transformer's share, chosen on validation
    steps: float | None = None  # models: optimizer steps a run took, mean over the runs (early stopping cuts them)
    best_step: int | None = None  # models stopped early: the step whose weights the chosen run kept

    def to_dict(self) -> dict[str, Any]:
        """A plain dict for results.json (the optional fields only where set)."""
        return {k: v for k, v in asdict(self).items() if not (k in _OPTIONAL and v is None)}


@dataclass
class SweepResult:
    """What a sweep produced: its runs, one row per (dataset, model or baseline), mean ranks (``ranks``: among
    the models; ``ranks_all``: models and baselines, None without baselines), and the files it wrote."""

    runs: list[RunResult]
    rows: list[SummaryRow]
    ranks: dict[str, dict[str, float]]
    ranks_all: dict[str, dict[str, float]] | None
    models: list[str]
    baselines: dict[str, dict[str, dict]]  # {dataset: {baseline: result}}
    dataset_seconds: dict[str, float]
    datasets: dict[str, str]  # {dataset: one-line summary}
    lrs: list[float]
    dropouts: list[float]
    ensemble: int = 1
    paths: dict[str, Path] = field(default_factory=dict)


def _record(run: RunResult | Mapping[str, Any]) -> dict[str, Any]:
    return asdict(run) if isinstance(run, RunResult) else dict(run)


def _selection_key(run: Mapping[str, Any]) -> tuple[float, float]:
    """Higher validation accuracy first, then lower validation loss."""
    return -run["val_top1"], run["val_loss"]


def selection_order(runs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Runs ranked for selection: higher validation accuracy first, then lower validation loss, then sweep
    order (the first is the "best" run)."""
    return sorted(runs, key=_selection_key)


def selection_ranking(runs: Sequence[RunResult | Mapping[str, Any]]) -> list[int]:
    """Indices of ``runs`` in :func:`selection_order`: the first is the chosen run, the first k the top-k
    ensemble's members."""
    records = [_record(r) for r in runs]
    return sorted(range(len(records)), key=lambda i: _selection_key(records[i]))


def ensemble_proba(probas: Sequence[np.ndarray]) -> np.ndarray:
    """The mean of several runs' class probabilities, each (n, K); one run gives its own probabilities."""
    if not probas:
        raise ValueError("expected at least one run's probabilities, got none")
    if len(probas) == 1:
        return np.asarray(probas[0])
    return np.mean(np.stack([np.asarray(p, dtype=np.float64) for p in probas]), axis=0)


def ensemble_scores(runs: Sequence[RunResult | Mapping[str, Any]], probas: Sequence[dict[str, np.ndarray]], k: int,
                    y_val: np.ndarray, y_test: np.ndarray) -> dict[str, Any]:
    """Top-1 accuracy (percent) of the mean probabilities of the ``k`` runs ranked best on validation (all runs
    when fewer).

    runs: run records (val_top1, val_loss); probas: their {"val", "test"} probabilities, in the same order.
    Returns {"k": members used, "test_top1", "val_top1", "members": indices into runs}."""
    if k < 1:
        raise ValueError(f"expected an ensemble of at least 1 run, got {k}")
    ranked = selection_ranking(runs)[:k]
    val = ensemble_proba([probas[i]["val"] for i in ranked])
    test = ensemble_proba([probas[i]["test"] for i in ranked])
    return {"k": len(ranked), "val_top1": 100.0 * scores(val, y_val)[0], "test_top1": 100.0 * scores(test, y_test)[0],
            "members": ranked}


def baseline_results(baselines: Mapping[str, Mapping[str, dict]] | None) -> Iterator[tuple[str, str, dict]]:
    """(dataset, baseline, result) from {dataset: {baseline: result}}."""
    for dataset, entry in (baselines or {}).items():
        for name, result in entry.items():
            yield dataset, name, result


def baseline_columns(rows: Sequence[SummaryRow]) -> list[str]:
    """The baselines that have a row, in :data:`BASELINES` order, then the fused models (``model+baseline``) in
    the order of the rows."""
    fused = [r.model for r in rows if r.fusion_weight is not None]
    return [b for b in BASELINES if any(r.model == b for r in rows)] + list(dict.fromkeys(fused))


def _model_row(dataset: str, model: str, items: list[dict], ens: dict | None,
               pretrain_seconds: float | None) -> SummaryRow:
    best = selection_order(items)[0]
    tests = np.array([r["test_top1"] for r in items])
    wall = float(sum(r.get("wall_seconds", 0.0) for r in items)) + (pretrain_seconds or 0.0)
    row = SummaryRow(
        dataset=dataset, model=model, runs=len(items), test_top1=best["test_top1"], val_top1=best["val_top1"],
        avg_test_top1=float(tests.mean()), std_test_top1=float(tests.std()), max_test_top1=float(tests.max()),
        best_lr=best["lr"], best_dropout=best["dropout"], train_seconds=float(sum(r["train_seconds"] for r in items)),
        step_ms=float(np.mean([r["step_ms"] for r in items])), params=best["params"], patch_len=best["patch_len"],
        stride=best["stride"], num_patches=best["num_patches"], global_tokens=best["global_tokens"],
        wall_seconds=wall, pretrain_seconds=pretrain_seconds)
    if all("steps" in r for r in items):
        row.steps = float(np.mean([r["steps"] for r in items]))
    stopped = (best.get("extra") or {}).get("early_stop")
    if stopped:
        row.best_step = int(stopped["best_step"])
    if ens is not None:
        row.ens_test_top1, row.ens_val_top1, row.ens_k = ens["test_top1"], ens["val_top1"], ens["k"]
    return row


def _baseline_row(dataset: str, name: str, result: dict) -> SummaryRow:
    acc = result["test_top1"]
    return SummaryRow(
        dataset=dataset, model=name, runs=1, test_top1=acc, val_top1=result["val_top1"], avg_test_top1=acc,
        std_test_top1=0.0, max_test_top1=acc, best_lr=None, best_dropout=None, train_seconds=result["seconds"],
        step_ms=None, params=None, patch_len=None, stride=None, num_patches=None, global_tokens=None,
        wall_seconds=result["seconds"], full_test_top1=result["full_test_top1"], ens_test_top1=acc,
        padded=bool(result.get("padded", False)))


def _fused_row(dataset: str, name: str, result: dict) -> SummaryRow:
    acc = result["test_top1"]
    return SummaryRow(
        dataset=dataset, model=name, runs=1, test_top1=acc, val_top1=result["val_top1"], avg_test_top1=acc,
        std_test_top1=0.0, max_test_top1=acc, best_lr=None, best_dropout=None, train_seconds=result["seconds"],
        step_ms=None, params=None, patch_len=None, stride=None, num_patches=None, global_tokens=None,
        wall_seconds=result["seconds"], ens_test_top1=acc, fusion_weight=result["weight"])


def summarize(runs: Iterable[RunResult | Mapping[str, Any]], baselines: Mapping[str, Mapping[str, dict]] | None = None,
              ensembles: Mapping[tuple[str, str], dict] | None = None,
              pretrain_seconds: Mapping[tuple[str, str], float] | None = None,
              fusions: Mapping[str, Mapping[str, dict]] | None = None) -> list[SummaryRow]:
    """One row per (dataset, model): best (validation-selected) and mean test accuracy, timings.

    Baselines (``{dataset: {name: result}}``) add a row per baseline (one run: best = avg = ensemble); so do
    fused models (``{dataset: {"model+baseline": late_fusion's result with "seconds"}}``, the model's and the
    baseline's time together).
    Ensembles (``{(dataset, model): {"k", "test_top1", "val_top1"}}``) set the model row's ``ens_*`` fields;
    ``pretrain_seconds`` (``{(dataset, model): s}``) is added to the row's wall time."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        record = _record(run)
        groups.setdefault((record["dataset"], record["model"]), []).append(record)
    rows = [_model_row(d, m, items, (ensembles or {}).get((d, m)), (pretrain_seconds or {}).get((d, m)))
            for (d, m), items in groups.items()]
    rows += [_baseline_row(d, name, result) for d, name, result in baseline_results(baselines)
             if "test_top1" in result]
    rows += [_fused_row(d, name, result) for d, name, result in baseline_results(fusions)]
    order = {m: i for i, m in enumerate(SERIES_MODELS + BASELINES)}
    rows.sort(key=lambda r: (r.dataset, order.get(r.model, 99), r.model))
    return rows


def rank_values(values: Sequence[float]) -> list[float]:
    """Rank 1 = highest value; ties share the mean rank (as scipy's ``rankdata(method="average")``), as plain
    floats; a NaN among them makes every rank NaN (as scipy's). In numpy: a training process that ranks its summary
    need not import scipy.stats (a CPU second)."""
    if np.isnan(np.asarray(values, dtype=float)).any():
        return [float("nan")] * len(values)
    _, group, counts = np.unique(-np.asarray(values, dtype=float), return_inverse=True, return_counts=True)
    last = np.cumsum(counts)  # a tie group's highest position (1-based); its mean rank is centred below it
    return [float(r) for r in last[group] - (counts[group] - 1) / 2]


RANK_FIELDS = {"best": "test_top1", "avg": "avg_test_top1", "ens": "ens_test_top1"}


def rank_models(rows: Sequence[SummaryRow], models: Sequence[str],
                keys: Sequence[str] = ("best", "avg")) -> dict[str, dict[str, float]]:
    """Mean rank over datasets of each model, by the best run's and by the mean test top-1 (or the ensemble's:
    ``keys`` among :data:`RANK_FIELDS`), over the datasets where all ``models`` have results. Returns
    {model: {"best": r, "avg": r, "datasets": n}}."""
    table: dict[str, dict[str, SummaryRow]] = {}
    for row in rows:
        table.setdefault(row.dataset, {})[row.model] = row
    out: dict[str, dict[str, float]] = {m: {**{k: 0.0 for k in keys}, "datasets": 0} for m in models}
    count = 0
    for per_model in table.values():
        if not all(m in per_model and all(getattr(per_model[m], RANK_FIELDS[k]) is not None for k in keys)
                   for m in models):
            continue
        count += 1
        for key in keys:
            for m, r in zip(models, rank_values([getattr(per_model[m], RANK_FIELDS[key]) for m in models])):
                out[m][key] += r
    for m in models:
        out[m]["datasets"] = count
        for key in keys:
            out[m][key] = out[m][key] / count if count else float("nan")
    return out

