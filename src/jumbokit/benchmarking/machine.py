"""The machine record: one shape for every benchmark's result file."""

from __future__ import annotations

import datetime
import os
import platform

__all__ = ["cpu_model", "machine_record"]


def cpu_model() -> str | None:
    """The processor's name from ``/proc/cpuinfo`` (Linux), else None."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


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
        ``cpu``, ``cpu_model`` (the processor's name where the system tells it), ``cpu_kernels`` (the instruction
        set torch dispatches its CPU kernels to, e.g. ``AVX2``: two machines with different ones give floats that
        differ in the last bits, which long training runs amplify), ``cores`` (usable by this process),
        ``threads``, ``python``, ``torch``, ``device``, ``date`` (UTC).
    """
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        device = torch.cuda.get_device_name(torch.device(device)) if torch.cuda.is_available() else device
    return {"cpu": platform.processor() or platform.machine(), "cpu_model": cpu_model(),
            "cpu_kernels": torch.backends.cpu.get_cpu_capability(), "cores": cores,
            "threads": torch.get_num_threads() if threads is None else threads, "python": platform.python_version(),
            "torch": torch.__version__, "device": device,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}
