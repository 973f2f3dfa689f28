"""Running means of training metrics, kept on the device between reads: reading a value back every
micro-batch would stall an accelerator on a host sync, so values are summed as tensors and reduced over
processes only where the loop logs, checks or checkpoints."""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch

__all__ = ["MetricWindow", "RunningMean", "step_logs", "scalar_logs", "check_finite", "format_record"]


def step_logs(logs: dict[str, Any] | None) -> dict[str, torch.Tensor | float]:
    """Per-step logs kept as detached device tensors (no host sync); plain numbers pass through as floats."""
    out: dict[str, torch.Tensor | float] = {}
    for k, v in (logs or {}).items():
        if isinstance(v, torch.Tensor):
            out[k] = v.detach().float().mean()
        elif isinstance(v, (bool, int, float)):
            out[k] = float(v)
    return out


def scalar_logs(logs: dict[str, Any] | None) -> dict[str, float | int]:
    """The numbers of a metrics dict as Python scalars (tensors averaged, bools as 0/1); other entries dropped."""
    out: dict[str, float | int] = {}
    for k, v in (logs or {}).items():
        if isinstance(v, torch.Tensor):
            v = v.detach().float().mean().item()
        if isinstance(v, bool):
            v = int(v)
        if isinstance(v, (int, float)):
            out[k] = v
    return out


def check_finite(loss: float, where: str, lr: float) -> None:
    """Raise ``FloatingPointError`` for a NaN / inf ``loss`` (``where`` says over which steps; ``lr`` is the
    configured peak learning rate)."""
    if not math.isfinite(loss):
        raise FloatingPointError(f"loss is {loss} {where}; lower the learning rate (lr={lr}) or enable grad_clip")


def format_record(record: dict[str, Any], skip: tuple[str, ...] = ("kind", "step", "lr", "epoch")) -> str:
    """``"train_loss 0.1234  val_top1 93.25"``: accuracies (``top1``, ``val_top5``, ...) with 2 decimals, other
    floats with 4."""
    def text(k: str, v: Any) -> str:
        if not isinstance(v, float):
            return f"{k} {v}"
        return f"{k} {v:.2f}" if k.rsplit("_", 1)[-1].startswith("top") else f"{k} {v:.4f}"

    return "  ".join(text(k, v) for k, v in record.items() if k not in skip)


class RunningMean:
    """Sum and count of a scalar tensor per micro-batch on the device (timm's ``AverageMeter``, without syncs)."""

    def __init__(self, device: torch.device | str) -> None:
        self.sum = torch.zeros((), device=device)
        self.count = 0

    def add(self, value: torch.Tensor) -> None:
        self.sum += value.detach().float()
        self.count += 1

    def sums(self, accelerator) -> list[float]:
        """Every process's sum, in process order (a host sync); ``restore`` takes them back exactly."""
        return accelerator.gather(self.sum.reshape(1)).tolist()

    def restore(self, sums: list[float], count: int, process_index: int) -> None:
        """Continue from this process's entry of ``sums`` after ``count`` values (a resumed epoch's mean then
        equals the uninterrupted one's)."""
        self.sum.fill_(sums[process_index])
        self.count = count

    def mean(self, accelerator) -> float:
        """The mean over micro-batches, averaged over processes (a host sync)."""
        return accelerator.reduce(self.sum / max(1, self.count), "mean").item()

    def total(self, accelerator) -> float:
        """The sum over micro-batches and processes (a host sync)."""
        return accelerator.reduce(self.sum, "sum").item()


class MetricWindow:
    """The loss, per-step logs and gradient norms since the last logging step, summed on the device.

    ``reduce`` returns their means over the window's micro-batches (the gradient norm over its optimizer steps,
    ``grad_accum`` micro-batches each), averaged over processes, and starts a new window."""

    def __init__(self, grad_accum: int = 1) -> None:
        self.grad_accum = grad_accum
        self.sums: dict[str, Any] = defaultdict(float)
        self.n = 0

    def add_grad_norm(self, norm: torch.Tensor | float | None) -> None:
        """One optimizer step's gradient norm as the clipping returned it: a tensor (DDP, one process), a DTensor
        (FSDP2: its full value is taken), a float, or None (DeepSpeed clips inside its engine: nothing logged)."""
        if norm is None:
            return
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        self.sums["grad_norm"] += norm.detach().float() if isinstance(norm, torch.Tensor) else float(norm)

    def add(self, loss: torch.Tensor, logs: dict[str, Any] | None) -> None:
        """One micro-batch: its loss and the logs ``loss_fn`` returned."""
        self.sums["loss"] += loss.detach().float()
        for k, v in step_logs(logs).items():
            self.sums[k] += v
        self.n += 1

    def reduce(self, accelerator) -> dict[str, float]:
        means = {k: v / self.n for k, v in self.sums.items()}
        if "grad_norm" in self.sums:
            means["grad_norm"] = self.sums["grad_norm"] / max(1, self.n // self.grad_accum)
        stacked = torch.stack([torch.as_tensor(v, dtype=torch.float32, device=accelerator.device).reshape(())
                               for v in means.values()])
        reduced = accelerator.reduce(stacked, "mean").tolist()
        self.sums, self.n = defaultdict(float), 0
        return dict(zip(means, reduced))
