"""The Accelerate side of a launch: CPU-or-GPU choice, the process-group state, the ``Accelerator`` for a
``TrainConfig`` (mixed precision, gradient accumulation, seeded data order, trackers), FSDP on CPU processes and
the TF32 switch."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from .config import TrainConfig

logger = logging.getLogger(__name__)

__all__ = ["use_cpu", "launch_state", "make_accelerator", "resolve_precision", "is_fsdp", "configure_tf32",
           "check_tracker", "tracker_names"]


def use_cpu(cpu: bool = False) -> bool:
    """True when asked, or when launched as several processes (``WORLD_SIZE`` > 1, e.g. ``accelerate launch
    --multi_gpu`` / ``torchrun``) on a machine without a GPU: Accelerate then runs multi-CPU DDP over gloo
    instead of independent single processes."""
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("PMI_SIZE", "1")) or 1)
    return bool(cpu) or (world > 1 and not torch.cuda.is_available())


def launch_state(cpu: bool = False):
    """The process-group state (``accelerate.PartialState``) of this launch, created once with ``use_cpu``;
    recipes call it first to know the process count and the main process before building data."""
    from accelerate import PartialState

    return PartialState(cpu=use_cpu(cpu))


def resolve_precision(requested: str, cpu: bool = False) -> str:
    """The autocast Accelerate gets for ``TrainConfig.mixed_precision``: "auto" is "bf16" on a CUDA GPU with bf16
    support (and not ``cpu``), else "no" (CPU fp32 stays exact); other values are returned as given."""
    if requested != "auto":
        return requested
    bf16 = not cpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return "bf16" if bf16 else "no"


def make_accelerator(cfg: TrainConfig, out_dir: str | os.PathLike | None = None):
    """An ``accelerate.Accelerator`` for ``cfg`` (mixed precision, gradient accumulation, cpu, trackers).

    In a single process a previous accelerator state with other settings is reset (tests, notebooks); under
    ``accelerate launch`` with several processes the launch settings are kept. Batches are copied to the device
    with ``non_blocking`` (overlapping the copy when the loader pins memory). ``ACCELERATE_USE_FSDP=true`` on a
    multi-process CPU launch (``torchrun``) gives FSDP2 over gloo (see ``enable_cpu_fsdp``).
    """
    from accelerate import Accelerator, DataLoaderConfiguration, PartialState
    from accelerate.state import AcceleratorState
    from accelerate.utils import ProjectConfiguration

    cpu = use_cpu(cfg.cpu)
    if AcceleratorState._shared_state and PartialState(cpu=cpu).num_processes == 1:
        AcceleratorState._reset_state(reset_partial_state=True)
    kwargs: dict[str, Any] = dict(
        mixed_precision=resolve_precision(cfg.mixed_precision, cpu),
        gradient_accumulation_steps=cfg.grad_accum,
        cpu=cpu,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=cfg.seed, non_blocking=True),
    )
    if cfg.log_with:
        if out_dir is None:
            raise ValueError(f"log_with={cfg.log_with!r} needs an out_dir for the tracker logs")
        kwargs["log_with"] = tracker_names(cfg.log_with)
        kwargs["project_config"] = ProjectConfiguration(project_dir=str(out_dir), logging_dir=str(Path(out_dir) / "logs"))
    accelerator = Accelerator(**kwargs)
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        enable_cpu_fsdp(accelerator)
    configure_tf32(cfg.tf32, accelerator.device)
    return accelerator


def enable_cpu_fsdp(accelerator) -> bool:
    """Switch a multi-process CPU accelerator (DDP over gloo) to FSDP2; returns whether it did.

    Accelerate turns ``ACCELERATE_USE_FSDP`` into FSDP on GPUs only and runs CPU processes as DDP; PyTorch's
    ``fully_shard`` (FSDP2) works on CPU over gloo, so the launch's FSDP plugin (``FSDP_*`` variables, FSDP2 unless
    ``FSDP_VERSION`` says otherwise) is installed here. FSDP1 needs a GPU and is refused on CPU."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    if accelerator.distributed_type != DistributedType.MULTI_CPU:
        return False
    version = int(os.environ.get("FSDP_VERSION", "2"))
    if version != 2:
        raise ValueError(f"FSDP on CPU processes needs FSDP2 (FSDP_VERSION=2), got FSDP_VERSION={version}")
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    accelerator.state.fsdp_plugin = plugin
    accelerator.state.distributed_type = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    if accelerator.is_main_process:
        logger.info("FSDP2 over gloo on %d CPU processes", accelerator.num_processes)
    return True


def is_fsdp(accelerator) -> bool:
    """True when ``accelerator`` shards the model with FSDP (its forward and state dict are collective)."""
    from accelerate.utils import DistributedType

    return accelerator.distributed_type == DistributedType.FSDP


def configure_tf32(enabled: bool, device: torch.device | str) -> bool:
    """On a CUDA ``device``, let fp32 matmuls and convolutions use TF32 tensor cores (Ampere and newer: several
    times the fp32 rate, 10-bit mantissa inputs, fp32 accumulation) or forbid it; returns whether TF32 is on.

    Applied through ``torch.set_float32_matmul_precision`` ("high" / "highest"), process-wide. On a CPU nothing is
    changed: CPU fp32 math stays exact (the same call would also switch oneDNN's fp32 matmuls)."""
    if torch.device(device).type != "cuda":
        return False
    torch.set_float32_matmul_precision("high" if enabled else "highest")
    torch.backends.cudnn.allow_tf32 = bool(enabled)
    return bool(enabled)


def tracker_names(log_with: str) -> list[str]:
    """The accelerate trackers of ``--log-with`` ("tensorboard", "tensorboard,wandb", "all"), each checked by
    ``check_tracker``."""
    names = [name.strip() for name in log_with.split(",") if name.strip()]
    if not names:
        raise ValueError(f"--log-with names no tracker, got {log_with!r}; expected e.g. tensorboard or wandb")
    for name in names:
        check_tracker(name)
    return names


def check_tracker(name: str) -> None:
    """Raise ``ValueError`` when the accelerate tracker ``name`` (e.g. "tensorboard") is unknown or its package is
    not installed (accelerate would otherwise drop it silently)."""
    from accelerate.utils import imports

    if name == "all":
        return
    checker = getattr(imports, f"is_{name}_available", None)
    if checker is None:
        raise ValueError(f"unknown tracker {name!r}; expected e.g. tensorboard, wandb, mlflow, aim, comet_ml")
    if not checker():
        raise ValueError(f"log_with={name!r} needs the {name} package; install it (pip install {name})")
