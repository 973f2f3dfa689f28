"""Trained classifiers in use, one module per modality: :mod:`~jumbokit.inference.images` (image classifiers) and
:mod:`~jumbokit.inference.series` (series classifiers and a sweep's ensembles); ``jumbokit predict`` and
``jumbokit validate`` run them. This module holds what both share: which modality a saved model is, the input
files named on a command line, class names, predicted-label counts and the confusion matrix.

```python
from jumbokit.inference.images import ImageFiles, find_images, load_classifier, predict_topk
from jumbokit.inference.series import load_series_models, read_series_file, series_proba
```
"""
from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

__all__ = ["checkpoint_tokenizer", "is_series_checkpoint", "class_names", "find_files", "label_counts",
           "confusion_matrix", "confusion_rows", "plot_confusion"]

_GLOB_CHARS = set("*?[")


def checkpoint_tokenizer(config: dict[str, Any]) -> str:
    """The tokenizer of a saved model config ("image" or "series"): its own, or that of the encoder it wraps."""
    wrapped = next((v for v in config.values() if isinstance(v, dict) and "tokenizer" in v), {})
    return config.get("tokenizer", wrapped.get("tokenizer", "image"))


def is_series_checkpoint(source: str | os.PathLike) -> bool:
    """Whether ``source`` names a series model (its saved config has a series tokenizer) or a tstrain sweep
    folder (``sweep.json``); False for anything else (an image model, a missing path: the image path reports
    those). An ``hf-hub:`` name is fetched (or found in the cache) first."""
    from jumbokit.encoders.zoo import load_config
    from jumbokit.pretrained import local_path

    path = local_path(source)
    if (path / "sweep.json").is_file():
        return True
    try:
        return checkpoint_tokenizer(load_config(path)) == "series"
    except (OSError, ValueError):
        return False


def class_names(cfg: dict[str, Any], num_classes: int) -> list[str]:
    """The data config's ``label_names``, or the class indices as text when it has none."""
    names = cfg.get("label_names")
    if names and len(names) == num_classes:
        return [str(n) for n in names]
    return [str(i) for i in range(num_classes)]


def find_files(inputs: Sequence[str | os.PathLike], extensions: Sequence[str], what: str) -> list[Path]:
    """The files with one of ``extensions`` named by ``inputs`` (files, folders searched recursively, glob
    patterns), as :func:`find_images` finds images; ``what`` names them in errors ("image", "series")."""
    def is_wanted(p: Path) -> bool:
        return p.is_file() and p.suffix.lower() in extensions and not p.name.startswith(".")

    found: dict[Path, None] = {}
    for item in inputs:
        text = str(item)
        path = Path(text).expanduser()
        if path.is_file():
            found[path] = None
            continue
        if path.is_dir():
            matches = sorted(p for p in path.rglob("*") if is_wanted(p))
        elif _GLOB_CHARS & set(text):
            matches = sorted(p for p in map(Path, glob.glob(os.path.expanduser(text), recursive=True)) if is_wanted(p))
        else:
            raise FileNotFoundError(f"input {text} does not exist (expected {what} files, folders or glob patterns)")
        if not matches:
            raise ValueError(f"no {what} files ({', '.join(extensions)}) in {text}")
        found.update(dict.fromkeys(matches))
    if not found:
        raise ValueError(f"no input {what} files given (expected {what} files, folders or glob patterns)")
    return list(found)


def label_counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How often each top-1 label was predicted, most frequent first."""
    from collections import Counter

    return dict(Counter(r["top1_label"] for r in rows).most_common())


def confusion_matrix(targets: torch.Tensor, predictions: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(num_classes, num_classes) counts: row = true class, column = predicted class (scikit-learn's layout)."""
    from sklearn.metrics import confusion_matrix as sk_confusion

    return torch.as_tensor(sk_confusion(targets.numpy(), predictions.numpy(), labels=list(range(num_classes))))


def confusion_rows(matrix: torch.Tensor, names: Sequence[str]) -> list[dict[str, Any]]:
    """CSV rows of a confusion matrix: a ``true \\ predicted`` column of class names, then one count column per
    predicted class."""
    return [{"true \\ predicted": names[i], **{names[j]: int(v) for j, v in enumerate(row)}}
            for i, row in enumerate(matrix.tolist())]


def plot_confusion(matrix: torch.Tensor, names: Sequence[str], path: str | os.PathLike, title: str) -> Path:
    """PNG of a confusion matrix (counts written in the cells up to 30 classes), written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import ConfusionMatrixDisplay

    from jumbokit.training.rundir import atomic_save_figure

    side = min(20.0, 3.0 + 0.45 * len(names))
    fig, ax = plt.subplots(figsize=(side, side))
    ConfusionMatrixDisplay(matrix.numpy(), display_labels=list(names)).plot(
        ax=ax, include_values=len(names) <= 30, colorbar=False, xticks_rotation="vertical")
    ax.set_title(title)
    fig.tight_layout()
    return atomic_save_figure(path, fig)
