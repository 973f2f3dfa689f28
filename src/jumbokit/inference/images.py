"""A trained image classifier in use: loaded with its data config, images read for it, top-k predictions, and a
dataset split checked against the model's classes (``jumbokit validate``).

```python
from jumbokit.inference.images import ImageFiles, find_images, load_classifier, predict_topk
model, cfg = load_classifier("runs/supervised_vit_pico_jumbo_digits")   # or "hf-hub:ORG/NAME"
files = ImageFiles(find_images(["photos/", "more/*.png"]), cfg)
rows = predict_topk(model, files, cfg, topk=3)         # [{"file", "top1_label", "top1_prob", ...}, ...]
```

Series models are served by :mod:`jumbokit.inference.series`; what both share (files, class names, the confusion
matrix) is :mod:`jumbokit.inference`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from . import checkpoint_tokenizer, class_names, find_files

__all__ = ["check_image_classifier", "load_classifier", "find_images", "ImageFiles", "predict_topk", "eval_dataset"]


def check_image_classifier(config: dict[str, Any], source: str | os.PathLike) -> None:
    """Raise ``ValueError`` unless the saved model config describes an image classifier (not a series model, a
    NAS supernet or an encoder without a head)."""
    tokenizer = checkpoint_tokenizer(config)
    if tokenizer != "image":
        raise ValueError(f"{source} holds a time-series model (tokenizer {tokenizer!r}), not an image classifier; "
                         "load it with jumbokit.inference.series.load_series_models")
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


def find_images(inputs: Sequence[str | os.PathLike]) -> list[Path]:
    """The image files named by ``inputs``: files, folders (searched recursively for image extensions) and
    glob patterns (``"photos/**/*.jpg"``), in the given order, each folder and pattern sorted, without repeats.
    Raises ``FileNotFoundError`` for a missing path and ``ValueError`` for a folder or pattern without images."""
    from jumbokit.data import IMG_EXTENSIONS

    return find_files(inputs, IMG_EXTENSIONS, "image")


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
