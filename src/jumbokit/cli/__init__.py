"""The command line, in one place: the ``jumbokit`` command (one subcommand per front door), and what the front doors
share.

    jumbokit mae-pretrain --dataset digits          # = accelerate launch recipes/mae_pretrain.py ...
    accelerate launch -m jumbokit supervised ...   # several processes / GPUs
    jumbokit tstrain --archive UCR ...             # the same as the ``tstrain`` command

- ``jumbokit.cli`` (here): the subcommands (:data:`COMMANDS`) and the console scripts ``jumbokit``, ``tstrain`` and
  ``jumbokit-export``;
- :mod:`~jumbokit.cli.errors`: bad input becomes one line on stderr and exit status 2, Ctrl-C 130;
- :mod:`~jumbokit.cli.config`: ``--config FILE`` and the flags a command line gave;
- :mod:`~jumbokit.cli.resume`: ``--resume`` with a run's stored flags and the differences it refuses;
- :mod:`~jumbokit.cli.training`, :mod:`~jumbokit.cli.data`: the flags the image front doors share;
- :mod:`~jumbokit.cli.series`: ``tstrain``'s flags, one per exposed ``SeriesModelConfig`` field.

The front doors themselves are the modules of :mod:`jumbokit.recipes`, one each, with one contract:
``build_parser()`` and ``main(argv: list[str] | None = None) -> dict`` that parses ``argv`` (``sys.argv[1:]`` when
None), runs, and returns its summary; bad input raises (``ValueError``, ``FileNotFoundError``, ...), which
:func:`run_front_door` turns into one line and an exit status (argparse's own exits, ``--help`` and unknown
flags, stay ``SystemExit``). A front door may set ``RESUME_HINT``, the line's
advice after Ctrl-C.
"""
from __future__ import annotations

import sys
from importlib import import_module
from typing import Sequence

from .errors import RESUME_HINT, run_cli

# subcommand -> module under jumbokit.recipes (loaded by name when the subcommand runs)
COMMANDS = {
    "mae-pretrain": "mae_pretrain",
    "linear-probe": "linear_probe",
    "supervised": "supervised",
    "sar-adapt": "sar_adapt",
    "nas-supernet": "nas_supernet",
    "nas-search": "nas_search",
    "export": "export",
    "validate": "validate",
    "predict": "predict",
    "tstrain": "tstrain",
    "series-pretrain": "series_pretrain",
}


def front_door(command: str):
    """The module of subcommand ``command`` (``jumbokit.recipes.<module>``)."""
    return import_module(f"jumbokit.recipes.{COMMANDS[command]}")


def _summary(command: str) -> str:
    """The first line of a front door's module docstring."""
    doc = (front_door(command).__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


def usage() -> str:
    """The command list printed by ``jumbokit --help``."""
    width = max(map(len, COMMANDS))
    lines = [f"  {cmd:<{width}}  {_summary(cmd)}" for cmd in COMMANDS]
    return ("usage: jumbokit COMMAND [flags]   (jumbokit COMMAND --help for its flags)\n\n"
            "Front doors of jumbokit; each also runs under `accelerate launch -m jumbokit COMMAND ...`.\n\n"
            "commands:\n" + "\n".join(lines) + "\n")


def run_front_door(command: str, argv: Sequence[str] | None = None, program: str | None = None) -> int:
    """Run front door ``command`` on ``argv`` (``sys.argv[1:]`` when None) and return the exit status: 0 when it
    finishes, 2 for bad input, 130 for Ctrl-C, each failure with one line on stderr (:func:`run_cli`).
    ``program``: the name argparse's usage lines give the command (default: the running script's)."""
    module = front_door(command)
    hint = getattr(module, "RESUME_HINT", RESUME_HINT)
    saved = sys.argv[0]
    if program is not None:
        sys.argv[0] = program
    try:
        return run_cli(lambda: module.main(None if argv is None else list(argv)), resume_hint=hint)
    finally:
        sys.argv[0] = saved


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``jumbokit``: dispatch ``jumbokit COMMAND ARGS`` to the front door's ``main(ARGS)``; returns
    the exit status (see :func:`run_front_door`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"jumbokit: unknown command {command!r}; expected one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return run_front_door(command, rest, program=f"jumbokit {command}")


def tstrain_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``tstrain`` (= ``jumbokit tstrain``; its flags name the program ``tstrain``)."""
    return run_front_door("tstrain", argv)


def export_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``jumbokit-export`` (= ``jumbokit export``)."""
    return main(["export", *(sys.argv[1:] if argv is None else argv)])
