"""Run (or resume) a sweep: every dataset x model x (lr, dropout, seed), the baselines, then the reports.

:func:`plan_sweep` checks the request and loads every dataset before anything is written;
:func:`execute_sweep` does the jobs (:mod:`jumbokit.timeseries.jobs`) the sweep directory
(:mod:`jumbokit.timeseries.store`) does not hold yet, each whole in one process (on N processes the jobs are split
between them, never a run), reads every finished run back, scores ensembles and writes the reports
(``results.csv``, ``results.json``, ``report.md``, ``accuracy.png``) and keeps the chosen models (``models/``) from
the main process alone.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..encoders.checks import whole_number
from ..training.jobs import launch_queue, run_jobs
from . import store
from .baselines import parse_baselines
from .data import ClassificationData, load_dataset
from .jobs import (Job, JobContext, SweepPlan, execute_job, job_cost, job_order, pending_jobs, start_pool_worker,
                   sweep_jobs)
from .models import HYBRID_MODELS, REFERENCE_MODELS, SERIES_MODELS, check_reference_model
from .protocol import SWEEP_DROPOUTS, SWEEP_LRS, SweepConfig
from .report import write_reports
from .encoder_pretrain import init_length, init_paths
from .fusion import fused_name, late_fusion, ridge_proba
from .results import (SweepResult, baseline_columns, ensemble_proba, ensemble_scores, rank_models,
                      selection_ranking, summarize)
from .run import RunResult, check_patches, new_run_model, quiet_training

__all__ = ["SweepPlan", "plan_sweep", "execute_sweep", "run_sweep"]

logger = logging.getLogger(__name__)


@dataclass
class _Gathered:
    """Everything the sweep directory holds for a planned sweep, read back in the sweep's order."""

    runs: list[RunResult] = field(default_factory=list)
    ensembles: dict[tuple[str, str], dict] = field(default_factory=dict)
    baselines: dict[str, dict] = field(default_factory=dict)
    dataset_seconds: dict[str, float] = field(default_factory=dict)
    pretrain_seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    run_paths: dict[tuple[str, str], list[Path]] = field(default_factory=dict)  # records, in the sweep's order
    chosen_proba: dict[tuple[str, str], dict] = field(default_factory=dict)  # fused: the chosen run's or ensemble's
    fusions: dict[str, dict[str, dict]] = field(default_factory=dict)  # {dataset: {fused name: result}}

    def add_seconds(self, dataset: str, seconds: float) -> None:
        self.dataset_seconds[dataset] = self.dataset_seconds.get(dataset, 0.0) + seconds


def _gather_model(got: _Gathered, plan: "SweepPlan", data: ClassificationData, model: str, jobs: list[Job]) -> None:
    """The runs of one model on one dataset (with their probabilities when an ensemble is scored or the model is
    fused), its pretraining time and its ensemble."""
    runs, probas = [], []
    for job in jobs:
        path = job.path(plan.out_dir)
        run = store.load_run(path)
        if run is None:
            raise RuntimeError(f"{path} is missing or unreadable after every process finished its jobs")
        runs.append(run)
        probas.append(store.load_proba(store.proba_path(path)) if plan.ensemble > 1 or plan.fuse else None)
        got.add_seconds(data.name, run.wall_seconds)
    got.runs += runs
    if plan.cfg.pretrain_epochs:
        folder = plan.out_dir / "runs" / data.name / model
        records = [store.pretrain_record_path(folder, seed) for seed in plan.cfg.run_seeds()]
        spent = float(sum(json.loads(r.read_text()).get("seconds", 0.0) for r in records if r.exists()))
        got.pretrain_seconds[(data.name, model)] = spent  # once per seed, counted also when its runs were resumed
        got.add_seconds(data.name, spent)
    if plan.ensemble > 1:
        got.ensembles[(data.name, model)] = ensemble_scores(runs, probas, plan.ensemble, data.val.y, data.test.y)
    if plan.fuse and all(p is not None for p in probas):
        members = selection_ranking(runs)[:plan.ensemble]
        got.chosen_proba[(data.name, model)] = {half: ensemble_proba([probas[i][half] for i in members])
                                                for half in ("val", "test")}
    got.run_paths[(data.name, model)] = [job.path(plan.out_dir) for job in jobs]


def _gather(plan: "SweepPlan", jobs: list[Job]) -> _Gathered:
    """Read every finished run and baseline of the sweep from its directory (whichever process wrote them)."""
    got = _Gathered()
    for data in plan.datasets.values():
        for model in plan.models:
            _gather_model(got, plan, data, model,
                          [j for j in jobs if j.kind == "run" and j.dataset == data.name and j.model == model])
        for job in (j for j in jobs if j.kind == "baseline" and j.dataset == data.name):
            result = json.loads(job.path(plan.out_dir).read_text())
            got.baselines.setdefault(data.name, {})[job.model] = result
            got.add_seconds(data.name, float(result.get("seconds", 0.0)))
        for job in (j for j in jobs if j.kind == "baseline" and j.dataset == data.name and j.model in plan.fuse):
            _fuse(got, plan, data, job)
    return got


def _fuse(got: _Gathered, plan: "SweepPlan", data: ClassificationData, job: Job) -> None:
    """Every model of the sweep fused with the baseline of ``job`` on one dataset (:func:`~jumbokit.timeseries.
    fusion.late_fusion`): the model's chosen run (or top-k ensemble) and the baseline's stored ridge scores."""
    baseline = job.model
    result = got.baselines[data.name][baseline]
    if "test_top1" not in result:
        return  # skipped for this set (its reason is in the baseline's row)
    scores = store.load_proba(store.baseline_scores_path(job.path(plan.out_dir)))
    if scores is None:
        logger.warning("%s: %s has no stored scores (a baseline run before they were kept); no fused row", data.name,
                       baseline)
        return
    ridge = {half: ridge_proba(scores[half], data.num_classes) for half in ("val", "test")}
    for model in plan.models:
        proba = got.chosen_proba.get((data.name, model))
        if proba is None:
            continue
        fused = late_fusion(proba, ridge, data.val.y, data.test.y)
        spent = sum(r.wall_seconds for r in got.runs if r.dataset == data.name and r.model == model)
        fused["seconds"] = spent + (got.pretrain_seconds.get((data.name, model)) or 0.0) + float(result["seconds"])
        got.fusions.setdefault(data.name, {})[fused_name(model, baseline)] = fused


def _load_all(datasets: Sequence[str], models: Sequence[str], cfg: SweepConfig, data_dir: str | Path | None,
              skip_short: bool) -> dict[str, ClassificationData]:
    """Every dataset loaded and checked (too short for ``cfg.model.patches``: skipped with a note, or an error);
    with ``cfg.init``, every series resampled to the pretrained encoders' length."""
    loaded: dict[str, ClassificationData] = {}
    # a pretrained encoder's input: every set resampled to it
    length = init_length(init_paths(cfg.init, models)) if cfg.init else None
    for name in datasets:
        data = load_dataset(name, protocol=cfg.protocol, split_seed=cfg.split_seed, data_dir=data_dir, length=length,
                            normalize=cfg.normalize, unequal_length=cfg.unequal_length)
        try:
            check_patches(data, cfg.model.patches)
        except ValueError as err:
            if not skip_short:
                raise
            logger.info("skipping %s: %s", name, err)
            continue
        loaded[name] = data
    if not loaded:
        raise ValueError(f"none of the datasets ({', '.join(datasets)}) allows {cfg.model.patches} patches")
    return loaded


def _check_request(models: Sequence[str], baseline: str | Sequence[str] | None, ensemble: int,
                   datasets: Sequence[str]) -> tuple[list[str], list[str]]:
    """(models without repeats, baseline names); ValueError for an unknown model or baseline, a bad ensemble
    size or no datasets."""
    models = list(dict.fromkeys(models))
    for m in models:
        if m not in SERIES_MODELS:
            raise ValueError(f"unknown model {m!r}; expected one or more of {', '.join(SERIES_MODELS)}")
    baselines = parse_baselines(baseline)
    if not whole_number(ensemble, 1):
        raise ValueError(f"ensemble must be a positive integer (1 = single runs), got {ensemble!r}")
    if not datasets:
        raise ValueError("no datasets to run")
    return models, baselines


def _check_hybrids(models: Sequence[str], cfg: SweepConfig) -> None:
    """ValueError for a hybrid asked to do what only the plain transformers do (pretraining, a pretrained encoder,
    branches)."""
    hybrids = [m for m in models if m in HYBRID_MODELS]
    if hybrids and (cfg.pretrain_epochs or cfg.init or cfg.branches > 1):
        raise ValueError(f"{', '.join(hybrids)} cannot be pretrained, start from an encoder or be trained as branches "
                         f"(asked: pretrain_epochs={cfg.pretrain_epochs}, init={cfg.init!r}, branches={cfg.branches}); "
                         "run it without them")


def _check_init(models: Sequence[str], cfg: SweepConfig, data: ClassificationData) -> None:
    """ValueError, before anything is written, when a model of the sweep cannot take the pretrained encoder's
    weights (another model, width or front end than the encoder's)."""
    from .encoder_pretrain import encoder_model, encoder_state, load_into
    from .ridge_head import check_frozen_model

    paths = init_paths(cfg.init, models)
    states = {path: encoder_state(path) for path in dict.fromkeys(paths.values())}  # one folder read once
    for model, path in paths.items():
        built = encoder_model(path)
        if built is not None and built != model:
            raise ValueError(f"the encoder {path} is a {built} encoder and cannot start {model}: pass --model {built} "
                             f"(tstrain runs patchtst, patchtst_registers and patchtst_jumbo unless --model names "
                             f"some), or give each model its own encoder (--init MODEL=FOLDER,...)")
        net = load_into(new_run_model(data, model, cfg.for_dataset(data.train.x), 0.0, cfg.seed), states[path],
                        source=f"the encoder {path} ({model})")
        if cfg.frozen:
            check_frozen_model(net, model)


def _check_frozen(cfg: SweepConfig, lrs: Sequence[float], dropouts: Sequence[float]) -> None:
    """ValueError for a grid of frozen runs: a ridge head takes no learning rate, dropout or seed, so every point of
    a grid would be the same run."""
    if cfg.frozen and (len(lrs) > 1 or len(dropouts) > 1 or cfg.seeds > 1):
        raise ValueError(f"a frozen encoder's ridge head is fitted once: no learning rate, dropout or seed enters it, "
                         f"so give one of each (asked: {len(lrs)} learning rate(s), {len(dropouts)} dropout(s), "
                         f"{cfg.seeds} seed(s)); e.g. --recipe fast, or --lr 1e-3 --dropout 0 --seeds 1")


def _check_references(models: Sequence[str], cfg: SweepConfig) -> None:
    """ValueError, before anything is written, for the trunk-alone reference without a trunk, or with transformer
    layers asked of it (the checks its builder runs later)."""
    for m in (m for m in models if m in REFERENCE_MODELS):
        check_reference_model(m, trunk=cfg.model.trunk, layers=cfg.layers, branches=cfg.branches)


def plan_sweep(datasets: Sequence[str], models: Sequence[str], cfg: SweepConfig, out_dir: str | Path,
               lrs: Sequence[float] = SWEEP_LRS, dropouts: Sequence[float] = SWEEP_DROPOUTS,
               baseline: str | Sequence[str] | None = None, data_dir: str | Path | None = None,
               skip_short: bool = False, ensemble: int = 1, fuse: str | Sequence[str] | None = None) -> SweepPlan:
    """Check a sweep and load its datasets; bad input raises ValueError here, before anything is written.

    ``skip_short``: drop datasets too short for ``cfg.model.patches`` (with a note) instead of failing.
    ``baseline``: names of :data:`~jumbokit.timeseries.baselines.BASELINES` (a comma-separated string or a
    list), run on the same splits. ``ensemble``: also score the mean probabilities of the top-k runs (chosen
    on validation) per dataset and model; 1 = off. ``fuse``: baselines (names as ``baseline``; run too when not
    asked for there) fused with every model: a row ``model+baseline`` per dataset, the model's chosen run (or
    ensemble) and the baseline's ridge scores mixed with a weight chosen on validation
    (:func:`~jumbokit.timeseries.fusion.late_fusion`)."""
    models, baselines = _check_request(models, baseline, ensemble, datasets)
    fused = parse_baselines(fuse)
    baselines += [b for b in fused if b not in baselines]
    _check_hybrids(models, cfg)
    _check_references(models, cfg)
    _check_frozen(cfg, lrs, dropouts)
    out_dir = Path(out_dir)
    store.check_out_dir(out_dir, cfg.identity())
    loaded = _load_all(datasets, models, cfg, data_dir, skip_short)
    if cfg.init:
        _check_init(models, cfg, next(iter(loaded.values())))
    return SweepPlan(datasets=loaded, models=models, cfg=cfg, out_dir=out_dir, lrs=list(lrs), dropouts=list(dropouts),
                     baselines=baselines, ensemble=int(ensemble), data_dir=data_dir, fuse=fused)


def _result(got: _Gathered, plan: SweepPlan) -> SweepResult:
    """Rows and ranks of everything the sweep gathered."""
    rows = summarize(got.runs, got.baselines, got.ensembles, got.pretrain_seconds, got.fusions)
    ran = baseline_columns(rows)
    keys = ("best", "ens") if plan.ensemble > 1 else ("best",)
    return SweepResult(runs=got.runs, rows=rows, ranks=rank_models(rows, plan.models),
                       ranks_all=rank_models(rows, plan.models + ran, keys=keys) if ran else None,
                       models=plan.models, baselines=got.baselines, dataset_seconds=got.dataset_seconds,
                       datasets={n: d.summary() for n, d in plan.datasets.items()}, lrs=plan.lrs,
                       dropouts=plan.dropouts, ensemble=plan.ensemble)


def _start(plan: SweepPlan, todo: list[Job], processes: int) -> None:
    """sweep.json (once), no failure marker of an earlier execution, and the sweep's first lines; main process
    only."""
    store.write_sweep_file(plan.out_dir, plan.cfg)
    store.clear_pretrain_failures(plan.out_dir)
    total = len(plan.datasets) * len(plan.models) * plan.runs_per_model
    logger.info("%d dataset(s) x %d model(s) x %d run(s) = %d runs -> %s", len(plan.datasets), len(plan.models),
                plan.runs_per_model, total, plan.out_dir)
    if processes > 1 or len(todo) < total:
        logger.info("%d job(s) to do (runs, pretrainings, baselines) on %d process(es), whole runs each",
                    len(todo), processes)
    for data in plan.datasets.values():
        level_scale = ""
        if plan.cfg.model.level_scale == "auto":
            level_scale = f", level_scale=auto: {'on' if plan.cfg.level_scale_for(data.train.x) else 'off'}"
        logger.info("%s%s", data.summary(), level_scale)


def execute_sweep(plan: SweepPlan, progress: bool = True, cpu: bool = False, runs_per_device: int = 1) -> SweepResult:
    """Run (or resume) a planned sweep and write the reports (``result.paths``; none on non-main processes).

    Under a launch of N processes each process takes the next unfinished job whenever it is free (the order of
    :func:`~jumbokit.timeseries.jobs.job_order`, through :func:`jumbokit.training.jobs.run_jobs`), trains it whole
    on its own device, alone, and writes it to the sweep directory; every process then reads all of them back (the
    same result on each) and the main process writes the reports. ``runs_per_device``: jobs run at once by each
    process (a pool)."""
    from tqdm.auto import tqdm

    from ..training import launch_state

    if not whole_number(runs_per_device, 1):
        raise ValueError(f"runs per device must be a positive integer, got {runs_per_device!r}")
    state = launch_state(cpu)
    state.wait_for_everyone()  # every process has checked --out (plan_sweep) before anything is written there
    jobs = sweep_jobs(plan)
    order = None
    if state.is_main_process:
        todo = pending_jobs(jobs, plan.out_dir, plan.ensemble)
        _start(plan, todo, state.num_processes)
        order = job_order(todo, [job_cost(job, plan.datasets[job.dataset], plan.cfg) for job in todo])
    queue = launch_queue(order)
    runs = [job.path(plan.out_dir) for job in jobs if job.kind == "run"]
    bar = tqdm(total=len(runs), desc="sweep", unit="run", disable=not (progress and state.is_main_process),
               dynamic_ncols=True)

    def tick(*_) -> None:  # the bar counts the finished runs of every process
        bar.update(sum(path.exists() for path in runs) - bar.n)

    def waiting() -> None:
        bar.set_postfix_str("waiting for the other processes", refresh=False)
        tick()

    ctx = JobContext(plan.datasets, plan.cfg, plan.out_dir, device=str(state.device), data_dir=plan.data_dir,
                     keep_rocket=tuple(plan.fuse),
                     wait=state.num_processes > 1 or runs_per_device > 1)
    tick()
    with quiet_training():  # one line per dataset, not per epoch of every run
        run_jobs(queue, functools.partial(execute_job, ctx=ctx), workers=int(runs_per_device),
                 setup=functools.partial(start_pool_worker, ctx.device), describe=Job.describe,
                 on_start=lambda job: bar.set_postfix_str(job.describe()), on_done=tick, on_wait=waiting)
    bar.set_postfix_str("")
    tick()
    bar.close()
    got = _gather(plan, jobs)
    result = _result(got, plan)
    if state.is_main_process:
        result.paths = write_reports(plan.out_dir, result, plan.cfg)
        result.paths.update(_keep_models(plan, got))
    return result


def _keep_models(plan: SweepPlan, got: _Gathered) -> dict[str, Path]:
    """Keep the chosen run (and the ensemble's members) of every (dataset, model) in ``models/``
    (:func:`~jumbokit.timeseries.store.keep_models`), and every fused model beside it
    (:func:`~jumbokit.timeseries.store.keep_fused`); ``{"models": folder}`` when any was kept."""
    kept = False
    for (dataset, model), paths in got.run_paths.items():
        runs = [r for r in got.runs if r.dataset == dataset and r.model == model]
        notes = [store.keep_models(plan.out_dir, dataset, model, runs, paths, plan.ensemble)]
        for baseline in plan.fuse:
            fusion = got.fusions.get(dataset, {}).get(fused_name(model, baseline))
            if fusion is not None:
                notes.append(store.keep_fused(plan.out_dir, dataset, model, baseline, fusion, runs, paths,
                                              plan.ensemble))
        for note in filter(None, notes):
            logger.warning(note)
        kept = kept or notes[0] is None
    return {"models": plan.out_dir / "models"} if kept else {}

def run_sweep(datasets: Sequence[str], models: Sequence[str], cfg: SweepConfig, out_dir: str | Path,
              lrs: Sequence[float] = SWEEP_LRS, dropouts: Sequence[float] = SWEEP_DROPOUTS,
              baseline: str | Sequence[str] | None = None, data_dir: str | Path | None = None,
              progress: bool = True, skip_short: bool = False, cpu: bool = False, ensemble: int = 1,
              runs_per_device: int = 1, fuse: str | Sequence[str] | None = None) -> SweepResult:
    """Check, run (or resume) the sweep and write the reports: :func:`plan_sweep` then :func:`execute_sweep`.

    Every dataset is loaded and checked before any training, so bad input fails with nothing written."""
    plan = plan_sweep(datasets, models, cfg, out_dir, lrs=lrs, dropouts=dropouts, baseline=baseline,
                      data_dir=data_dir, skip_short=skip_short, ensemble=ensemble, fuse=fuse)
    return execute_sweep(plan, progress=progress, cpu=cpu, runs_per_device=runs_per_device)
