"""``tstrain`` for the time-series benchmarks: run in the calling process (one sweep directory per arm, one set at a
time, finished runs reused), or in a child process whose CPU seconds and peak memory the kernel reports."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

from .records import peak_rss_mib

__all__ = ["run_tstrain", "tstrain_child"]


def run_tstrain(argv: list[str], quiet: bool = True) -> str:
    """Run ``tstrain argv`` here; returns what it printed (nothing is captured unless ``quiet``).

    Raises
    ------
    SystemExit
        When tstrain exits non-zero: the command and its exit status (its own message is above).
    """
    from jumbokit.cli import tstrain_main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed) if quiet else contextlib.nullcontext():
        code = tstrain_main(argv)
    if code != 0:
        raise SystemExit(f"tstrain {' '.join(argv)} failed (exit {code})")
    return printed.getvalue()


def tstrain_child(argv: list[str]) -> tuple[float, float]:
    """``tstrain argv`` in a child process of this Python (its printed lines dropped, its errors shown): (its CPU
    seconds, user + system, and its peak resident memory in MiB), read from the kernel when it exits: the whole
    process, imports and data included. SystemExit when it fails."""
    code = "import sys; from jumbokit.cli import tstrain_main; sys.exit(tstrain_main(sys.argv[1:]))"
    child = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"tstrain {' '.join(argv)} failed (exit {child.returncode})")
    return usage.ru_utime + usage.ru_stime, peak_rss_mib(usage)
