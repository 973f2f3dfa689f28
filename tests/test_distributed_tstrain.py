"""tstrain on several processes: the sweep's jobs are split between the processes, each run trained whole by one of
them, so 1 and N processes give the same runs bit for bit (records and the .proba.safetensors predictions), also
with pretraining and progressive-join branches; a sweep killed with SIGKILL resumes on any process count without
redoing or losing a finished run. In-process tests check the job list, the split and the single-process
accelerator; the torchrun tests launch real gloo processes (one thread each)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from jumbokit.timeseries import jobs as ts_jobs
from jumbokit.timeseries import store as ts_store
from jumbokit.timeseries.data import load_dataset
from jumbokit.training.local import LocalAccelerator
from jumbokit.timeseries.protocol import SweepConfig
from jumbokit.timeseries.run import train_run_with_proba
from jumbokit.timeseries.sweep import plan_sweep
from jumbokit.training.jobs import JobQueue
from launch import jumbokit_command, kill_tree, launch, launch_env, torchrun_command, wait_until

# a tiny sweep: 2 datasets x 2 models x 2 dropouts = 8 runs of 6 steps
TINY = ["--dataset", "ItalyPowerDemand,GunPoint", "--model", "patchtst,patchtst_jumbo", "--lr", "1e-3",
        "--dropout", "0,0.1", "--steps", "6", "--batch-size", "32", "--cpu", "--no-progress"]
RECORD_KEYS = ("val_top1", "test_top1", "val_loss", "train_loss", "steps", "epochs", "params", "num_patches")


# ------------------------------------------------------------------ in-process: jobs, split, local accelerator
def _plan(tmp_path: Path, **cfg):
    return plan_sweep(["ItalyPowerDemand", "GunPoint"], ["patchtst", "patchtst_jumbo"],
                      SweepConfig(steps=4, batch_size=16, **cfg), tmp_path / "sweep", lrs=(1e-3, 3e-4),
                      dropouts=(0.0,), baseline="minirocket")


def test_jobs_are_handed_out_whole_once_each_pretrainings_first(tmp_path):
    plan = _plan(tmp_path, pretrain_epochs=1, seeds=2)
    jobs = ts_jobs.sweep_jobs(plan)
    kinds = [j.kind for j in jobs]
    assert kinds.count("run") == 2 * 2 * 2 * 2 and kinds.count("pretrain") == 2 * 2 * 2 and kinds.count("baseline") == 2
    costs = [ts_jobs.job_cost(j, plan.datasets[j.dataset], plan.cfg) for j in jobs]
    order = ts_jobs.job_order(jobs, costs)
    assert order == ts_jobs.job_order(list(jobs), list(costs))  # the same list on every process
    first_run = next(i for i, job in enumerate(order) if job.kind != "pretrain")
    assert {j.kind for j in order[:first_run]} == {"pretrain"} and "pretrain" not in {j.kind for j in order[first_run:]}
    ranked = [costs[jobs.index(j)] for j in order[first_run:]]
    assert ranked == sorted(ranked, reverse=True)  # the long jobs first, so the tail is short
    # two processes drawing from one store: each job claimed by exactly one, in the list's order
    shared = torch.distributed.HashStore()
    queues = [JobQueue(order, shared, "sweep-test"), JobQueue(order, shared, "sweep-test")]
    claims = [(rank, queues[rank].claim()) for rank in (0, 1, 1, 1, 0) * len(order)]
    claimed = [job for _, job in claims if job is not None]
    assert claimed == order
    assert {rank for rank, job in claims if job is not None} == {0, 1}
    assert list(JobQueue(order)) == order and list(JobQueue(order, shared, "sweep-test")) == []
    with pytest.raises(ValueError, match="one cost per job"):
        ts_jobs.job_order(jobs, costs[:-1])


def test_a_free_process_takes_the_next_job_so_the_work_evens_out():
    """Simulated launch: process 0's jobs take twice as long as their estimate; it simply takes fewer of them."""
    jobs = [ts_jobs.Job("run", "GunPoint", "patchtst", lr=float(i)) for i in range(10)]
    shared = torch.distributed.HashStore()
    queues = [JobQueue(jobs, shared, "even"), JobQueue(jobs, shared, "even")]
    clock, done = [0.0, 0.0], [[], []]
    while True:
        rank = min((0, 1), key=lambda r: (clock[r], r))  # the process that is free first takes the next job
        job = queues[rank].claim()
        if job is None:
            break
        done[rank].append(job)
        clock[rank] += 2.0 if rank == 0 else 1.0
    assert len(done[0]) + len(done[1]) == 10 and not set(done[0]) & set(done[1])
    assert abs(clock[0] - clock[1]) <= 2.0  # they finish within one job of each other


def test_pending_jobs_skip_what_the_directory_holds(tmp_path):
    plan = _plan(tmp_path, pretrain_epochs=1)
    jobs = ts_jobs.sweep_jobs(plan)
    assert ts_jobs.pending_jobs(jobs, plan.out_dir) == jobs
    runs = [j for j in jobs if j.kind == "run" and j.dataset == "GunPoint" and j.model == "patchtst"]
    record = {k: 1.0 for k in ("val_top1", "test_top1", "val_loss", "train_loss", "train_seconds", "wall_seconds",
                               "step_ms")}
    record.update(dataset="GunPoint", model="patchtst", lr=1e-3, dropout=0.0, epochs=1, steps=4, params=1,
                  patch_len=1, stride=1, num_patches=1, global_tokens=0)
    from jumbokit.timeseries.run import RunResult

    for job in runs:
        ts_store.write_run(job.path(plan.out_dir), RunResult(**record), {"val": np.zeros((2, 2)),
                                                                         "test": np.zeros((2, 2))})
    todo = ts_jobs.pending_jobs(jobs, plan.out_dir, ensemble=2)
    assert not set(runs) & set(todo)
    # the pretraining of a model whose runs are all finished is not redone
    assert ts_jobs.Job("pretrain", "GunPoint", "patchtst", seed=0) not in todo
    assert ts_jobs.Job("pretrain", "GunPoint", "patchtst_jumbo", seed=0) in todo
    ts_store.proba_path(runs[0].path(plan.out_dir)).unlink()  # an ensemble needs the probabilities: redo
    assert runs[0] in ts_jobs.pending_jobs(jobs, plan.out_dir, ensemble=2)
    assert runs[0] not in ts_jobs.pending_jobs(jobs, plan.out_dir, ensemble=1)


@pytest.mark.parametrize("options", [
    dict(steps=6, batch_size=16, branches=2, ema_decay=0.5),
    dict(epochs=2, batch_size=16, augment="jitter,scaling", pretrain_epochs=1),
])
def test_local_accelerator_trains_as_a_one_process_accelerator(one_torch_thread, options):
    """A run through LocalAccelerator equals the same run through Accelerate's Accelerator on one process."""
    from jumbokit.timeseries.run import pretrain_run

    data = load_dataset("ItalyPowerDemand")
    cfg = SweepConfig(**options)
    answers = []
    for local in (False, True):
        pretrained = None
        if cfg.pretrain_epochs:
            acc = LocalAccelerator("cpu", data_seed=1) if local else None
            pretrained = pretrain_run(data, "patchtst_jumbo", cfg, seed=1, accelerator=acc)[0]
        acc = LocalAccelerator("cpu", data_seed=1) if local else None
        run, proba = train_run_with_proba(data, "patchtst_jumbo", 1e-3, 0.1, cfg, accelerator=acc, seed=1,
                                          pretrained=pretrained)
        answers.append(([getattr(run, k) for k in RECORD_KEYS], proba))
    (record_a, proba_a), (record_b, proba_b) = answers
    assert record_a == record_b
    assert all(np.array_equal(proba_a[k], proba_b[k]) for k in proba_a)


def test_local_accelerator_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="fp16"):
        LocalAccelerator("cpu", mixed_precision="fp16")
    assert LocalAccelerator("cpu", mixed_precision="auto").mixed_precision == "no"
    with pytest.raises(ValueError, match="checkpoints"):
        LocalAccelerator("cpu").save_state("x")


# ------------------------------------------------------------------ torchrun: real processes on gloo
def _command(nproc: int, argv: list[str]) -> list[str]:
    """``tstrain argv`` in 1 plain process or ``nproc`` torchrun processes."""
    argv = ["tstrain", *argv]
    return torchrun_command(argv, nproc) if nproc > 1 else jumbokit_command(argv)


def _tstrain(nproc: int, argv: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    return launch(_command(nproc, argv), timeout)


def _runs(out: Path) -> dict[str, tuple[list, dict[str, np.ndarray]]]:
    """Every finished run of a sweep directory: its record's results and its stored probabilities."""
    found = {}
    for path in sorted((out / "runs").glob("*/*/*.json")):
        if path.name.startswith(".") or path.name.startswith("pretrained_"):
            continue
        record = json.loads(path.read_text())
        found[str(path.relative_to(out))] = ([record[k] for k in RECORD_KEYS],
                                             ts_store.load_proba(ts_store.proba_path(path)))
    return found


def _assert_same_runs(a: Path, b: Path, expected: int) -> None:
    runs_a, runs_b = _runs(a), _runs(b)
    assert len(runs_a) == expected and sorted(runs_a) == sorted(runs_b)
    for name, (record, proba) in runs_a.items():
        assert runs_b[name][0] == record, name
        assert set(proba) == {"val", "test"} and all(np.array_equal(proba[k], runs_b[name][1][k]) for k in proba), name


@pytest.mark.multiprocess
def test_a_sweep_on_two_processes_gives_the_runs_of_one(tmp_path):
    _tstrain(1, [*TINY, "--out", str(tmp_path / "one")])
    done = _tstrain(2, [*TINY, "--out", str(tmp_path / "two")])
    _assert_same_runs(tmp_path / "one", tmp_path / "two", expected=8)
    assert "on 2 process(es)" in done.stderr and done.stdout.count("wrote ") == 1  # one writer of the reports
    one, two = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("one", "two"))

    def untimed(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in row.items() if not ("seconds" in k or k.endswith("_ms"))} for row in rows]

    assert untimed(one["summary"]) == untimed(two["summary"])
    assert one["ranks"] == two["ranks"]


@pytest.mark.multiprocess
def test_pretraining_and_branches_train_whole_on_two_processes(tmp_path):
    flags = ["--dataset", "ItalyPowerDemand", "--model", "patchtst_jumbo", "--lr", "1e-3", "--dropout", "0,0.1",
             "--steps", "8", "--batch-size", "32", "--pretrain-epochs", "1", "--branches", "2", "--cpu",
             "--no-progress"]
    _tstrain(1, [*flags, "--out", str(tmp_path / "one")])
    _tstrain(2, [*flags, "--out", str(tmp_path / "two")])
    _assert_same_runs(tmp_path / "one", tmp_path / "two", expected=2)
    folder = tmp_path / "two" / "runs" / "ItalyPowerDemand" / "patchtst_jumbo"
    for stem in ("lr0.001_do0", "lr0.001_do0.1"):
        record = json.loads((folder / f"{stem}.json").read_text())
        assert record["steps"] == 8 and record["extra"]["pretrained"] is True  # every step, in one process
    assert json.loads((folder / "pretrained_s0.json").read_text())["steps"] == 3  # ceil(67 / 32), once


@pytest.mark.multiprocess
def test_runs_packed_on_one_device_give_the_runs_of_one_at_a_time(tmp_path):
    """--runs-per-device 2: a pool of 2 workers takes the next job whenever one is free (a run waits for the
    pretraining the other worker is doing); every run is the one trained alone."""
    flags = ["--dataset", "ItalyPowerDemand", "--model", "patchtst", "--lr", "1e-3,3e-4", "--dropout", "0,0.1",
             "--steps", "6", "--batch-size", "32", "--pretrain-epochs", "1", "--cpu", "--no-progress"]
    _tstrain(1, [*flags, "--out", str(tmp_path / "one")])
    _tstrain(1, [*flags, "--runs-per-device", "2", "--out", str(tmp_path / "pool")])
    _assert_same_runs(tmp_path / "one", tmp_path / "pool", expected=4)


def _finished(out: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime in ns) of every finished run record: a redone run would replace its file."""
    return {str(p.relative_to(out)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in sorted((out / "runs").glob("*/*/*.json"))
            if not (p.name.startswith(".") or p.name.startswith("pretrained_"))}


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.parametrize("resume_on", [2, 1])
def test_a_killed_two_process_sweep_resumes_on_any_process_count(tmp_path, resume_on):
    flags = ["--dataset", "ItalyPowerDemand", "--model", "patchtst,patchtst_jumbo", "--lr", "1e-3,3e-4",
             "--dropout", "0,0.1", "--steps", "40", "--batch-size", "32", "--cpu", "--no-progress"]
    _tstrain(1, [*flags, "--out", str(tmp_path / "whole")])
    out = tmp_path / "killed"
    proc = subprocess.Popen(_command(2, [*flags, "--out", str(out)]), env=launch_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_until(lambda: (out / "runs").exists() and len(_finished(out)) >= 2, proc, 300, "two finished runs")
    kill_tree(proc)
    before = _finished(out)
    if not 2 <= len(before) < 8:
        pytest.skip(f"the sweep could not be caught midway ({len(before)} of 8 runs finished when killed)")
    _tstrain(resume_on, [*flags, "--out", str(out)])
    after = _finished(out)
    assert {k: after[k] for k in before} == before  # no finished run redone (same file), none lost
    assert len(after) == 8
    _assert_same_runs(tmp_path / "whole", out, expected=8)
    assert (out / "report.md").exists()
