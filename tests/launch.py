"""Running jumbokit in real processes for the multi-process tests: one plain process or torchrun's gloo processes.

A launch that runs past its timeout is a hang (a deadlock, a rank waiting for a peer that never comes): the test
fails with the command, the timeout and the tail of what the processes printed, and every process the launch
started is killed. A launch only skips when it cannot start at all: the launcher is not installed, or this torch has no
gloo backend for CPU processes.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Callable

import psutil
import pytest
import torch

TAIL_CHARS = 4000


def jumbokit_command(argv: list[str]) -> list[str]:
    """``python -m jumbokit ARGV``: one plain process."""
    return [sys.executable, "-m", "jumbokit", *argv]


def torchrun_command(argv: list[str], nproc: int) -> list[str]:
    """``torchrun --nproc_per_node NPROC --standalone -m jumbokit ARGV``: ``nproc`` gloo processes on CPU."""
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available: torchrun cannot start CPU processes here")
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--standalone",
            "-m", "jumbokit", *argv]


def launch_env(**extra: str) -> dict[str, str]:
    """The environment of a launch: one thread per process, unbuffered output, plus ``extra``."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra}


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a launcher and every process under it (torchrun starts its workers in sessions of their own)."""
    try:
        root = psutil.Process(proc.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for process in tree:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=30)
    psutil.wait_procs(tree, timeout=30)


def _tail(stdout: str, stderr: str) -> str:
    return (f"--- stdout (last {TAIL_CHARS} characters) ---\n{stdout[-TAIL_CHARS:]}\n"
            f"--- stderr (last {TAIL_CHARS} characters) ---\n{stderr[-TAIL_CHARS:]}")


def launch(command: list[str], timeout: float, **env: str) -> subprocess.CompletedProcess:
    """Run ``command`` to its end and return it; fail the test on a non-zero exit or when it outlives ``timeout``
    seconds. The output goes to files rather than pipes, so a stray process cannot keep the reader waiting."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            proc = subprocess.Popen(command, env=launch_env(**env), stdout=out, stderr=err, text=True)
        except FileNotFoundError as error:  # any other failure to start is a failure of the test
            pytest.skip(f"the launcher {command[0]} is not installed here: {error}")
        try:
            proc.wait(timeout=timeout)
            hung = False
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            hung = True
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(command, proc.returncode, out.read(), err.read())
    if hung:
        pytest.fail(f"hang: still running after the {timeout} s timeout, killed: {shlex.join(command)}\n"
                    f"{_tail(done.stdout, done.stderr)}", pytrace=False)
    if done.returncode != 0:
        pytest.fail(f"exit status {done.returncode}: {shlex.join(command)}\n{_tail(done.stdout, done.stderr)}",
                    pytrace=False)
    return done


def wait_until(ready: Callable[[], bool], proc: subprocess.Popen, timeout: float, what: str) -> None:
    """Poll until ``ready()`` holds or ``proc`` has ended; a launch still running without it after ``timeout``
    seconds is a hang: its processes are killed and the test fails."""
    deadline = time.monotonic() + timeout
    while not ready() and proc.poll() is None:
        if time.monotonic() > deadline:
            kill_tree(proc)
            pytest.fail(f"hang: {what} not within the {timeout} s timeout, killed: {shlex.join(proc.args)}",
                        pytrace=False)
        time.sleep(0.05)
