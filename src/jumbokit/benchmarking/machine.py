"""The machine record: one shape for every benchmark's result file."""

from __future__ import annotations

import datetime
import os
import platform

__all__ = ["machine_record"]


def machine_record(threads: int | None = None, device: str | None = None) -> dict[str, object]:
    """What the numbers ran on.

    Parameters
    ----------
    threads : int, optional
        The CPU threads the measurement used (default: torch's current setting).
    device : str, optional
        ``"cpu"``, ``"cuda"`` (the current GPU's name is recorded) or a label given by the caller, e.g. the GPU
        a run stored elsewhere ran on. Default: the current GPU where there is one, else ``"cpu"``.

    Returns
    -------
    dict
        ``cpu``, ``cores`` (usable by this process), ``threads``, ``python``, ``torch``, ``device``, ``date`` (UTC).
    """
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        device = torch.cuda.get_device_name(torch.device(device)) if torch.cuda.is_available() else device
    return {"cpu": platform.processor() or platform.machine(), "cores": cores,
            "threads": torch.get_num_threads() if threads is None else threads, "python": platform.python_version(),
            "torch": torch.__version__, "device": device,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}
