"""Host reads: the operations that, on a GPU, make the host wait for the device (a sync).

On CUDA, ``torch.cuda.set_sync_debug_mode("error")`` catches them. On a CPU nothing waits, so that check cannot
run; :class:`HostReads` records instead the operators that read a tensor's values back to the host (what ``bool``,
``.item()``, ``int()``/``float()`` of a tensor, ``nonzero``, ``masked_select``, ``unique`` or indexing with a bool
mask do), which would each be a sync on a GPU. It cannot see a device-to-host copy (``.cpu()``, ``.tolist()`` of
a device tensor): on a CPU there is none.

    with HostReads() as reads:
        step()
    assert not reads.calls, reads.describe()

Scalar reads made by ``torch.optim`` are left out: an optimizer's step count lives on the host on a GPU too
(``capturable=False``), so reading it waits for nothing.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HOST_READ_OPS", "HostRead", "HostReads"]

_aten = torch.ops.aten

#: Operator packets whose result the host must read (a value, or a size that depends on values).
HOST_READ_OPS = frozenset({
    _aten._local_scalar_dense,  # .item(), bool(), int(), float() of a tensor
    _aten.nonzero,
    _aten.masked_select,
    _aten._unique2,
    _aten.unique_dim,
    _aten.unique_consecutive,
    _aten.repeat_interleave,  # without output_size
    _aten.equal,  # torch.equal returns a Python bool
})


@dataclass(frozen=True)
class HostRead:
    """One recorded read: the operator and where it was called from (the innermost frames outside torch)."""

    op: str
    where: str


def _caller(stack: list[traceback.FrameSummary]) -> tuple[str, bool]:
    """(the innermost frames outside torch and this module, whether torch.optim made the call)."""
    optim = any("/torch/optim/" in frame.filename for frame in stack)
    ours = [f for f in stack if "/torch/" not in f.filename and not f.filename.endswith("hostsync.py")]
    where = " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}" for f in reversed(ours[-3:]))
    return where or "(inside torch)", optim


def _bool_index(func, args) -> bool:
    """``x[mask]`` with a bool mask: its result's size depends on the mask's values."""
    if func.overloadpacket not in (_aten.index, _aten.index_put, _aten.index_put_) or len(args) < 2:
        return False
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] or ())


class HostReads(TorchDispatchMode):
    """Record every host read (:data:`HOST_READ_OPS`) made while the mode is active; ``calls`` lists them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[HostRead] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in HOST_READ_OPS or _bool_index(func, args):
            where, optim = _caller(traceback.extract_stack()[:-1])
            if not optim:
                self.calls.append(HostRead(str(func.overloadpacket.__name__), where))
        return func(*args, **(kwargs or {}))

    def describe(self) -> str:
        """One line per read: ``op at file:line function <- ...``."""
        return "\n".join(f"{c.op} at {c.where}" for c in self.calls) or "no host read"
