"""Doing a process's share of a sweep's jobs (:mod:`jumbokit.timeseries.jobs`): each job whole, on this process's
device, through a :class:`~jumbokit.timeseries.local.LocalAccelerator` (never the launch's process group), its
result written to the sweep directory by the process that did it.

``runs_per_device`` K > 1 runs K jobs at once in a pool of K spawned worker processes, the next job taken whenever
a worker is free (each worker single-threaded in its jobs, so that every run stays a deterministic function of its
settings); K = 1 runs them in this process.
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from itertools import islice
from typing import Callable, Iterable, Iterator

import torch

from jumbokit.training.rundir import atomic_write_text

from . import store
from .data import ClassificationData
from .jobs import Job
from .local import LocalAccelerator
from .protocol import SweepConfig

__all__ = ["JobContext", "execute_job", "run_jobs", "wait_for_pretrained"]

logger = logging.getLogger(__name__)

# what a launcher sets in the processes it starts; a pool worker drops them, so it can never join their group
_LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                     "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
POLL_SECONDS = 0.5


@dataclass
class JobContext:
    """What every job of one sweep needs: the loaded datasets, the settings, the sweep directory, the device.

    ``wait``: a run whose pretrained weights are missing waits for them (another process pretrains them) instead
    of failing."""

    datasets: dict[str, ClassificationData]
    cfg: SweepConfig
    out_dir: Path
    device: str = "cpu"
    data_dir: str | Path | None = None
    wait: bool = False

    def accelerator(self, seed: int) -> LocalAccelerator:
        """The single-process accelerator of one job (data order seeded with the job's seed)."""
        return LocalAccelerator(self.device, self.cfg.mixed_precision, data_seed=seed)


def wait_for_pretrained(job: Job, ctx: JobContext) -> dict[str, torch.Tensor]:
    """The pretrained weights a run starts from, read from the sweep directory (waiting for another process to
    write them when ``ctx.wait``)."""
    folder = job.folder(ctx.out_dir)
    while True:
        stored = store.read_pretrained(folder, job.seed)
        if stored is not None:
            return stored[0]
        if not ctx.wait:
            raise RuntimeError(f"no pretrained weights for seed {job.seed} in {folder}; the pretraining job "
                               "should have run before this run")
        time.sleep(POLL_SECONDS)


def execute_job(job: Job, ctx: JobContext) -> None:
    """Do one job whole in this process and write its files (a run: probabilities, then its record)."""
    from .baselines import rocket_baseline
    from .run import pretrain_run, train_run_with_proba

    data = ctx.datasets[job.dataset]
    if job.kind == "pretrain":
        state, record = pretrain_run(data, job.model, ctx.cfg, seed=job.seed, accelerator=ctx.accelerator(job.seed),
                                     data_dir=ctx.data_dir)
        store.write_pretrained(job.folder(ctx.out_dir), job.seed, state, record)
    elif job.kind == "run":
        pretrained = wait_for_pretrained(job, ctx) if ctx.cfg.pretrain_epochs else None
        acc = ctx.accelerator(job.seed)
        run, proba = train_run_with_proba(data, job.model, job.lr, job.dropout, ctx.cfg, accelerator=acc,
                                          seed=job.seed, pretrained=pretrained)
        store.write_run(job.path(ctx.out_dir), run, proba)
        acc.free_memory()
    elif job.kind == "baseline":
        result = rocket_baseline(job.model, data, seed=ctx.cfg.seed, data_dir=ctx.data_dir)
        atomic_write_text(job.path(ctx.out_dir), json.dumps(result, indent=1) + "\n")
    else:
        raise ValueError(f"unknown job kind {job.kind!r}")


def run_jobs(jobs: Iterable[Job], ctx: JobContext, runs_per_device: int = 1,
             on_start: Callable[[Job], None] | None = None, on_done: Callable[[Job], None] | None = None) -> None:
    """Do ``jobs`` in order, taking each only when it can start (``jobs`` may be a
    :class:`~jumbokit.timeseries.queue.JobQueue` that other processes draw from too): one after the other here
    (``runs_per_device`` 1), or ``runs_per_device`` at a time in a pool of worker processes. ``on_start`` /
    ``on_done`` are told each job (progress)."""
    from .run import quiet_training

    if runs_per_device < 1:
        raise ValueError(f"runs per device must be >= 1, got {runs_per_device}")
    if runs_per_device == 1:
        with quiet_training():  # one line per dataset, not per epoch of every run
            for job in jobs:
                if on_start is not None:
                    on_start(job)
                execute_job(job, ctx)
                if on_done is not None:
                    on_done(job)
        return
    _run_in_pool(iter(jobs), ctx, runs_per_device, on_done)


def _run_in_pool(jobs: Iterator[Job], ctx: JobContext, workers: int, on_done: Callable[[Job], None] | None) -> None:
    """``jobs`` on ``workers`` spawned processes, the next one taken whenever a worker is free; the first failure
    cancels what has not started and is raised here."""
    import multiprocessing

    first = list(islice(jobs, workers))
    if not first:
        return
    threads = max(1, torch.get_num_threads() // workers)
    pool = ProcessPoolExecutor(max_workers=len(first), mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(ctx, threads))
    running = {pool.submit(_worker_job, job): job for job in first}
    try:
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                future.result()  # a worker's exception, raised here
                if on_done is not None:
                    on_done(job)
                following = next(jobs, None)
                if following is not None:
                    running[pool.submit(_worker_job, following)] = following
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


_WORKER_CONTEXT: JobContext | None = None


def _start_worker(ctx: JobContext, threads: int) -> None:
    """A pool worker: out of any launch (it trains alone), ``threads`` CPU threads, quiet training logs."""
    global _WORKER_CONTEXT
    for name in _LAUNCH_VARIABLES:
        os.environ.pop(name, None)
    torch.set_num_threads(threads)
    device = torch.device(ctx.device)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    logging.getLogger("jumbokit.training").setLevel(logging.WARNING)
    _WORKER_CONTEXT = ctx


def _worker_job(job: Job) -> Job:
    if _WORKER_CONTEXT is None:
        raise RuntimeError("a sweep worker got a job before its context")
    execute_job(job, _WORKER_CONTEXT)
    return job
