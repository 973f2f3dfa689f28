"""``tstrain`` run in the calling process, for the time-series benchmarks (one sweep directory per arm, one set
at a time, finished runs reused)."""

from __future__ import annotations

import contextlib
import io

__all__ = ["run_tstrain"]


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
