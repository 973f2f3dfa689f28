"""One classification evaluation loop (top-k accuracy in percent, loss) shared by recipes."""
from __future__ import annotations

from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn


def topk_correct(logits: torch.Tensor, labels: torch.Tensor, topk: tuple[int, ...] = (1, 5)) -> dict[int, int]:
    """Per k, the number of samples whose label is among the k highest logits (timm's ``accuracy``; k above the
    class count counts every class)."""
    from timm.utils import accuracy

    if labels.numel() == 0:
        return {k: 0 for k in topk}
    percents = accuracy(logits, labels, topk=topk)
    return {k: int(round(float(p) * labels.numel() / 100.0)) for k, p in zip(topk, percents)}


@torch.no_grad()
def evaluate_classifier(
    model: nn.Module,
    loader: Iterable,
    *,
    topk: tuple[int, ...] = (1, 5),
    forward: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
    device: torch.device | str | None = None,
    prefix: str = "",
    return_predictions: bool = False,
    progress: bool = False,
    desc: str = "eval",
) -> dict:
    """Top-k accuracy and mean cross-entropy of ``model`` over ``(images, labels)`` batches.

    The model is put in eval mode for the pass (and restored after). ``k`` larger than the number of classes is
    left out. Returns ``{f"{prefix}top1", f"{prefix}top5", f"{prefix}loss", f"{prefix}n"}`` (accuracies in percent,
    0-100; ``top{k}`` for each k of ``topk``); with ``return_predictions`` also ``"predictions"`` / ``"targets"``
    (LongTensor (N,)); ``progress`` draws a tqdm bar.
    """
    from tqdm.auto import tqdm

    if device is None:
        device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    correct = {k: 0 for k in topk}
    total, loss_sum = 0, 0.0
    preds, targets = [], []
    for batch in tqdm(loader, desc=desc, disable=not progress, leave=False, dynamic_ncols=True):
        x, y = batch[0].to(device, non_blocking=True), batch[1].to(device, non_blocking=True)
        logits = forward(model, x) if forward is not None else model(x)
        logits = logits.float()
        loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
        for k, hits in topk_correct(logits, y, topk).items():
            correct[k] += hits
        total += y.numel()
        if return_predictions:
            preds.append(logits.argmax(dim=-1).cpu())
            targets.append(y.cpu())
    model.train(was_training)
    if total == 0:
        raise ValueError("evaluation loader yielded no samples")
    num_classes = logits.shape[-1]
    out: dict = {f"{prefix}top{k}": 100.0 * correct[k] / total for k in topk if k <= num_classes}
    out[f"{prefix}loss"] = loss_sum / total
    out[f"{prefix}n"] = total
    if return_predictions:
        out["predictions"] = torch.cat(preds)
        out["targets"] = torch.cat(targets)
    return out
