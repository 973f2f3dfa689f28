"""Handing a sweep's jobs to the processes of a launch as they free up.

Every process holds the same ordered list (:func:`job_order`: pretrainings first, then the rest, each longest
first). A process takes the next unclaimed job when it is free, through one atomic counter in the launch's
key-value store (``torch.distributed``'s default store, the one the process group was set up with), so a process
that drew short jobs simply takes more of them and all processes finish within about one job of each other,
however wrong the cost estimates are. Which process does a job never changes its result: each job is a
deterministic function of its settings.
"""

from __future__ import annotations

import uuid
from typing import Iterator, Sequence

from .jobs import Job

__all__ = ["job_order", "JobQueue", "launch_store", "new_queue_key"]


def job_order(jobs: Sequence[Job], costs: Sequence[float]) -> list[Job]:
    """``jobs`` in the order they are handed out: pretrainings first (no run waits on a pretraining nobody has
    started), then the rest; each group by decreasing cost (ties keep the list order)."""
    if len(jobs) != len(costs):
        raise ValueError(f"expected one cost per job, got {len(costs)} costs for {len(jobs)} jobs")
    ranked = sorted(range(len(jobs)), key=lambda i: (jobs[i].kind != "pretrain", -costs[i], i))
    return [jobs[i] for i in ranked]


class JobQueue:
    """The jobs of one sweep in their order, each claimed by exactly one process.

    ``store``: a ``torch.distributed.Store`` shared by the processes of the launch and ``key`` a name unique to
    this sweep's execution (:func:`new_queue_key` on the main process, broadcast); without a store (one process)
    the jobs are claimed locally in order. Iterating claims jobs until none is left."""

    def __init__(self, jobs: Sequence[Job], store=None, key: str = "") -> None:
        if store is not None and not key:
            raise ValueError("a shared job queue needs a key unique to the sweep")
        self.jobs = list(jobs)
        self.store = store
        self.key = key
        self._next = 0

    def claim(self) -> Job | None:
        """The next job nobody has claimed (this process now owns it), or None when all are taken."""
        if self.store is None:
            index, self._next = self._next, self._next + 1
        else:
            index = int(self.store.add(self.key, 1)) - 1
        return self.jobs[index] if index < len(self.jobs) else None

    def __iter__(self) -> Iterator[Job]:
        while (job := self.claim()) is not None:
            yield job

    def __len__(self) -> int:
        return len(self.jobs)


def launch_store():
    """The key-value store of this launch's process group (a TCP store under ``torchrun`` / ``accelerate
    launch``); raises when no process group is set up."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("a job queue shared between processes needs an initialised torch.distributed group")
    from torch.distributed.distributed_c10d import _get_default_store

    return dist.PrefixStore("jumbokit/jobs/", _get_default_store())


def new_queue_key() -> str:
    """A counter name no earlier sweep of the launch has used (made once, on the main process)."""
    return f"sweep-{uuid.uuid4().hex}"
