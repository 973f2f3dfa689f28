"""A trained series classifier in use: a kept model (or a sweep's ensemble) loaded with its data config, series
files read for it, class probabilities and top-k rows (``jumbokit predict``), a data set's split scored
(``jumbokit validate``).

```python
from jumbokit.inference.series import load_series_predictor, read_series_file
predictor = load_series_predictor("sweep/models/GunPoint/patchtst_jumbo")   # or the sweep folder; ensemble=True
series = read_series_file("GunPoint_TEST.ts", predictor.cfg)
proba = predictor.proba(series.x, series.raw)  # (n, K): an ensemble's mean; a fused model mixes in its ROCKET half
```

A fused model (``tstrain --fuse``, kept in ``models/<dataset>/<model>+<baseline>``) is the transformer and a ROCKET
classifier mixed with the weight the sweep chose on the validation half (:mod:`jumbokit.timeseries.fusion`): the
transformer reads the series prepared with its data config, the ROCKET classifier the raw series, so both travel
(``SeriesFile.raw``, ``split_of_dataset(..., raw=True)``). ``load_series_models`` gives the transformer alone and
refuses a fused folder.

Inputs: ``.ts`` (aeon / UEA), ``.tsv`` (the UCR 2018 archive: label, then the values, tab-separated), ``.npy``
((n, L) for 1-channel models, or (n, C, L)) and ``.csv`` (one series per row; for a C-channel model each C
consecutive rows are one series' channels; empty cells are missing). Labels in ``.ts`` / ``.tsv`` files are kept.
"""
from __future__ import annotations

import csv
import json
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from torch import nn

__all__ = ["SERIES_SUFFIXES", "load_series_models", "load_series_predictor", "SeriesPredictor", "SeriesFile",
           "read_series_file", "series_proba", "stack_raw", "topk_rows", "split_of_dataset", "split_scores"]

SERIES_SUFFIXES = (".ts", ".tsv", ".csv", ".npy")


def _kept_folder(path: Path) -> Path:
    """The ``models/<dataset>/<model>`` folder that a sweep folder names, when it kept exactly one."""
    folders = sorted(p.parent for p in (path / "models").glob("*/*/kept.json"))
    if len(folders) == 1:
        return folders[0]
    if not folders:
        raise ValueError(f"the sweep {path} kept no model (runs written before sweeps kept their weights); "
                         "run tstrain again into a new --out")
    shown = ", ".join(str(f.relative_to(path)) for f in folders[:6]) + (", ..." if len(folders) > 6 else "")
    raise ValueError(f"the sweep {path} kept {len(folders)} models ({shown}); pass one of them as --checkpoint")


def _model_folder(source: str | os.PathLike) -> Path:
    """The model a path or ``hf-hub:`` name names: itself (a Hub name fetched or found in the cache), or the one
    folder a sweep folder kept."""
    from ..pretrained import local_path

    path = local_path(source)
    return _kept_folder(path) if (path / "sweep.json").is_file() else path


def load_series_models(source: str | os.PathLike, ensemble: bool = False,
                       device: str = "cpu") -> tuple[list[nn.Module], dict[str, Any]]:
    """``([model, ...] in eval mode on device, series data config)`` of a saved series classifier: a model
    folder or ``.safetensors`` file, a sweep's ``models/<dataset>/<model>`` folder, or a sweep folder that kept
    one model, or an ``hf-hub:ORG/NAME`` name (``jumbokit.pretrained.local_path``). ``ensemble``: the
    members of the sweep's top-k ensemble (``kept.json``) instead of the chosen run. A fused model's folder is
    refused (its transformer alone is not the model the sweep scored: :func:`load_series_predictor`). Raises
    ``FileNotFoundError`` / ``ValueError`` with one readable line."""
    from ..timeseries.fusion import FUSION_FILE

    path = _model_folder(source)
    if (path / FUSION_FILE).is_file():
        raise ValueError(f"{source} is a fused model (a transformer and a ROCKET classifier, {FUSION_FILE}); "
                         "load it with jumbokit.inference.series.load_series_predictor")
    return _load_members(path, source, ensemble, device)


def _load_members(path: Path, source: str | os.PathLike, ensemble: bool,
                  device: str) -> tuple[list[nn.Module], dict[str, Any]]:
    """The transformer(s) of a model folder or file and their series data config (:func:`load_series_models`)."""
    from ..data.data_config import check_series_data_config, is_series_config
    from ..encoders import load

    files = [path]
    if ensemble:
        try:
            kept = json.loads((path / "kept.json").read_text())
        except (OSError, ValueError):
            raise ValueError(f"--ensemble needs a tstrain sweep's kept models (models/<dataset>/<model> with "
                             f"kept.json); {source} is not one") from None
        if "ensemble" not in kept:
            raise ValueError(f"{source} kept no ensemble (the sweep ran with --ensemble 1)")
        files = [path / m["file"] for m in kept["ensemble"]]
    models = [load(f) for f in files]
    cfg = getattr(models[0], "pretrained_cfg", None)
    if not is_series_config(cfg):
        raise ValueError(f"{source} carries no series data config (normalisation, length, classes); save it "
                         "with jumbokit.save(model, path, data_config=series_data_config(data))")
    cfg = check_series_data_config(cfg)
    if any(m.pretrained_cfg != cfg for m in models[1:]):
        raise ValueError(f"the ensemble members of {source} were trained on differently prepared data")
    return [m.to(device).eval() for m in models], cfg


@dataclass
class SeriesPredictor:
    """A saved series classifier ready to score: the transformer (or an ensemble's members) with its data config,
    and for a fused model the ROCKET classifier (``rocket``) mixed in with the transformer's share ``weight``."""

    models: list[nn.Module]
    cfg: dict[str, Any]
    rocket: Any = None
    weight: float = 1.0
    fusion: dict[str, Any] | None = None

    @property
    def fused(self) -> bool:
        return self.rocket is not None

    def check_raw(self, raw: np.ndarray, what: str) -> None:
        """ValueError naming ``what`` (a file) and its first such series when a fused model's ROCKET half cannot read
        raw series (n, C, L): a value missing before a series' end. Nothing to check for a transformer alone."""
        from ..timeseries.baselines import missing_inside

        if not self.fused:
            return
        bad = np.flatnonzero(missing_inside(raw))
        if len(bad):
            bad = int(bad[0])
            raise ValueError(f"{what}, series {bad}: a value is missing before the series' end, which the "
                             f"{self.fusion['baseline']} half of this fused model cannot read (its transformer "
                             f"{self.fusion['model']} alone can)")

    def proba(self, x: np.ndarray, raw: np.ndarray | None = None, batch_size: int = 256,
              progress: bool = False) -> np.ndarray:
        """Class probabilities (n, K) in ``cfg["label_names"]``' order of prepared series x (n, C, seq_len) and,
        for a fused model, the same series raw (n, C, L; NaN after a shorter series' end): :func:`series_proba`,
        then :func:`~jumbokit.timeseries.fusion.rocket_proba` mixed in as the sweep mixed them."""
        from ..timeseries.fusion import fuse_proba, rocket_proba

        proba = series_proba(self.models, x, batch_size=batch_size, progress=progress)
        if not self.fused:
            return proba
        if raw is None or len(raw) != len(x):
            raise ValueError(f"a fused model scores the raw series beside the prepared ones: expected {len(x)} raw "
                             f"series, got {'none' if raw is None else len(raw)}")
        ridge = rocket_proba(self.rocket, raw, [str(n) for n in self.cfg["label_names"]])
        return fuse_proba(proba, ridge, self.weight).astype(np.float32)


def load_series_predictor(source: str | os.PathLike, ensemble: bool | None = None,
                          device: str = "cpu") -> SeriesPredictor:
    """A saved series classifier as :class:`SeriesPredictor`: what :func:`load_series_models` loads, or a fused
    model's folder (``models/<dataset>/<model>+<baseline>`` with ``fusion.json``: the transformer, or the ensemble
    the sweep fused, and the ROCKET classifier). ``ensemble``: the sweep's top-k ensemble (default: a fused model's
    own choice, else the chosen run). ``FileNotFoundError`` / ``ValueError`` with one readable line."""
    from ..timeseries.fusion import FUSION_FILE, FUSION_FORMAT
    from ..timeseries.rocket_classifiers import load_rocket

    path = _model_folder(source)
    if not (path / FUSION_FILE).is_file():
        return SeriesPredictor(*_load_members(path, source, bool(ensemble), device))
    try:
        fusion = json.loads((path / FUSION_FILE).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path / FUSION_FILE}: expected a fused model's record, could not read it ({err})") from None
    if fusion.get("format") != FUSION_FORMAT:
        raise ValueError(f"{path / FUSION_FILE}: expected format {FUSION_FORMAT}, got {fusion.get('format')!r}")
    if ensemble is not None and bool(ensemble) != bool(fusion["ensemble"]):
        raise ValueError(f"{source} fused {'an ensemble' if fusion['ensemble'] else 'one run'} of its transformer; "
                         "it scores only as it was fused (leave --ensemble out)")
    models, cfg = _load_members(path, source, bool(fusion["ensemble"]), device)
    return SeriesPredictor(models, cfg, rocket=load_rocket(path / fusion["rocket"]), weight=float(fusion["weight"]),
                           fusion=fusion)


@dataclass
class SeriesFile:
    """The series of one input file, prepared for the model: x (n, C, seq_len) float32; labels (n,) as text
    when the file carries them; raw: the series as read (n, C, L) float32, NaN after a shorter series' end (what a
    fused model's ROCKET classifier reads)."""

    path: Path
    x: np.ndarray
    labels: np.ndarray | None = None
    raw: np.ndarray | None = None


def stack_raw(files: Sequence[SeriesFile]) -> np.ndarray:
    """The raw series of several files as one array (n, C, L), each padded with NaN to the longest."""
    from ..timeseries.data import pad_series

    length = max(f.raw.shape[-1] for f in files)
    return np.concatenate([pad_series(f.raw, length) for f in files])


def _read_csv(path: Path, channels: int) -> list[np.ndarray]:
    rows = []
    with open(path, newline="", encoding="utf-8") as fh:
        for number, fields in enumerate(csv.reader(fh), start=1):
            if not any(f.strip() for f in fields):
                continue
            try:
                values = np.array([float(f) if f.strip() else np.nan for f in fields], dtype=np.float64)
            except ValueError:
                bad = next(f for f in fields if f.strip() and not _is_number(f))
                raise ValueError(f"{path}, line {number}: expected numbers (empty = missing), got {bad[:30]!r}"
                                 ) from None
            observed = np.flatnonzero(~np.isnan(values))
            rows.append(values[: observed[-1] + 1] if len(observed) else values[:1])
    if not rows:
        raise ValueError(f"{path} holds no series (expected one series per row)")
    lengths = sorted({len(r) for r in rows})
    if len(lengths) > 1:
        warnings.warn(f"{path}: rows hold {lengths[0]} to {lengths[-1]} values; shorter rows are read as shorter "
                      "series (their last steps missing)")
    if len(rows) % channels:
        raise ValueError(f"{path}: the model takes series of {channels} channel(s) (each {channels} consecutive "
                         f"rows one series), got {len(rows)} rows")
    series = []
    for start in range(0, len(rows), channels):
        group = rows[start:start + channels]
        out = np.full((channels, max(len(r) for r in group)), np.nan)
        for c, r in enumerate(group):
            out[c, : len(r)] = r
        series.append(out)
    return series


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_raw(path: Path, channels: int) -> tuple[Any, np.ndarray | None]:
    """(series as pad_series takes them, labels or None) of one file, by its suffix."""
    suffix = path.suffix.lower()
    if suffix == ".tsv":
        from ..timeseries.ucr_tsv import read_ucr_tsv

        return read_ucr_tsv(path)
    if suffix == ".csv":
        return _read_csv(path, channels), None
    if suffix == ".npy":
        with open(path, "rb") as fh:
            if fh.read(6) != b"\x93NUMPY":
                raise ValueError(f"cannot read series file {path} (no NumPy .npy header)")
        x = np.load(path, allow_pickle=False)
        if x.ndim == 2 and channels == 1:
            return x[:, None, :].astype(np.float64), None
        if x.ndim != 3:
            raise ValueError(f"{path}: expected an array of shape (n, C, L)" + (" or (n, L)" if channels == 1 else "")
                             + f", got {x.shape}")
        return x.astype(np.float64), None
    if suffix == ".ts":
        from aeon.datasets import load_from_ts_file

        x, y = load_from_ts_file(str(path))
        labels = np.asarray(y).astype(str) if y is not None and len(y) else None
        return x, labels
    raise ValueError(f"{path}: expected a series file ({', '.join(SERIES_SUFFIXES)}), got {suffix or 'no suffix'}")


def read_series_file(path: str | os.PathLike, cfg: dict[str, Any]) -> SeriesFile:
    """One input file read and prepared with the model's data config (:func:`prepare_series`); ``ValueError``
    naming the file for an unreadable file or series the model cannot take."""
    from ..timeseries.data import pad_series
    from ..timeseries.data_config import prepare_series

    path = Path(path)
    try:
        raw, labels = _read_raw(path, int(cfg["in_chans"]))
    except (ValueError, OSError) as err:
        text = str(err)
        raise ValueError(text if str(path) in text else f"cannot read series file {path} ({text})") from None
    except Exception as err:  # a reader's own parse error (aeon's .ts reader, NumPy's header check)
        raise ValueError(f"cannot read series file {path} ({type(err).__name__}: {err})") from None
    return SeriesFile(path, prepare_series(raw, cfg, what=str(path)), labels, pad_series(raw))


def series_proba(models: Sequence[nn.Module], x: np.ndarray, batch_size: int = 256,
                 progress: bool = False) -> np.ndarray:
    """Class probabilities (n, K) of prepared series x (n, C, L): one model's softmax, or the mean over an
    ensemble's members (as the sweep scores its ensemble, :func:`~jumbokit.timeseries.results.ensemble_proba`)."""
    from tqdm.auto import tqdm

    from ..timeseries.results import ensemble_proba
    from ..timeseries.run import predict_proba

    batches = math.ceil(len(x) / batch_size)
    probas = []
    with tqdm(total=batches * len(models), desc="predict", unit="batch", disable=not progress,
              dynamic_ncols=True) as bar:
        for model in models:
            chunks = []
            for start in range(0, len(x), batch_size):
                chunks.append(predict_proba(model, x[start:start + batch_size], batch_size))
                bar.update()
            probas.append(np.concatenate(chunks))
    return ensemble_proba(probas)


def topk_rows(file: SeriesFile, proba: np.ndarray, names: Sequence[str], topk: int) -> list[dict[str, Any]]:
    """One row per series: ``file``, ``series`` (its position in the file), ``label`` (when the file has
    labels), then ``top{j}_label`` / ``top{j}_prob`` for j = 1..k."""
    k = min(topk, proba.shape[-1])
    order = np.argsort(-proba, axis=-1, kind="stable")[:, :k]
    rows = []
    for i, classes in enumerate(order):
        row: dict[str, Any] = {"file": str(file.path), "series": i}
        if file.labels is not None:
            row["label"] = str(file.labels[i])
        for j, c in enumerate(classes, start=1):
            row[f"top{j}_label"], row[f"top{j}_prob"] = names[c], float(proba[i, c])
        rows.append(row)
    return rows


def split_of_dataset(name: str, split: str, cfg: dict[str, Any], data_dir: str | os.PathLike | None = None,
                     raw: bool = False) -> tuple[np.ndarray, ...]:
    """(prepared series, class codes) of split ``split`` of UCR/UEA set ``name``: "train", or, under the
    protocol the model was scored with (its data config; "official" when it names none), "val" / "test" (the
    paper's protocol: the stratified halves of the official test split that tstrain validated and tested on;
    "official": the whole test split for both). ``raw``: also the same series as read (n, C, L), for a fused
    model. Labels the model does not know raise ``ValueError``."""
    from ..timeseries.data import load_raw, pad_series, stratified_half_split
    from ..timeseries.data_config import prepare_series

    if split not in ("train", "val", "test"):
        raise ValueError(f"expected split train, val or test, got {split!r}")
    x, labels = load_raw(name, "train" if split == "train" else "test", data_dir)
    names = list(cfg.get("label_names") or [])
    unknown = sorted(set(np.asarray(labels).astype(str)) - set(names))
    if unknown:
        raise ValueError(f"{name} {split} has labels {unknown[:5]} the model does not know (its classes: "
                         f"{names[:10]})")
    codes = np.array([names.index(v) for v in np.asarray(labels).astype(str)], dtype=np.int64)
    series = (prepare_series(x, cfg, what=f"{name} {split}"), codes) + ((pad_series(x),) if raw else ())
    if split != "train" and cfg.get("protocol", "official") == "seed":
        halves = stratified_half_split(codes, int(cfg.get("split_seed", 0)))
        index = halves[0] if split == "val" else halves[1]
        return tuple(a[index] for a in series)
    return series


def split_scores(proba: np.ndarray, codes: np.ndarray) -> dict[str, Any]:
    """top1 (and top5 with five or more classes) in percent, the mean cross-entropy and n, as
    ``jumbokit validate`` reports them."""
    from ..timeseries.run import scores

    accuracy, loss = scores(proba, codes)
    out: dict[str, Any] = {"top1": 100.0 * accuracy}
    if proba.shape[-1] >= 5:
        top5 = np.argsort(-proba, axis=-1, kind="stable")[:, :5]
        out["top5"] = 100.0 * float((top5 == codes[:, None]).any(axis=1).mean())
    out.update(loss=loss, n=int(len(codes)))
    return out
