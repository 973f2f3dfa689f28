"""How a run computes its steps, never what it computes: ``torch.compile`` of the model and gradient
checkpointing (timm's ``set_grad_checkpointing``)."""
from __future__ import annotations

from torch import nn

__all__ = ["compile_model", "enable_grad_checkpointing"]


def compile_model(model: nn.Module) -> nn.Module:
    """Compile ``model``'s forward in place with ``torch.compile`` (``nn.Module.compile``) and return it.

    In place, so the parameter names, the state dict and the checkpoints stay those of the plain model, and the
    model can be wrapped (DDP) afterwards. Compile after any copy of the model is taken (a weight average): a copy
    of a compiled module would call the original's forward."""
    model.compile()
    return model


def enable_grad_checkpointing(model: nn.Module) -> list[str]:
    """Switch on timm's gradient checkpointing (``set_grad_checkpointing(True)``) of ``model``, or, when the model
    has none, of its outermost submodules that have it (an MAE's encoder); returns their names ("" = the model).

    Activations of the checkpointed blocks are recomputed in the backward pass instead of kept: less memory, the
    same gradients. Raises ``ValueError`` when no module has ``set_grad_checkpointing``."""
    found: list[str] = []
    for name, module in model.named_modules():
        if any(name.startswith(done + ".") or done == "" for done in found):
            continue  # inside a module already switched
        if callable(getattr(module, "set_grad_checkpointing", None)):
            module.set_grad_checkpointing(True)
            found.append(name)
    if not found:
        raise ValueError(f"--grad-checkpointing needs a model with timm's set_grad_checkpointing(); "
                         f"{type(model).__name__} and its submodules have none")
    return found
