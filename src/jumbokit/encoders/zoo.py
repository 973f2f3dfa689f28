"""Named configurations, ``create_model`` / ``list_models``, and save / load.

A registry entry is a flat config (see ``encoder.DEFAULT_CONFIG``) plus an optional ``builder`` that turns
user overrides into encoder options (the time-series models use one to derive patching from
``seq_len`` and a patch count). Saved models are ``model.safetensors`` + ``model_config.json``; the config
is also stored in the safetensors metadata so a lone file loads too. Nothing is ever unpickled.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from .branches import build_branched_encoder
from .encoder import Encoder, encoder_options, unknown_options
from .io import (MODEL_FILE, atomic_write, load_state_dict_checked, read_safetensors, resolve_model_file,
                 unreadable_file_error)
from .stages import MultiStageEncoder, multistage_options

__all__ = ["load_config", "register_model", "register_architecture", "create_model", "list_models", "model_config",
           "registered_config",
           "build_model", "save",
           "load", "load_data_config", "CONFIG_FILE", "DATA_CONFIG_KEY"]

CONFIG_FILE = "model_config.json"
_METADATA_KEY = "jumbokit_config"
DATA_CONFIG_KEY = "pretrained_cfg"  # optional block beside the model options: see jumbokit.data.data_config


@dataclass
class _Entry:
    config: dict[str, Any]
    builder: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
    description: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


_REGISTRY: dict[str, _Entry] = {}
_ARCHITECTURES: dict[str, Callable[[dict[str, Any]], nn.Module]] = {}


def register_model(
    name: str,
    builder: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None,
    description: str = "",
    **config: Any,
) -> None:
    """Register a named encoder config.

    builder(config, overrides) -> final config, for options that are not plain encoder keys (they are
    removed from ``overrides`` by the builder). Without a builder, overrides must be encoder keys.
    """
    _REGISTRY[name] = _Entry(dict(config), builder, description)


def register_architecture(name: str, build: Callable[[dict[str, Any]], nn.Module]) -> None:
    """Configs with ``encoder=name`` are built (and rebuilt on load) by ``build(config)``: models that wrap an
    encoder (the series ROCKET hybrid) register themselves so."""
    _ARCHITECTURES[name] = build


def list_models(pattern: str | None = None) -> list[str]:
    """Sorted registered names, optionally filtered by a shell-style pattern (``"vit_*_jumbo"``)."""
    names = sorted(_REGISTRY)
    if pattern:
        names = [n for n in names if fnmatch.fnmatch(n, pattern)]
    return names


def registered_config(name: str) -> dict[str, Any]:
    """A copy of the config ``name`` was registered with (before its builder and any overrides)."""
    return dict(_entry(name).config)


def _entry(name: str) -> _Entry:
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=5, cutoff=0.4)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise ValueError(f"unknown model {name!r}{hint} (jumbokit.list_models() lists all {len(_REGISTRY)})")
    return _REGISTRY[name]


_BRANCH_KEYS = ("branches", "join_schedule", "join_warmup_steps", "join_start_step", "diversity_weight",
                "join_values", "join_rescale", "join_lambda")


def model_config(name: str, **overrides: Any) -> dict[str, Any]:
    """The flat config ``create_model(name, **overrides)`` would build (branch options excluded)."""
    entry = _entry(name)
    overrides = {k: v for k, v in overrides.items() if k not in _BRANCH_KEYS}
    if entry.builder is not None:
        return entry.builder(dict(entry.config), dict(overrides))
    # an option of another tokenizer kind passes here; the encoder names the kind it belongs to
    defaults = multistage_options() if entry.config.get("encoder") == "multistage" else encoder_options(None)
    unknown = set(overrides) - set(defaults)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown_options(unknown, defaults)} for model {name!r}")
    return {**entry.config, **overrides}


def create_model(name: str, **overrides: Any) -> nn.Module:
    """Build a registered model: ``create_model("vit_tiny_jumbo", num_classes=10, img_size=32, patch_size=4)``.

    ``branches=n`` (with ``join_schedule``, ``join_warmup_steps``, ``diversity_weight``) builds the
    progressive-join training form of the same config (see ``jumbokit.encoders.branches``).
    ``pretrained=True`` raises ``ValueError``: jumbokit has no hub weights (timm's load with ``from_timm``).
    """
    if overrides.pop("pretrained", False):
        raise ValueError(
            f"jumbokit has no hub weights for {name!r}; load timm's ViT weights with "
            "jumbokit.encoders.from_timm(timm.create_model(name, pretrained=True)), or a saved run with "
            "jumbokit.load(path)")
    branch_opts = {k: overrides[k] for k in _BRANCH_KEYS if k in overrides}
    config = model_config(name, **overrides)
    branches = int(branch_opts.pop("branches", 1) or 1)
    if branches > 1:
        return build_branched_encoder(config, branches=branches, **branch_opts)
    if branch_opts:
        raise ValueError(f"{sorted(branch_opts)} only apply with branches > 1, got branches={branches}")
    return build_model(config)


def small_image_patch_size(name: str, img_size: int) -> int | None:
    """The recipes' patch size for images up to 64 px (None above: keep the model's): a 4x4 grid for plain
    encoders (8 px patches at 32 px); an 8x8 grid of even patches for multi-stage encoders, so that their
    last stage still has a 2x2 grid."""
    if img_size > 64:
        return None
    if model_config(name).get("encoder") != "multistage":
        return max(1, img_size // 4)
    return max(2, img_size // 8 // 2 * 2)


def build_model(config: dict[str, Any]) -> nn.Module:
    """Rebuild a model from a saved config (plain encoders, or the progressive-join training form)."""
    config = dict(config)
    branched = config.pop("branched", None)
    if branched:
        return build_branched_encoder(config, **branched)
    if config.get("encoder") == "multistage":
        return MultiStageEncoder(**config)
    if config.get("encoder") in _ARCHITECTURES:
        return _ARCHITECTURES[config["encoder"]](config)
    return Encoder(**config)


def _config_of(model: nn.Module) -> dict[str, Any]:
    if hasattr(model, "saved_config"):
        return model.saved_config()
    if isinstance(model, (Encoder, MultiStageEncoder)):
        return model.plain_config()
    raise TypeError(f"expected a jumbokit encoder (with a .config), got {type(model).__name__}")


def save(model: nn.Module, path: str | os.PathLike, data_config: dict[str, Any] | None = None,
         config_file: bool = True) -> Path:
    """Write ``model.safetensors`` + ``model_config.json`` into directory ``path`` (created if needed),
    or to ``path`` itself when it ends in ``.safetensors``. Files are written atomically. ``data_config`` (default:
    the model's ``pretrained_cfg``, when it has one) is stored as the config's ``pretrained_cfg`` block.
    The config is always stored in the weights file's metadata; ``config_file=False`` leaves out the readable
    copy beside it."""
    from safetensors.torch import save_file

    path = Path(path)
    target = path if path.suffix == ".safetensors" else path / MODEL_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    config = _config_of(model)
    data_config = data_config if data_config is not None else getattr(model, "pretrained_cfg", None)
    if data_config:
        config[DATA_CONFIG_KEY] = dict(data_config)
    text = json.dumps(config, indent=2, sort_keys=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    atomic_write(target, lambda tmp: save_file(tensors, tmp, metadata={_METADATA_KEY: text}))
    if config_file:
        atomic_write(target.with_name(CONFIG_FILE) if target.name == MODEL_FILE else target.with_suffix(".json"),
                     lambda tmp: Path(tmp).write_text(text + "\n"))
    return target


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """The model config stored with a saved model (directory or .safetensors file), without its data config."""
    config = _stored_config(path)
    config.pop(DATA_CONFIG_KEY, None)
    return config


def load_data_config(path: str | os.PathLike) -> dict[str, Any] | None:
    """The ``pretrained_cfg`` block stored with a saved model; None for models saved without one."""
    return _stored_config(path).get(DATA_CONFIG_KEY)


def _stored_config(path: str | os.PathLike) -> dict[str, Any]:
    from safetensors import SafetensorError, safe_open

    target = resolve_model_file(Path(path))
    try:
        with safe_open(str(target), framework="pt") as f:
            meta = f.metadata() or {}
    except SafetensorError as err:
        raise unreadable_file_error(target, err) from None
    if _METADATA_KEY in meta:
        return json.loads(meta[_METADATA_KEY])
    for side in (target.with_name(CONFIG_FILE), target.with_suffix(".json")):
        if side.exists():
            return json.loads(side.read_text())
    raise ValueError(f"{target} carries no jumbokit config (metadata or {CONFIG_FILE}); "
                     "for timm weights use jumbokit.encoders.from_timm")


def load(path: str | os.PathLike, map_location: str | torch.device = "cpu", **overrides: Any) -> nn.Module:
    """Rebuild a saved model in one call: a run directory (``model.safetensors`` + config) or a file."""
    target = resolve_model_file(Path(path))
    config = {**load_config(target), **overrides}
    model = build_model(config)
    state = read_safetensors(target, device=str(map_location))
    load_state_dict_checked(model, state, source=str(target))
    data_config = load_data_config(target)
    if data_config:
        model.pretrained_cfg = data_config
    return model.to(map_location)


# ------------------------------------------------------------ the papers' ViT sizes
VIT_SIZES = {
    "pico": dict(dim=96, num_heads=3),
    "nano": dict(dim=128, num_heads=4),
    "tiny": dict(dim=192, num_heads=3),
    "small": dict(dim=384, num_heads=6),
    "base": dict(dim=768, num_heads=12),
}


def _register_vits() -> None:
    for size, dims in VIT_SIZES.items():
        base = dict(tokenizer="image", img_size=224, patch_size=16, in_chans=3, depth=12, num_classes=1000, **dims)
        jumbo_j = 3 if size == "base" else 6
        register_model(f"vit_{size}_cls", description=f"ViT-{size.capitalize()}/16 with a CLS token",
                       global_tokens="cls", **base)
        register_model(f"vit_{size}_reg16", description=f"ViT-{size.capitalize()}/16 + CLS + 16 registers",
                       global_tokens="registers", num_registers=16, **base)
        register_model(f"vit_{size}_jumbo", description=f"ViT-{size.capitalize()}/16 + Jumbo (J={jumbo_j})",
                       global_tokens="jumbo", jumbo_multiplier=jumbo_j, **base)
        register_model(f"vit_{size}_gap", description=f"ViT-{size.capitalize()}/16, no global token, mean pooling",
                       global_tokens="none", **base)


_register_vits()


# ------------------------------------------------------- multi-stage ViT-Res / ViT-ResNAS (the ViT-ResNAS paper)
def _stage_lists(heads: list[list[int]], ffn: list[list[int]]) -> dict[str, Any]:
    return {"heads": [list(h) for h in heads], "mlp_hidden": [list(f) for f in ffn]}


VIT_RES_ARCHS: dict[str, dict[str, Any]] = {
    # ViT-Res-Tiny (the paper's Table 4): DeiT-Tiny split into 3 stages of 4 blocks, head width 64, FFN ratio 4
    "vit_res_tiny": dict(dims=[192, 384, 768], head_dims=[64, 64, 64],
                         **_stage_lists([[3] * 4, [6] * 4, [12] * 4], [[768] * 4, [1536] * 4, [3072] * 4])),
    # the searched networks (the paper's Tables 6-8): head widths 32 / 48 / 64, per-block heads and FFN sizes
    "vit_resnas_tiny": dict(dims=[176, 352, 704], head_dims=[32, 48, 64], **_stage_lists(
        [[3, 3, 3, 4, 4], [10, 8, 8, 8, 10, 10], [10, 10, 10, 8, 8]],
        [[704, 576, 640, 576, 704], [1408, 1408, 1280, 1408, 1280, 1024], [2560, 1792, 2816, 2816, 2560]])),
    "vit_resnas_small": dict(dims=[220, 440, 880], head_dims=[32, 48, 64], **_stage_lists(
        [[5, 5, 7, 5, 5, 5], [10, 10, 10, 10, 12, 12], [16, 12, 16, 12, 14]],
        [[880, 880, 800, 720, 720, 720], [1760, 1440, 1920, 1600, 1600, 1440], [3200, 3200, 2880, 2240, 2560]])),
    "vit_resnas_medium": dict(dims=[240, 640, 880], head_dims=[32, 48, 64], **_stage_lists(
        [[7, 6, 7, 8, 7, 8, 6], [10, 14, 14, 16, 14, 16, 16], [16, 10, 16, 12, 16, 14]],
        [[960, 960, 800, 960, 880, 880, 800], [1120, 1760, 1920, 1760, 1440, 1760, 1920],
         [3200, 3840, 3840, 3200, 3520, 3520]])),
    # scaled down to the plain vit_pico / vit_nano FLOPs range for small images (32 px, patch 4)
    # (8x8 -> 4x4 -> 2x2 grids), depths 4/3/3: ~ the FLOPs of vit_pico / vit_nano at patch 8 (a 4x4 grid)
    "vit_res_pico": dict(dims=[48, 96, 192], head_dims=[16, 32, 64], img_size=32, patch_size=4, stem_chans=12,
                         **_stage_lists([[3] * 4, [3] * 3, [3] * 3], [[192] * 4, [384] * 3, [768] * 3])),
    "vit_res_nano": dict(dims=[64, 128, 256], head_dims=[16, 32, 64], img_size=32, patch_size=4, stem_chans=16,
                         **_stage_lists([[4] * 4, [4] * 3, [4] * 3], [[256] * 4, [512] * 3, [1024] * 3])),
}

VIT_RES_JUMBO_J = 2  # J * d_stage wide: J = 6 as in the plain ViTs would make a 4.6K-wide FFN at 768


def _register_vit_res() -> None:
    for name, arch in VIT_RES_ARCHS.items():
        base = {**dict(encoder="multistage", img_size=224, patch_size=14, in_chans=3, num_classes=1000), **arch}
        depths = "/".join(str(len(h)) for h in arch["heads"])
        dims = "/".join(str(d) for d in arch["dims"])
        label = f"{name} (dims {dims}, depths {depths}; conv stem + residual spatial reduction)"
        register_model(name, description=label + " with a CLS token", global_tokens="cls", **base)
        register_model(f"{name}_reg4", description=label + " + CLS + 4 registers", global_tokens="registers",
                       num_registers=4, **base)
        register_model(f"{name}_jumbo", description=label + f" + Jumbo (J={VIT_RES_JUMBO_J}, one FFN per stage)",
                       global_tokens="jumbo", jumbo_multiplier=VIT_RES_JUMBO_J, **base)


_register_vit_res()
