"""One classification evaluation loop (top-k accuracy in percent, loss) shared by recipes, on one process or
sharded over every process of an Accelerate launch.

``topk_correct`` is timm's ``accuracy``; the loop keeps its per-sample rows (``sample_stats``, loss and hits in one
(B, 1 + k) tensor): timm's gives one percentage per batch, so every process would gather its (B, classes) logits
instead, and the loss would be summed in another order (``val_loss`` no longer bit-identical to earlier runs).
"""
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


def sample_stats(logits: torch.Tensor, labels: torch.Tensor, topk: tuple[int, ...]) -> torch.Tensor:
    """Per sample: cross-entropy and, per k of ``topk``, 1.0 when the label is among the k highest logits.

    logits (B, C), labels (B,) -> (B, 1 + len(topk)) float32 (k above C counts every class)."""
    logits = logits.float()
    ranked = logits.topk(min(max(topk), logits.shape[-1]), dim=-1).indices
    hits = ranked == labels[:, None]
    columns = [F.cross_entropy(logits, labels, reduction="none")]
    columns += [hits[:, :k].any(dim=-1).float() for k in topk]
    return torch.stack(columns, dim=1)


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
    accelerator=None,
) -> dict:
    """Top-k accuracy and mean cross-entropy of ``model`` over ``(images, labels)`` batches.

    The model is put in eval mode for the pass (and restored after). ``k`` larger than the number of classes is
    left out. Returns ``{f"{prefix}top1", f"{prefix}top5", f"{prefix}loss", f"{prefix}n"}`` (accuracies in percent,
    0-100; ``top{k}`` for each k of ``topk``); with ``return_predictions`` also ``"predictions"`` / ``"targets"``
    (LongTensor (N,)); ``progress`` draws a tqdm bar.

    With ``accelerator``, ``loader`` is one it prepared and every process calls this on its shard: the per-sample
    results are combined with ``accelerator.gather_for_metrics`` (the padding that evens out the last batches is
    dropped, so each sample counts once) and every process returns the same numbers.
    """
    from tqdm.auto import tqdm

    if device is None:
        device = accelerator.device if accelerator is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    sums, total, num_classes = None, 0, 0
    preds, targets = [], []
    for batch in tqdm(loader, desc=desc, disable=not progress, leave=False, dynamic_ncols=True):
        x, y = batch[0].to(device, non_blocking=True), batch[1].to(device, non_blocking=True)
        logits = forward(model, x) if forward is not None else model(x)
        stats, pred, num_classes = sample_stats(logits, y, topk), logits.argmax(dim=-1), logits.shape[-1]
        if accelerator is not None:
            stats, pred, y = accelerator.gather_for_metrics((stats, pred, y))
        sums = stats.sum(dim=0) if sums is None else sums + stats.sum(dim=0)
        total += stats.shape[0]
        if return_predictions:
            preds.append(pred.cpu())
            targets.append(y.cpu())
    model.train(was_training)
    if total == 0:
        raise ValueError("evaluation loader yielded no samples")
    loss_sum, *hits = sums.tolist()
    out: dict = {f"{prefix}top{k}": 100.0 * h / total for k, h in zip(topk, hits) if k <= num_classes}
    out[f"{prefix}loss"] = loss_sum / total
    out[f"{prefix}n"] = total
    if return_predictions:
        out["predictions"] = torch.cat(preds)
        out["targets"] = torch.cat(targets)
    return out
