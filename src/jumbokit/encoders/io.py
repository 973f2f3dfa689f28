"""File and state-dict helpers shared by the zoo, timm interop and the progressive-join collapse: atomic writes,
safetensors reading with readable errors, strict state-dict loading with a readable report."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

import torch
from torch import nn

__all__ = ["MODEL_FILE", "atomic_write", "resolve_model_file", "read_safetensors", "load_state_dict_checked",
           "unreadable_file_error"]

MODEL_FILE = "model.safetensors"


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


def resolve_model_file(path: Path) -> Path:
    """The .safetensors file of a run directory or a file path; raises a clear error when there is none."""
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


def unreadable_file_error(target: Path, err: Exception) -> ValueError:
    return ValueError(f"{target} is not a readable .safetensors file ({err}); it may be truncated or damaged, "
                      "write it again")


def read_safetensors(path: str | os.PathLike, device: str = "cpu") -> dict[str, torch.Tensor]:
    """``safetensors.torch.load_file`` whose errors (truncated or damaged files) name the file."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device=str(device))
    except SafetensorError as err:
        raise unreadable_file_error(Path(path), err) from None


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
