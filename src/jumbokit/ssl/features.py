"""Frozen features of a whole split on 1 or N processes.

Each process embeds its share of the split through an Accelerate-prepared, non-shuffled loader (under the
launch's autocast: bf16 on a GPU by default, fp32 on a CPU), the shares are combined with
``accelerator.gather_for_metrics`` (which drops the samples that pad the last batches) and put back into the
split's order by their dataset index, so every process holds the same (M, F) tensor whatever the process count.
Only the real rows of a padded batch are embedded, so each sample goes through the encoder in the same batch as
in a one-process run and its feature does not depend on the process count even where kernels round differently
for other batch sizes.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Dataset

from jumbokit.encoders import Encoder

from .linear_probe import encoder_features, probe_feature_dim, split_batch

__all__ = ["IndexedDataset", "restore_order", "real_rows", "embed_shard", "extract_split_features"]


class IndexedDataset(Dataset):
    """``dataset`` whose items carry their position: item i is ``(image, label, i)``."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.source = getattr(dataset, "source", None)  # make_loader reads source.in_memory for its worker count
        self.task = "eval"

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[Any, Any, int]:
        image, label = split_batch(self.dataset[index])
        return image, label, index


def restore_order(index: torch.Tensor, count: int, *values: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Rows gathered from every process, put back in dataset order: row r of each value (M, ...) goes to
    position ``index[r]``. ``index`` (M,) must name each position of ``range(count)`` exactly once; a missing or
    repeated sample, or a padding row (index -1), raises ``RuntimeError`` (it would count twice or not at all)."""
    index = index.long().cpu()
    padding = int((index < 0).sum())
    seen = torch.bincount(index[index >= 0], minlength=count)
    if index.numel() != count or padding or len(seen) != count or not bool((seen == 1).all()):
        missing, repeated = int((seen[:count] == 0).sum()), int((seen > 1).sum())
        raise RuntimeError(f"gathered features do not cover the {count} samples once each: {index.numel()} rows, "
                           f"{missing} samples missing, {repeated} repeated, {padding} padding")
    ordered = []
    for value in values:
        out = torch.empty((count, *value.shape[1:]), dtype=value.dtype)
        out[index] = value.cpu()
        ordered.append(out)
    return tuple(ordered)


def real_rows(step: int, steps: int, count: int, batch_size: int, rank: int, world: int) -> int:
    """How many leading rows of process ``rank``'s batch at ``step`` (of ``steps``) are samples that
    ``gather_for_metrics`` keeps, for ``count`` samples in batches of ``batch_size`` over ``world`` processes.

    Accelerate deals whole batches round-robin and, on the last step, completes the partial batch and adds whole
    batches with samples from the start; the gathered last step is cut after ``count % (batch_size * world)`` rows,
    so process ``rank`` keeps its first ``remainder - rank * batch_size`` rows there (clamped to [0, batch_size])."""
    remainder = count % (batch_size * world)
    if step < steps - 1 or remainder == 0:
        return batch_size
    return min(batch_size, max(0, remainder - rank * batch_size))


@torch.no_grad()
def embed_shard(encoder: Encoder, loader: Any, accelerator: Any, count: int, batch_size: int,
                feature: str = "token", progress: bool = False, desc: str = "features", layer: int | None = None,
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per step of this process's prepared ``loader`` of ``IndexedDataset`` items: features (B, F) float32, labels
    (B,) and dataset indices (B,), ready for ``gather_for_metrics``.

    Only the real rows (``real_rows``) go through the encoder, so every sample is embedded in the very batch a
    one-process run gives it; the padding rows get zero features and index -1 (``restore_order`` refuses one that
    survives the gather). The encoder runs under ``accelerator.autocast()``; ``layer`` as in ``encoder_features``."""
    from tqdm.auto import tqdm

    steps, width = len(loader), probe_feature_dim(encoder, feature)
    bar = tqdm(loader, desc=desc, leave=False, disable=not (progress and accelerator.is_main_process))
    for step, (images, target, position) in enumerate(bar):
        real = min(len(images), real_rows(step, steps, count, batch_size, accelerator.process_index,
                                          accelerator.num_processes))
        out = torch.zeros(len(images), width, device=images.device)
        if real:
            with accelerator.autocast():
                out[:real] = encoder_features(encoder, images[:real], feature, layer).float()
        position = position.clone()
        position[real:] = -1
        yield out, torch.as_tensor(target, device=images.device).long(), position.to(images.device)


def extract_split_features(
    encoder: Encoder,
    dataset: Any,
    accelerator: Any,
    feature: str = "token",
    batch_size: int = 256,
    num_workers: int | None = None,
    progress: bool = False,
    desc: str = "features",
    layer: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Frozen features of every sample of ``dataset``, embedded sharded over the processes of ``accelerator``
    (of block ``layer``, see ``encoder_features``; None: the last).

    The encoder (on ``accelerator.device``) runs in eval mode under ``accelerator.autocast()``; its train/eval
    state is restored afterwards. Every process returns the same features (M, F) float32 and labels (M,) long,
    on the CPU, in dataset order (M = ``len(dataset)``)."""
    from jumbokit.data import make_loader

    loader = accelerator.prepare_data_loader(
        make_loader(IndexedDataset(dataset), batch_size, train=False, num_workers=num_workers))
    was_training = encoder.training
    encoder.eval()
    columns: list[list[torch.Tensor]] = [[], [], []]
    try:
        for step in embed_shard(encoder, loader, accelerator, len(dataset), batch_size, feature, progress, desc,
                                layer):
            for column, value in zip(columns, accelerator.gather_for_metrics(step)):
                column.append(value.cpu())
    finally:
        encoder.train(was_training)
    feats, labels, index = (torch.cat(column) for column in columns)
    return restore_order(index, len(dataset), feats, labels)
