"""One way to spread many independent jobs over the processes of a launch: a tstrain sweep's runs, sar-adapt's
adaptation runs, nas-search's candidate scoring.

A job is an opaque, picklable key; a callable does it whole and returns a picklable result. Every process holds
the same ordered job list (:func:`launch_queue` broadcasts the main process's list) and takes the next unclaimed
job whenever it is free, through one atomic counter in the launch's key-value store (``torch.distributed``'s
default store, set up by ``torchrun`` / ``accelerate launch``); on one process the queue is local. A process
that drew short jobs simply takes more of them, so all finish within about one job of each other. Results go
through the store too, and :func:`run_jobs` returns all of them in job order on every process; the main process
is the one that writes them. No collective call waits on a job, so a process may finish hours before another.

```python
queue = launch_queue(jobs)                                   # the main process's list, on every process
results = run_jobs(queue, do_one, describe=str)              # results[i] is do_one(jobs[i]), on every process
```

A job that raises stops the claiming on every process; once the jobs already running are done, every process
raises the first failed job's exception (in job order; its type kept, so bad input still reads as bad input)
from a :class:`JobFailed` that names the job, the process that ran it and its traceback there.
``workers`` K > 1 does K jobs at once in a pool of K spawned processes, each with 1/K of this process's threads
and outside the launch (a pooled job trains alone).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
import traceback
import uuid
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Generic, Iterator, Sequence, TypeVar

import torch
import torch.distributed as dist

__all__ = ["JobFailed", "JobQueue", "launch_queue", "launch_store", "run_jobs"]

J = TypeVar("J")

# what a launcher sets in the processes it starts; a pool worker drops them, so it can never join their group
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                    "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
MAX_POLL_SECONDS = 0.5


class JobFailed(RuntimeError):
    """A job raised; the message names the job, the process that ran it and its traceback there. The job's own
    exception is raised from it (this alone when that exception cannot be sent between processes)."""


class _LocalStore:
    """The part of ``torch.distributed.Store`` a queue uses, for one process alone."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def add(self, key: str, amount: int) -> int:
        self._values[key] = self._values.get(key, 0) + amount
        return self._values[key]

    def set(self, key: str, value: bytes) -> None:
        self._values[key] = value

    def get(self, key: str) -> bytes:
        return self._values[key]

    def delete_key(self, key: str) -> bool:
        return self._values.pop(key, None) is not None


class JobQueue(Generic[J]):
    """``jobs`` in their order, each claimed by exactly one of ``processes`` processes, and their outcomes.

    ``store``: a ``torch.distributed.Store`` shared by the processes and ``key`` a name unique to this execution
    (:func:`launch_queue` makes both); without a store (one process) the queue is local. ``rank``: this process's
    place, named in failures. Iterating claims jobs until none is left (or a job failed somewhere)."""

    def __init__(self, jobs: Sequence[J], store: Any = None, key: str = "", processes: int = 1,
                 rank: int = 0) -> None:
        if store is not None and not key:
            raise ValueError("a shared job queue needs a key unique to its execution")
        if not 0 <= rank < processes:
            raise ValueError(f"expected a rank in [0, {processes}), got {rank}")
        self.jobs = list(jobs)
        self.store = store if store is not None else _LocalStore()
        self.key = key or "local"
        self.processes, self.rank = int(processes), int(rank)

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[J]:
        while (claimed := self.claim_index()) is not None:
            yield self.jobs[claimed]

    def _name(self, *parts: object) -> str:
        return "/".join((self.key, *map(str, parts)))

    def claim_index(self) -> int | None:
        """The index of the next job nobody has claimed (this process now owns it); None when all are taken or a
        job failed."""
        if self.stopped():
            return None
        index = int(self.store.add(self._name("claimed"), 1)) - 1
        return index if index < len(self.jobs) else None

    def claim(self) -> J | None:
        """The next job nobody has claimed, or None (see :meth:`claim_index`)."""
        index = self.claim_index()
        return None if index is None else self.jobs[index]

    def stopped(self) -> bool:
        """Whether a job failed on some process (nobody claims another)."""
        return int(self.store.add(self._name("failed"), 0)) > 0

    def post(self, index: int, result: Any) -> None:
        """The result of job ``index``, done here."""
        self.store.set(self._name("outcome", index), pickle.dumps((True, result, self.rank)))

    def post_failure(self, index: int, error: BaseException) -> None:
        """Job ``index`` raised ``error`` here: recorded (pickled when it can be rebuilt elsewhere) with its
        traceback, and the claiming stops everywhere."""
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        try:
            sent: bytes | None = pickle.dumps(error)
            pickle.loads(sent)
        except Exception:  # e.g. an exception whose arguments do not rebuild it
            sent = None
        self.store.set(self._name("outcome", index), pickle.dumps((False, (text, sent), self.rank)))
        self.store.add(self._name("failed"), 1)

    def finish(self, on_wait: Callable[[], None] | None = None) -> None:
        """Say this process claims no more, then return once every process has said so (every claimed job has
        its outcome); ``on_wait`` is called while waiting."""
        self.store.add(self._name("finished"), 1)
        pause = 0.001
        while int(self.store.add(self._name("finished"), 0)) < self.processes:
            if on_wait is not None:
                on_wait()
            time.sleep(pause)
            pause = min(2 * pause, MAX_POLL_SECONDS)

    def results(self, describe: Callable[[J], str] = repr) -> list[Any]:
        """Every job's result in job order (after :meth:`finish`); the first failed job's exception, raised from
        a :class:`JobFailed` naming it. The last process to read removes the execution's keys from the store."""
        claimed = min(int(self.store.add(self._name("claimed"), 0)), len(self.jobs))
        outcomes = [pickle.loads(self.store.get(self._name("outcome", i))) for i in range(claimed)]
        if int(self.store.add(self._name("read"), 1)) == self.processes:
            for name in ("claimed", "failed", "finished", "read", *(f"outcome/{i}" for i in range(claimed))):
                self.store.delete_key(self._name(name))
        for index, (ok, value, rank) in enumerate(outcomes):
            if not ok:
                text, sent = value
                failed = JobFailed(f"job {index + 1} of {len(self.jobs)} ({describe(self.jobs[index])}) failed on "
                                   f"process {rank}:\n{text}")
                if sent is None:
                    raise failed
                raise pickle.loads(sent) from failed
        if claimed < len(self.jobs):
            raise RuntimeError(f"{len(self.jobs) - claimed} of {len(self.jobs)} jobs were never claimed")
        return [value for _, value, _ in outcomes]


def launch_store() -> Any:
    """The key-value store of this launch's process group (a TCP store under ``torchrun`` / ``accelerate
    launch``); raises when no process group is set up."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("a job queue shared between processes needs an initialised torch.distributed group")
    from torch.distributed.distributed_c10d import _get_default_store

    return dist.PrefixStore("jumbokit/jobs/", _get_default_store())


def launch_queue(jobs: Sequence[J] | None) -> JobQueue[J]:
    """The main process's ``jobs``, shared by every process of the launch under a fresh key (a collective
    broadcast: every process calls it; the others' ``jobs`` are ignored and may be None). Outside a launch, or on
    one process, a local queue of ``jobs``."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        if jobs is None:
            raise ValueError("the main process must pass the job list")
        return JobQueue(jobs)
    rank = dist.get_rank()
    box = [(list(jobs), f"run-{uuid.uuid4().hex}") if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    listed, key = box[0]
    return JobQueue(listed, launch_store(), key, processes=dist.get_world_size(), rank=rank)


def run_jobs(queue: JobQueue[J], fn: Callable[[J], Any], workers: int = 1, setup: Callable[[], None] | None = None,
             describe: Callable[[J], str] = repr, on_start: Callable[[J], None] | None = None,
             on_done: Callable[[J, Any], None] | None = None,
             on_wait: Callable[[], None] | None = None) -> list[Any]:
    """Do ``fn(job)`` for the jobs this process claims from ``queue``, then return every job's result in job order
    (whichever process did it), on every process.

    ``workers``: jobs done at once here; K > 1 runs them in a pool of K spawned processes (``fn`` and ``setup``
    must then pickle; ``setup()`` runs once in each worker before its first job). ``describe(job)`` names a job in
    a failure. ``on_start(job)`` / ``on_done(job, result)`` are told about the jobs done here, ``on_wait()`` is
    called while the other processes finish theirs. When a job raised anywhere, every process raises its exception
    from a :class:`JobFailed` naming the job."""
    if int(workers) != workers or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if workers == 1:
        _run_here(queue, fn, on_start, on_done)
    else:
        _run_in_pool(queue, fn, int(workers), setup, on_start, on_done)
    queue.finish(on_wait)
    return queue.results(describe)


def _run_here(queue: JobQueue[J], fn: Callable[[J], Any], on_start: Callable[[J], None] | None,
              on_done: Callable[[J, Any], None] | None) -> None:
    """The claimed jobs one after the other in this process, until none is left or one failed."""
    while (index := queue.claim_index()) is not None:
        job = queue.jobs[index]
        try:
            if on_start is not None:
                on_start(job)
            result = fn(job)
            queue.post(index, result)
            if on_done is not None:
                on_done(job, result)
        except Exception as err:  # the job, its result's pickling or a progress hook
            queue.post_failure(index, err)
            return


def _run_in_pool(queue: JobQueue[J], fn: Callable[[J], Any], workers: int, setup: Callable[[], None] | None,
                 on_start: Callable[[J], None] | None, on_done: Callable[[J, Any], None] | None) -> None:
    """The claimed jobs on ``workers`` spawned processes, the next one claimed whenever a worker is free; after a
    failure nothing more is claimed and the running jobs finish."""
    threads = max(1, torch.get_num_threads() // workers)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(fn, setup, threads))
    running: dict[Any, int] = {}

    def submit() -> None:
        index = queue.claim_index()
        if index is None:
            return
        try:
            if on_start is not None:
                on_start(queue.jobs[index])
            running[pool.submit(_worker_job, queue.jobs[index])] = index
        except Exception as err:
            queue.post_failure(index, err)

    try:
        for _ in range(workers):
            submit()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                index = running.pop(future)
                try:
                    result = future.result()  # the worker's exception is raised here, its traceback the cause
                    queue.post(index, result)
                    if on_done is not None:
                        on_done(queue.jobs[index], result)
                except Exception as err:
                    queue.post_failure(index, err)
                    continue
                submit()
    except BaseException:  # interrupted: leave the workers to the launcher
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


_WORKER_FN: Callable[[Any], Any] | None = None


def _start_worker(fn: Callable[[Any], Any], setup: Callable[[], None] | None, threads: int) -> None:
    """A pool worker: out of any launch (its jobs run alone), ``threads`` CPU threads, then ``setup()``."""
    global _WORKER_FN
    for name in LAUNCH_VARIABLES:
        os.environ.pop(name, None)
    torch.set_num_threads(threads)
    if setup is not None:
        setup()
    _WORKER_FN = fn


def _worker_job(job: Any) -> Any:
    if _WORKER_FN is None:
        raise RuntimeError("a pool worker got a job before its function")
    return _WORKER_FN(job)
