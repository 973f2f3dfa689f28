"""The calls speed benchmarks time: training steps and the model pairs they compare.

The benchmark scripts (``benchmarks/timeseries.py``, ``mae.py``, ``throughput.py``, ``gpu_suite.py``) build their
timed calls here, so a step means the same in every table. Importing this module needs torch and the encoder core
only (no data sets, no aeon): ``gpu_suite.py`` runs from a source checkout with a GPU machine's own torch.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["gemm_gflops", "jumbo_vs_registers", "mae_step", "phase_times", "train_step"]


def gemm_gflops(size: int, repeats: int = 20) -> float:
    """fp32 GFLOP/s of a (size x size) @ (size x size) matmul, best of ``repeats``: what the machine's matmul reaches
    with the current threads, the yardstick of a step's achieved rate."""
    from .timing import time_interleaved

    a, b = torch.randn(size, size), torch.randn(size, size)
    timing = time_interleaved({"gemm": lambda: a @ b}, repeats, warmup=3)["gemm"]
    return 2 * size**3 / timing.fastest / 1e9


def phase_times(next_batch: Callable[[], Any], loss_of: Callable[[Any], torch.Tensor],
                optimizer: torch.optim.Optimizer, warmup: int, steps: int) -> tuple[dict[str, list[float]], Any]:
    """Seconds of each phase of ``steps`` training steps after ``warmup`` untimed ones: ``data`` (``next_batch()``),
    ``forward`` (``loss_of(batch)``), ``backward``, ``optimizer`` (step and zeroing). Returns the phases' times and
    the last batch."""
    import time

    phases: dict[str, list[float]] = {"data": [], "forward": [], "backward": [], "optimizer": []}
    batch = None
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        batch = next_batch()
        t1 = time.perf_counter()
        loss = loss_of(batch)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        if i >= warmup:
            for name, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                phases[name].append(dt)
    return phases, batch


def train_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    """One training step (forward, cross-entropy, backward, AdamW step) of ``model`` on (x, y), as a call
    (``tstrain``'s step: AdamW at lr 1e-4, weight decay 0.02)."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.02)

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def mae_step(model: torch.nn.Module, images: torch.Tensor, amp: str) -> Callable[[float], None]:
    """One MAE training step (forward, backward, AdamW step) as a function of the mask ratio; ``amp``: ``"bf16"``,
    ``"fp16"`` (autocast) or anything else (none)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.05)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    device_type = "cuda" if images.is_cuda else "cpu"

    def step(ratio: float) -> None:
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = model(images, mask_ratio=ratio).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def jumbo_vs_registers(img_size: int, dim: int) -> dict[str, torch.nn.Module]:
    """ViT with 16 registers (+CLS) and ViT+Jumbo (J=6) at width ``dim`` (128: ``vit_nano_*``, 192: ``vit_tiny_*``),
    1000 classes, keyed ``"D=<dim> registers R=16"`` and ``"D=<dim> Jumbo J=6"``."""
    from ..pretrained import create_model

    sizes = {128: "nano", 192: "tiny"}
    if dim not in sizes:
        raise ValueError(f"expected dim 128 or 192, got {dim}")
    common = dict(img_size=img_size, num_classes=1000)
    return {
        f"D={dim} registers R=16": create_model(f"vit_{sizes[dim]}_reg16", **common),
        f"D={dim} Jumbo J=6": create_model(f"vit_{sizes[dim]}_jumbo", jumbo_multiplier=6, **common),
    }
