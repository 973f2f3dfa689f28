"""Anchors beside the benchmarked encoders: logistic regression on the raw pixels of an in-memory image set.

```python
from jumbokit.benchmarking.anchors import pixel_logistic_regression
anchor = pixel_logistic_regression("fashion-mnist", max_train_samples=10000, seeds=[0], standardize=True)
anchor["fits"][0]["test_top1"]
```

The training images are the ones a recipe run with ``--dataset SPEC --max-train-samples N --seed S`` trains on
(``build_dataset``'s seeded subset of the "train" split); the fit is scored on the "val" and "test" splits.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..training.rundir import atomic_write_json

__all__ = ["pixel_logistic_regression", "pixels"]


def pixels(dataset) -> tuple[np.ndarray, list[int]]:
    """(images as rows of pixels in [0, 1], labels) of an in-memory image split (``dataset.source.images``: one
    uint8 array, or a list of images), taken before any transform."""
    images = dataset.source.images
    if isinstance(images, np.ndarray):
        chosen = images[dataset.indices]
    else:
        chosen = np.stack([np.asarray(images[i]) for i in dataset.indices])
    return chosen.reshape(len(chosen), -1) / 255.0, [dataset.source.targets[i] for i in dataset.indices]


def pixel_logistic_regression(dataset: str, max_train_samples: int | None = None, seeds: Sequence[int] = (0,),
                              standardize: bool = False, max_iter: int = 1000,
                              cache: str | Path | None = None) -> dict[str, Any]:
    """Logistic regression (scikit-learn, lbfgs, C=1) on the pixels of ``dataset``'s training images, scored on
    its val and test splits: one fit per seed's subset with ``max_train_samples`` (one fit in all without).
    ``standardize``: a StandardScaler first. ``cache``: a JSON file read when it exists, else written.

    Returns ``{"model": description, "fits": [{"seed", "train_images", "seconds", "iterations", "val_top1",
    "test_top1"}, ...]}`` (accuracies in percent)."""
    if cache is not None and Path(cache).exists():
        return json.loads(Path(cache).read_text())
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from ..data import build_dataset

    evals = {s: pixels(build_dataset(dataset, s, "eval")) for s in ("val", "test")}
    fits = []
    for seed in (list(seeds) if max_train_samples else list(seeds)[:1]):
        x, y = pixels(build_dataset(dataset, "train", "eval", max_samples=max_train_samples, seed=seed))
        print(f"logistic regression on {len(y)} training images (seed {seed}) ...", flush=True)
        started = time.perf_counter()
        clf = LogisticRegression(max_iter=max_iter)
        clf = (make_pipeline(StandardScaler(), clf) if standardize else clf).fit(x, y)
        fits.append({"seed": seed, "train_images": len(y), "seconds": time.perf_counter() - started,
                     "iterations": int(np.max(clf[-1].n_iter_ if standardize else clf.n_iter_)),
                     **{f"{s}_top1": 100.0 * clf.score(*evals[s]) for s in evals}})
    scaler = "StandardScaler, " if standardize else ""
    anchor = {"model": f"logistic regression on pixels (scikit-learn, {scaler}lbfgs, C=1)", "fits": fits}
    if cache is not None:
        atomic_write_json(Path(cache), anchor)
    return anchor
