"""Linear probing of a frozen encoder (MAE protocol).

The encoder stays frozen and in eval mode (no gradient, no statistics update, dropout off); the probe is
``BatchNorm1d(affine=False) + Linear`` on the global-token plug-in's pooled feature (or the mean patch
token), trained with LARS (timm's) or AdamW. Features can be extracted once and the head trained on the
cached tensors, which makes probing fast on a CPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from jumbokit.encoders import Encoder
from jumbokit.heads import ProbeHead, select_feature
from jumbokit.training.evaluate import topk_correct
from jumbokit.training.optim import lr_lambda

__all__ = [
    "FEATURE_KINDS",
    "LinearProbe",
    "make_probe_head",
    "probe_feature_dim",
    "encoder_features",
    "check_probe_layer",
    "extract_features",
    "build_probe_optimizer",
    "train_head_on_features",
    "evaluate_head",
    "split_batch",
]

FEATURE_KINDS = ("token", "avg")


def _check_feature_kind(feature: str) -> None:
    if feature not in FEATURE_KINDS:
        raise ValueError(f"unknown probe feature {feature!r}; expected one of {FEATURE_KINDS} "
                         "('token' = the global-token plug-in's pooled feature, 'avg' = mean patch token)")


def probe_feature_dim(encoder: Encoder, feature: str = "token") -> int:
    """Width of the probed feature: ``encoder.num_features`` ('token') or ``encoder.embed_dim`` ('avg')."""
    _check_feature_kind(feature)
    return int(encoder.num_features if feature == "token" else encoder.embed_dim)


_SOURCES = {"token": "pooled", "avg": "patch_mean"}  # probe flag -> jumbokit.heads feature source


def make_probe_head(in_features: int, num_classes: int) -> ProbeHead:
    """MAE's probe head (``jumbokit.heads.ProbeHead``): BatchNorm1d without affine + Linear."""
    if num_classes < 1:
        raise ValueError(f"a probe needs num_classes >= 1, got {num_classes}")
    return ProbeHead(in_features, num_classes)


def check_probe_layer(encoder: Encoder, layer: int | None) -> None:
    """``layer`` must name a block of a plain encoder (negative counts from the end), or be None (the last)."""
    if layer is None:
        return
    if not isinstance(encoder, Encoder):
        raise ValueError(f"probing an intermediate layer needs a plain encoder; got a {type(encoder).__name__} "
                         "(drop --layer to probe its output)")
    encoder._block_index(layer)


def encoder_features(encoder: Encoder, images: torch.Tensor, feature: str = "token",
                     layer: int | None = None) -> torch.Tensor:
    """(B, C, H, W) -> (B, F) frozen features: the pooled plug-in feature or the mean patch token, of the final
    norm applied to the output of block ``layer`` (None: the last block, the encoder's own output)."""
    _check_feature_kind(feature)
    out = encoder.forward_features(images) if layer is None else encoder.forward_features(images, layer=layer)
    return select_feature(out, _SOURCES[feature])


class LinearProbe(nn.Module):
    """Frozen encoder + trainable BatchNorm1d(affine=False) + Linear head.

    The encoder's parameters get ``requires_grad=False`` and the encoder stays in eval mode whatever
    ``train()`` is called with, so its weights and statistics never change.

    ``layer`` probes the output of that block (normed and pooled as the last one is); None probes the last.

    forward: images (B, C, H, W) -> logits (B, num_classes).
    """

    def __init__(self, encoder: Encoder, num_classes: int, feature: str = "token", layer: int | None = None) -> None:
        super().__init__()
        _check_feature_kind(feature)
        check_probe_layer(encoder, layer)
        self.encoder = encoder
        self.feature = feature
        self.layer = layer
        self.encoder.requires_grad_(False)
        self.head = make_probe_head(probe_feature_dim(encoder, feature), num_classes)
        self.train()

    def train(self, mode: bool = True) -> LinearProbe:
        super().train(mode)
        self.encoder.eval()
        return self

    def features(self, images: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return encoder_features(self.encoder, images, self.feature, self.layer)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))


def split_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(images, labels) from a loader batch: a (x, y, ...) tuple/list or a dict with image/label keys."""
    if isinstance(batch, dict):
        image_key = next((k for k in ("image", "images", "pixel_values", "x") if k in batch), None)
        label_key = next((k for k in ("label", "labels", "target", "y") if k in batch), None)
        if image_key is None or label_key is None:
            raise ValueError(f"expected a batch dict with image and label keys, got keys {sorted(batch)}")
        return batch[image_key], batch[label_key]
    if isinstance(batch, (tuple, list)) and len(batch) >= 2:
        return batch[0], batch[1]
    raise ValueError(f"expected a batch (images, labels), got {type(batch).__name__}")


@torch.no_grad()
def extract_features(
    encoder: Encoder,
    loader: Iterable,
    feature: str = "token",
    device: torch.device | str | None = None,
    progress: bool = False,
    desc: str = "features",
    layer: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the frozen encoder (eval mode) over a loader once: returns features (M, F) float32 and labels (M,)
    on the CPU (of block ``layer``, see ``encoder_features``). The encoder's train/eval state is restored
    afterwards."""
    _check_feature_kind(feature)
    check_probe_layer(encoder, layer)
    if device is None:
        device = next(encoder.parameters()).device
    was_training = encoder.training
    encoder.eval()
    feats, labels = [], []
    iterator: Iterable = loader
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(loader, desc=desc, leave=False)
    try:
        for batch in iterator:
            images, target = split_batch(batch)
            feats.append(encoder_features(encoder, images.to(device), feature, layer).float().cpu())
            labels.append(torch.as_tensor(target).long().cpu())
    finally:
        encoder.train(was_training)
    if not feats:
        raise ValueError("the loader yielded no batch; nothing to extract features from")
    return torch.cat(feats), torch.cat(labels)


def build_probe_optimizer(
    head: nn.Module,
    optimizer: str = "lars",
    lr: float = 0.1,
    weight_decay: float = 0.0,
    momentum: float = 0.9,
    betas: tuple[float, float] = (0.9, 0.999),
) -> torch.optim.Optimizer:
    """LARS (timm's ``Lars``, MAE's linear-probe optimizer) or AdamW over the head's trainable parameters, in the
    shared ``param_groups`` (weight decay on weight matrices only).

    LARS adapts the step of matrices (trust ratio 0.001); biases get plain momentum SGD without decay, as MAE's
    LARS excludes 1-D parameters (``jumbokit.training.build_lars``).
    """
    from jumbokit.training.optim import build_lars, param_groups

    name = optimizer.lower()
    if name not in ("lars", "adamw"):
        raise ValueError(f"unknown probe optimizer {optimizer!r}; expected 'lars' or 'adamw'")
    if not any(p.requires_grad for p in head.parameters()):
        raise ValueError("the head has no trainable parameter")
    groups = param_groups(head, weight_decay)
    if name == "lars":
        return build_lars(groups, lr=lr, momentum=momentum)
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


def _batches(count: int, batch_size: int, generator: torch.Generator, shuffle: bool = True) -> Iterator[torch.Tensor]:
    order = torch.randperm(count, generator=generator) if shuffle else torch.arange(count)
    for start in range(0, count, batch_size):
        yield order[start:start + batch_size]


@torch.no_grad()
def evaluate_head(head: nn.Module, features: torch.Tensor, labels: torch.Tensor,
                  batch_size: int = 1024) -> dict[str, float]:
    """Loss and top-1/top-5 (percent; k above the class count counts every class) of a head on cached features
    (M, F) with labels (M,)."""
    was_training = head.training
    head.eval()
    device = next(head.parameters()).device
    logits = torch.cat([head(features[i:i + batch_size].to(device)).float().cpu()
                        for i in range(0, len(features), batch_size)])
    head.train(was_training)
    correct = topk_correct(logits, labels, (1, 5))
    metrics = {f"top{k}": 100.0 * c / len(labels) for k, c in correct.items()}
    metrics["loss"] = F.cross_entropy(logits, labels).item()
    return metrics


def train_head_on_features(
    head: nn.Module,
    features: torch.Tensor,
    labels: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    epochs: int = 90,
    batch_size: int = 256,
    warmup_epochs: float = 10.0,
    seed: int = 0,
    eval_sets: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
    eval_every: int = 0,
    progress: bool = False,
    on_epoch: Any = None,
) -> list[dict[str, float]]:
    """Train a probe head on cached features (M, F) with labels (M,): per-step warm-up + cosine schedule
    from each param group's initial lr. Returns one dict per epoch (train loss, lr, and the metrics of
    each eval set named ``{name}_top1`` ... on the evaluated epochs; the last epoch is always evaluated)."""
    if len(features) != len(labels):
        raise ValueError(f"features and labels differ in length: {len(features)} vs {len(labels)}")
    if batch_size < 2:
        raise ValueError(f"batch_size must be >= 2 (BatchNorm in the probe head), got {batch_size}")
    if batch_size > len(features):
        raise ValueError(f"batch_size {batch_size} is larger than the {len(features)} training samples; lower it")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    device = next(head.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    steps_per_epoch = len(features) // batch_size  # drop the last partial batch (BatchNorm statistics)
    total = epochs * steps_per_epoch
    warmup = int(round(warmup_epochs * steps_per_epoch))
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    history: list[dict[str, float]] = []
    epoch_iter: Iterable[int] = range(epochs)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(epoch_iter, desc="probe", leave=False)
        epoch_iter = bar
    step = 0
    head.train()
    for epoch in epoch_iter:
        running, seen = 0.0, 0
        for index in _batches(len(features), batch_size, generator):
            if len(index) < batch_size:
                continue
            scale = lr_lambda(step, total, warmup)
            for group, base in zip(optimizer.param_groups, base_lrs):
                group["lr"] = base * scale
            x, y = features[index].to(device), labels[index].to(device)
            loss = F.cross_entropy(head(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            running += loss.item() * len(index)
            seen += len(index)
            step += 1
        record = {"epoch": epoch + 1, "train_loss": running / max(seen, 1),
                  "lr": optimizer.param_groups[0]["lr"]}
        last = epoch + 1 == epochs
        if eval_sets and (last or (eval_every and (epoch + 1) % eval_every == 0)):
            for name, (feats, labs) in eval_sets.items():
                for key, value in evaluate_head(head, feats, labs).items():
                    record[f"{name}_{key}"] = value
        history.append(record)
        if bar is not None:
            bar.set_postfix(loss=f"{record['train_loss']:.3f}")
        if on_epoch is not None:
            on_epoch(record)
    return history
