"""One series encoder pretrained across many sets, once, for every set after it (``jumbokit series-pretrain``).

The corpus is the TRAINING splits of the named sets only (``load_raw(name, "train")``; no validation or test series
of any set is read): the encoder is channel-independent, so every channel of every series is one univariate
series, its observed steps resampled linearly to one length (``length``, default :data:`DEFAULT_LENGTH`) and
standardised on their own (:func:`~jumbokit.timeseries.pool.resample_observed`). The encoder is a zoo model
without a head (``num_classes=0``), one channel, built with the small-data recipe's front end (16 patches,
convolutional patch features of width 32) and pretrained by masked-patch reconstruction
(:func:`~jumbokit.timeseries.pretrain.pretrain_series`).

:func:`save_encoder` writes it as a jumbokit model (``model.safetensors`` + ``model_config.json``, loadable with
``jumbokit.load``) whose data config says its input (one channel, ``length`` steps, every series resampled to it,
standardised on its own) and a record of its corpus (``corpus.json``: the sets and their series, the settings, the
cost). ``tstrain --init FOLDER`` fine-tunes from it: every set's series are resampled to the encoder's length, each
run's model (built for the set's channels and classes) takes the encoder's weights and keeps its own head
(:func:`encoder_state`); ``--init MODEL=FOLDER,...`` gives each model of a sweep its own encoder
(:func:`init_paths`), so kinds compare each from its own pretraining.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

__all__ = ["DEFAULT_LENGTH", "CORPUS_FILE", "corpus_series", "pretrain_encoder", "save_encoder", "encoder_length",
           "encoder_state", "load_into", "init_paths", "init_for", "init_length"]

logger = logging.getLogger(__name__)

DEFAULT_LENGTH = 512
CORPUS_FILE = "corpus.json"
# the small-data recipe's front end: a model fine-tuned under it matches the encoder's shapes
ENCODER_OPTIONS = dict(patches=16, conv_stem=32)


def corpus_series(names: Sequence[str], length: int = DEFAULT_LENGTH, data_dir: str | Path | None = None,
                  seed: int = 0) -> tuple[np.ndarray, dict[str, int]]:
    """(n, 1, ``length``) float32 series from the TRAINING splits of ``names`` (every channel one series, shuffled
    with ``seed``) and {set: series taken}. A set not available locally raises ``DatasetNotFoundError``."""
    from .pool import parse_pool, training_series

    names = parse_pool(names)
    if not names:
        raise ValueError("expected one or more sets whose training splits make the corpus, got none")
    if int(length) < 16:
        raise ValueError(f"expected an encoder length of at least 16 steps (16 patches), got {length}")
    per_set = training_series(names, int(length), data_dir)
    counts = {name: len(kept) for name, kept in per_set.items()}
    series = [s for kept in per_set.values() for s in kept]
    if len(series) < 2:
        raise ValueError(f"the training splits of {', '.join(names)} give {len(series)} usable series; expected at "
                         "least 2")
    order = np.random.default_rng(seed).permutation(len(series))
    return np.stack([series[i] for i in order])[:, None, :], counts


def pretrain_encoder(names: Sequence[str], *, model: str = "patchtst_jumbo", length: int = DEFAULT_LENGTH,
                     steps: int = 2000, batch_size: int = 64, lr: float = 1e-3, mask_ratio: float = 0.4,
                     seed: int = 0, data_dir: str | Path | None = None, progress: bool = False, cpu: bool = False,
                     dim: int | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Pretrain ``model`` (a PatchTST-family zoo name) on the corpus of ``names`` (:func:`corpus_series`). Returns
    the encoder (no head, one channel, ``length`` steps) and its record (corpus, settings, cost)."""
    from ..encoders import create_model
    from .models import PATCHTST_MODELS, width_options
    from .pretrain import pretrain_series

    if model not in PATCHTST_MODELS:
        raise ValueError(f"expected a model among {', '.join(PATCHTST_MODELS)}, got {model!r}")
    x, counts = corpus_series(names, length, data_dir, seed)
    logger.info("corpus: %d series of %d steps from the training splits of %d set(s)", len(x), length, len(counts))
    torch.manual_seed(seed)
    encoder = create_model(model, num_classes=0, in_chans=1, seq_len=int(length), **ENCODER_OPTIONS,
                           **(width_options(dim) if dim else {}))
    cpu_start = time.process_time()
    result = pretrain_series(encoder, x, steps=int(steps), batch_size=int(batch_size), lr=float(lr),
                             mask_ratio=float(mask_ratio), seed=int(seed), progress=progress, cpu=cpu)
    record = {"model": model, "length": int(length), "series": int(len(x)), "sets": counts,
              "splits": "train", "steps": int(result.steps), "batch_size": int(min(batch_size, len(x))),
              "lr": float(lr), "mask_ratio": float(mask_ratio), "seed": int(seed), "dim": dim,
              "options": ENCODER_OPTIONS, "final_loss": float(result.loss), "seconds": float(result.seconds),
              "cpu_seconds": time.process_time() - cpu_start,
              # what decides the floats: the same command on other CPU kernels gives another encoder
              "torch": torch.__version__, "cpu_kernels": torch.backends.cpu.get_cpu_capability()}
    return result.model.eval(), record


def save_encoder(encoder: nn.Module, folder: str | Path, record: dict[str, Any]) -> Path:
    """``folder``/model.safetensors + model_config.json (with the encoder's data config) and ``corpus.json``."""
    from ..encoders import save
    from ..training.rundir import atomic_write_text
    from .data_config import SERIES_MODALITY

    folder = Path(folder)
    data_config = {"modality": SERIES_MODALITY, "in_chans": 1, "seq_len": int(record["length"]),
                   "unequal_length": "resample", "normalize": "instance", "num_classes": 0, "label_names": []}
    path = save(encoder, folder, data_config=data_config)
    atomic_write_text(folder / CORPUS_FILE, json.dumps(record, indent=1) + "\n")
    return path


def encoder_length(path: str | Path) -> int:
    """The series length a saved encoder takes (its data config's ``seq_len``); ValueError for a saved model that is
    not a pretrained series encoder."""
    from ..encoders.zoo import load_config, load_data_config

    config, data = load_config(path), load_data_config(path) or {}
    if config.get("tokenizer") != "series" or int(config.get("num_classes", -1)) != 0:
        raise ValueError(f"{path}: expected a pretrained series encoder (jumbokit series-pretrain: a series model "
                         f"without a head), got tokenizer={config.get('tokenizer')!r}, "
                         f"num_classes={config.get('num_classes')!r}")
    return int(data.get("seq_len", config["seq_len"]))


def _init_items(spec: str) -> dict[str, str] | None:
    """``MODEL=FOLDER,...`` -> {model: folder}; None for one folder (no item names a series model)."""
    from .models import SERIES_MODELS

    items = [item.strip() for item in spec.split(",")]
    if not any(item.partition("=")[0] in SERIES_MODELS for item in items):
        return None
    paths: dict[str, str] = {}
    for item in items:
        model, sep, path = item.partition("=")
        if not sep or not path or model not in SERIES_MODELS:
            raise ValueError(f"init: expected one encoder folder or MODEL=FOLDER,... with series models; got the "
                             f"item {item!r} in {spec!r}")
        if model in paths:
            raise ValueError(f"init: {model} is given two encoders ({paths[model]} and {path})")
        paths[model] = path
    return paths


def init_paths(spec: str, models: Sequence[str]) -> dict[str, str]:
    """{model: the encoder folder it starts from} for a sweep of ``models``: ``spec`` is one folder (every model
    starts from it) or ``MODEL=FOLDER,...`` (each model from its own; every model of the sweep named, none other).
    ValueError, naming what was expected, for a malformed mapping, one that leaves a model out, names one twice or
    names a model the sweep does not run. The folders themselves are checked where they are read
    (:func:`encoder_state`)."""
    paths = _init_items(spec)
    if paths is None:
        return {model: spec for model in models}
    stray, missing = [m for m in paths if m not in models], [m for m in models if m not in paths]
    if stray or missing:
        raise ValueError(f"init: expected an encoder for every model of the sweep ({', '.join(models)}) and no other; "
                         + "; ".join(part for part in (f"missing: {', '.join(missing)}" if missing else "",
                                                       f"not in the sweep: {', '.join(stray)}" if stray else "")
                                     if part))
    return paths


def init_for(spec: str, model: str) -> str:
    """The encoder folder ``model`` starts from under ``init`` ``spec`` (:func:`init_paths`, checked by the sweep)."""
    paths = _init_items(spec)
    if paths is None:
        return spec
    if model not in paths:
        raise ValueError(f"init: no encoder for {model} in {spec!r}; expected MODEL=FOLDER for it")
    return paths[model]


def init_length(paths: dict[str, str]) -> int:
    """The one series length the encoders of :func:`init_paths` take (a set is resampled once, for every model);
    ValueError when they differ."""
    lengths = {path: encoder_length(path) for path in dict.fromkeys(paths.values())}
    if len(set(lengths.values())) > 1:
        raise ValueError("init: the encoders must take one series length (each set is resampled once for every "
                         "model); got " + ", ".join(f"{p}: {n}" for p, n in lengths.items()))
    return next(iter(lengths.values()))


def encoder_model(path: str | Path) -> str | None:
    """The model name a saved encoder was pretrained as (its ``corpus.json``), or None when it does not say."""
    corpus = Path(path) / CORPUS_FILE
    if not corpus.is_file():
        return None
    model = json.loads(corpus.read_text()).get("model")
    return model if isinstance(model, str) else None


def encoder_state(path: str | Path) -> dict[str, torch.Tensor]:
    """The weights of a saved encoder (:func:`save_encoder`), checked to be one."""
    from ..encoders.io import read_safetensors, resolve_model_file

    encoder_length(path)
    return read_safetensors(resolve_model_file(Path(path)), device="cpu")


def load_into(model: nn.Module, state: dict[str, torch.Tensor], source: str = "the encoder") -> nn.Module:
    """``model`` (a run's model: its own head) with every weight of the encoder ``state``; ValueError when the two
    differ beyond the head (another architecture, width, patches or front end than the encoder's)."""
    own = model.state_dict()
    mismatched = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
    unexpected = [k for k in state if k not in own]
    missing = [k for k in own if k not in state and not k.startswith("head")]
    if mismatched or unexpected or missing:
        shapes = ", ".join(f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in mismatched[:3])
        raise ValueError(f"{source} does not fit this run's model: build it as the encoder was built (the "
                         f"encoder's model, --dim, 16 patches, --conv-stem 32); different shapes: {shapes or 'none'}; "
                         f"only in the encoder: {unexpected[:3]}; only in the model: {missing[:3]}")
    model.load_state_dict(state, strict=False)
    return model
