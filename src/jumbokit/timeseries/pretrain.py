"""Self-supervised pretraining of series encoders: masked-patch reconstruction (PatchTST's self-supervised
mode) through :class:`jumbokit.ssl.MaskedAutoencoder`.

    from jumbokit.timeseries import pretrain_series
    result = pretrain_series("patchtst_jumbo", x_unlabeled, steps=500, num_classes=3)   # x: (n, C, L), NaN = missing
    model = result.model        # the encoder with pretrained weights; fine-tune it like a fresh model

Every channel is patched and masked on its own; the encoder sees the visible patches (plus its global
tokens), a one-block decoder predicts every patch, and the loss is the MSE on the observed steps that no visible
patch covers (patches overlap; missing / padded steps are never targets). Those steps reach the encoder as
missing, so a trunk or stem reading across patch borders cannot see them. Pass series normalised as the
fine-tuning inputs will be (``tstrain`` pretrains on the training split as loaded: standardised with
training-split statistics, and never on validation or test series).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["PretrainResult", "pretrain_series", "StepBatches", "PRETRAIN_DEFAULTS"]

PRETRAIN_DEFAULTS: dict[str, Any] = dict(mask_ratio=0.4, lr=1e-3, weight_decay=0.02, decoder_dim=64,
                                         decoder_depth=1, decoder_num_heads=4)


class StepBatches:
    """A batch sampler giving exactly ``steps`` batches of ``batch_size`` indices of ``n`` items: consecutive
    slices of a stream of seeded random permutations, so every item is seen equally often (within one)."""

    def __init__(self, n: int, batch_size: int, steps: int, seed: int = 0) -> None:
        if n < 1 or batch_size < 1 or steps < 1:
            raise ValueError(f"expected n, batch_size and steps >= 1, got n={n}, batch_size={batch_size}, "
                             f"steps={steps}")
        self.n, self.batch_size, self.steps, self.seed = int(n), int(min(batch_size, n)), int(steps), int(seed)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        rng = np.random.default_rng(self.seed)
        need = self.steps * self.batch_size
        stream = np.concatenate([rng.permutation(self.n) for _ in range(math.ceil(need / self.n))])
        for i in range(self.steps):
            yield stream[i * self.batch_size:(i + 1) * self.batch_size].tolist()


@dataclass
class PretrainResult:
    """``model``: the pretrained encoder (the one passed in, updated in place, or the one built from a name);
    ``mae``: the wrapper (encoder + decoder); ``history``: per-epoch records of the shared loop (one epoch =
    all ``steps``); ``loss``: the mean masked-reconstruction loss of the last 10% of steps."""

    model: nn.Module
    mae: nn.Module
    steps: int
    seconds: float
    loss: float
    history: list[dict] = field(default_factory=list)


def _as_series(x: Any) -> np.ndarray:
    from .data import pad_series
    from .normalize import check_series

    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    arr = pad_series(x) if not (isinstance(x, np.ndarray) and x.dtype != object and x.ndim == 3) else x
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    check_series(arr, "pretraining series")
    return arr


def pretrain_series(model: nn.Module | str, x: Any, *, steps: int | None = None, epochs: int | None = None,
                    batch_size: int = 32, lr: float = PRETRAIN_DEFAULTS["lr"],
                    mask_ratio: float = PRETRAIN_DEFAULTS["mask_ratio"],
                    weight_decay: float = PRETRAIN_DEFAULTS["weight_decay"],
                    decoder_dim: int = PRETRAIN_DEFAULTS["decoder_dim"],
                    decoder_depth: int = PRETRAIN_DEFAULTS["decoder_depth"],
                    decoder_num_heads: int = PRETRAIN_DEFAULTS["decoder_num_heads"], patches: int = 8,
                    num_classes: int = 0, seed: int = 0, progress: bool = False, cpu: bool = False,
                    accelerator: Any = None) -> PretrainResult:
    """Masked-patch pretraining of a series encoder on unlabeled series.

    model: a series :class:`~jumbokit.encoders.Encoder` (e.g. ``create_model("patchtst_jumbo", ...)``; its
        weights are updated in place) or a zoo name, built for x's channels and length with ``patches`` and
        ``num_classes`` (0 = no head).
    x: (n, C, L) or (n, L) array / tensor, or a list of (C, L_i) arrays (padded with NaN); NaN = missing.
    steps / epochs: length of pretraining in optimizer steps, or in passes over x (exactly one of them;
        epochs -> ceil(n / batch_size) steps each).
    batch_size: series per step (capped at n). lr: peak AdamW lr (10% warm-up, cosine to 1e-8).
    mask_ratio: fraction of each channel's observed patches hidden from the encoder (PatchTST: 0.4).
    """
    from ..encoders import create_model
    from ..ssl import MaskedAutoencoder
    from ..training import TrainConfig, fit

    if (steps is None) == (epochs is None):
        raise ValueError(f"pass exactly one of steps or epochs, got steps={steps}, epochs={epochs}")
    if (steps is not None and steps < 1) or (epochs is not None and epochs < 1):
        raise ValueError(f"steps / epochs must be >= 1, got steps={steps}, epochs={epochs}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    series = _as_series(x)
    n, chans, length = series.shape
    if isinstance(model, str):
        torch.manual_seed(seed)
        model = create_model(model, num_classes=num_classes, in_chans=chans, seq_len=length, patches=patches)
    config = getattr(model, "config", {}) or {}
    if config.get("tokenizer") != "series":
        raise ValueError(f"expected a series encoder (tokenizer='series'), got tokenizer={config.get('tokenizer')!r}")
    if int(config.get("in_chans", chans)) != chans:
        raise ValueError(f"expected series of {config.get('in_chans')} channel(s) (as the model), got {chans}")
    batch = min(int(batch_size), n)
    if steps is None:
        steps = int(epochs) * math.ceil(n / batch)
    torch.manual_seed(seed)
    mae = MaskedAutoencoder(model, decoder_dim=decoder_dim, decoder_depth=decoder_depth,
                            decoder_num_heads=decoder_num_heads, mask_ratio=mask_ratio)
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(series))
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=StepBatches(n, batch, steps, seed))
    generator = torch.Generator().manual_seed(seed)
    losses: list[float] = []

    def loss_fn(wrapper: nn.Module, batch_: Any) -> tuple[torch.Tensor, dict]:
        x_ = batch_[0]
        out = wrapper(x_, generator=generator if x_.device.type == "cpu" else None)
        losses.append(out.loss.detach())
        return out.loss, {}

    cfg = TrainConfig(epochs=1, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95), warmup_fraction=0.1,
                      min_lr=min(1e-8, lr), schedule="cosine", seed=seed, checkpoint_every=0, progress=progress,
                      cpu=cpu, save_model=False, log_every=max(1, min(10, steps)))
    start = time.perf_counter()
    result = fit(mae, loader, loss_fn, cfg, accelerator=accelerator)
    seconds = time.perf_counter() - start
    tail = losses[-max(1, len(losses) // 10):]
    loss = float(torch.stack(tail).float().mean()) if tail else float("nan")
    mae = result.model
    return PretrainResult(model=mae.encoder, mae=mae, steps=steps, seconds=seconds, loss=loss,
                          history=result.history)
