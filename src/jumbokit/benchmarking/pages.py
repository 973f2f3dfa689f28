"""Results tables generated from the raw records: ``python -m jumbokit.benchmarking.pages --write`` / ``--check``.

A spec file (TOML; the checkout's is ``benchmarks/pages.toml``) lists tables and their rows. A table names a
markdown page, a marker and its columns; the command replaces what lies between ::

    <!-- generated: MARKER -->
    ...
    <!-- end generated -->

in that page with the table computed from the records. A row names its records (JSON files in the spec's
``results`` folder) and gives each cell as a template: text with ``{expression}`` or ``{expression:format}``
fields, evaluated over the records (``r`` is the row's first record, ``rs`` all of them, ``R(name)`` any other)
and the row's ``let`` values (computed in order), with the helpers of :data:`HELPERS` (``paired`` is
:func:`~jumbokit.benchmarking.stats.paired_test`). A row without records says "no raw record". A table with
``record_column = true`` gets a last column linking each row's records and marking the legacy ones (records written
before :func:`~jumbokit.benchmarking.records.write_result` stamped them), with a note below the table.

``--check`` recomputes every table and fails, showing the difference, when a page and its records disagree (a number
edited by hand, a record rewritten); ``--write`` writes the computed tables into the pages. Hand-written prose
outside the markers is never touched.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import statistics
import sys
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from . import stats
from .records import is_legacy

__all__ = ["HELPERS", "Spec", "PageError", "check", "load_spec", "main", "render_template", "render_tables", "write"]

BEGIN = "<!-- generated: {marker} -->"
END = "<!-- end generated -->"
LEGACY_NOTE = ("legacy: a record written before records carried their command line, git commit, times, CPU "
               "seconds and peak memory.")


class PageError(ValueError):
    """A spec, template, page or record that cannot be rendered."""


def _pluck(items: Sequence[dict[str, Any]], key: str, **where: Any) -> list[Any]:
    """``[item[key] for item in items if item matches every where]``."""
    return [item[key] for item in items if all(item.get(k) == v for k, v in where.items())]


def _one(items: Sequence[dict[str, Any]], **where: Any) -> dict[str, Any]:
    """The one item matching every ``where``; raises when there is none or several."""
    found = [item for item in items if all(item.get(k) == v for k, v in where.items())]
    if len(found) != 1:
        raise PageError(f"expected one item with {where}, found {len(found)}")
    return found[0]


def _per(items: Sequence[dict[str, Any]], key: str, value: str, **where: Any) -> dict[Any, Any]:
    """``{item[key]: item[value]}`` over the items matching every ``where`` (a key given twice raises)."""
    out: dict[Any, Any] = {}
    for item in items:
        if all(item.get(k) == v for k, v in where.items()):
            if item[key] in out:
                raise PageError(f"two items with {key} = {item[key]!r} and {where}")
            out[item[key]] = item[value]
    return out


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(list(values)))


def _thousands(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


#: What a template can call besides the records and its row's ``let`` values.
HELPERS: dict[str, Any] = {
    "paired": stats.paired_test, "format_p": stats.format_p, "mean": _mean, "median": statistics.median,
    "pluck": _pluck, "one": _one, "per": _per, "thousands": _thousands, "np": np, "math": math, "len": len, "min": min,
    "max": max, "sum": sum, "sorted": sorted, "round": round, "abs": abs, "zip": zip, "list": list,
    "range": range, "float": float, "int": int, "str": str, "any": any, "all": all, "dict": dict, "set": set,
    "enumerate": enumerate,
}


def _split_fields(template: str) -> list[tuple[str, str | None, str | None]]:
    """A template as (literal, expression, format) parts; ``{{`` and ``}}`` are literal braces."""
    parts, literal, i = [], [], 0
    while i < len(template):
        ch = template[i]
        if ch in "{}" and template[i:i + 2] in ("{{", "}}"):
            literal.append(ch)
            i += 2
            continue
        if ch == "}":
            raise PageError(f"unmatched '}}' in template {template!r}")
        if ch != "{":
            literal.append(ch)
            i += 1
            continue
        depth, quote, j, colon = 0, None, i + 1, None
        while j < len(template):
            c = template[j]
            if quote:
                if c == "\\":
                    j += 1
                elif c == quote:
                    quote = None
            elif c in "'\"":
                quote = c
            elif c in "([{":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif c == "}":
                if depth == 0:
                    break
                depth -= 1
            elif c == ":" and depth == 0 and colon is None:
                colon = j
            j += 1
        else:
            raise PageError(f"unclosed '{{' in template {template!r}")
        expression = template[i + 1:colon if colon is not None else j].strip()
        fmt = template[colon + 1:j] if colon is not None else None
        parts.append(("".join(literal), expression, fmt))
        literal, i = [], j + 1
    parts.append(("".join(literal), None, None))
    return parts


def render_template(template: str, namespace: dict[str, Any]) -> str:
    """The template with every ``{expression[:format]}`` replaced by its value (formatted with ``format()``)."""
    out = []
    for literal, expression, fmt in _split_fields(template):
        out.append(literal)
        if expression is None:
            continue
        try:
            value = eval(expression, namespace)  # noqa: S307 (the checkout's own spec, builtins limited to HELPERS)
        except Exception as error:  # noqa: BLE001 (re-raised with the expression named)
            raise PageError(f"{expression!r}: {type(error).__name__}: {error}") from error
        if hasattr(value, "verdict") and not fmt:
            value = value.verdict
        out.append(format(value, fmt) if fmt else str(value))
    return "".join(out)


@dataclass
class Table:
    id: str
    page: str
    marker: str
    columns: list[str]
    record_column: bool = True
    note: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Spec:
    root: Path
    results: Path
    tables: list[Table]

    @property
    def results_dir(self) -> Path:
        return self.root / self.results


def load_spec(path: str | os.PathLike, root: str | os.PathLike | None = None) -> Spec:
    """Read a spec file; pages and the results folder are relative to ``root`` (default: the current folder)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise PageError(f"cannot read the spec {path}: {error}") from error
    if "results" not in data:
        raise PageError(f"{path}: expected a top-level 'results' folder")
    tables: dict[str, Table] = {}
    for entry in data.get("table", []):
        missing = {"id", "page", "marker", "columns"} - set(entry)
        if missing:
            raise PageError(f"{path}: table {entry.get('id', '?')} lacks {sorted(missing)}")
        if entry["id"] in tables:
            raise PageError(f"{path}: table id {entry['id']!r} given twice")
        tables[entry["id"]] = Table(entry["id"], entry["page"], entry["marker"], list(entry["columns"]),
                                    bool(entry.get("record_column", True)), entry.get("note", ""))
    for number, row in enumerate(data.get("row", []), 1):
        if row.get("table") not in tables:
            raise PageError(f"{path}: row {number} names table {row.get('table')!r}; tables: {sorted(tables)}")
        table = tables[row["table"]]
        if len(row.get("cells", [])) != len(table.columns):
            raise PageError(f"{path}: row {number} of table {table.id!r} has {len(row.get('cells', []))} cells "
                            f"for {len(table.columns)} columns")
        table.rows.append(row)
    return Spec(Path(root) if root is not None else Path.cwd(), Path(data["results"]), list(tables.values()))


def _escape_cell(text: str) -> str:
    return text.replace("\n", " ").replace("|", "\\|")


def _relative_link(page: Path, target: Path) -> str:
    return Path(os.path.relpath(target, page.parent)).as_posix()


def render_table(spec: Spec, table: Table, load: Callable[[str], Any]) -> str:
    """The markdown of one table (header, rows, the legacy note where a row's record is legacy)."""
    page = spec.root / table.page
    columns = table.columns + (["record"] if table.record_column else [])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    any_legacy = False
    for number, row in enumerate(table.rows, 1):
        names = [row["record"]] if isinstance(row.get("record"), str) else list(row.get("records", []))
        records = [load(name) for name in names]
        namespace = dict(HELPERS, __builtins__={})
        namespace.update(r=records[0] if records else None, rs=records, R=load)
        where = f"{table.page} [{table.marker}] row {number} ({row['cells'][0][:40]!r})"
        try:
            for name, expression in row.get("let", {}).items():
                namespace[name] = eval(expression, namespace)  # noqa: S307
            cells = [render_template(cell, namespace) for cell in row["cells"]]
        except PageError as error:
            raise PageError(f"{where}: {error}") from None
        except Exception as error:  # noqa: BLE001 (a let expression)
            raise PageError(f"{where}: {type(error).__name__}: {error}") from None
        if table.record_column:
            links = []
            for name, record in zip(names, records):
                stem = name[:-5] if name.endswith(".json") else name
                target = spec.results_dir / name
                markdown_copy = target.with_suffix(".md")
                link = _relative_link(page, markdown_copy if markdown_copy.exists() else target)
                legacy = is_legacy(record)
                any_legacy |= legacy
                links.append(f"[{stem}]({link})" + (" (legacy)" if legacy else ""))
            cells.append(", ".join(links) if links else "no raw record")
        lines.append("| " + " | ".join(_escape_cell(cell) for cell in cells) + " |")
    notes = [table.note] if table.note else []
    if any_legacy:
        notes.append(LEGACY_NOTE[0].upper() + LEGACY_NOTE[1:])
    return "\n".join(lines + ([""] + [" ".join(notes)] if notes else []))


def render_tables(spec: Spec) -> dict[tuple[str, str], str]:
    """(page, marker) -> the generated markdown of every table in the spec."""

    @lru_cache(maxsize=None)
    def load(name: str) -> Any:
        path = spec.results_dir / name
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise PageError(f"cannot read the record {path}: {error}") from error

    return {(table.page, table.marker): render_table(spec, table, load) for table in spec.tables}


def _replace_block(text: str, marker: str, body: str, page: str) -> str:
    begin = BEGIN.format(marker=marker)
    pattern = re.compile(re.escape(begin) + r"\n(.*?)" + re.escape(END), re.S)
    found = pattern.findall(text)
    if len(found) != 1:
        raise PageError(f"{page}: expected one '{begin}' ... '{END}' block, found {len(found)}")
    return pattern.sub(lambda _: f"{begin}\n{body}\n{END}", text)


def _updated_pages(spec: Spec) -> dict[str, tuple[str, str]]:
    """page -> (its text now, its text with every generated block recomputed)."""
    pages: dict[str, tuple[str, str]] = {}
    for (page, marker), body in render_tables(spec).items():
        path = spec.root / page
        if page not in pages:
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as error:
                raise PageError(f"cannot read the page {path}: {error}") from error
            pages[page] = (text, text)
        old, new = pages[page]
        pages[page] = (old, _replace_block(new, marker, body, page))
    return pages


def check(spec: Spec) -> list[str]:
    """The differences between the pages and their records, as unified diffs (empty when they agree)."""
    problems = []
    for page, (old, new) in _updated_pages(spec).items():
        if old != new:
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), f"{page} (page)",
                                        f"{page} (from the records)", n=0, lineterm="")
            problems.append("\n".join(diff))
    return problems


def write(spec: Spec) -> list[str]:
    """Write every generated table into its page; returns the pages that changed."""
    from ..training.rundir import atomic_write_text

    changed = []
    for page, (old, new) in _updated_pages(spec).items():
        if old != new:
            atomic_write_text(spec.root / page, new)
            changed.append(page)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jumbokit.benchmarking.pages", description=__doc__.split("\n")[0],
                                     epilog="Run from the checkout's root (or pass --root).")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="fail when a page differs from its records")
    mode.add_argument("--write", action="store_true", help="write the generated tables into the pages")
    parser.add_argument("--spec", default="benchmarks/pages.toml", help="the spec, relative to --root "
                        "(default: %(default)s)")
    parser.add_argument("--root", default=".", help="the checkout's root (default: the current folder)")
    args = parser.parse_args(argv)
    root = Path(args.root)
    try:
        spec = load_spec(root / args.spec, root)
        if args.write:
            changed = write(spec)
            print(f"wrote {len(changed)} page(s)" + (": " + ", ".join(changed) if changed else ""))
            return 0
        problems = check(spec)
    except PageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if problems:
        print("\n\n".join(problems))
        print(f"\n{len(problems)} page(s) differ from their records; `python -m jumbokit.benchmarking.pages "
              "--write` regenerates them", file=sys.stderr)
        return 1
    rows = sum(len(table.rows) for table in spec.tables)
    print(f"{len(spec.tables)} tables, {rows} rows: every page agrees with its records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
