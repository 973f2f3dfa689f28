"""``jumbokit.load``: a saved model ready for use, with the data config its inputs need.

``load(path)`` rebuilds the model of a run directory, a ``.safetensors`` file or an ``hf-hub:ORG/NAME`` name (see
``jumbokit.hub``) with ``jumbokit.encoders.load`` and sets ``model.pretrained_cfg`` (timm's name; see
``jumbokit.data.data_config``, which also describes the series variant): the block saved with the weights, or,
for runs written before models carried one, the one derived from the run's ``config.json``. A model without either
has no ``pretrained_cfg``, and ``data_config(model)`` is None.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["create_model", "load", "data_config", "local_path"]


def load(source: str | os.PathLike, map_location: str | torch.device = "cpu", **overrides: Any) -> nn.Module:
    """Rebuild a saved model in one call: a run directory (``model.safetensors`` + its config), a file or an
    ``hf-hub:ORG/NAME[@REVISION]`` name.

    ``overrides`` replace saved model options (``drop_path_rate=0.1``); the returned model exposes its data
    config as ``model.pretrained_cfg`` where one is known.
    """
    from jumbokit.data.data_config import check_data_config, read_run_data_config
    from jumbokit.encoders import load as load_saved

    path = local_path(source)
    model = load_saved(path, map_location=map_location, **overrides)
    config = getattr(model, "pretrained_cfg", None) or read_run_data_config(path)
    if config:
        model.pretrained_cfg = check_data_config(config)
    return model


def create_model(name: str, pretrained: bool | str | os.PathLike = False, **overrides: Any) -> nn.Module:
    """``jumbokit.create_model``: a registered model (``jumbokit.encoders.create_model``), with its weights from a
    saved model when ``pretrained`` names one (a run directory, a ``.safetensors`` file or ``hf-hub:ORG/NAME``).

    The saved model must be an instance of ``name`` with these ``overrides``: every tensor is loaded, except the
    classifier head when ``num_classes`` asks for another number of classes (timm's convention: the head starts
    afresh). The model carries the saved data config (``model.pretrained_cfg``) with its own class count.
    """
    from jumbokit.encoders import create_model as build

    if pretrained is False or pretrained is None or pretrained is True:
        return build(name, pretrained=pretrained is True, **overrides)
    saved = load(pretrained)
    model = build(name, **overrides)
    weights, own = saved.state_dict(), model.state_dict()
    head = [k for k in own if k.startswith("head.") and k in weights and weights[k].shape != own[k].shape]
    if head and "num_classes" in overrides:
        weights = {k: v for k, v in weights.items() if k not in head}
    mismatched = sorted(set(weights) ^ set(own) - set(head)) + [
        k for k in weights if k in own and weights[k].shape != own[k].shape]
    if mismatched:
        shown = ", ".join(mismatched[:4]) + (f" and {len(mismatched) - 4} more" if len(mismatched) > 4 else "")
        raise ValueError(f"pretrained={str(pretrained)!r} is not a saved {name!r} with {overrides or 'its defaults'}: "
                         f"tensors that differ in name or shape: {shown}")
    model.load_state_dict(weights, strict=not head)
    config = data_config(saved)
    if config:
        model.pretrained_cfg = {**config, "num_classes": getattr(model, "num_classes", config.get("num_classes"))}
        if head:
            model.pretrained_cfg.pop("label_names", None)
    return model


def data_config(model: nn.Module) -> dict[str, Any] | None:
    """The data config of a loaded model (``model.pretrained_cfg``), None when it has none."""
    return getattr(model, "pretrained_cfg", None) or None


def local_path(source: str | os.PathLike) -> Path:
    """The local run directory or ``.safetensors`` file that ``source`` names; an ``hf-hub:ORG/NAME`` name is
    fetched into (or found in) the Hugging Face cache (``jumbokit.hub.snapshot``)."""
    from jumbokit.hub import HUB_PREFIX, snapshot

    if str(source).startswith(HUB_PREFIX):
        return snapshot(str(source))
    return Path(source).expanduser()
