"""Human reports of a classification run: accuracies in percent, training curves, report.md text."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from torch import nn

from jumbokit.encoders import save

from .rundir import atomic_save_figure, markdown_table

__all__ = ["RESULT_COLUMNS", "classification_report", "collapse_branches", "evaluate_splits", "plot_curves",
           "summary_text"]

RESULT_COLUMNS = ["model", "dataset", "split", "top1", "top5", "loss", "n"]
EPOCH_COLUMNS = ["epoch", "train_loss", "val_top1", "val_loss", "lr", "epoch_time_s"]


def plot_curves(history: Sequence[dict[str, Any]], path: str | Path) -> Path | None:
    """PNG of the training loss and the validation top-1 (%) per epoch; None without history."""
    if not history:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] for r in history]
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
    ax[0].plot(epochs, [r.get("train_loss") for r in history], marker="o")
    ax[0].set(xlabel="epoch", ylabel="train loss", title="training loss")
    if "val_top1" in history[0]:
        ax[1].plot(epochs, [r["val_top1"] for r in history], marker="o", color="tab:green")
    ax[1].set(xlabel="epoch", ylabel="val top-1 (%)", title="validation accuracy")
    for a in ax:
        a.grid(alpha=0.3)
    fig.tight_layout()
    return atomic_save_figure(path, fig, dpi=110)


def classification_report(title: str, facts: Sequence[str], rows: Sequence[dict[str, Any]],
                          history: Sequence[dict[str, Any]], notes: str = "", curves: str | None = None) -> str:
    """Markdown of a classification run: a bullet list of ``facts``, the final metrics ``rows`` (columns
    ``RESULT_COLUMNS``), ``notes``, the per-epoch table and the ``curves`` image (file name)."""
    epoch_cols = [c for c in EPOCH_COLUMNS if history and c in history[0]]
    text = f"# {title}\n\n" + "".join(f"- {fact}\n" for fact in facts)
    text += f"\n## Final metrics\n\n{markdown_table(_two_decimals(rows), RESULT_COLUMNS)}\n"
    text += f"{notes}\n" if notes else ""
    if history:
        text += f"## Per epoch\n\n{markdown_table(_two_decimals(history), epoch_cols)}\n"
    return text + (f"![curves]({curves})\n" if curves else "")


def _two_decimals(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with percentages (keys ending in top1 / top5) as text with 2 decimals."""
    return [{k: f"{v:.2f}" if k.endswith(("top1", "top5")) and isinstance(v, float) else v for k, v in r.items()}
            for r in rows]


def summary_text(rows: Sequence[dict[str, Any]], model: str) -> str:
    """One line of the rows of ``model``: ``val top1 93.25%  test top1 92.10%``."""
    return "  ".join(f"{r['split']} top1 {r['top1']:.2f}%" for r in rows if r["model"] == model)


def evaluate_splits(model: nn.Module, name: str, dataset: str, loaders: dict[str, Any],
                    progress: bool = False) -> list[dict[str, Any]]:
    """One results row per evaluation loader: model, dataset, split, top1, top5 (percent), loss, n."""
    from .evaluate import evaluate_classifier

    return [{"model": name, "dataset": dataset, "split": split,
             **evaluate_classifier(model, loader, progress=progress, desc=f"eval {split}")}
            for split, loader in loaders.items()]


def collapse_branches(trained: nn.Module, name: str, dataset: str, loaders: dict[str, Any],
                      out: str | Path) -> tuple[list[dict[str, Any]], str]:
    """For a progressive-join model: its collapsed plain model saved in ``out/reparameterized``, its rows and a
    note for the report (only a note when the branches are not fully joined); ``([], "")`` for other models."""
    if not hasattr(trained, "reparameterize"):
        return [], ""
    if trained.join_lambda < 1.0:
        return [], (f"\nThe branches were not fully joined (lambda {trained.join_lambda:.3f} < 1), so no collapsed "
                    "model was written; use a shorter --join-warmup-steps.\n")
    plain = trained.reparameterize()
    save(plain, Path(out) / "reparameterized", data_config=getattr(trained, "pretrained_cfg", None))
    rows = evaluate_splits(plain, f"{name} (reparameterized)", dataset, loaders)
    return rows, "\nThe joined model was collapsed to a plain encoder in `reparameterized/`.\n"
