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
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from .encoder import DEFAULT_CONFIG, Encoder

__all__ = ["atomic_write", "load_config", "load_state_dict_checked", "register_model", "create_model", "list_models", "model_config", "build_model", "save", "load",
           "MODEL_FILE", "CONFIG_FILE"]

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "model_config.json"
_METADATA_KEY = "jumbokit_config"


@dataclass
class _Entry:
    config: dict[str, Any]
    builder: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
    description: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


_REGISTRY: dict[str, _Entry] = {}


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


def list_models(pattern: str | None = None) -> list[str]:
    """Sorted registered names, optionally filtered by a shell-style pattern (``"vit_*_jumbo"``)."""
    names = sorted(_REGISTRY)
    if pattern:
        names = [n for n in names if fnmatch.fnmatch(n, pattern)]
    return names


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
    unknown = set(overrides) - set(DEFAULT_CONFIG)
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)} for model {name!r}; "
                         f"encoder options are: {', '.join(sorted(DEFAULT_CONFIG))}")
    return {**entry.config, **overrides}


def create_model(name: str, **overrides: Any) -> nn.Module:
    """Build a registered model: ``create_model("vit_tiny_jumbo", num_classes=10, img_size=32, patch_size=4)``.

    ``branches=n`` (with ``join_schedule``, ``join_warmup_steps``, ``diversity_weight``) builds the
    progressive-join training form of the same config (see ``jumbokit.encoders.branches``).
    """
    branch_opts = {k: overrides[k] for k in _BRANCH_KEYS if k in overrides}
    config = model_config(name, **overrides)
    branches = int(branch_opts.pop("branches", 1) or 1)
    if branches > 1:
        from .branches import build_branched_encoder

        return build_branched_encoder(config, branches=branches, **branch_opts)
    if branch_opts:
        raise ValueError(f"{sorted(branch_opts)} only apply with branches > 1, got branches={branches}")
    return build_model(config)


def build_model(config: dict[str, Any]) -> nn.Module:
    """Rebuild a model from a saved config (plain encoders, or the progressive-join training form)."""
    config = dict(config)
    branched = config.pop("branched", None)
    if branched:
        from .branches import build_branched_encoder

        return build_branched_encoder(config, **branched)
    return Encoder(**config)


def _config_of(model: nn.Module) -> dict[str, Any]:
    if hasattr(model, "saved_config"):
        return model.saved_config()
    if isinstance(model, Encoder):
        return model.plain_config()
    raise TypeError(f"expected a jumbokit encoder (with a .config), got {type(model).__name__}")


def save(model: nn.Module, path: str | os.PathLike) -> Path:
    """Write ``model.safetensors`` + ``model_config.json`` into directory ``path`` (created if needed),
    or to ``path`` itself when it ends in ``.safetensors``. Files are written atomically."""
    from safetensors.torch import save_file

    path = Path(path)
    target = path if path.suffix == ".safetensors" else path / MODEL_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    config = _config_of(model)
    text = json.dumps(config, indent=2, sort_keys=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    atomic_write(target, lambda tmp: save_file(tensors, tmp, metadata={_METADATA_KEY: text}))
    atomic_write(target.with_name(CONFIG_FILE) if target.name == MODEL_FILE else target.with_suffix(".json"),
                 lambda tmp: Path(tmp).write_text(text + "\n"))
    return target


def atomic_write(target: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Create ``target`` atomically: ``write(tmp_path)`` fills a temp file beside it, which is renamed over
    ``target`` (with the usual umask permissions); on any error the temp file is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp files are private (0600)
        os.replace(tmp, target)
        return target
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _resolve(path: Path) -> Path:
    if path.is_dir():
        target = path / MODEL_FILE
        if not target.exists():
            raise FileNotFoundError(f"no {MODEL_FILE} in {path}; expected a run directory or a .safetensors file")
        return target
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; expected a run directory or a .safetensors file")
    if path.suffix != ".safetensors":
        raise ValueError(f"expected a directory or a .safetensors file, got {path}")
    return path


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """The model config stored with a saved model (directory or .safetensors file)."""
    from safetensors import safe_open

    target = _resolve(Path(path))
    with safe_open(str(target), framework="pt") as f:
        meta = f.metadata() or {}
    if _METADATA_KEY in meta:
        return json.loads(meta[_METADATA_KEY])
    for side in (target.with_name(CONFIG_FILE), target.with_suffix(".json")):
        if side.exists():
            return json.loads(side.read_text())
    raise ValueError(f"{target} carries no jumbokit config (metadata or {CONFIG_FILE}); "
                     "for timm weights use jumbokit.encoders.from_timm")


def load(path: str | os.PathLike, map_location: str | torch.device = "cpu", **overrides: Any) -> nn.Module:
    """Rebuild a saved model in one call: a run directory (``model.safetensors`` + config) or a file."""
    from safetensors.torch import load_file

    target = _resolve(Path(path))
    config = {**load_config(target), **overrides}
    model = build_model(config)
    state = load_file(str(target), device=str(map_location))
    load_state_dict_checked(model, state, source=str(target))
    return model.to(map_location)


def load_state_dict_checked(model: nn.Module, state: dict[str, torch.Tensor], source: str = "state dict") -> None:
    """``load_state_dict(strict=True)`` with a readable error on missing / unexpected / mis-shaped tensors."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: expected {tuple(own[k].shape)}, got {tuple(state[k].shape)}"
              for k in own if k in state and own[k].shape != state[k].shape]
    if missing or unexpected or shapes:
        parts = []
        if shapes:
            parts.append("shape mismatch " + "; ".join(shapes[:5]) + (" ..." if len(shapes) > 5 else ""))
        if missing:
            parts.append(f"missing {missing[:5]}" + (" ..." if len(missing) > 5 else ""))
        if unexpected:
            parts.append(f"unexpected {unexpected[:5]}" + (" ..." if len(unexpected) > 5 else ""))
        raise ValueError(f"{source} does not fit this model config: " + "; ".join(parts))
    model.load_state_dict(state)


# ---------------------------------------------------------------- the seeds' sizes
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
