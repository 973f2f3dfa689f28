"""The jobs of a sweep and who does them: every run, pretraining and baseline is one job, done whole by one
process and finished when its file lies in the sweep directory (:mod:`jumbokit.timeseries.store`).

:func:`sweep_jobs` lists them in a fixed order, :func:`pending_jobs` keeps those whose files are missing (so a
resume redoes nothing, whichever process count wrote the files) and :func:`job_cost` estimates their relative
cost, so that :mod:`jumbokit.timeseries.queue` hands out the long ones first.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import store
from .run import run_length

if TYPE_CHECKING:
    from .data import ClassificationData
    from .protocol import SweepConfig
    from .sweep import SweepPlan

__all__ = ["Job", "sweep_jobs", "job_done", "pending_jobs", "job_cost"]

KINDS = ("pretrain", "run", "baseline")
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


def sweep_jobs(plan: "SweepPlan") -> list[Job]:
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


def job_cost(job: Job, data: "ClassificationData", cfg: "SweepConfig") -> float:
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
