"""Run the adaptation jobs of one evaluation. A job adapts a fresh copy of the source with one method on one
corruption at one severity (the setting ``mixed``, one stream of every corruption, makes one job per severity
and method). Jobs are whole runs and their answers do not depend on which process runs them (each stream is
seeded by the corruption's place in the full list); under several processes each takes the next job whenever
it is free (:func:`jumbokit.training.jobs.run_jobs`), builds the corrupted sets of that job when it first needs
them (:class:`SetsOnDemand`), and every process gets every record, which the caller merges per (severity,
method).
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Mapping, NamedTuple

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

from ..training.jobs import JobQueue, launch_queue
from ..training.jobs import run_jobs as run_queue
from .wild import MethodSettings, build_episodes, build_method, input_normalizer, run_episodes

logger = logging.getLogger(__name__)

__all__ = ["METHOD_LABELS", "Job", "StreamOptions", "SetsOnDemand", "job_list", "merge_records", "needed_sets",
           "run_job", "run_jobs"]

METHOD_LABELS = {"none": "No adapt", "tent": "Tent", "eata": "EATA", "sar": "SAR"}


@dataclass
class StreamOptions:
    """How the test streams are drawn (see :func:`jumbokit.adaptation.wild.build_episodes`)."""

    setting: str = "normal"
    batch_size: int = 64
    seed: int = 0
    imbalance_ratio: float = 500000.0
    stream_length: int | None = None
    num_workers: int = 0
    clean_workers: int = 0  # DataLoader workers of EATA's clean Fisher batches
    input_norm: str = "source"  # the stream's input statistics (wild.input_normalizer)


class Job(NamedTuple):
    """One adaptation run: ``method`` at ``severity`` on ``corruption`` (None: every corruption, one stream);
    ``place``: the corruption's index in the evaluation's list, which seeds its stream."""

    corruption: str | None
    severity: int
    method: str
    place: int = 0


def job_list(setting: str, corruptions: Sequence[str], severities: Sequence[int],
             methods: Sequence[str]) -> list[Job]:
    """Every job of an evaluation, ordered (severity, corruption, method): the jobs that read one corrupted set
    are neighbours, so a process taking the next job mostly finds its sets built (:class:`SetsOnDemand`)."""
    per = [None] if setting == "mixed" else list(corruptions)
    return [Job(c, s, m, p) for s in severities for p, c in enumerate(per) for m in methods]


def needed_sets(jobs: Sequence[Job], corruptions: Sequence[str]) -> set[tuple[str, int]]:
    """The (corruption, severity) sets that ``jobs`` read."""
    return {(c, job.severity) for job in jobs for c in ([job.corruption] if job.corruption else corruptions)}


class SetsOnDemand:
    """``sets(job) -> {corruption: dataset}``: the corrupted sets a job reads, made by ``build(needed)`` (needed:
    (corruption, severity) pairs, see :func:`needed_sets`; returns ``{severity: {corruption: dataset}}``) when a
    job first needs them and kept while the following jobs read the same ones. A process claims jobs in list
    order, so sets it dropped are never asked for again."""

    def __init__(self, build: Callable[[set[tuple[str, int]]], dict[int, dict[str, Dataset]]],
                 corruptions: Sequence[str]) -> None:
        self.build, self.corruptions = build, list(corruptions)
        self._pairs: set[tuple[str, int]] = set()
        self._sets: dict[int, dict[str, Dataset]] = {}

    def __call__(self, job: Job) -> Mapping[str, Dataset]:
        pairs = needed_sets([job], self.corruptions)
        if pairs != self._pairs:
            self._sets = {}  # the previous sets go before the next ones are made
            self._sets, self._pairs = self.build(pairs), pairs
        return self._sets[job.severity]


def _clean_batches(clean: Dataset, seed: int, num_workers: int, device: torch.device,
                   transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Iterator:
    """Shuffled clean (x, y) batches of 64 on ``device`` (EATA's Fisher), through the stream's ``transform``."""
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(clean, batch_size=64, shuffle=True, generator=generator, num_workers=num_workers)
    return ((transform(x.to(device)) if transform else x.to(device), y) for x, y in loader)


def run_job(model: nn.Module, job: Job, domains: Mapping[str, Dataset], num_classes: int, settings: MethodSettings,
            stream: StreamOptions, clean: Dataset | None = None, device: torch.device | str = "cpu",
            progress: bool = False, autocast: Callable[[], ContextManager] | None = None) -> dict[str, Any]:
    """Adapt a copy of ``model`` with ``job.method`` on the streams of ``domains`` (corruption -> dataset of
    the job's severity): ``job.corruption``'s alone, or all of them for a job of every corruption.

    Returns a record: severity, method, per-corruption ``correct`` / ``total`` counts, adaptation
    ``seconds``, ``nan_batches`` and the method's counters (``stats``)."""
    device = torch.device(device)
    transform = input_normalizer(stream.input_norm)
    clean_batches = None
    if job.method == "eata" and clean is not None:
        clean_batches = _clean_batches(clean, stream.seed, stream.clean_workers, device, transform)
    adapter = build_method(job.method, model, stream.batch_size, num_classes, settings, clean_batches)
    picked = domains if job.corruption is None else {job.corruption: domains[job.corruption]}
    episodes = build_episodes(stream.setting, picked, stream.batch_size, seed=stream.seed + job.place,
                              imbalance_ratio=stream.imbalance_ratio, stream_length=stream.stream_length,
                              num_workers=stream.num_workers)
    where = f"{job.corruption} " if job.corruption else ""
    with (autocast or contextlib.nullcontext)():
        result = run_episodes(adapter, episodes, device, progress=progress, transform=transform,
                              desc=f"{METHOD_LABELS.get(job.method, job.method)} {where}sev {job.severity}")
    logger.debug("%s %sseverity %d: %d images in %.1f s", job.method, where, job.severity,
                 sum(result.total.values()), result.seconds)
    return {"severity": job.severity, "method": job.method, "correct": result.correct, "total": result.total,
            "seconds": result.seconds, "nan_batches": result.nan_batches, "stats": result.stats}


def _describe(job: Job) -> str:
    """``sar on fog at severity 5`` (``... on every corruption ...`` for a mixed stream)."""
    return f"{job.method} on {job.corruption or 'every corruption'} at severity {job.severity}"


def run_jobs(model: nn.Module, jobs: Sequence[Job], sets: Callable[[Job], Mapping[str, Dataset]], num_classes: int,
             settings: MethodSettings, stream: StreamOptions, clean: Dataset | None = None,
             device: torch.device | str = "cpu", progress: bool = False,
             autocast: Callable[[], ContextManager] | None = None,
             queue: JobQueue[Job] | None = None) -> list[dict[str, Any]]:
    """The record of every job (:func:`run_job`), in ``jobs``' order, on every process. ``sets(job)``: the job's
    corrupted sets (e.g. :class:`SetsOnDemand`). ``queue``: who does which job (default: the jobs shared by the
    launch's processes, :func:`jumbokit.training.jobs.launch_queue`; every process calls this together)."""
    queue = queue if queue is not None else launch_queue(jobs)
    return run_queue(queue, lambda job: run_job(model, job, sets(job), num_classes, settings, stream, clean, device,
                                                progress, autocast), describe=_describe)


def merge_records(jobs: Sequence[Job], records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (severity, method), severities then methods in job order: the records (one per job, in
    job order) with their counts, seconds and counters summed."""
    if len(records) != len(jobs):
        raise RuntimeError(f"records of {len(jobs) - len(records)} of {len(jobs)} jobs did not arrive")
    merged: dict[tuple[int, str], dict[str, Any]] = {}
    for rec in records:
        key = (rec["severity"], rec["method"])
        if key not in merged:
            merged[key] = {**rec, "correct": {}, "total": {}, "seconds": 0.0, "nan_batches": 0, "stats": {}}
        out = merged[key]
        for field_name in ("correct", "total", "stats"):
            for name, value in rec[field_name].items():
                out[field_name][name] = out[field_name].get(name, 0) + value
        out["seconds"] += rec["seconds"]
        out["nan_batches"] += rec["nan_batches"]
    return list(merged.values())
