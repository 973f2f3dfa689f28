"""Reports of the architecture search: the supernet's inherited-weight accuracy, the search's best
architecture (``best_arch.json``), its top candidates (``results.csv`` / ``report.md``) and the
FLOPs-vs-accuracy plot of every candidate (``pareto.png``). Accuracies are top-1 in percent.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from .search import SearchResult
from .space import SearchSpace

logger = logging.getLogger(__name__)

__all__ = ["best_arch_payload", "inherited_fitness", "plot_pareto", "search_rows", "subnet_top1", "supernet_rows",
           "write_search_report", "write_supernet_report"]


@torch.no_grad()
def subnet_top1(model: nn.Module, batches: Iterable, arch: dict[str, Any] | None = None) -> float:
    """Top-1 (%) over (images, labels) ``batches`` of ``model``, or of the supernet's ``arch`` when given."""
    from jumbokit.training import evaluate_classifier

    forward: Callable | None = None if arch is None else (lambda m, x: m(x, arch))
    metrics = evaluate_classifier(model, batches, topk=(1,), forward=forward)
    return float(metrics["top1"])


def inherited_fitness(supernet: nn.Module, batches: Iterable) -> Callable[[dict[str, Any]], float]:
    """``fitness(arch)``: val top-1 (%) of the subnet extracted from ``supernet`` with its inherited weights."""

    @torch.no_grad()
    def fitness(arch: dict[str, Any]) -> float:
        return subnet_top1(supernet.extract(arch).eval(), batches)

    return fitness


def supernet_rows(supernet: nn.Module, batches: Iterable, probes: dict[str, dict[str, Any]], img_size: int,
                  in_chans: int, num_classes: int) -> list[dict[str, Any]]:
    """One row per probe architecture (name -> arch): its MFLOPs and val top-1 (%) with inherited weights."""
    rows = []
    for name, arch in probes.items():
        flops = supernet.space.flops(arch, img_size, in_chans, num_classes)
        rows.append({"subnet": name, "MFLOPs": round(flops / 1e6, 2),
                     "val_top1": round(subnet_top1(supernet, batches, arch), 2)})
    return rows


def write_supernet_report(out: str | Path, rows: Sequence[dict[str, Any]], header: Sequence[str]) -> Path:
    """``report.md`` of a supernet run: ``header`` bullet lines, the rows, how to search it."""
    from jumbokit.training import RunDir, markdown_table

    title, *bullets = header
    return RunDir(out).write_report(
        f"# {title}\n\n" + "".join(f"- {b}\n" for b in bullets)
        + f"\n## Inherited-weight accuracy\n\n{markdown_table(rows, list(rows[0]))}\n"
        f"Search it: `jumbokit nas-search --checkpoint {out} --flops-of vit_pico_cls`\n")


def best_arch_payload(space: SearchSpace, best: dict[str, Any], img_size: int, in_chans: int, num_classes: int,
                      budget: float) -> dict[str, Any]:
    """The content of ``best_arch.json``: the architecture, its space, encoder config, FLOPs and val top-1 (%)."""
    return {"arch": best["arch"], "space": space.to_dict(),
            "config": space.config(best["arch"], img_size, in_chans, num_classes), "flops": best["flops"],
            "val_top1": best["fitness"], "budget": budget}


def search_rows(history: Sequence[dict[str, Any]], top: int = 10) -> list[dict[str, Any]]:
    """The ``top`` candidates by fitness (val top-1 %): rank, MFLOPs, origin, global tokens, widths, depths."""
    best = sorted(history, key=lambda r: r["fitness"], reverse=True)[:top]
    return [{"rank": i + 1, "MFLOPs": round(r["flops"] / 1e6, 2), "val_top1": round(r["fitness"], 2),
             "origin": r["origin"], "iteration": r["iteration"], "tokens": r["arch"]["global_tokens"],
             "dims": "/".join(map(str, r["arch"]["dims"])),
             "depths": "/".join(str(sum(1 for h in hs if h)) for hs in r["arch"]["heads"])}
            for i, r in enumerate(best)]


def plot_pareto(history: Sequence[dict[str, Any]], best: dict[str, Any], budget: float, path: str | Path) -> None:
    """Scatter of every candidate's MFLOPs vs val top-1 (%), coloured by origin; the best starred."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jumbokit.training import atomic_save_figure

    fig, ax = plt.subplots(figsize=(6, 4))
    for origin, colour in (("random", "tab:gray"), ("mutation", "tab:blue"), ("crossover", "tab:orange")):
        rows = [r for r in history if r["origin"] == origin]
        ax.scatter([r["flops"] / 1e6 for r in rows], [r["fitness"] for r in rows], s=8, alpha=0.6,
                   color=colour, label=f"{origin} ({len(rows)})")
    ax.scatter([best["flops"] / 1e6], [best["fitness"]], marker="*", s=160, color="tab:red", label="best")
    ax.axvline(budget / 1e6, color="k", lw=0.8, ls="--")
    ax.set(xlabel="MFLOPs per image", ylabel="val top-1 with inherited weights (%)",
           title="evolutionary search: every candidate")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    atomic_save_figure(path, fig, dpi=120)


def write_search_report(out: str | Path, space: SearchSpace, result: SearchResult, payload: dict[str, Any],
                        settings: str, dataset: str) -> list[dict[str, Any]]:
    """Write ``best_arch.json``, ``pareto.png``, ``results.csv`` (top 10) and ``report.md`` into ``out``;
    ``settings`` is one line of the search's options. Returns the top-10 rows."""
    from jumbokit.training import RunDir, markdown_table

    run = RunDir(out)
    run.write_json("best_arch.json", payload)
    plot_pareto(result.history, result.best, payload["budget"], run / "pareto.png")
    rows = search_rows(result.history)
    run.write_results_csv(rows, fieldnames=list(rows[0]))
    low, high = result.window
    run.write_report(
        f"# Evolutionary search: space {space.name}, budget {payload['budget'] / 1e6:.2f} MFLOPs\n\n"
        f"- {len(result.history)} candidates in [{low / 1e6:.2f}, {high / 1e6:.2f}] MFLOPs; {settings}\n"
        f"- fitness: {dataset} val top-1 (%) with inherited weights\n\n"
        f"## Top 10\n\n{markdown_table(rows, list(rows[0]))}\n![pareto](pareto.png)\n\n"
        f"Retrain the best: `jumbokit supervised --arch {Path(out) / 'best_arch.json'}`\n")
    return rows
