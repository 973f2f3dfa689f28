"""Series augmentation for small training sets: jitter, scaling, magnitude warping, time warping, window
slicing and mixup (Um et al. 2017; Le Guennec et al. 2016; Iwana & Uchida 2021).

Every transform works on a batch (B, C, L) with NaN at missing / padded steps and keeps the shape and the
padding: steps after a series' last observation stay NaN, observed steps stay finite. Time warping and window
slicing resample each series over its own observed length (the same warp for all its channels), so a short
series is never stretched into its padding.

    aug = SeriesAugment(("jitter", "time_warp"), generator=torch.Generator().manual_seed(0))
    x_aug = aug(x)                             # (B, C, L) -> (B, C, L)
    mix = SeriesMixup(num_classes=3, alpha=0.2)
    x_mix, soft_targets = mix(x, y)            # (B, C, L), (B, 3)

Defaults (``--augment`` with no value): ``DEFAULT_AUGMENT``; each per-series transform is applied to a series
with probability ``prob`` (0.5), independently of the others.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from .models.scale import observed_mean_var

__all__ = ["AUGMENTATIONS", "DEFAULT_AUGMENT", "SeriesAugment", "SeriesMixup", "observed_std", "parse_augment",
           "series_lengths", "resample_series"]

AUGMENTATIONS = ("jitter", "scaling", "magnitude_warp", "time_warp", "window_slice", "mixup")
DEFAULT_AUGMENT: tuple[str, ...] = ("jitter", "scaling", "magnitude_warp", "time_warp", "window_slice")


def parse_augment(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"default"`` | ``"none"`` | comma-separated names of :data:`AUGMENTATIONS` (``"default"`` among them
    stands for :data:`DEFAULT_AUGMENT`) -> a canonical tuple (in the order of ``AUGMENTATIONS``; empty for none)."""
    if spec is None:
        return ()
    names = [v.strip() for v in spec.split(",")] if isinstance(spec, str) else [str(v).strip() for v in spec]
    names = [n for n in names if n]
    if names in (["none"], []):
        return ()
    if "default" in names:  # "default" alone, or with more names ("default,mixup")
        names = [n for n in names if n != "default"] + list(DEFAULT_AUGMENT)
    unknown = [n for n in names if n not in AUGMENTATIONS]
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, AUGMENTATIONS, n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ValueError(f"unknown augmentation {', '.join(hints)}; expected 'default', 'none' or "
                         f"comma-separated names among {', '.join(AUGMENTATIONS)}")
    return tuple(n for n in AUGMENTATIONS if n in names)


def observed_std(x: torch.Tensor) -> torch.Tensor:
    """(B, C, L) with NaN = missing -> (B, C, 1): the standard deviation of each channel's observed steps
    (0 where none is observed)."""
    return observed_mean_var(torch.nan_to_num(x, nan=0.0), ~torch.isnan(x))[1].sqrt()


def series_lengths(x: torch.Tensor) -> torch.Tensor:
    """(B,) int64: one past the last step observed in any channel of each series (B, C, L)."""
    observed = (~torch.isnan(x)).any(dim=1)  # (B, L)
    steps = torch.arange(1, x.shape[-1] + 1, device=x.device)
    return (observed * steps).amax(dim=1)


def resample_series(x: torch.Tensor, source: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Read each series at fractional ``source`` steps (B, L), linearly interpolated, for the steps before its
    length; later steps are kept as they are (padding). A resampled step is missing where its nearest source
    step is missing. x: (B, C, L) -> (B, C, L)."""
    batch, chans, length = x.shape
    observed = ~torch.isnan(x)
    filled = torch.nan_to_num(x, nan=0.0)
    last = (lengths - 1).clamp_min(0)[:, None].to(source.dtype)
    source = torch.minimum(source.clamp_min(0.0), last)
    lo = source.floor().long()
    hi = torch.minimum(lo + 1, last.long())
    frac = (source - lo.to(source.dtype))[:, None, :].to(x.dtype)
    index = lambda i: i[:, None, :].expand(batch, chans, length)  # noqa: E731
    values = filled.gather(2, index(lo)) * (1 - frac) + filled.gather(2, index(hi)) * frac
    nearest = observed.gather(2, index(source.round().long()))
    out = values.masked_fill(~nearest, float("nan"))
    inside = (torch.arange(length, device=x.device)[None, :] < lengths[:, None])[:, None, :]
    return torch.where(inside, out, x)


def _smooth_curve(knots: torch.Tensor, lengths: torch.Tensor, length: int) -> torch.Tensor:
    """Piecewise-linear curves through K equally spaced knots (B, ..., K) over each series' own length:
    (B, ..., L); steps past a series' length take the last knot."""
    num_knots = knots.shape[-1]
    steps = torch.arange(length, device=knots.device, dtype=knots.dtype)[None, :]
    span = (lengths.to(knots.dtype) - 1).clamp_min(1.0)[:, None]
    pos = (steps / span).clamp(max=1.0) * (num_knots - 1)  # (B, L) in [0, K-1]
    lo = pos.floor().long().clamp(max=num_knots - 2)
    frac = pos - lo.to(pos.dtype)
    shape = knots.shape[:-1] + (length,)
    lo = lo.reshape(lo.shape[0], *([1] * (knots.ndim - 2)), length).expand(shape)
    frac = frac.reshape(lo.shape[0], *([1] * (knots.ndim - 2)), length).expand(shape)
    return knots.gather(-1, lo) * (1 - frac) + knots.gather(-1, lo + 1) * frac


@dataclass
class SeriesAugment:
    """Random per-series transforms of a batch (B, C, L), NaN = missing / padded (kept).

    ops: names among jitter, scaling, magnitude_warp, time_warp, window_slice (mixup is :class:`SeriesMixup`).
    prob: each transform is applied to each series with this probability.
    jitter_sigma: additive Gaussian noise (in units of the standardised series).
    jitter_relative: scale each series' noise by the standard deviation of its observed steps, per channel (the
        same noise relative to the series whatever its amplitude, for series not normalised one by one).
    scaling_sigma: one multiplicative factor N(1, sigma) per series and channel.
    magnitude_sigma / magnitude_knots: multiply by a smooth curve through knots drawn from N(1, sigma).
    time_sigma / time_knots: speed up and slow down time (a monotone warp through knots of speed N(1, sigma)).
    window_ratio: window slicing keeps a random window of this fraction of the series, stretched back to its
        length.
    generator: a CPU generator for reproducible draws (None: torch's global generator).
    """

    ops: tuple[str, ...] = DEFAULT_AUGMENT
    prob: float = 0.5
    jitter_sigma: float = 0.03
    jitter_relative: bool = False
    scaling_sigma: float = 0.1
    magnitude_sigma: float = 0.2
    magnitude_knots: int = 4
    time_sigma: float = 0.2
    time_knots: int = 4
    window_ratio: float = 0.9
    generator: torch.Generator | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.ops = tuple(op for op in parse_augment(self.ops) if op != "mixup")
        if not 0.0 <= self.prob <= 1.0:
            raise ValueError(f"prob must be in [0, 1], got {self.prob}")
        if not 0.0 < self.window_ratio <= 1.0:
            raise ValueError(f"window_ratio must be in (0, 1], got {self.window_ratio}")
        if self.magnitude_knots < 2 or self.time_knots < 2:
            raise ValueError(f"magnitude_knots and time_knots must be >= 2, got {self.magnitude_knots} and "
                             f"{self.time_knots}")

    def _randn(self, *shape: int, like: torch.Tensor) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator).to(device=like.device, dtype=like.dtype)

    def _rand(self, *shape: int, like: torch.Tensor) -> torch.Tensor:
        return torch.rand(*shape, generator=self.generator).to(device=like.device, dtype=like.dtype)

    def _chosen(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 1, 1) bool: which series this transform applies to."""
        return (self._rand(x.shape[0], like=x) < self.prob)[:, None, None]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 3:
            raise ValueError(f"expected series of shape (B, C, L), got a tensor of shape {tuple(x.shape)}")
        if not self.ops or x.shape[0] == 0:
            return x
        batch, chans, length = x.shape
        lengths = series_lengths(x)
        for op in self.ops:
            chosen = self._chosen(x)
            if op == "jitter":
                noise = self.jitter_sigma * self._randn(batch, chans, length, like=x)
                new = x + (noise * observed_std(x) if self.jitter_relative else noise)
            elif op == "scaling":
                new = x * (1.0 + self.scaling_sigma * self._randn(batch, chans, 1, like=x))
            elif op == "magnitude_warp":
                knots = 1.0 + self.magnitude_sigma * self._randn(batch, chans, self.magnitude_knots, like=x)
                new = x * _smooth_curve(knots, lengths, length)
            elif op == "time_warp":
                speed = (1.0 + self.time_sigma * self._randn(batch, self.time_knots, like=x)).clamp_min(0.1)
                rate = _smooth_curve(speed, lengths, length)  # (B, L)
                pos = torch.cumsum(rate, dim=1) - rate[:, :1]
                last = (lengths - 1).clamp_min(0)
                end = pos.gather(1, last[:, None]).clamp_min(1e-6)
                new = resample_series(x, pos / end * last[:, None].to(x.dtype), lengths)
            else:  # window_slice
                span = (lengths - 1).clamp_min(0).to(x.dtype)
                width = self.window_ratio * span
                start = self._rand(batch, like=x) * (span - width)
                steps = torch.arange(length, device=x.device, dtype=x.dtype)[None, :]
                source = start[:, None] + steps * (width / span.clamp_min(1.0))[:, None]
                new = resample_series(x, source, lengths)
            x = torch.where(chosen, new, x)
        return x


@dataclass
class SeriesMixup:
    """Mixup for series batches: ``(x (B, C, L), y (B,)) -> (mixed x, soft targets (B, num_classes))``.

    One ``lam ~ Beta(alpha, alpha)`` per batch; each series is mixed with the batch in reverse order. Where
    the partner series is missing / padded the series keeps its own value, so its NaN pattern is unchanged.
    ``augment`` (optional) runs first, on every batch. ``smoothing`` > 0 smooths the one-hot targets before
    they are mixed (1 - smoothing on the class, smoothing spread over all classes).
    """

    num_classes: int
    alpha: float = 0.2
    augment: SeriesAugment | None = None
    generator: torch.Generator | None = field(default=None, repr=False)
    smoothing: float = 0.0

    def __post_init__(self) -> None:
        if self.alpha <= 0:
            raise ValueError(f"mixup alpha must be > 0, got {self.alpha}")
        if self.num_classes < 2:
            raise ValueError(f"mixup needs at least 2 classes, got {self.num_classes}")
        if not 0 <= self.smoothing < 1:
            raise ValueError(f"label smoothing must be in [0, 1), got {self.smoothing}")

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.augment is not None:
            x = self.augment(x)
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator))  # Beta takes no generator
        lam = float(np.random.default_rng(seed).beta(self.alpha, self.alpha))
        partner = x.flip(0)
        partner = torch.where(torch.isnan(partner), x, partner)
        mixed = lam * x + (1.0 - lam) * partner
        from timm.data.mixup import mixup_target  # here, not at import: timm costs a tstrain process seconds

        target = mixup_target(y, self.num_classes, lam, self.smoothing)  # timm's: mixed with the batch reversed
        return mixed, target.to(x.dtype)
