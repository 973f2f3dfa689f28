"""CPU thread count of a training process.

``accelerate launch`` without a config (and ``torchrun`` with several processes) sets ``OMP_NUM_THREADS=1`` for
every process it starts unless the user set it, so a single CPU process trains on one core of many. Recipes call
``configure_threads(args.threads)`` first: a count the user chose (``--threads``, ``OMP_NUM_THREADS`` in their own
environment, ``accelerate launch --num_cpu_threads_per_process``) is kept; a 1 forced by the launcher is replaced
by the cores this process may use divided among the processes on this machine.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

# set by `accelerate launch` (simple and multi-process launchers) and by torchrun in the processes they start
_LAUNCHER_MARKERS = ("ACCELERATE_DYNAMO_BACKEND", "ACCELERATE_MIXED_PRECISION", "TORCHELASTIC_RUN_ID")
_LAUNCHER_THREAD_FLAG = "--num_cpu_threads_per_process"


@dataclass(frozen=True)
class ThreadChoice:
    """``threads`` torch uses from now on and ``reason``, one line saying where that count came from."""

    threads: int
    reason: str

    def describe(self) -> str:
        return f"CPU threads: {self.threads} ({self.reason})"


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS tells it, else the CPU count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def local_processes(env: Mapping[str, str] | None = None) -> int:
    """Processes of this launch on this machine (``LOCAL_WORLD_SIZE``, else 1)."""
    env = os.environ if env is None else env
    try:
        return max(1, int(env.get("LOCAL_WORLD_SIZE", "1") or 1))
    except ValueError:
        return 1


def _parent_chose_threads(ppid: int | None = None) -> bool | None:
    """Whether the launching process had ``OMP_NUM_THREADS`` in its own environment or was given
    ``--num_cpu_threads_per_process``; None when the OS does not tell (no /proc)."""
    proc = Path("/proc") / str(os.getppid() if ppid is None else ppid)
    try:
        environ = (proc / "environ").read_bytes().split(b"\0")
        cmdline = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    in_env = any(item.startswith(b"OMP_NUM_THREADS=") for item in environ)
    in_args = any(arg.split(b"=")[0] == _LAUNCHER_THREAD_FLAG.encode() for arg in cmdline)
    return in_env or in_args


def launcher_forced_one_thread(env: Mapping[str, str] | None = None, ppid: int | None = None) -> bool:
    """True when ``OMP_NUM_THREADS=1`` was set by ``accelerate launch`` / ``torchrun`` rather than by the user."""
    env = os.environ if env is None else env
    if env.get("OMP_NUM_THREADS") != "1" or not any(key in env for key in _LAUNCHER_MARKERS):
        return False
    return not _parent_chose_threads(ppid)


def choose_threads(requested: int | None = None, env: Mapping[str, str] | None = None,
                   ppid: int | None = None, cores: int | None = None) -> ThreadChoice:
    """The thread count for this process without applying it (see ``configure_threads``)."""
    import torch

    env = os.environ if env is None else env
    if requested is not None:
        if requested < 1:
            raise ValueError(f"--threads must be an integer >= 1 (CPU threads for torch), got {requested}")
        return ThreadChoice(requested, "--threads")
    cores = available_cores() if cores is None else cores
    procs = local_processes(env)
    share = max(1, cores // procs)
    split = f"{cores} cores / {procs} processes" if procs > 1 else f"{cores} cores"
    if launcher_forced_one_thread(env, ppid):
        return ThreadChoice(share, f"{split}; the launcher had set OMP_NUM_THREADS=1, --threads N overrides")
    if "OMP_NUM_THREADS" in env:
        return ThreadChoice(torch.get_num_threads(), f"OMP_NUM_THREADS={env['OMP_NUM_THREADS']}")
    return ThreadChoice(min(torch.get_num_threads(), share), split)


def configure_threads(requested: int | None = None) -> ThreadChoice:
    """Set torch's intra-op thread count for a training process and return what was chosen and why.

    ``requested`` (``--threads``) wins; a user's ``OMP_NUM_THREADS`` is kept; a 1 forced by the launcher becomes the
    available cores divided by the processes on this machine (``LOCAL_WORLD_SIZE``); otherwise torch's default,
    capped at that share.
    """
    import torch

    choice = choose_threads(requested)
    if torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)
    return choice
