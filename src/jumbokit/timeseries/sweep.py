"""Run (or resume) a sweep: every dataset x model x (lr, dropout, seed), the baselines, then the reports.

:func:`plan_sweep` checks the request and loads every dataset before anything is written;
:func:`execute_sweep` runs what the sweep directory (:mod:`jumbokit.timeseries.store`) does not hold yet,
scores ensembles, runs the baselines and writes the reports (``results.csv``, ``results.json``, ``report.md``,
``accuracy.png``). Only the main process writes files.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from jumbokit.training.rundir import atomic_write_text

from . import store
from .baselines import parse_baselines, rocket_baseline
from .data import ClassificationData, load_dataset
from .models import PATCHTST_MODELS
from .protocol import SWEEP_DROPOUTS, SWEEP_LRS, SweepConfig
from .report import write_reports
from .results import SweepResult, baseline_columns, ensemble_scores, rank_models, summarize
from .run import RunResult, check_patches, pretrain_run, quiet_training, train_config, train_run_with_proba

__all__ = ["SweepPlan", "plan_sweep", "execute_sweep", "run_sweep"]

logger = logging.getLogger(__name__)


@dataclass
class _Sweep:
    """The state of one sweep while it runs: its settings, where it writes, what it has gathered."""

    cfg: SweepConfig
    out_dir: Path
    grid: list[tuple[float, float]]
    ensemble: int
    accelerator: Any
    bar: Any
    cpu: bool = False
    data_dir: str | Path | None = None
    runs: list[RunResult] = field(default_factory=list)
    ensembles: dict[tuple[str, str], dict] = field(default_factory=dict)
    baselines: dict[str, dict] = field(default_factory=dict)
    dataset_seconds: dict[str, float] = field(default_factory=dict)
    pretrain_seconds: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    def add_seconds(self, dataset: str, seconds: float) -> None:
        self.dataset_seconds[dataset] = self.dataset_seconds.get(dataset, 0.0) + seconds


# ---------------------------------------------------------------- the sweep
def _pretrained_state(sweep: _Sweep, data: ClassificationData, model: str,
                      seed: int) -> tuple[dict[str, torch.Tensor], dict]:
    """The pretrained weights of (dataset, model, seed): read from the sweep directory, or pretrained on the
    training split and written there."""
    folder = sweep.out_dir / "runs" / data.name / model
    stored = store.read_pretrained(folder, seed)
    if stored is not None:
        return stored
    state, record = pretrain_run(data, model, sweep.cfg, seed=seed, accelerator=sweep.accelerator, cpu=sweep.cpu)
    if sweep.is_main:
        store.write_pretrained(folder, seed, state, record)
    return state, record


def _finished_run(sweep: _Sweep, path: Path) -> tuple[RunResult | None, dict[str, np.ndarray] | None]:
    """A run already on disk (and its probabilities when an ensemble needs them), or (None, None)."""
    done = store.load_run(path) if path.exists() else None
    if done is None or sweep.ensemble == 1:
        return done, None
    proba = store.load_proba(store.proba_path(path))
    if proba is None:
        logger.info("%s has no stored probabilities (needed by --ensemble): running it again", path)
        return None, None
    return done, proba


def _run_model(sweep: _Sweep, data: ClassificationData, model: str) -> None:
    """Every run of one model on one dataset (resumed ones read back), then its ensemble."""
    model_runs: list[RunResult] = []
    model_probas: list[dict[str, np.ndarray] | None] = []
    pretrain_records: dict[int, dict] = {}
    seeds = sweep.cfg.run_seeds()
    for offset, seed in enumerate(seeds):
        pretrained = None
        for lr, dropout in sweep.grid:
            path = sweep.out_dir / "runs" / data.name / model / f"{store.run_id(lr, dropout, offset)}.json"
            done, proba = _finished_run(sweep, path)
            if done is None:
                if sweep.cfg.pretrain_epochs and pretrained is None:
                    sweep.bar.set_postfix_str(f"{data.name} {model} pretraining seed {seed}")
                    pretrained, pretrain_records[seed] = _pretrained_state(sweep, data, model, seed)
                sweep.bar.set_postfix_str(f"{data.name} {model} lr={lr:g} do={dropout:g}"
                                          + (f" seed={seed}" if len(seeds) > 1 else ""))
                done, proba = train_run_with_proba(data, model, lr, dropout, sweep.cfg, accelerator=sweep.accelerator,
                                                   cpu=sweep.cpu, seed=seed, pretrained=pretrained)
                if sweep.is_main:
                    store.write_run(path, done, proba)
                sweep.accelerator.free_memory()
            sweep.runs.append(done)
            model_runs.append(done)
            model_probas.append(proba)
            sweep.add_seconds(data.name, done.wall_seconds)
            sweep.bar.update(1)
    if sweep.cfg.pretrain_epochs:
        _count_pretraining(sweep, data.name, model, pretrain_records)
    if sweep.ensemble > 1:
        sweep.ensembles[(data.name, model)] = ensemble_scores(model_runs, model_probas, sweep.ensemble,
                                                              data.val.y, data.test.y)


def _count_pretraining(sweep: _Sweep, dataset: str, model: str, records: dict[int, dict]) -> None:
    """Pretraining costs once per seed, counted also when its runs were resumed."""
    for seed in sweep.cfg.run_seeds():
        record_path = store.pretrain_record_path(sweep.out_dir / "runs" / dataset / model, seed)
        if seed not in records and record_path.exists():
            records[seed] = json.loads(record_path.read_text())
    spent = float(sum(r.get("seconds", 0.0) for r in records.values()))
    sweep.pretrain_seconds[(dataset, model)] = spent
    sweep.add_seconds(dataset, spent)


def _run_baselines(sweep: _Sweep, data: ClassificationData, names: Sequence[str]) -> None:
    """aeon's baselines on one dataset (main process only; a finished one is read back)."""
    if not sweep.is_main:
        return
    for base in names:
        path = sweep.out_dir / "runs" / data.name / f"{base}.json"
        result = json.loads(path.read_text()) if path.exists() else {}
        if not ("test_top1" in result or "skipped" in result):  # not run yet, or a record of other fields
            sweep.bar.set_postfix_str(f"{data.name} {base}")
            result = rocket_baseline(base, data, seed=sweep.cfg.seed, data_dir=sweep.data_dir)
            atomic_write_text(path, json.dumps(result, indent=1) + "\n")
        sweep.baselines.setdefault(data.name, {})[base] = result
        sweep.add_seconds(data.name, float(result.get("seconds", 0.0)))


def _load_all(datasets: Sequence[str], cfg: SweepConfig, data_dir: str | Path | None,
              skip_short: bool) -> dict[str, ClassificationData]:
    """Every dataset loaded and checked (too short for ``cfg.patches``: skipped with a note, or an error)."""
    loaded: dict[str, ClassificationData] = {}
    for name in datasets:
        data = load_dataset(name, protocol=cfg.protocol, split_seed=cfg.split_seed, data_dir=data_dir,
                            normalize=cfg.normalize)
        try:
            check_patches(data, cfg.patches)
        except ValueError as err:
            if not skip_short:
                raise
            logger.info("skipping %s: %s", name, err)
            continue
        loaded[name] = data
    if not loaded:
        raise ValueError(f"none of the datasets ({', '.join(datasets)}) allows {cfg.patches} patches")
    return loaded


def _check_request(models: Sequence[str], baseline: str | Sequence[str] | None, ensemble: int,
                   datasets: Sequence[str]) -> tuple[list[str], list[str]]:
    """(models without repeats, baseline names); ValueError for an unknown model or baseline, a bad ensemble
    size or no datasets."""
    models = list(dict.fromkeys(models))
    for m in models:
        if m not in PATCHTST_MODELS:
            raise ValueError(f"unknown model {m!r}; expected one or more of {', '.join(PATCHTST_MODELS)}")
    baselines = parse_baselines(baseline)
    if isinstance(ensemble, bool) or int(ensemble) != ensemble or ensemble < 1:
        raise ValueError(f"ensemble must be a positive integer (1 = single runs), got {ensemble!r}")
    if not datasets:
        raise ValueError("no datasets to run")
    return models, baselines


@dataclass
class SweepPlan:
    """A checked sweep, its datasets loaded and nothing written yet (:func:`plan_sweep`)."""

    datasets: dict[str, ClassificationData]
    models: list[str]
    cfg: SweepConfig
    out_dir: Path
    lrs: list[float]
    dropouts: list[float]
    baselines: list[str]
    ensemble: int = 1
    data_dir: str | Path | None = None

    @property
    def runs_per_model(self) -> int:
        return len(self.lrs) * len(self.dropouts) * self.cfg.seeds


def plan_sweep(datasets: Sequence[str], models: Sequence[str], cfg: SweepConfig, out_dir: str | Path,
               lrs: Sequence[float] = SWEEP_LRS, dropouts: Sequence[float] = SWEEP_DROPOUTS,
               baseline: str | Sequence[str] | None = None, data_dir: str | Path | None = None,
               skip_short: bool = False, ensemble: int = 1) -> SweepPlan:
    """Check a sweep and load its datasets; bad input raises ValueError here, before anything is written.

    ``skip_short``: drop datasets too short for ``cfg.patches`` (with a note) instead of failing.
    ``baseline``: names of :data:`~jumbokit.timeseries.baselines.BASELINES` (a comma-separated string or a
    list), run on the same splits. ``ensemble``: also score the mean probabilities of the top-k runs (chosen
    on validation) per dataset and model; 1 = off."""
    models, baselines = _check_request(models, baseline, ensemble, datasets)
    out_dir = Path(out_dir)
    store.check_out_dir(out_dir, cfg.identity())
    loaded = _load_all(datasets, cfg, data_dir, skip_short)
    return SweepPlan(datasets=loaded, models=models, cfg=cfg, out_dir=out_dir, lrs=list(lrs), dropouts=list(dropouts),
                     baselines=baselines, ensemble=int(ensemble), data_dir=data_dir)


def _result(sweep: _Sweep, plan: SweepPlan) -> SweepResult:
    """Rows and ranks of everything the sweep gathered."""
    rows = summarize(sweep.runs, sweep.baselines, sweep.ensembles, sweep.pretrain_seconds)
    ran = baseline_columns(rows)
    keys = ("best", "ens") if plan.ensemble > 1 else ("best",)
    return SweepResult(runs=sweep.runs, rows=rows, ranks=rank_models(rows, plan.models),
                       ranks_all=rank_models(rows, plan.models + ran, keys=keys) if ran else None,
                       models=plan.models, baselines=sweep.baselines, dataset_seconds=sweep.dataset_seconds,
                       datasets={n: d.summary() for n, d in plan.datasets.items()}, lrs=plan.lrs,
                       dropouts=plan.dropouts, ensemble=plan.ensemble)


def _start(plan: SweepPlan, accelerator: Any) -> None:
    """sweep.json (once, on the main process) and the sweep's first line."""
    if not accelerator.is_main_process:
        return
    store.write_sweep_file(plan.out_dir, plan.cfg)
    total = len(plan.datasets) * len(plan.models) * plan.runs_per_model
    logger.info("%d dataset(s) x %d model(s) x %d run(s) = %d runs -> %s", len(plan.datasets), len(plan.models),
                plan.runs_per_model, total, plan.out_dir)


def execute_sweep(plan: SweepPlan, progress: bool = True, cpu: bool = False) -> SweepResult:
    """Run (or resume) a planned sweep and write the reports (``result.paths``; none on non-main processes)."""
    from tqdm.auto import tqdm

    from ..training import make_accelerator

    accelerator = make_accelerator(train_config(plan.cfg, 1e-3, 1, cpu=cpu))
    _start(plan, accelerator)
    total = len(plan.datasets) * len(plan.models) * plan.runs_per_model
    bar = tqdm(total=total, desc="sweep", unit="run", disable=not (progress and accelerator.is_main_process),
               dynamic_ncols=True)
    sweep = _Sweep(cfg=plan.cfg, out_dir=plan.out_dir, grid=[(lr, do) for lr in plan.lrs for do in plan.dropouts],
                   ensemble=plan.ensemble, accelerator=accelerator, bar=bar, cpu=cpu, data_dir=plan.data_dir)
    with quiet_training():  # one line per dataset, not per epoch of every run
        for data in plan.datasets.values():
            if sweep.is_main:
                (bar.write if progress else logger.info)(data.summary())
            for model in plan.models:
                _run_model(sweep, data, model)
            _run_baselines(sweep, data, plan.baselines)
    bar.close()
    result = _result(sweep, plan)
    if sweep.is_main:
        result.paths = write_reports(plan.out_dir, result, plan.cfg)
    return result


def run_sweep(datasets: Sequence[str], models: Sequence[str], cfg: SweepConfig, out_dir: str | Path,
              lrs: Sequence[float] = SWEEP_LRS, dropouts: Sequence[float] = SWEEP_DROPOUTS,
              baseline: str | Sequence[str] | None = None, data_dir: str | Path | None = None,
              progress: bool = True, skip_short: bool = False, cpu: bool = False, ensemble: int = 1) -> SweepResult:
    """Check, run (or resume) the sweep and write the reports: :func:`plan_sweep` then :func:`execute_sweep`.

    Every dataset is loaded and checked before any training, so bad input fails with nothing written."""
    plan = plan_sweep(datasets, models, cfg, out_dir, lrs=lrs, dropouts=dropouts, baseline=baseline,
                      data_dir=data_dir, skip_short=skip_short, ensemble=ensemble)
    return execute_sweep(plan, progress=progress, cpu=cpu)
