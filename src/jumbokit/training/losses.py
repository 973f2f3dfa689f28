"""Loss functions in ``fit``'s form: ``loss_fn(model, batch) -> (loss, logs)``."""
from __future__ import annotations

from typing import Any, Callable

import torch
from accelerate.utils import extract_model_from_parallel
from torch import nn

__all__ = ["LossFn", "classification_loss"]

LossFn = Callable[[nn.Module, Any], "tuple[torch.Tensor, dict[str, Any]]"]


def classification_loss(
    criterion: nn.Module | None = None,
    mixup: Callable | None = None,
    forward: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
) -> LossFn:
    """A ``loss_fn`` for ``fit`` on ``(images, labels)`` batches: optional mixup/cutmix, ``criterion`` (default
    cross-entropy; soft-target CE with mixup), plus the model's ``aux_loss`` when it exposes one, plus ``criterion``
    on the logits of a second head when the model has ``take_aux_logits()`` (e.g. an encoder with ``trunk_head``);
    logs ``top1`` (the batch's accuracy in percent, on hard labels, not under mixup), ``aux_loss`` and ``aux_ce``.

    ``forward(model, x) -> logits`` (B, num_classes) replaces ``model(x)`` (e.g. token dropping through ``keep``).
    """
    if criterion is None:
        if mixup is not None:
            from timm.loss import SoftTargetCrossEntropy

            criterion = SoftTargetCrossEntropy()
        else:
            criterion = nn.CrossEntropyLoss()

    def loss_fn(model: nn.Module, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        x, y = batch[0], batch[1]
        if mixup is not None:
            x, target = mixup(x, y)
        else:
            target = y
        logits = forward(model, x) if forward is not None else model(x)
        loss = criterion(logits, target)
        logs: dict[str, torch.Tensor] = {}
        unwrapped = extract_model_from_parallel(model)
        aux = getattr(unwrapped, "aux_loss", None)
        if isinstance(aux, torch.Tensor):
            loss = loss + aux
            logs["aux_loss"] = aux.detach()
        take_aux_logits = getattr(unwrapped, "take_aux_logits", None)
        aux_logits = take_aux_logits() if take_aux_logits is not None else None
        if aux_logits is not None:
            aux_ce = criterion(aux_logits, target)
            loss = loss + aux_ce
            logs["aux_ce"] = aux_ce.detach()
        if mixup is None:
            logs["top1"] = (logits.detach().argmax(-1) == y).float().mean() * 100.0
        return loss, logs

    return loss_fn

