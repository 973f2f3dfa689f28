"""The source classifier of test-time adaptation: a jumbokit run, a ``.safetensors`` file, or a timm model.

```python
from jumbokit.adaptation.source import load_source
source = load_source("runs/supervised_vit_tiny_jumbo_digits")
source.model, source.info["mean"], source.info["img_size"], source.name
```
``info`` holds what the evaluation transform needs: mean, std, img_size, in_chans, crop_pct, interpolation,
and, for jumbokit runs, the training dataset and its class names.
"""
from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

logger = logging.getLogger(__name__)

__all__ = ["SourceModel", "check_classifier", "find_source_run", "load_source", "num_outputs", "read_weights"]

_MAE_RECIPES = ("mae_pretrain",)


@dataclass
class SourceModel:
    """A source classifier in eval mode, its data record (``info``) and a short display ``name``."""

    model: nn.Module
    info: dict[str, Any]
    name: str
    path: str


def read_weights(weights: str | Path) -> dict[str, torch.Tensor]:
    """The state dict in ``weights``: a .safetensors file, or a .pth/.pt file loaded with
    ``torch.load(weights_only=True)`` (never unpickling arbitrary objects); a checkpoint dict with a
    ``state_dict`` / ``model`` entry gives that entry. Unreadable files raise a one-line ``ValueError``."""
    weights = str(weights)
    if weights.endswith(".safetensors"):
        from jumbokit.encoders.zoo import read_safetensors

        return read_safetensors(weights)
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as err:
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise ValueError(
            f"--weights {weights}: not a tensor state dict that loads without unpickling code objects "
            f"({first[:160]}); save the weights as model.state_dict() or .safetensors"
        ) from None
    if isinstance(state, dict):
        state = state.get("state_dict", state.get("model", state))
    if not isinstance(state, dict) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"--weights {weights}: expected a dict of tensors (a state dict), got "
                         f"{type(state).__name__}" + (" with non-tensor values" if isinstance(state, dict) else ""))
    return state


def find_source_run(root: str | Path = "runs", dataset: str = "digits") -> Path:
    """The newest supervised run under ``root`` trained on ``dataset``; FileNotFoundError says how to make one."""
    from jumbokit.training.rundir import find_latest_run

    latest = find_latest_run(root, "supervised", dataset)
    if latest is None:
        raise FileNotFoundError(
            f"no supervised {dataset} run found under {root}/; create one with `jumbokit supervised --dataset "
            f"{dataset} --model vit_tiny_jumbo` (recipes/supervised.py) or pass --checkpoint")
    return latest


def check_classifier(path: str | Path) -> None:
    """Raise ``ValueError`` when the saved model at ``path`` (run directory or .safetensors) is an encoder
    without a classifier head: an MAE run, or a model config with ``num_classes`` 0."""
    import json

    from jumbokit.encoders.zoo import load_config

    path = Path(path)
    config = load_config(path)
    run_file = (path if path.is_dir() else path.parent) / "config.json"
    try:
        recipe = json.loads(run_file.read_text()).get("recipe")
    except (OSError, json.JSONDecodeError, AttributeError):
        recipe = None
    if recipe in _MAE_RECIPES or config.get("num_classes") == 0:
        raise ValueError(
            f"{path} holds an encoder without a classifier head (an MAE run?); train a head first with "
            "`jumbokit linear-probe` or fine-tune with `jumbokit supervised`")


def _timm_source(name: str, weights: str | None) -> tuple[nn.Module, dict[str, Any]]:
    import timm

    if weights is None:
        raise ValueError(f"timm model {name!r} needs --weights FILE (.safetensors or .pth state dict)")
    if not Path(weights).is_file():
        raise FileNotFoundError(f"weights file {weights} does not exist")
    state = read_weights(weights)
    head = next((v for k, v in state.items() if k.endswith("head.weight") or k.endswith("fc.weight")), None)
    kwargs = {"num_classes": int(head.shape[0])} if head is not None else {}
    model = timm.create_model(name, pretrained=False, **kwargs)
    model.load_state_dict(state)
    cfg = getattr(model, "pretrained_cfg", {}) or {}
    input_size = cfg.get("input_size", (3, 224, 224))
    info = {"mean": list(cfg.get("mean", ())), "std": list(cfg.get("std", ())), "img_size": int(input_size[-1]),
            "in_chans": int(input_size[0]), "crop_pct": float(cfg.get("crop_pct", 0.875)),
            "interpolation": cfg.get("interpolation", "bicubic"), "classes": None, "dataset": None}
    return model, info


def _jumbokit_source(path: Path) -> tuple[nn.Module, dict[str, Any], str]:
    import jumbokit
    from jumbokit.training.rundir import read_data_record

    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    check_classifier(path)
    model = jumbokit.load(path)
    info = dict(read_data_record(path))
    config = getattr(model, "config", {}) or {}
    info.setdefault("img_size", config.get("img_size", 224))
    info.setdefault("in_chans", config.get("in_chans", 3))
    return model, info, path.name if path.is_dir() else path.stem


def _normalisation(info: dict[str, Any], checkpoint: str, mean: Sequence[float] | None,
                   std: Sequence[float] | None) -> None:
    """Apply ``mean``/``std`` overrides (one value, or one per channel) to ``info`` in place and check they fit
    the model's channels."""
    channels = int(info["in_chans"])
    if mean is not None:
        info["mean"] = list(mean) * (channels if len(mean) == 1 else 1)
    if std is not None:
        info["std"] = list(std) * (channels if len(std) == 1 else 1)
    if not info.get("mean") or not info.get("std"):
        raise ValueError(
            f"the normalisation of {checkpoint} is unknown (no data record in its config.json); pass the mean "
            "and std the model was trained with, e.g. --mean 0.309 --std 0.349")
    if len(info["mean"]) != int(info["in_chans"]) or len(info["std"]) != int(info["in_chans"]):
        raise ValueError(f"mean/std have {len(info['mean'])}/{len(info['std'])} values, the model takes "
                         f"{info['in_chans']} channels")


def load_source(checkpoint: str | Path, weights: str | None = None, mean: Sequence[float] | None = None,
                std: Sequence[float] | None = None) -> SourceModel:
    """Load the source classifier: a run directory or .safetensors file (data record from its config.json),
    or a timm model name with ``weights``. ``mean``/``std`` override the stored normalisation."""
    checkpoint = str(checkpoint)
    path = Path(checkpoint)
    if path.is_dir() or path.suffix == ".safetensors":
        model, info, name = _jumbokit_source(path)
    else:
        import timm

        if not timm.is_model(checkpoint):
            raise FileNotFoundError(
                f"checkpoint {checkpoint!r} is neither a run directory, a .safetensors file nor a timm model name")
        model, info = _timm_source(checkpoint, weights)
        name = checkpoint
    if isinstance(info.get("img_size"), (list, tuple)):
        info["img_size"] = int(info["img_size"][0])
    _normalisation(info, checkpoint, mean, std)
    info.setdefault("crop_pct", 1.0)
    info.setdefault("interpolation", "bicubic")
    logger.info("source %s: %s px, %s channel(s), mean %s std %s", name, info["img_size"], info["in_chans"],
                info["mean"], info["std"])
    return SourceModel(model.eval(), info, name, checkpoint)


@torch.no_grad()
def num_outputs(model: nn.Module, in_chans: int, img_size: int) -> int:
    """Width of the model's output for one (1, in_chans, img_size, img_size) input (its class count)."""
    device = next(model.parameters()).device
    return int(model(torch.zeros(1, in_chans, img_size, img_size, device=device)).shape[-1])
