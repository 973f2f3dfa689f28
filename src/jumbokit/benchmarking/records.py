"""Result files: ``<results>/<benchmark>_<variant>.json`` and a markdown copy beside it (``.md``), each stamped.

Every record :func:`write_result` writes carries a ``stamp``: what a reader needs to regenerate and trust it
(:func:`run_stamp`): the exact command line, the git commit and whether the tree was dirty, the machine record,
start and end time, wall and CPU seconds (child processes included), peak resident memory and the seeds. A record
without a stamp is a *legacy* record (:func:`is_legacy`); the results pages mark the numbers that come from one.
"""

from __future__ import annotations

import copy
import datetime
import os
import re
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from ..training.rundir import atomic_write_json, atomic_write_text

__all__ = ["STAMP_KEYS", "dataset_slug", "is_legacy", "peak_rss_mib", "process_start_time", "result_path",
           "run_stamp", "stamp_line", "write_result"]

#: What a stamp holds; a record whose ``stamp`` lacks one of these is legacy.
STAMP_KEYS = ("command", "argv", "folder", "commit", "dirty", "machine", "started", "finished", "wall_s",
              "cpu_s", "peak_rss_mib", "seeds")

_IMPORTED_AT = time.time()


def result_path(results_dir: str | os.PathLike, benchmark: str, variant: str = "") -> Path:
    """``<results_dir>/<benchmark>_<variant>.json`` (``<benchmark>.json`` without a variant).

    The caller names the folder: a benchmark script passes its own (``benchmarks/results`` in a checkout,
    :func:`results_folder`); the library knows no results folder of its own."""
    return Path(results_dir) / (f"{benchmark}_{variant}.json" if variant else f"{benchmark}.json")


def results_folder(script: str | os.PathLike) -> Path:
    """The ``results`` folder beside ``script`` (a benchmark passes its ``__file__``), relative to the current
    folder where it can be (``benchmarks/results`` when run from the checkout), so records and messages carry no
    absolute path of this machine."""
    folder = Path(script).resolve().parent / "results"
    try:
        return Path(os.path.relpath(folder))
    except ValueError:  # another drive (Windows)
        return folder


def dataset_slug(dataset: str) -> str:
    """The result-file variant of a ``--dataset`` string: ``fashion-mnist[:DIR]`` -> ``fashion_mnist``,
    ``folder:/data/x`` -> ``x``."""
    from ..data.spec import parse_dataset_spec

    spec = parse_dataset_spec(dataset)
    name = spec.kind if spec.kind in ("digits", "fashion-mnist") else Path(str(spec.path).rstrip("/")).name
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or spec.kind


def process_start_time() -> float:
    """When this process started (seconds since the epoch): from ``/proc`` on Linux, else when this module was
    imported (the benchmark scripts import it at start-up)."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime, in clock ticks after boot
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED_AT


def _git(args: Sequence[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(cwd: str | os.PathLike | None = None) -> tuple[str | None, bool | None]:
    """(HEAD's commit, whether tracked files differ from it) of the checkout at ``cwd`` (default: the current
    folder, else the folder this package is installed from); (None, None) outside a git checkout."""
    for folder in ([Path(cwd)] if cwd is not None else [Path.cwd(), Path(__file__).resolve().parent]):
        commit = _git(["rev-parse", "HEAD"], folder)
        if commit:
            status = _git(["status", "--porcelain", "--untracked-files=no"], folder)
            return commit.strip(), (None if status is None else bool(status.strip()))
    return None, None


def _checkout_root(folder: str | os.PathLike | None = None) -> Path | None:
    """The top of the git checkout holding ``folder`` (default: the current folder); None outside one."""
    top = _git(["rev-parse", "--show-toplevel"], Path.cwd() if folder is None else Path(folder))
    return Path(top.strip()) if top else None


def _script_checkout() -> Path | None:
    """The checkout holding the running script (``python path/script.py``), when it is another than the current
    folder's: the code that ran is that checkout's (a worktree of another commit, say); None otherwise."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] not in ("", "-c", "-m") else None
    if script is None or not script.is_file():
        return None
    root = _checkout_root(script.resolve().parent)
    return root if root is not None and root != _checkout_root() else None


def portable_argv(argv: Sequence[str], root: Path | None = None) -> list[str]:
    """``argv`` without this machine's absolute paths: the interpreter (or script launcher) by its name, any other
    path inside the current folder, or inside the checkout ``root`` that holds it, relative to the current folder,
    and a path inside a checkout ``root`` elsewhere relative to that checkout's top."""
    base = Path.cwd()
    out = []
    for i, arg in enumerate(argv):
        path = Path(arg)
        if i == 0 and path.is_absolute():
            out.append(path.name)
        elif path.is_absolute() and (path.is_relative_to(base) or (
                root is not None and base.is_relative_to(root) and path.is_relative_to(root))):
            out.append(os.path.relpath(path, base))
        elif path.is_absolute() and root is not None and path.is_relative_to(root):
            out.append(path.relative_to(root).as_posix())
        else:
            out.append(arg)
    return out


def _readable_command(argv: Sequence[str]) -> str:
    """The command line as typed: the interpreter's path shortened to ``python``."""
    argv = list(argv)
    if argv and re.fullmatch(r"python[0-9.]*", Path(argv[0]).name):
        argv[0] = "python"
    return shlex.join(argv)


_SEED_FLAG = re.compile(r"--seeds?(?:=(.*))?$")


def _seeds_of(record: dict[str, Any], argv: Sequence[str]) -> list[int] | None:
    """The seeds a record names (``seeds``, ``run_seeds`` or ``seed``), else those of a ``--seed(s)`` flag."""
    for key in ("seeds", "run_seeds", "seed"):
        value = record.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return [value]
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
            return list(value)
    argv = list(argv)
    for i, arg in enumerate(argv):
        match = _SEED_FLAG.match(arg)
        if not match:
            continue
        values = match.group(1).split(",") if match.group(1) else []
        for following in argv[i + 1:] if match.group(1) is None else []:
            if following.startswith("-"):
                break
            values += following.split(",")
        try:
            return [int(v) for v in values if v]
        except ValueError:
            return None
    return None


def peak_rss_mib(usage: resource.struct_rusage) -> float:
    """The peak resident memory of a ``getrusage`` / ``os.wait4`` record in MiB (one decimal): ru_maxrss is KiB
    on Linux, bytes on macOS."""
    scale = 1 / 2**20 if sys.platform == "darwin" else 1 / 1024
    return round(usage.ru_maxrss * scale, 1)


def run_stamp(record: dict[str, Any] | None = None, seeds: Sequence[int] | None = None,
              started: float | None = None, machine: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the process that calls this ran, up to now.

    Parameters
    ----------
    record : dict, optional
        The result being written; its ``seeds`` / ``run_seeds`` / ``seed`` name the seeds when ``seeds`` is not
        given (else a ``--seed``/``--seeds`` flag on the command line does).
    seeds : sequence of int, optional
        The seeds the numbers were measured with.
    started : float, optional
        When the measurement started (``time.time()``); default: when the process started.
    machine : dict, optional
        The machine record (default: :func:`~jumbokit.benchmarking.machine.machine_record` now).

    Returns
    -------
    dict
        ``command`` (readable), ``argv`` (exact, paths of this machine made relative: :func:`portable_argv`),
        ``folder`` (where it ran, relative to the checkout; None outside one), ``commit``, ``dirty`` (of the
        checkout holding the script when it is another than the current folder's, else the current one's), ``machine``,
        ``started``
        and ``finished`` (UTC, ISO 8601), ``wall_s``, ``cpu_s`` (``self``, ``children``, ``total``: user + system
        seconds, children counted once they have been waited for), ``peak_rss_mib`` (``self`` and ``children``:
        the largest resident size of this process and of any one waited-for child), ``seeds`` (None when unknown).
    """
    from .machine import machine_record

    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    now = time.time()
    start = process_start_time() if started is None else float(started)
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_self, cpu_children = own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime
    elsewhere = _script_checkout()  # the script ran from another checkout: its commit is the code that ran
    commit, dirty = git_state(elsewhere)

    def iso(t: float) -> str:
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")

    root = _checkout_root()
    argv = portable_argv(argv, elsewhere or root)
    folder = os.path.relpath(Path.cwd(), root) if root is not None and Path.cwd().is_relative_to(root) else None
    return {"command": _readable_command(argv), "argv": argv, "folder": folder, "commit": commit, "dirty": dirty,
            "machine": machine if machine is not None else machine_record(),
            "started": iso(start), "finished": iso(now), "wall_s": round(now - start, 2),
            "cpu_s": {"self": round(cpu_self, 2), "children": round(cpu_children, 2),
                      "total": round(cpu_self + cpu_children, 2)},
            "peak_rss_mib": {"self": peak_rss_mib(own), "children": peak_rss_mib(children)},
            "seeds": list(seeds) if seeds is not None else _seeds_of(record or {}, argv)}


def is_legacy(record: dict[str, Any]) -> bool:
    """True for a record written before stamps (or whose stamp lacks one of :data:`STAMP_KEYS`)."""
    stamp = record.get("stamp") if isinstance(record, dict) else None
    return not isinstance(stamp, dict) or any(key not in stamp for key in STAMP_KEYS)


def stamp_line(stamp: dict[str, Any]) -> str:
    """One markdown line saying what a stamp holds."""
    commit = (stamp.get("commit") or "no git commit")[:12]
    dirty = {True: " (tree dirty)", False: "", None: ""}[stamp.get("dirty")]
    seeds = stamp.get("seeds")
    machine = stamp.get("machine") or {}
    return (f"Recorded: `{stamp.get('command')}` at commit {commit}{dirty}, {stamp.get('started')} to "
            f"{stamp.get('finished')}; wall {stamp.get('wall_s')} s, CPU {stamp.get('cpu_s', {}).get('total')} s "
            f"(children included), peak resident {stamp.get('peak_rss_mib', {}).get('self')} MiB (largest child "
            f"{stamp.get('peak_rss_mib', {}).get('children')} MiB); seeds "
            f"{', '.join(map(str, seeds)) if seeds else 'not given'}; {machine.get('device', '?')}, torch "
            f"{machine.get('torch', '?')}.")


def write_result(path: str | os.PathLike, record: dict[str, Any], markdown: str, quiet: bool = False,
                 seeds: Sequence[int] | None = None, started: float | None = None) -> Path:
    """Write ``record``, stamped (:func:`run_stamp`, under ``"stamp"``), as JSON to ``path`` and ``markdown`` to the
    same name with ``.md`` (the stamp's :func:`stamp_line` appended); both atomically.

    ``seeds`` and ``started`` go to :func:`run_stamp`. The caller's dict is not changed. Returns the JSON's path.
    Unless ``quiet``, says where they went on stdout.
    """
    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"expected a result path ending in .json, got {path}")
    if not isinstance(record, dict):
        raise ValueError(f"expected the record as a dict, got {type(record).__name__}")
    stamped = copy.copy(record)
    stamped["stamp"] = run_stamp(record, seeds=seeds, started=started)
    atomic_write_json(path, stamped)
    body = markdown.rstrip("\n")
    text = (body + "\n\n" if body else "") + stamp_line(stamped["stamp"]) + "\n"
    atomic_write_text(path.with_suffix(".md"), text)
    if not quiet:
        print(f"wrote {path} and {path.with_suffix('.md')}")
    return path
