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


def _summary(module_name: str) -> str:
    """The first line of a front door's module docstring."""
    doc = import_module(module_name).__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def usage() -> str:
    """The command list printed by ``jumbokit --help``."""
    names = {cmd: f"jumbokit.recipes.{mod}" for cmd, mod in COMMANDS.items()}
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
    if command not in COMMANDS:
        print(f"jumbokit: unknown command {command!r}; expected one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    from .training.cli import run_cli

    module = import_module(f"jumbokit.recipes.{COMMANDS[command]}")
    outcome = []
    program, sys.argv[0] = sys.argv[0], f"jumbokit {command}"  # argparse's usage lines name the subcommand
    try:
        run_cli(lambda: outcome.append(module.main(rest)))
    finally:
        sys.argv[0] = program
    # tstrain's main returns its exit status (it reports its own errors); the others return their summary
    return outcome[0] if isinstance(outcome[0], int) else 0


if __name__ == "__main__":
    sys.exit(main())


def export_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``jumbokit-export`` (= ``jumbokit export``)."""
    return main(["export", *(sys.argv[1:] if argv is None else argv)])
