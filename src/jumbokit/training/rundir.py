"""``RunDir``: the files of one run, written atomically (temp file + rename) and only by the main process.

Layout: ``config.json``, ``metrics.jsonl``, ``checkpoints/``, ``model.safetensors`` + ``model_config.json``,
``report.md``, ``results.csv`` (and any PNG a recipe adds).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Sequence

from jumbokit.encoders.io import atomic_write

CHECKPOINT_RE = re.compile(r"^(epoch|step)_(\d+)_(\d+)$")


def _json_default(obj: Any):
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return repr(obj)


def to_json(data: Any, indent: int | None = 2) -> str:
    """JSON text of ``data`` (paths, tuples, numpy / torch scalars allowed; NaN kept as NaN)."""
    return json.dumps(data, indent=indent, default=_json_default)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to a temp file next to ``path`` and rename it over ``path``."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def atomic_save_figure(path: str | os.PathLike, fig, dpi: int = 120, close: bool = True) -> Path:
    """Save a matplotlib figure atomically (PNG by the file's suffix), then close it."""
    try:
        return atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, bbox_inches="tight"))
    finally:
        if close:
            import matplotlib.pyplot as plt

            plt.close(fig)


def atomic_write_json(path: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as indented JSON (see ``to_json``) atomically."""
    return atomic_write_text(path, to_json(data) + "\n")


def csv_text(rows: Sequence[dict[str, Any]], fieldnames: Sequence[str] | None = None) -> str:
    """CSV text of dict rows; columns = ``fieldnames`` or the union of keys in first-seen order."""
    if fieldnames is None:
        fieldnames = list(dict.fromkeys(k for row in rows for k in row))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(fieldnames), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _fmt(v) for k, v in row.items()})
    return buf.getvalue()


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, digits: int = 4,
                   formats: dict[str, str] | None = None) -> str:
    """A GitHub markdown table of dict rows, columns in the order of ``columns`` (default: keys in first-seen
    order). ``formats`` gives a column's format spec (``{"top1": ".2f"}``: accuracies in percent with 2 decimals);
    other floats get ``digits`` significant places; strings (pre-formatted cells) and ints are shown as they are,
    None as an empty cell."""
    if not rows:
        return ""
    columns = list(columns or dict.fromkeys(k for row in rows for k in row))
    formats = formats or {}

    def cell(column: str, v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, float) and math.isnan(v):
            return "nan"
        if column in formats and isinstance(v, (int, float)) and not isinstance(v, bool):
            return format(v, formats[column])
        return f"{v:.{digits}g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(c, row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


class RunDir:
    """Helpers for one run directory. With ``enabled=False`` (non-main processes) every write is a no-op."""

    CONFIG = "config.json"
    ARGS = "args.yaml"  # the run's flags, a --config file
    METRICS = "metrics.jsonl"
    RESUMES = "resumes.jsonl"
    REPORT = "report.md"
    RESULTS = "results.csv"
    CHECKPOINTS = "checkpoints"

    def __init__(self, path: str | os.PathLike, enabled: bool = True, create: bool = True):
        self.path = Path(path).expanduser()
        self.enabled = enabled
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"run directory {self.path} exists and is not a directory")
        if create and enabled:
            self.path.mkdir(parents=True, exist_ok=True)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ---------------------------------------------------------------- files
    def write_text(self, name: str, text: str) -> Path:
        if self.enabled:
            atomic_write_text(self.path / name, text)
        return self.path / name

    def write_json(self, name: str, data: Any) -> Path:
        return self.write_text(name, to_json(data) + "\n")

    def read_json(self, name: str) -> Any:
        return json.loads((self.path / name).read_text())

    def write_config(self, config: dict[str, Any]) -> Path:
        """Write ``config.json`` (replacing it)."""
        return self.write_json(self.CONFIG, config)

    def update_config(self, **entries: Any) -> Path:
        """Merge entries into ``config.json`` (created if missing)."""
        current = self.read_config() if (self.path / self.CONFIG).exists() else {}
        current.update(entries)
        return self.write_config(current)

    def read_config(self) -> dict[str, Any]:
        return self.read_json(self.CONFIG)

    def _append_line(self, name: str, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path / name, "a") as fh:
            fh.write(to_json(record, indent=None) + "\n")
            fh.flush()

    def _read_lines(self, name: str) -> list[dict[str, Any]]:
        file = self.path / name
        if not file.exists():
            return []
        out = []
        for line in file.read_text().splitlines():
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut short by a crash
                    continue
        return out

    def append_metrics(self, record: dict[str, Any]) -> None:
        """Append one JSON line to ``metrics.jsonl`` (a line is small; appends are flushed at once)."""
        self._append_line(self.METRICS, record)

    def read_metrics(self) -> list[dict[str, Any]]:
        return self._read_lines(self.METRICS)

    def append_resume(self, record: dict[str, Any]) -> None:
        """Append one JSON line to ``resumes.jsonl``: a run's ``config.json`` is its first record and stays as
        written; each resume adds a line instead (time, checkpoint, position, changed settings)."""
        self._append_line(self.RESUMES, record)

    def read_resumes(self) -> list[dict[str, Any]]:
        """The ``resumes.jsonl`` records, oldest first (``[]`` for a run never resumed)."""
        return self._read_lines(self.RESUMES)

    def truncate_metrics(self, max_step: int) -> None:
        """Drop metric lines logged after optimizer step ``max_step`` (used when resuming from a checkpoint)."""
        kept = [r for r in self.read_metrics() if r.get("step", 0) <= max_step]
        if self.enabled and (self.path / self.METRICS).exists():
            self.write_text(self.METRICS, "".join(to_json(r, indent=None) + "\n" for r in kept))

    def write_report(self, markdown: str) -> Path:
        return self.write_text(self.REPORT, markdown if markdown.endswith("\n") else markdown + "\n")

    def write_results_csv(
        self, rows: Sequence[dict[str, Any]], fieldnames: Sequence[str] | None = None, name: str = RESULTS
    ) -> Path:
        return self.write_text(name, csv_text(rows, fieldnames))

    # ---------------------------------------------------------------- checkpoints
    @property
    def checkpoints_dir(self) -> Path:
        return self.path / self.CHECKPOINTS

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest first (ordered by optimizer step)."""
        return list_checkpoints(self.checkpoints_dir)

    def discard_start(self) -> None:
        """Remove what a fresh run writes when it starts (config.json, args.yaml, metrics.jsonl, resumes.jsonl,
        tracker logs) and the folder when that leaves it empty: a run stopped by bad input before its first
        checkpoint leaves nothing that a rerun would have to be told about."""
        if not self.enabled:
            return
        for name in (self.CONFIG, self.ARGS, self.METRICS, self.RESUMES):
            (self.path / name).unlink(missing_ok=True)
        for folder in (self.checkpoints_dir, self.path / "logs", self.path):
            try:
                folder.rmdir()  # only when empty
            except OSError:
                pass

    def latest_checkpoint(self) -> Path | None:
        found = self.checkpoints()
        return found[-1] if found else None


def checkpoint_name(epoch: int, step: int, end_of_epoch: bool) -> str:
    """``epoch_{E}_{S}`` for checkpoints after epoch E (1-based count), ``step_{E}_{S}`` mid-epoch."""
    return f"{'epoch' if end_of_epoch else 'step'}_{epoch:04d}_{step:08d}"


def list_checkpoints(folder: str | os.PathLike) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for p in folder.iterdir():
        m = CHECKPOINT_RE.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(3)), m.group(1) == "epoch", p))
    return [p for *_, p in sorted(found)]


def find_latest_run(root: str | os.PathLike = "runs", prefix: str = "", dataset: str | None = None) -> Path | None:
    """The newest run directory under ``root`` whose name starts with ``prefix`` (e.g. "mae_pretrain"), that
    holds a final ``model.safetensors`` and, when ``dataset`` is given, a ``data`` record for that dataset in its
    ``config.json``; None when there is none. Newest = latest ``model.safetensors``."""
    best: tuple[float, Path] | None = None
    root = Path(root)
    for model_file in root.glob(f"{prefix}*/model.safetensors") if root.is_dir() else []:
        run = model_file.parent
        if dataset is not None and str(read_data_record(run).get("dataset")) != dataset:
            continue
        mtime = model_file.stat().st_mtime
        if best is None or mtime > best[0]:
            best = (mtime, run)
    return None if best is None else best[1]


def read_data_record(run_or_file: str | os.PathLike) -> dict[str, Any]:
    """The ``data`` record (dataset, mean/std, img_size, in_chans, classes) that a run stored in its
    ``config.json``; ``{}`` when the run (or the folder of a weights file) has none or it cannot be read."""
    path = Path(run_or_file)
    config = (path if path.is_dir() else path.parent) / RunDir.CONFIG
    try:
        record = json.loads(config.read_text()).get("data")
    except (OSError, json.JSONDecodeError, AttributeError):
        return {}
    return record if isinstance(record, dict) else {}
