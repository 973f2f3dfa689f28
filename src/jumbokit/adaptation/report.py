"""Results of a test-time adaptation run: rows (top-1 in percent per severity, method and corruption, plus
the average over corruptions), throughput, the accuracy table (the SAR paper's Table 2 layout), the bar plot,
and the files ``results.csv``, ``report.md``, ``accuracy.png``, ``summary.json``.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .jobs import METHOD_LABELS

logger = logging.getLogger(__name__)

__all__ = ["SHORT_NAMES", "accuracy_table", "plot_accuracy", "result_rows", "terminal_summary", "write_report"]

SHORT_NAMES = {
    "gaussian_noise": "Gauss", "shot_noise": "Shot", "impulse_noise": "Impul", "defocus_blur": "Defoc",
    "glass_blur": "Glass", "motion_blur": "Motion", "zoom_blur": "Zoom", "snow": "Snow", "frost": "Frost",
    "fog": "Fog", "brightness": "Brit", "contrast": "Contr", "elastic_transform": "Elast", "pixelate": "Pixel",
    "jpeg_compression": "JPEG", "speckle_noise": "Speck", "gaussian_blur": "GBlur", "spatter": "Spat",
    "saturate": "Satur", "avg": "Avg",
}


def _label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def result_rows(records: Sequence[dict[str, Any]], corruptions: Sequence[str], model: str,
                setting: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows, throughput) of job records (see :func:`jumbokit.adaptation.jobs.run_job`).

    rows: one per (severity, method, corruption) with ``top1`` (percent) and ``n`` (images), then the
    ``avg`` row (mean of the corruptions' top1, ``n`` their sum). throughput: images/s and counters."""
    rows: list[dict[str, Any]] = []
    throughput: list[dict[str, Any]] = []
    for rec in records:
        base = {"model": model, "setting": setting, "severity": rec["severity"], "method": rec["method"]}
        accs = []
        for corruption in corruptions:
            total = rec["total"].get(corruption, 0)
            top1 = 100.0 * rec["correct"].get(corruption, 0) / total if total else float("nan")
            accs.append(top1)
            rows.append({**base, "corruption": corruption, "top1": top1, "n": total})
        images = sum(rec["total"].values())
        rows.append({**base, "corruption": "avg", "top1": sum(accs) / len(accs), "n": images})
        stats = rec["stats"]
        throughput.append({"severity": rec["severity"], "method": rec["method"],
                           "images_per_s": images / rec["seconds"] if rec["seconds"] > 0 else float("nan"),
                           "updates": stats.get("updates", 0), "selected": stats.get("selected", 0),
                           "recoveries": stats.get("recoveries", ""), "skipped": stats.get("skipped", ""),
                           "nan_batches": rec["nan_batches"]})
    return rows, throughput


def _table_rows(rows: Sequence[dict[str, Any]], severity: int) -> tuple[list[str], list[dict[str, str]]]:
    """Columns and cells of one severity's table: a row per method, a column per corruption, then Avg."""
    sel = [r for r in rows if r["severity"] == severity]
    domains = [d for d in dict.fromkeys(r["corruption"] for r in sel) if d != "avg"] + ["avg"]
    top1 = {(r["method"], r["corruption"]): r["top1"] for r in sel}
    columns = ["Method"] + [SHORT_NAMES.get(d, d) for d in domains]
    table = []
    for method in dict.fromkeys(r["method"] for r in sel):
        cells = [f"{top1.get((method, d), math.nan):.2f}" for d in domains]
        table.append(dict(zip(columns, [_label(method), *cells])))
    return columns, table


def accuracy_table(rows: Sequence[dict[str, Any]], severity: int, markdown: bool = True) -> str:
    """One severity's top-1 (%) table: markdown, or aligned plain text for the terminal."""
    from jumbokit.training.rundir import markdown_table

    columns, table = _table_rows(rows, severity)
    if markdown:
        return markdown_table(table, columns)
    widths = [max(len(c), *(len(row[c]) for row in table)) for c in columns]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(columns), *(line([row[c] for c in columns]) for row in table)]) + "\n"


def plot_accuracy(rows: Sequence[dict[str, Any]], path: str | Path, title: str) -> None:
    """Grouped bars: top-1 (%) per corruption (and the average) for each method and severity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jumbokit.training.rundir import atomic_save_figure

    keys = list(dict.fromkeys((r["severity"], r["method"]) for r in rows))
    domains = list(dict.fromkeys(r["corruption"] for r in rows))
    top1 = {(r["severity"], r["method"], r["corruption"]): r["top1"] for r in rows}
    fig, ax = plt.subplots(figsize=(max(8, 0.75 * len(domains) * max(1, len(keys)) / 3), 4))
    width = 0.8 / max(len(keys), 1)
    for k, (severity, method) in enumerate(keys):
        xs = [i + (k - (len(keys) - 1) / 2) * width for i in range(len(domains))]
        ax.bar(xs, [top1.get((severity, method, d), 0.0) for d in domains], width,
               label=f"{_label(method)} (sev {severity})")
    ax.set_xticks(range(len(domains)))
    ax.set_xticklabels([SHORT_NAMES.get(d, d) for d in domains], rotation=45, ha="right")
    ax.set(ylabel="top-1 accuracy (%)", ylim=(0, 100), title=title)
    ax.legend(fontsize=8, ncol=min(4, len(keys)))
    ax.grid(axis="y", alpha=0.3)
    atomic_save_figure(path, fig)


def _throughput_table(throughput: Sequence[dict[str, Any]]) -> str:
    from jumbokit.training.rundir import markdown_table

    table = [{"severity": t["severity"], "method": _label(t["method"]), "images/s": f"{t['images_per_s']:.1f}",
              "updates": t["updates"], "selected": t["selected"], "recoveries": t["recoveries"],
              "skipped": t["skipped"], "NaN batches": t["nan_batches"]} for t in throughput]
    return markdown_table(table)


def write_report(out: str | Path, summary: dict[str, Any], header: Sequence[str]) -> Path:
    """Write results.csv, accuracy.png, report.md (``header``: bullet lines) and summary.json into ``out``.

    ``summary`` holds at least model, title, severities, rows and throughput (see :func:`result_rows`)."""
    from jumbokit.training.rundir import atomic_write_json, atomic_write_text, csv_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows, severities = summary["rows"], summary["severities"]
    atomic_write_text(out / "results.csv", csv_text(rows))
    plot_accuracy(rows, out / "accuracy.png", summary["title"])
    report = [f"# Test-time adaptation: {summary['model']}", "", *(f"- {line}" for line in header), ""]
    for severity in severities:
        report += [f"## Top-1 accuracy (%), severity {severity}", "", accuracy_table(rows, severity)]
    report += ["## Adaptation throughput and counters", "", _throughput_table(summary["throughput"]),
               "![accuracy](accuracy.png)", ""]
    atomic_write_text(out / "report.md", "\n".join(report))
    atomic_write_json(out / "summary.json", {**summary, "created": time.strftime("%Y-%m-%d %H:%M:%S")})
    return out


def terminal_summary(summary: dict[str, Any]) -> str:
    """The text printed at the end of a run: one table per severity, then the throughput line."""
    severities, throughput = summary["severities"], summary["throughput"]
    parts = []
    for severity in severities:
        parts += [f"\n{summary['title']}, severity {severity}: top1 (%)",
                  accuracy_table(summary["rows"], severity, markdown=False).rstrip("\n")]
    speeds = [f"{_label(t['method'])}{'' if len(severities) == 1 else ' sev ' + str(t['severity'])} "
              f"{t['images_per_s']:.0f}" + (f" (recoveries {t['recoveries']})" if t["recoveries"] not in ("", 0)
                                            else "") for t in throughput]
    parts.append("\nthroughput (images/s): " + ", ".join(speeds))
    return "\n".join(parts)
