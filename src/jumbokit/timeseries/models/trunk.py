"""A full-resolution convolutional trunk for series tokens (InceptionTime- or ResNet-style).

The plain series tokenizer sees each patch through one linear map, so a long series (ACSF1: 1,460 steps in
16 patches of 91 steps) is read coarsely. The trunk runs stride-1 convolutions over the whole channel
first, then every patch window reduces the trunk's feature map to one token (masked max and mean over the
window's observed steps, projected to width D) that is added to the linear patch projection:

    channel series (B*C, 1|2, L')  -> trunk -> (B*C, F, L')  -> max+mean per patch window -> (B*C, N, 2F)
                                                              -> Linear(2F, D) -> added to the patch tokens

- ``inception``: InceptionTime modules (1x1 bottleneck, kernels 39/19/9 and a max-pool branch, each of
  ``width`` filters, so F = 4 * width), BatchNorm, ReLU, a residual shortcut around every 3 modules.
- ``resnet``: the residual blocks of Wang et al.'s ResNet (kernels 7/5/3, F = ``width`` filters per block).

``diff=True`` feeds the first difference of each channel as a second input channel (MultiRocket's
first-difference series). :class:`TokenStats` is the per-token mean/std option (Mantis): the window's
observed mean and standard deviation, projected to width D and added.

Missing steps (NaN) enter the trunk as 0 and are left out of every window reduction; a window with no
observed step gives a zero feature (its token is masked by the tokenizer anyway).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...encoders.checks import whole_number

__all__ = ["TRUNKS", "TrunkPatchFeatures", "TokenStats", "window_max_mean", "trunk_flops", "token_stats_flops"]

TRUNKS = ("inception", "resnet")
INCEPTION_KERNELS = (39, 19, 9)
RESNET_KERNELS = (7, 5, 3)
RESIDUAL_EVERY = 3  # InceptionTime: a shortcut around every 3 modules


def window_max_mean(feats: torch.Tensor, observed: torch.Tensor | None, patch_len: int,
                    stride: int) -> torch.Tensor:
    """Masked max and mean of (S, F, L') features in windows of ``patch_len`` every ``stride`` steps.

    ``observed``: (S, 1, L') bool/float (1 = observed) or None. Returns (S, N, 2F): [max | mean] per window;
    windows with no observed step give 0."""
    window = dict(kernel_size=patch_len, stride=stride)
    if observed is None:
        peak, mean = F.max_pool1d(feats, **window), F.avg_pool1d(feats, **window)
    else:
        seen = observed.to(feats.dtype)
        peak = F.max_pool1d(feats.masked_fill(seen == 0, float("-inf")), **window)
        peak = peak.masked_fill(torch.isinf(peak), 0.0)
        mean = F.avg_pool1d(feats * seen, **window) / F.avg_pool1d(seen, **window).clamp_min(1.0 / patch_len)
    return torch.cat([peak, mean], dim=1).transpose(1, 2)


def _conv(in_chans: int, out_chans: int, kernel: int) -> nn.Conv1d:
    return nn.Conv1d(in_chans, out_chans, kernel, padding=kernel // 2, bias=False)


class InceptionModule(nn.Module):
    """(S, in, L) -> (S, 4 * width, L): bottleneck, three kernel sizes and a max-pool branch, BN, ReLU."""

    def __init__(self, in_chans: int, width: int) -> None:
        super().__init__()
        self.bottleneck = _conv(in_chans, width, 1) if in_chans > 1 else nn.Identity()
        inner = width if in_chans > 1 else in_chans
        self.convs = nn.ModuleList(_conv(inner, width, k) for k in INCEPTION_KERNELS)
        self.pool_conv = _conv(in_chans, width, 1)
        self.bn = nn.BatchNorm1d(4 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.bottleneck(x)
        pooled = F.max_pool1d(x, 3, stride=1, padding=1)
        branches = [conv(z) for conv in self.convs] + [self.pool_conv(pooled)]
        return F.relu(self.bn(torch.cat(branches, dim=1)))


class Shortcut(nn.Module):
    """The residual path: 1x1 conv + BN (identity-shaped sums need no conv, but InceptionTime always uses one)."""

    def __init__(self, in_chans: int, out_chans: int) -> None:
        super().__init__()
        self.conv, self.bn = _conv(in_chans, out_chans, 1), nn.BatchNorm1d(out_chans)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class InceptionTrunk(nn.Module):
    """``depth`` inception modules with a shortcut around every 3: (S, in, L) -> (S, 4 * width, L)."""

    def __init__(self, in_chans: int, width: int, depth: int) -> None:
        super().__init__()
        out = 4 * width
        self.blocks = nn.ModuleList(InceptionModule(in_chans if i == 0 else out, width) for i in range(depth))
        starts = range(0, depth - RESIDUAL_EVERY + 1, RESIDUAL_EVERY)
        self.shortcuts = nn.ModuleList(Shortcut(in_chans if s == 0 else out, out) for s in starts)
        self.out_chans = out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        for i, module in enumerate(self.blocks):
            x = module(x)
            if (i + 1) % RESIDUAL_EVERY == 0:
                x = F.relu(x + self.shortcuts[i // RESIDUAL_EVERY](residual))
                residual = x
        return x


class ResNetBlock(nn.Module):
    """Wang et al.'s residual block: three conv-BN(-ReLU) layers (kernels 7/5/3) plus a shortcut."""

    def __init__(self, in_chans: int, width: int) -> None:
        super().__init__()
        chans = [in_chans, width, width, width]
        self.convs = nn.ModuleList(_conv(a, b, k) for a, b, k in zip(chans, chans[1:], RESNET_KERNELS))
        self.bns = nn.ModuleList(nn.BatchNorm1d(width) for _ in RESNET_KERNELS)
        self.shortcut = Shortcut(in_chans, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x
        for i, (conv, bn) in enumerate(zip(self.convs, self.bns)):
            z = bn(conv(z))
            z = F.relu(z) if i < len(self.convs) - 1 else z
        return F.relu(z + self.shortcut(x))


class ResNetTrunk(nn.Sequential):
    """``depth`` residual blocks of ``width`` filters: (S, in, L) -> (S, width, L)."""

    def __init__(self, in_chans: int, width: int, depth: int) -> None:
        super().__init__(*(ResNetBlock(in_chans if i == 0 else width, width) for i in range(depth)))
        self.out_chans = width


def check_trunk(kind: str, width: int, depth: int) -> None:
    """ValueError naming the bad setting of a trunk."""
    if kind not in TRUNKS:
        raise ValueError(f"unknown trunk {kind!r}; expected one of {', '.join(TRUNKS)} (or None for no trunk)")
    for name, value in (("trunk_width", width), ("trunk_depth", depth)):
        if not whole_number(value, 1):
            raise ValueError(f"expected {name} to be a positive integer, got {value!r}")


class TrunkPatchFeatures(nn.Module):
    """Trunk features per patch window: padded steps (B, C, L') -> (B*C, N, D); see the module docstring.

    Args:
        kind: "inception" or "resnet".
        width: filters per branch (inception: F = 4 * width) or per layer (resnet: F = width).
        depth: inception modules or residual blocks.
        dim: token width D.
        patch_len, stride: the tokenizer's windows.
        diff: add each channel's first difference as a second trunk input.
        mix_chans: None = channel-independent (one trunk pass per channel); C = channel-mixing: one pass over all
            C channels of a series together (their first differences too with ``diff``), whose window features
            are added to the tokens of every channel; a window counts the steps where any channel is observed.
    """

    def __init__(self, kind: str, width: int, depth: int, dim: int, patch_len: int, stride: int,
                 diff: bool = False, mix_chans: int | None = None) -> None:
        super().__init__()
        check_trunk(kind, width, depth)
        if mix_chans is not None and not whole_number(mix_chans, 1):
            raise ValueError(f"expected mix_chans to be None or a channel count >= 1, got {mix_chans!r}")
        self.kind, self.patch_len, self.stride, self.diff = kind, patch_len, stride, bool(diff)
        self.mix_chans = None if mix_chans is None else int(mix_chans)
        trunk_cls = InceptionTrunk if kind == "inception" else ResNetTrunk
        self.trunk = trunk_cls((2 if diff else 1) * (self.mix_chans or 1), int(width), int(depth))
        self.proj = nn.Linear(2 * self.trunk.out_chans, dim)

    def forward(self, values: torch.Tensor, observed: torch.Tensor | None = None) -> torch.Tensor:
        batch, chans, length = values.shape
        if self.mix_chans is not None and chans != self.mix_chans:
            raise ValueError(f"the channel-mixing trunk was built for {self.mix_chans} channel(s), got {chans}")
        rows = batch if self.mix_chans else batch * chans
        x = values.reshape(rows, -1, length)  # (B, C, L') mixing, else (B*C, 1, L')
        seen = None if observed is None else observed.reshape(rows, -1, length)
        if self.diff:
            x = torch.cat([x, first_difference(x, seen)], dim=1)
        feats = self.trunk(x)  # (rows, F, L')
        if seen is not None and self.mix_chans:
            seen = seen.any(dim=1, keepdim=True)
        tokens = self.proj(window_max_mean(feats, seen, self.patch_len, self.stride))  # (rows, N, D)
        return tokens.repeat_interleave(chans, dim=0) if self.mix_chans else tokens


def first_difference(x: torch.Tensor, observed: torch.Tensor | None) -> torch.Tensor:
    """(S, K, L) -> (S, K, L): x[t] - x[t-1], 0 at t = 0 and wherever either step is missing."""
    step = torch.cat([torch.zeros_like(x[..., :1]), x[..., 1:] - x[..., :-1]], dim=-1)
    if observed is None:
        return step
    both = torch.cat([torch.zeros_like(observed[..., :1]), observed[..., 1:] & observed[..., :-1]], dim=-1)
    return step * both.to(step.dtype)


class TokenStats(nn.Module):
    """Per-window statistics of the raw series (Mantis): (B, C, L') -> (B*C, N, D) from the observed mean and
    standard deviation of each patch window, projected by Linear(2, D)."""

    def __init__(self, dim: int, patch_len: int, stride: int) -> None:
        super().__init__()
        self.patch_len, self.stride = patch_len, stride
        self.proj = nn.Linear(2, dim)

    def forward(self, values: torch.Tensor, observed: torch.Tensor | None = None) -> torch.Tensor:
        batch, chans, length = values.shape
        x = values.reshape(batch * chans, 1, length)
        window = dict(kernel_size=self.patch_len, stride=self.stride)
        if observed is None:
            mean, sq = F.avg_pool1d(x, **window), F.avg_pool1d(x * x, **window)
        else:
            seen = observed.reshape(batch * chans, 1, length).to(x.dtype)
            count = F.avg_pool1d(seen, **window).clamp_min(1.0 / self.patch_len)
            mean = F.avg_pool1d(x * seen, **window) / count
            sq = F.avg_pool1d(x * x * seen, **window) / count
        std = (sq - mean * mean).clamp_min(0.0).add(1e-5).sqrt()
        return self.proj(torch.cat([mean, std], dim=1).transpose(1, 2))


def trunk_flops(kind: str, width: int, depth: int, steps: int, num_patches: int, dim: int,
                diff: bool = False, in_series: int = 1) -> int:
    """Forward FLOPs of one :class:`TrunkPatchFeatures` pass over ``in_series`` series of ``steps`` padded steps
    (1: a channel of a channel-independent trunk; C: a whole series through a channel-mixing trunk), as
    ``FlopCounterMode`` counts them (convolutions and the projection; BN, ReLU and pooling are not counted)."""
    check_trunk(kind, width, depth)
    in_chans = (2 if diff else 1) * in_series
    macs = 0
    if kind == "inception":
        out = 4 * width
        for i in range(depth):
            c = in_chans if i == 0 else out
            inner = width if c > 1 else c
            macs += (c * width if c > 1 else 0) + sum(inner * width * k for k in INCEPTION_KERNELS) + c * width
        macs += sum((in_chans if s == 0 else out) * out for s in range(0, depth - RESIDUAL_EVERY + 1, RESIDUAL_EVERY))
    else:
        out = width
        for i in range(depth):
            c = in_chans if i == 0 else width
            macs += c * width * RESNET_KERNELS[0] + width * width * sum(RESNET_KERNELS[1:]) + c * width
    return 2 * steps * macs + 2 * num_patches * 2 * out * dim


def token_stats_flops(num_patches: int, dim: int) -> int:
    """Forward FLOPs of :class:`TokenStats` per channel-series (the projection)."""
    return 2 * num_patches * 2 * dim
