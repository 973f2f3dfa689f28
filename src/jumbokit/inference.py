"""A trained image classifier in use: loaded with its data config, images read for it, top-k predictions, and the
pieces of ``jumbokit validate`` (a dataset split checked against the model's classes, the confusion matrix).

```python
from jumbokit.inference import ImageFiles, find_images, load_classifier, predict_topk
model, cfg = load_classifier("runs/supervised_vit_pico_jumbo_digits")   # or "hf-hub:ORG/NAME"
files = ImageFiles(find_images(["photos/", "more/*.png"]), cfg)
rows = predict_topk(model, files, cfg, topk=3)         # [{"file", "top1_label", "top1_prob", ...}, ...]
```

Only image models are served here; series models are served by ``jumbokit.timeseries.inference``.
"""
from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

__all__ = ["load_classifier", "checkpoint_tokenizer", "is_series_checkpoint", "check_image_classifier", "find_images", "find_files",
           "ImageFiles", "predict_topk", "class_names", "label_counts", "eval_dataset", "confusion_matrix",
           "confusion_rows", "plot_confusion"]

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


def check_image_classifier(config: dict[str, Any], source: str | os.PathLike) -> None:
    """Raise ``ValueError`` unless the saved model config describes an image classifier (not a series model, a
    NAS supernet or an encoder without a head)."""
    tokenizer = checkpoint_tokenizer(config)
    if tokenizer != "image":
        raise ValueError(f"{source} holds a time-series model (tokenizer {tokenizer!r}), not an image classifier; "
                         "load it with jumbokit.timeseries.inference.load_series_models")
    if config.get("encoder") == "supernet":
        raise ValueError(f"{source} holds a NAS supernet; extract an architecture first (jumbokit nas-search)")
    if config.get("encoder") not in (None, "multistage"):
        raise ValueError(f"{source} holds a {config['encoder']!r} model; predict and validate take image classifiers")
    if not config.get("num_classes"):
        raise ValueError(f"{source} holds an encoder without a classifier head (num_classes 0, an MAE run?); "
                         "train a head first with `jumbokit linear-probe` or `jumbokit supervised --checkpoint`")


def load_classifier(source: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[nn.Module, dict]:
    """``(model in eval mode on device, data config)`` of a saved image classifier (run directory, ``.safetensors``
    file or ``hf-hub:`` name); raises ``FileNotFoundError`` / ``ValueError`` with one readable line."""
    from jumbokit.encoders.zoo import load_config
    from jumbokit.pretrained import load, local_path

    path = local_path(source)
    check_image_classifier(load_config(path), source)
    model = load(path)
    cfg = getattr(model, "pretrained_cfg", None)
    if not cfg:
        raise ValueError(f"{source} carries no data config (input size, normalisation, classes) and has no run "
                         "config.json beside it; save it with jumbokit.save(model, path, data_config=...)")
    return model.to(device).eval(), cfg


def class_names(cfg: dict[str, Any], num_classes: int) -> list[str]:
    """The data config's ``label_names``, or the class indices as text when it has none."""
    names = cfg.get("label_names")
    if names and len(names) == num_classes:
        return [str(n) for n in names]
    return [str(i) for i in range(num_classes)]


def find_images(inputs: Sequence[str | os.PathLike]) -> list[Path]:
    """The image files named by ``inputs``: files, folders (searched recursively for image extensions) and
    glob patterns (``"photos/**/*.jpg"``), in the given order, each folder and pattern sorted, without repeats.
    Raises ``FileNotFoundError`` for a missing path and ``ValueError`` for a folder or pattern without images."""
    from jumbokit.data import IMG_EXTENSIONS

    return find_files(inputs, IMG_EXTENSIONS, "image")


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


class ImageFiles(Dataset):
    """Image files transformed for a model's data config: ``ds[i] -> (image (C, H, W), i)``.

    An image must have the model's channels: gray files for a 1-channel model (colour files whose three channels
    are equal count as gray), colour files for a 3-channel one; ``convert=True`` converts the others as training
    does (luminance, or gray replicated). Unreadable files raise ``CorruptImageError`` naming the file.
    """

    def __init__(self, paths: Sequence[Path], cfg: dict[str, Any], convert: bool = False):
        from jumbokit.data.data_config import eval_transform, image_mode

        self.paths = list(paths)
        self.mode = image_mode(cfg)
        self.transform = eval_transform(cfg)
        self.convert = convert

    def __len__(self) -> int:
        return len(self.paths)

    def load(self, i: int):
        """The PIL image of file ``i`` in the model's channel mode."""
        from PIL import Image

        from jumbokit.data import CorruptImageError, DataError
        from jumbokit.data.choices import is_gray

        path = self.paths[i]
        try:
            with open(path, "rb") as fh:
                img = Image.open(fh)
                img.load()
        except Exception as err:
            raise CorruptImageError(f"cannot read image file {path} ({type(err).__name__}: {err})") from None
        gray = is_gray(img)
        if not self.convert and gray != (self.mode == "L"):
            want = "1-channel (gray)" if self.mode == "L" else "3-channel (colour)"
            got = f"a {'gray' if gray else 'colour'} ({img.mode})"
            raise DataError(f"{path}: the model takes {want} images, got {got} image; pass --convert to convert "
                            "images to the model's channels as training does")
        return img.convert(self.mode) if img.mode != self.mode else img

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.transform(self.load(i)), i


@torch.no_grad()
def predict_topk(model: nn.Module, files: ImageFiles, cfg: dict[str, Any], *, topk: int = 5, batch_size: int = 64,
                 num_workers: int = 0, progress: bool = False) -> list[dict[str, Any]]:
    """One row per file: ``file``, then ``top{j}_label`` / ``top{j}_prob`` (softmax probability) for j = 1..k,
    in the order of ``files``."""
    from tqdm.auto import tqdm

    device = next(model.parameters()).device
    loader = DataLoader(files, batch_size=batch_size, num_workers=num_workers, shuffle=False)
    rows: list[dict[str, Any]] = []
    names: list[str] | None = None
    for images, index in tqdm(loader, desc="predict", unit="batch", disable=not progress, dynamic_ncols=True):
        probs = model(images.to(device)).float().softmax(dim=-1).cpu()
        names = names or class_names(cfg, probs.shape[-1])
        values, classes = probs.topk(min(topk, probs.shape[-1]), dim=-1)
        for i, v, c in zip(index.tolist(), values.tolist(), classes.tolist()):
            row: dict[str, Any] = {"file": str(files.paths[i])}
            for j, (p, k) in enumerate(zip(v, c), start=1):
                row[f"top{j}_label"], row[f"top{j}_prob"] = names[k], p
            rows.append(row)
    return rows


def label_counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How often each top-1 label was predicted, most frequent first."""
    from collections import Counter

    return dict(Counter(r["top1_label"] for r in rows).most_common())


def eval_dataset(spec: str, split: str, cfg: dict[str, Any], num_classes: int, *, skip_corrupt: bool = False,
                 progress: bool = False, holdout=None):
    """Split ``split`` of dataset ``spec`` with the evaluation transform of data config ``cfg`` (``holdout``: the
    ``Holdout`` that carved it from the training images); raises ``ValueError`` when its classes are not the
    model's."""
    from jumbokit.data import build_dataset

    chans, size, _ = cfg["input_size"]
    ds = build_dataset(spec, split, "eval", img_size=int(size), in_chans=int(chans), mean=cfg["mean"], std=cfg["std"],
                       crop_pct=float(cfg.get("crop_pct") or 1.0), interpolation=cfg.get("interpolation"),
                       skip_corrupt=skip_corrupt, progress=progress, holdout=holdout)
    names = cfg.get("label_names")
    if ds.num_classes != num_classes or (names and list(ds.classes) != list(names)):
        shown = names if names else f"{num_classes} classes"
        raise ValueError(f"{spec} split {split!r} has classes {_short(ds.classes)}, the model was trained on "
                         f"{_short(shown) if names else shown}")
    return ds


def _short(names: Sequence[str], n: int = 10) -> str:
    return "[" + ", ".join(map(str, names[:n])) + (f", ... ({len(names)} in all)" if len(names) > n else "") + "]"


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
