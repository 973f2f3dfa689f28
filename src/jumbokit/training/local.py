"""A single-process stand-in for ``accelerate.Accelerator``: trains one run whole on one device, even inside a
multi-process launch (runtime code, beside the loop it serves).

A sweep spreads whole runs over the processes of a launch (see :mod:`jumbokit.training.jobs` and
:mod:`jumbokit.timeseries.jobs`); each run must then train exactly as it would alone, so it may not join the
launch's process group (no DDP wrapper, no sharded loader, no collective reductions). :class:`LocalAccelerator`
answers the part of the ``Accelerator`` interface that :func:`jumbokit.training.fit` uses, as a one-process
``Accelerator`` would: the same device placement, the same seeded data order (Accelerate's own
``prepare_data_loader`` with one process), the same autocast.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from typing import Any, Iterable, Iterator

import torch
from torch import nn

__all__ = ["LocalAccelerator", "local_precision"]


def local_precision(requested: str, device: torch.device) -> str:
    """The autocast of a run: "auto" is bf16 on a CUDA device that supports it, else "no"; fp16 needs CUDA."""
    if requested == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return "bf16" if bf16 else "no"
    if requested not in ("no", "bf16", "fp16"):
        raise ValueError(f"mixed precision must be one of auto, no, bf16, fp16, got {requested!r}")
    if requested == "fp16" and device.type != "cuda":
        raise ValueError(f"fp16 mixed precision needs a CUDA device, got {device}; use bf16 or no")
    return requested


class _ScaledOptimizer:
    """An optimizer whose steps go through a ``torch.amp.GradScaler`` (fp16); other attributes pass through."""

    def __init__(self, optimizer: torch.optim.Optimizer, scaler: Any) -> None:
        self.optimizer, self.scaler = optimizer, scaler

    def step(self, closure: Any = None) -> None:
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)


class LocalAccelerator:
    """What :func:`jumbokit.training.fit` needs of an ``Accelerator``, for one process alone on ``device``.

    ``mixed_precision``: "no", "bf16", "fp16" (CUDA only) or "auto" (see :func:`local_precision`);
    ``data_seed``: the seed of a shuffled loader's order, as ``DataLoaderConfiguration(data_seed=...)``;
    ``tf32``: TF32 matmuls on a CUDA device (``configure_tf32``).
    Gradient accumulation, trackers and checkpoint state are not supported (the sweep's runs use none)."""

    is_main_process = True
    is_local_main_process = True
    process_index = 0
    local_process_index = 0
    num_processes = 1
    sync_gradients = True
    gradient_accumulation_steps = 1

    def __init__(self, device: torch.device | str = "cpu", mixed_precision: str = "no", data_seed: int = 0,
                 tf32: bool = True) -> None:
        from accelerate.utils import DistributedType

        from ..training.accelerator import configure_tf32

        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.mixed_precision = local_precision(mixed_precision, self.device)
        self.distributed_type = DistributedType.NO
        self.data_seed = int(data_seed)
        self.scaler = torch.amp.GradScaler("cuda") if self.mixed_precision == "fp16" else None
        configure_tf32(tf32, self.device)  # as make_accelerator does (CUDA only)

    # ------------------------------------------------------------------ preparing
    def prepare(self, *objects: Any) -> Any:
        """Models to the device (with autocast), optimizers (scaled under fp16), loaders as Accelerate's with one
        process; anything else as given. One object in, one out; several in, a tuple out."""
        out = tuple(self._prepare_one(obj) for obj in objects)
        return out[0] if len(out) == 1 else out

    def _prepare_one(self, obj: Any) -> Any:
        if isinstance(obj, nn.Module):
            return self._prepare_model(obj)
        if isinstance(obj, torch.optim.Optimizer):
            return _ScaledOptimizer(obj, self.scaler) if self.scaler is not None else obj
        if isinstance(obj, torch.utils.data.DataLoader):
            return self.prepare_data_loader(obj)
        return obj

    def _prepare_model(self, model: nn.Module) -> nn.Module:
        """The model on the device; under mixed precision its forward runs in autocast with fp32 outputs."""
        from types import MethodType

        from accelerate.utils import convert_outputs_to_fp32

        model = model.to(self.device)
        if self.mixed_precision != "no" and not hasattr(model, "_local_forward"):
            model._local_forward = model.forward
            autocast = torch.autocast(self.device.type, dtype=self._dtype())
            model.forward = MethodType(convert_outputs_to_fp32(autocast(model.forward.__func__)), model)
        return model

    def prepare_data_loader(self, loader: torch.utils.data.DataLoader) -> torch.utils.data.DataLoader:
        """Accelerate's loader for one process: seeded order, batches sent to the device."""
        from accelerate.data_loader import prepare_data_loader

        return prepare_data_loader(loader, self.device, num_processes=1, process_index=0, put_on_device=True,
                                   rng_types=None, use_seedable_sampler=True, data_seed=self.data_seed,
                                   non_blocking=self.device.type == "cuda")

    def unwrap_model(self, model: nn.Module, keep_fp32_wrapper: bool = True) -> nn.Module:
        return model

    # ------------------------------------------------------------------ a step
    @contextlib.contextmanager
    def accumulate(self, *models: nn.Module) -> Iterator[None]:
        yield

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward(**kwargs)

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float,
                        norm_type: float = 2) -> torch.Tensor:
        parameters = list(parameters)
        if self.scaler is not None:
            raise ValueError("gradient clipping with fp16 is not supported by a local run; use bf16 or no")
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def autocast(self, *args: Any, **kwargs: Any) -> contextlib.AbstractContextManager:
        if self.mixed_precision == "no":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self._dtype())

    def _dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.mixed_precision == "bf16" else torch.float16

    def skip_first_batches(self, loader: Iterable, num_batches: int = 0) -> Iterable:
        return itertools.islice(loader, num_batches, None)

    # ------------------------------------------------------------------ one process: collectives are identities
    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        return tensor * scale if scale != 1.0 else tensor

    def gather(self, tensor: Any) -> Any:
        return tensor

    def gather_for_metrics(self, data: Any, use_gather_object: bool = False) -> Any:
        return data

    def wait_for_everyone(self) -> None:
        pass

    def get_state_dict(self, model: nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        return model.state_dict()

    def free_memory(self, *objects: Any) -> None:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------ not used by the sweep's runs
    def init_trackers(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError("a local run has no trackers (log_with must be None)")

    def log(self, *args: Any, **kwargs: Any) -> None:
        pass

    def end_training(self) -> None:
        pass

    def save_state(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError("a local run keeps no checkpoints (checkpoint_every must be 0, out_dir None)")

    load_state = save_state
