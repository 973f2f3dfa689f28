"""The job runner (``jumbokit.training.jobs``): an ordered job list, each job claimed once from a store shared by
the processes (simulated by threads on one ``HashStore``, and once for real with torchrun), every result back in
job order on every process, and a job that raises failing every process with its own exception and the job named, never a hang."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
import torch

from jumbokit.training.jobs import JobFailed, JobQueue, launch_queue, run_jobs


def _launch(jobs, fn, processes=2, key="test", **options):
    """``run_jobs`` on ``processes`` simulated processes (threads sharing one store): {rank: results or error}."""
    store, answers = torch.distributed.HashStore(), {}

    def process(rank: int) -> None:
        try:
            answers[rank] = run_jobs(JobQueue(jobs, store, key, processes=processes, rank=rank), fn, **options)
        except Exception as err:  # kept for the test to look at
            answers[rank] = err

    threads = [threading.Thread(target=process, args=(rank,), daemon=True) for rank in range(processes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a simulated process hangs"
    return answers


def test_a_local_queue_hands_out_the_jobs_in_order():
    jobs = ["c", "a", "b"]
    queue = JobQueue(jobs)
    assert len(queue) == 3 and [queue.claim(), queue.claim(), queue.claim(), queue.claim()] == ["c", "a", "b", None]
    seen = []
    assert run_jobs(JobQueue(jobs), lambda job: job.upper(), on_start=seen.append) == ["C", "A", "B"]
    assert seen == jobs
    assert launch_queue(jobs).jobs == jobs  # outside a launch: a local queue
    with pytest.raises(ValueError, match="main process must pass"):
        launch_queue(None)
    with pytest.raises(ValueError, match="key unique"):
        JobQueue(jobs, torch.distributed.HashStore())


def test_two_processes_claim_each_job_once_and_both_get_every_result_in_order():
    """Process 1 is slower, so it takes fewer jobs; both return every result in job order (the main process is
    then the one writer of all of them)."""
    done: dict[int, list[int]] = {0: [], 1: []}
    store, answers = torch.distributed.HashStore(), {}

    def process(rank: int) -> None:
        def square(job: int) -> int:
            time.sleep(0.02 if rank == 1 else 0.005)
            done[rank].append(job)
            return job * job

        answers[rank] = run_jobs(JobQueue(list(range(20)), store, "even", processes=2, rank=rank), square)

    threads = [threading.Thread(target=process, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert answers[0] == answers[1] == [j * j for j in range(20)]
    assert sorted(done[0] + done[1]) == list(range(20))  # each job done exactly once
    assert done[0] == sorted(done[0]) and done[1] == sorted(done[1])  # each claims in list order
    assert len(done[0]) > len(done[1]) > 0
    # the last process to read cleared the execution's keys: a new execution under the same key starts afresh
    assert _launch(["x"], str.upper, key="even") == {0: ["X"], 1: ["X"]}


def test_a_failing_job_fails_every_process_with_the_job_named():
    def fn(job: str) -> str:
        if job == "bad":
            raise ValueError("cannot do bad")
        return job

    answers = _launch(["a", "b", "bad", "c", "d", "e"], fn, describe=lambda job: f"job {job!r}")
    for rank in (0, 1):
        err = answers[rank]
        assert isinstance(err, ValueError) and str(err) == "cannot do bad", err  # bad input stays a ValueError
        message = str(err.__cause__)
        assert isinstance(err.__cause__, JobFailed) and "job 3 of 6 (job 'bad') failed on process" in message
        assert "ValueError: cannot do bad" in message and "Traceback" in message
    assert run_jobs(JobQueue(["a"]), fn) == ["a"]
    with pytest.raises(ValueError, match="cannot do bad") as raised:
        run_jobs(JobQueue(["a", "bad", "c"]), fn)
    assert "job 2 of 3 ('bad') failed on process 0" in str(raised.value.__cause__)


class _Unrebuildable(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a} and {b}")


def test_an_exception_that_cannot_travel_arrives_as_the_job_failure():
    def fn(job):
        raise _Unrebuildable(job, 2)

    with pytest.raises(JobFailed, match=r"job 1 of 1 \(1\) failed on process 0:(.|\n)*_Unrebuildable: 1 and 2"):
        run_jobs(JobQueue([1]), fn)


@pytest.mark.multiprocess
def test_a_local_pool_does_the_jobs_whole_and_names_a_failure():
    assert run_jobs(JobQueue(["3", "1", "2", "5"]), int, workers=2) == [3, 1, 2, 5]
    with pytest.raises(ValueError, match="invalid literal") as raised:
        run_jobs(JobQueue(["3", "1", "x", "5"]), int, workers=2)
    assert "job 3 of 4 ('x') failed on process 0" in str(raised.value.__cause__)
    with pytest.raises(ValueError, match="positive integer"):
        run_jobs(JobQueue(["1"]), int, workers=0)


_LAUNCHED = '''
import sys

import torch.distributed as dist

from jumbokit.training.jobs import launch_queue, run_jobs

dist.init_process_group("gloo")
failing = int(sys.argv[1])


def times_ten(job):
    if job == failing:
        raise ValueError(f"cannot do {job}")
    return 10 * job


try:
    results = run_jobs(launch_queue(list(range(8)) if dist.get_rank() == 0 else None), times_ten,
                       describe=lambda job: f"job {job}")
    print("results", dist.get_rank(), results)
finally:
    dist.destroy_process_group()
'''


@pytest.mark.multiprocess
def test_two_torchrun_processes_share_the_jobs_and_a_failure_reaches_the_main_process(tmp_path):
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available: torchrun cannot start CPU processes here")
    script = tmp_path / "jobs.py"
    script.write_text(_LAUNCHED)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone", str(script)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    runs = {}
    for failing in (-1, 5):
        try:
            runs[failing] = subprocess.run([*command, str(failing)], capture_output=True, text=True, timeout=180,
                                           env=env)
        except subprocess.TimeoutExpired:
            pytest.fail(f"hang: the 2-process launch with job {failing} failing ran past 180 s", pytrace=False)
    ok, failed = runs[-1], runs[5]
    expected = [10 * j for j in range(8)]
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert sorted(ok.stdout.splitlines()) == [f"results {rank} {expected}" for rank in (0, 1)]
    assert failed.returncode != 0 and "results" not in failed.stdout
    # every process, the main one included, names the job, the process that ran it and its error
    assert failed.stderr.count("JobFailed: job 6 of 8 (job 5) failed on process") == 2, failed.stderr[-3000:]
    assert "ValueError: cannot do 5" in failed.stderr
