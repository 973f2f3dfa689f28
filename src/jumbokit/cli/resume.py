"""``--resume`` with a run's stored flags: the flags a run started with (``config.json``, changed by its
``resumes.jsonl``), what a resuming command line may change (more ``--epochs``; flags that only change how a run
is watched), and the one error listing every other difference."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..training.rundir import RunDir, to_json
from .config import flag_names, parse_flags

logger = logging.getLogger(__name__)

# flags that change how a run is watched or where and how it runs, never what it computes: free on resume (the
# values a --config file sets are compared one by one)
NEUTRAL_ON_RESUME = frozenset({"resume", "out", "overwrite", "no_progress", "debug", "threads", "num_workers",
                               "log_every", "log_with", "run_name", "checkpoint_every", "checkpoint_steps",
                               "compile", "grad_checkpointing", "config"})


def read_stored_args(run: str | Path) -> dict[str, Any] | None:
    """The flags a run runs with: those stored under ``"args"`` in its ``config.json``, with the changes its
    resumes accepted (``"changed"`` in ``resumes.jsonl``) applied in order; None when there is no such record."""
    config = Path(run) / RunDir.CONFIG
    try:
        stored = json.loads(config.read_text()).get("args")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    if not isinstance(stored, dict):
        return None
    for record in RunDir(run, create=False).read_resumes():
        for dest, change in (record.get("changed") or {}).items():
            stored[dest] = change.get("given", stored.get(dest))
    return stored


def _plain(value: Any) -> Any:
    """A value as stored in config.json (tuples as lists, paths as strings)."""
    return json.loads(to_json(value, indent=None))


def _show(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(_show(v) for v in value)
    return "unset" if value is None else str(value)


def resume_differences(
    parser: argparse.ArgumentParser, stored: dict[str, Any], given: dict[str, Any]
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Compare the flags given on resume with a run's stored flags. Returns (refused, accepted): one line per
    refused difference (``--lr: run has 0.001, given 0.005``) and the accepted changes ``{dest: {"run": old,
    "given": new}}`` (more ``--epochs``). Flags that only change how a run is watched are ignored."""
    defaults = vars(parser.parse_args([]))
    names = flag_names(parser)
    refused: list[str] = []
    accepted: dict[str, dict[str, Any]] = {}
    for dest, value in given.items():
        if dest in NEUTRAL_ON_RESUME:
            continue
        old, new = _plain(stored.get(dest, defaults.get(dest))), _plain(value)
        if old == new:
            continue
        flag = names.get(dest, "--" + dest.replace("_", "-"))
        if dest == "epochs" and isinstance(old, int) and new > old:
            accepted[dest] = {"run": old, "given": new}
            continue
        note = " (on resume --epochs may only grow)" if dest == "epochs" else ""
        refused.append(f"{flag}: run has {_show(old)}, given {_show(new)}{note}")
    return refused, accepted


@dataclass
class RunArgs:
    """What ``parse_run_args`` returns: the flags to run with, the run directory, the flags typed on the command
    line, and (when continuing a stored run) the entries for its ``resumes.jsonl`` line (``fit(resume_record=)``)."""

    args: argparse.Namespace
    out: Path
    given: dict[str, Any]
    resume_record: dict[str, Any] | None = None


def _record_folder(args: argparse.Namespace, out: Path) -> Path:
    """The run whose stored flags a resume continues: ``out``, or the run holding the checkpoint given to
    ``--resume PATH`` when ``out`` has no record yet."""
    if (out / RunDir.CONFIG).exists() or args.resume in (None, "latest"):
        return out
    path = Path(args.resume).expanduser()
    for folder in (path, path.parent, path.parent.parent):
        if (folder / RunDir.CONFIG).exists():
            return folder
    return out


def parse_run_args(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    default_out: Callable[[argparse.Namespace], Path],
) -> RunArgs:
    """Parse a front door's flags; with ``--resume``, continue with the flags the run stored in its
    ``config.json`` (``"args"``): a user repeats none of them, and a given flag that differs from the stored one
    raises one ``ValueError`` listing every difference (except more ``--epochs``, accepted and recorded).

    ``default_out(args)`` names the run directory when ``--out`` is not given.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args, given = parse_flags(parser, argv)
    out = Path(args.out).expanduser() if getattr(args, "out", None) else default_out(args)
    if getattr(args, "resume", None) is None:
        return RunArgs(args, out, given)
    folder = _record_folder(args, out)
    stored = read_stored_args(folder)
    if stored is None:
        if (folder / RunDir.CONFIG).exists():
            logger.info(f"{folder}/config.json holds no stored flags; resuming with the flags given")
        return RunArgs(args, out, given)
    refused, accepted = resume_differences(parser, stored, given)
    if refused:
        raise ValueError(f"cannot resume {folder} with other flags than it was started with ("
                         + "; ".join(refused) + "); leave them out to continue the run as it was, or start a "
                         "new run with another --out")
    merged = vars(parser.parse_args([]))
    merged.update({k: v for k, v in stored.items() if k in merged})
    merged.update({k: v for k, v in given.items() if k in NEUTRAL_ON_RESUME or k in accepted})
    merged["out"] = str(out)
    for dest, change in accepted.items():
        logger.info(f"resuming with {flag_names(parser).get(dest, dest)} {change['given']} "
                    f"(the run had {change['run']})")
    record = {"argv": argv, "changed": accepted}
    return RunArgs(argparse.Namespace(**merged), out, given, record)


