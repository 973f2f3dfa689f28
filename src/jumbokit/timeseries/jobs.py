"""The jobs of a sweep and how one is done: every run, pretraining and baseline is one job, done whole by one
process (through :func:`jumbokit.training.jobs.run_jobs`) and finished when its file lies in the sweep directory
(:mod:`jumbokit.timeseries.store`).

:func:`sweep_jobs` lists them in a fixed order, :func:`pending_jobs` keeps those whose files are missing (so a
resume redoes nothing, whichever process count wrote the files), :func:`job_order` hands out pretrainings first
and then the long jobs first (:func:`job_cost`), and :func:`execute_job` does one job and writes its files.
Each job is a deterministic function of its settings, so which process does it never changes its result.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from jumbokit.training.local import LocalAccelerator
from jumbokit.training.rundir import atomic_write_text

from . import store
from .data import ClassificationData
from .protocol import SweepConfig
from .run import run_length

__all__ = ["Job", "SweepPlan", "sweep_jobs", "job_done", "pending_jobs", "job_cost", "job_order", "JobContext",
           "execute_job", "start_pool_worker"]

KINDS = ("pretrain", "run", "baseline")
POLL_SECONDS = 0.5
# relative cost of a training step per series, by model (PatchTST+Jumbo has about twice PatchTST's FLOPs)
# and the ROCKET hybrid adds the MiniRocket transform of every batch
MODEL_COST = {"patchtst": 1.0, "patchtst_registers": 1.2, "patchtst_jumbo": 2.0, "patchtst_jumbo_rocket": 4.0}


@dataclass(frozen=True)
class Job:
    """One unit of a sweep. ``kind``: "pretrain" (of ``model`` with ``seed``), "run" (``model`` at ``lr``,
    ``dropout`` with the ``offset``-th seed ``seed``) or "baseline" (``model`` names the baseline)."""

    kind: str
    dataset: str
    model: str
    seed: int = 0
    offset: int = 0
    lr: float = 0.0
    dropout: float = 0.0

    def folder(self, out_dir: Path) -> Path:
        """The folder of the model's files (runs and pretrained weights)."""
        return Path(out_dir) / "runs" / self.dataset / self.model

    def path(self, out_dir: Path) -> Path:
        """The file whose presence marks the job finished."""
        if self.kind == "run":
            return self.folder(out_dir) / f"{store.run_id(self.lr, self.dropout, self.offset)}.json"
        if self.kind == "pretrain":
            return store.pretrain_record_path(self.folder(out_dir), self.seed)
        return Path(out_dir) / "runs" / self.dataset / f"{self.model}.json"

    def describe(self) -> str:
        """A short name for progress lines: ``GunPoint patchtst lr=0.001 do=0.1 seed=1``."""
        if self.kind == "run":
            return f"{self.dataset} {self.model} lr={self.lr:g} do={self.dropout:g}" + (
                f" seed={self.seed}" if self.offset else "")
        if self.kind == "pretrain":
            return f"{self.dataset} {self.model} pretraining seed {self.seed}"
        return f"{self.dataset} {self.model}"


@dataclass
class SweepPlan:
    """A checked sweep, its datasets loaded and nothing written yet (:func:`jumbokit.timeseries.sweep.plan_sweep`)."""

    datasets: dict[str, ClassificationData]
    models: list[str]
    cfg: SweepConfig
    out_dir: Path
    lrs: list[float]
    dropouts: list[float]
    baselines: list[str]
    ensemble: int = 1
    data_dir: str | Path | None = None
    fuse: list[str] = field(default_factory=list)  # baselines fused with every model (late fusion, :mod:`.fusion`)

    @property
    def runs_per_model(self) -> int:
        return len(self.lrs) * len(self.dropouts) * self.cfg.seeds


def sweep_jobs(plan: SweepPlan) -> list[Job]:
    """Every job of a planned sweep in a fixed order: per dataset, per model its pretrainings (one per seed,
    when the sweep pretrains) and runs (seeds x learning rates x dropouts), then the dataset's baselines."""
    jobs: list[Job] = []
    seeds = plan.cfg.run_seeds()
    for name in plan.datasets:
        for model in plan.models:
            if plan.cfg.pretrain_epochs:
                jobs += [Job("pretrain", name, model, seed=seed) for seed in seeds]
            jobs += [Job("run", name, model, seed=seed, offset=offset, lr=float(lr), dropout=float(do))
                     for offset, seed in enumerate(seeds) for lr in plan.lrs for do in plan.dropouts]
        jobs += [Job("baseline", name, base) for base in plan.baselines]
    return jobs


def job_done(job: Job, out_dir: Path, ensemble: int = 1) -> bool:
    """Whether the job's files are in the sweep directory and readable (a run's probabilities too, when an
    ensemble needs them)."""
    path = job.path(out_dir)
    if not path.exists():
        return False
    if job.kind == "run":
        if store.load_run(path) is None:
            return False
        return ensemble == 1 or store.load_proba(store.proba_path(path)) is not None
    if job.kind == "pretrain":
        return store.read_pretrained(job.folder(out_dir), job.seed) is not None
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return "test_top1" in result or "skipped" in result


def pending_jobs(jobs: list[Job], out_dir: Path, ensemble: int = 1) -> list[Job]:
    """The jobs still to do: those not finished, without the pretrainings that no unfinished run needs."""
    todo = [job for job in jobs if job.kind != "pretrain" and not job_done(job, out_dir, ensemble)]
    needed = {(j.dataset, j.model, j.seed) for j in todo if j.kind == "run"}
    keep = set(todo) | {job for job in jobs if job.kind == "pretrain" and (job.dataset, job.model, job.seed) in needed
                        and not job_done(job, out_dir)}
    return [job for job in jobs if job in keep]


def job_cost(job: Job, data: ClassificationData, cfg: SweepConfig) -> float:
    """A rough relative cost of the job, for balancing only: series seen in training (steps x batch x channels,
    times the model's and the branches' factor) plus the series scored; a baseline as a few training passes."""
    batch, steps, _, _ = run_length(data, cfg)
    n_train, n_eval = len(data.train), len(data.val) + (len(data.test) if data.test is not data.val else 0)
    per_series = data.channels * MODEL_COST.get(job.model, 1.0) * max(1, cfg.branches)
    if job.kind == "run":
        return per_series * (steps * min(batch, n_train) + n_eval / 3)
    if job.kind == "pretrain":
        return 1.5 * per_series * cfg.pretrain_epochs * math.ceil(n_train / min(batch, n_train)) * min(batch, n_train)
    return data.channels * (n_train + n_eval) * max(1.0, data.seq_len / 64)


def job_order(jobs: Sequence[Job], costs: Sequence[float]) -> list[Job]:
    """``jobs`` in the order they are handed out: pretrainings first (no run waits on a pretraining nobody has
    started), then the rest; each group by decreasing cost (ties keep the list order)."""
    if len(jobs) != len(costs):
        raise ValueError(f"expected one cost per job, got {len(costs)} costs for {len(jobs)} jobs")
    ranked = sorted(range(len(jobs)), key=lambda i: (jobs[i].kind != "pretrain", -costs[i], i))
    return [jobs[i] for i in ranked]


@dataclass
class JobContext:
    """What every job of one sweep needs: the loaded datasets, the settings, the sweep directory, the device.

    ``wait``: a run whose pretrained weights are missing waits for them (another process pretrains them) instead
    of failing. ``keep_rocket``: the baselines whose fitted classifier is saved (the fused ones)."""

    datasets: dict[str, ClassificationData]
    cfg: SweepConfig
    out_dir: Path
    device: str = "cpu"
    data_dir: str | Path | None = None
    wait: bool = False
    keep_rocket: tuple[str, ...] = ()

    def accelerator(self, seed: int) -> LocalAccelerator:
        """The single-process accelerator of one job (data order seeded with the job's seed)."""
        return LocalAccelerator(self.device, self.cfg.mixed_precision, data_seed=seed)


def _pretrained_for(job: Job, ctx: JobContext) -> dict[str, torch.Tensor]:
    """The pretrained weights a run starts from, read from the sweep directory (waiting for another process to
    write them when ``ctx.wait``; a RuntimeError when that pretraining failed)."""
    folder = job.folder(ctx.out_dir)
    while True:
        stored = store.read_pretrained(folder, job.seed)
        if stored is not None:
            return stored[0]
        if store.pretrain_failed_path(folder, job.seed).exists():
            raise RuntimeError(f"the pretraining of seed {job.seed} in {folder} failed; this run needs it")
        if not ctx.wait:
            raise RuntimeError(f"no pretrained weights for seed {job.seed} in {folder}; the pretraining job "
                               "should have run before this run")
        time.sleep(POLL_SECONDS)


def execute_job(job: Job, ctx: JobContext) -> None:
    """Do one job whole in this process and write its files (a run: probabilities and weights, then its record).
    A failed pretraining leaves a marker, so that the runs waiting for it fail too rather than wait for ever."""
    from .baselines import rocket_baseline
    from .data_config import series_data_config
    from .run import pretrain_run, train_run_model

    data = ctx.datasets[job.dataset]
    if job.kind == "pretrain":
        try:
            state, record = pretrain_run(data, job.model, ctx.cfg, seed=job.seed,
                                         accelerator=ctx.accelerator(job.seed), data_dir=ctx.data_dir)
        except Exception:
            atomic_write_text(store.pretrain_failed_path(job.folder(ctx.out_dir), job.seed), "failed\n")
            raise
        store.write_pretrained(job.folder(ctx.out_dir), job.seed, state, record)
    elif job.kind == "run":
        pretrained = _pretrained_for(job, ctx) if ctx.cfg.pretrain_epochs else None
        acc = ctx.accelerator(job.seed)
        run, proba, model = train_run_model(data, job.model, job.lr, job.dropout, ctx.cfg, accelerator=acc,
                                            seed=job.seed, pretrained=pretrained)
        store.write_run(job.path(ctx.out_dir), run, proba, model, series_data_config(data))
        acc.free_memory()
    elif job.kind == "baseline":
        store.write_baseline(job.path(ctx.out_dir), rocket_baseline(job.model, data, seed=ctx.cfg.seed,
                                                                     data_dir=ctx.data_dir,
                                                                     keep=job.model in ctx.keep_rocket))
    else:
        raise ValueError(f"unknown job kind {job.kind!r}")


def start_pool_worker(device: str) -> None:
    """A pool worker of a sweep (``--runs-per-device`` > 1): on ``device``, the training loop's lines quiet."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    logging.getLogger("jumbokit.training").setLevel(logging.WARNING)
