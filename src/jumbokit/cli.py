"""The ``jumbokit`` command: one subcommand per front door.

    jumbokit mae-pretrain --dataset digits          # = accelerate launch recipes/mae_pretrain.py ...
    accelerate launch -m jumbokit supervised ...   # several processes / GPUs
    jumbokit tstrain --archive UCR ...             # the same as the ``tstrain`` command
"""
from __future__ import annotations

import sys
from importlib import import_module
from typing import Sequence

from .recipes import COMMANDS

TSTRAIN = "tstrain"


def _summary(module_name: str) -> str:
    """The first line of a front door's module docstring."""
    doc = import_module(module_name).__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def usage() -> str:
    """The command list printed by ``jumbokit --help``."""
    names = {**{cmd: f"jumbokit.recipes.{mod}" for cmd, mod in COMMANDS.items()}, TSTRAIN: "jumbokit.timeseries.cli"}
    width = max(map(len, names))
    lines = [f"  {cmd:<{width}}  {_summary(mod)}" for cmd, mod in names.items()]
    return ("usage: jumbokit COMMAND [flags]   (jumbokit COMMAND --help for its flags)\n\n"
            "Front doors of jumbokit; each also runs under `accelerate launch -m jumbokit COMMAND ...`.\n\n"
            "commands:\n" + "\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch ``jumbokit COMMAND ARGS`` to the front door's ``main(ARGS)``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="")
        return 0
    command, rest = argv[0], argv[1:]
    if command == TSTRAIN:
        from .timeseries.cli import main as tstrain_main

        return tstrain_main(rest)
    if command not in COMMANDS:
        print(f"jumbokit: unknown command {command!r}; expected one of {', '.join([*COMMANDS, TSTRAIN])}",
              file=sys.stderr)
        return 2
    from .training.cli import run_cli

    module = import_module(f"jumbokit.recipes.{COMMANDS[command]}")
    run_cli(lambda: module.main(rest))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def export_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``jumbokit-export`` (= ``jumbokit export``)."""
    return main(["export", *(sys.argv[1:] if argv is None else argv)])
