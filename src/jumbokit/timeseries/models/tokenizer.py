"""The series tokenizer: channel-independent PatchTST patching, its convolutional front ends and per-channel
features (the trunk, token statistics, level and scale)."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn

from ...encoders.checks import whole_number
from ...encoders.tokenizers import Tokens, exporting, resample_pos_embed, sincos_pos_embed_1d
from .length import last_observed_index
from .scale import LevelScale
from .trunk import TokenStats, TrunkPatchFeatures, window_max_mean

__all__ = ["SeriesPatchTokenizer", "ConvPatchFeatures", "conv_stem_flops", "declared_missing", "series_patch_count"]


def series_patch_count(length: int, patch_len: int, stride: int, pad_end: bool) -> int:
    """Number of patches PatchTST-style patching makes of a series of ``length`` steps."""
    if pad_end:
        length = length + stride
    if length < patch_len:
        return 0
    return (length - patch_len) // stride + 1


class SeriesPatchTokenizer(nn.Module):
    """Channel-independent PatchTST patching: (B, C, L) -> (B*C, N, D).

    Each channel is cut into patches of ``patch_len`` steps every ``stride`` steps (with ``pad_end`` the
    series is first extended by ``stride`` copies of its last observed value, as PatchTST does), and each
    patch is projected linearly to width D. NaN steps count as missing: they enter the projection as 0,
    and a patch with no observed step is marked in the padding mask (True = ignore).

    ``conv_stem=W`` adds shift-tolerant features to each token (:class:`ConvPatchFeatures`): two 1-D
    convolutions run over the whole channel, and the max and mean of their W responses within each patch
    window are projected to width D and added to the linear projection.

    Args:
        seq_len: the length the position table is built for (longer/shorter inputs resample it).
        patch_len: steps per patch.
        stride: steps between patch starts.
        in_chans: channels C.
        dim: token width D.
        pad_end: extend the end by ``stride`` steps so the tail gets a patch.
        conv_stem: width W of the convolutional patch features (0 = the linear projection only).
        trunk: "inception" | "resnet" | None: a full-resolution convolutional trunk whose features, reduced
            per patch window, are added to each token (:class:`~jumbokit.timeseries.models.trunk.TrunkPatchFeatures`).
        trunk_width, trunk_depth: the trunk's filters per branch (inception) or layer (resnet), and its modules.
        trunk_diff: feed each channel's first difference to the trunk as a second input. It and ``trunk_mix`` need a
            trunk; ``SeriesModelConfig`` checks that rule, and without a trunk the tokenizer reads neither.
        trunk_mix: one trunk over all C channels of a series together, its window features added to every
            channel's tokens (default: a trunk pass per channel).
        token_stats: add each window's observed mean and standard deviation, projected (``TokenStats``).
        level_scale: normalise each channel by its own observed mean and std first, and add the two, projected,
            to every token of the channel (:class:`~jumbokit.timeseries.models.scale.LevelScale`).

    Missing values and host syncs: the attribute ``missing`` (not a constructor argument; not saved) says how a
    forward learns whether a batch holds NaN. ``None`` (the default): it looks, which reads one value of the batch
    back to the host; on a GPU that waits for every queued kernel (a sync in every step). ``False``: the caller
    declares the batches NaN-free; no look, the no-missing path (a NaN then reaches the output). ``True``: always
    the missing-value path with no look (what an exported graph does). For NaN-free batches ``False`` computes
    exactly what ``None`` does; :func:`declared_missing` sets it over a model for a block of code (``tstrain``
    declares a set without NaN so while it trains).
    """

    kind = "series"

    def __init__(
        self,
        seq_len: int,
        patch_len: int,
        stride: int,
        in_chans: int = 1,
        dim: int = 128,
        pad_end: bool = True,
        conv_stem: int = 0,
        trunk: str | None = None,
        trunk_width: int = 16,
        trunk_depth: int = 3,
        trunk_diff: bool = False,
        token_stats: bool = False,
        trunk_mix: bool = False,
        level_scale: bool = False,
    ) -> None:
        super().__init__()
        if patch_len <= 0 or stride <= 0 or seq_len <= 0:
            raise ValueError(f"seq_len, patch_len and stride must be positive, got seq_len={seq_len}, "
                             f"patch_len={patch_len}, stride={stride}")
        self.seq_len = seq_len
        self.patch_len = patch_len
        self.stride = stride
        self.in_chans = in_chans
        self.dim = dim
        self.pad_end = pad_end
        self.num_patches = series_patch_count(seq_len, patch_len, stride, pad_end)
        if self.num_patches < 1:
            raise ValueError(f"a series of {seq_len} steps is shorter than one patch of {patch_len} steps; "
                             "use a shorter patch_len or pad_end=True")
        self.grid_size = (self.num_patches,)
        self.proj = nn.Linear(patch_len, dim)
        if not whole_number(conv_stem, 0) or conv_stem == 1:
            raise ValueError(f"expected conv_stem to be 0 (none) or an integer width >= 2, got {conv_stem!r}")
        self.conv = ConvPatchFeatures(int(conv_stem), dim, patch_len, stride) if conv_stem else None
        self.trunk = (TrunkPatchFeatures(trunk, trunk_width, trunk_depth, dim, patch_len, stride, trunk_diff,
                                         mix_chans=in_chans if trunk_mix else None) if trunk else None)
        self.stats = TokenStats(dim, patch_len, stride) if token_stats else None
        self.level_scale = LevelScale(dim) if level_scale else None
        self.missing: bool | None = None  # see the class docstring: None = look at each batch

    def forward(self, x: torch.Tensor) -> Tokens:
        values, observed = self.padded(x)  # (B, C, L')
        level_scale = None
        if self.level_scale is not None:
            values, level_scale = self.level_scale(values, observed)  # (B, C, L'), (B*C, 1, D)
        patches = self._windows(values)  # (B, C, N, P)
        batch, chans, num, _ = patches.shape
        tokens = self.proj(patches.reshape(batch * chans, num, self.patch_len))
        if level_scale is not None:
            tokens = tokens + level_scale
        for features in (self.conv, self.trunk, self.stats):
            if features is not None:
                tokens = tokens + features(values, observed)
        pad_mask = None
        if observed is not None:
            pad_mask = ~self._windows(observed).any(-1).reshape(batch * chans, -1)
            if self._looks() and not pad_mask.any():
                pad_mask = None
        return Tokens(tokens, (num,), pad_mask, chans)

    def patchify(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The patches the tokenizer projects: series (B, C, L) -> ``patches`` (B, C, N, P) with missing steps
        as 0, and ``observed`` (B, C, N, P) bool (True = an observed step), or None when nothing is missing.

        With ``pad_end`` the series is first extended by ``stride`` copies of its last observed value."""
        values, observed = self.padded(x)
        return self._windows(values), None if observed is None else self._windows(observed)

    def _windows(self, steps: torch.Tensor) -> torch.Tensor:
        """(B, C, L') -> (B, C, N, P) patch windows (a view)."""
        return steps.unfold(-1, self.patch_len, self.stride)

    def padded(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Series (B, C, L) -> the (B, C, L') steps patching reads (missing steps as 0, ``pad_end`` applied)
        and their (B, C, L') observed mask, or None when nothing is missing."""
        if x.ndim == 2:
            x = x[:, None, :]
        if x.ndim != 3:
            raise ValueError(f"expected series of shape (B, C, L), got a tensor of shape {tuple(x.shape)}")
        _, chans, length = x.shape
        if chans != self.in_chans:
            raise ValueError(f"expected series of {self.in_chans} channels, got {chans}; "
                             f"build the model with in_chans={chans}")
        observed = ~torch.isnan(x)
        # an exported graph (torch.export, ONNX) has no data-dependent branch: it always takes the missing-value path;
        # a declared ``missing`` skips the look (a host read of the batch: a GPU sync)
        has_missing = (not bool(observed.all())) if self._looks() else (exporting() or bool(self.missing))
        values = torch.nan_to_num(x, nan=0.0) if has_missing else x
        if self.pad_end:
            if has_missing:
                values, observed = self._pad_with_last_observed(values, observed)
            else:
                values = torch.cat([values, values[..., -1:].expand(-1, -1, self.stride)], dim=-1)
        if values.shape[-1] < self.patch_len:
            raise ValueError(f"a series of {length} steps is shorter than one patch of {self.patch_len} steps")
        return values, observed if has_missing else None

    def _looks(self) -> bool:
        """Whether this forward reads the batch back to choose its path (see ``missing``); never while exporting."""
        return self.missing is None and not exporting()

    def _pad_with_last_observed(self, values: torch.Tensor, observed: torch.Tensor):
        """Append ``stride`` copies of each channel's last observed value; padding counts as observed
        only when the series had an observed step (so a trailing-NaN series keeps its tail masked)."""
        length = values.shape[-1]
        last_idx = last_observed_index(observed)
        last_val = values.gather(-1, last_idx.clamp_min(0))
        tail_ok = (last_idx == length - 1).expand(-1, -1, self.stride)
        values = torch.cat([values, last_val.expand(-1, -1, self.stride) * tail_ok], dim=-1)
        observed = torch.cat([observed, tail_ok], dim=-1)
        return values, observed

    def init_pos_embed(self, kind: str) -> torch.Tensor:
        if kind == "sincos":
            return sincos_pos_embed_1d(self.dim, torch.arange(self.num_patches))[None]
        return torch.zeros(1, self.num_patches, self.dim)

    def positions(self, pos_embed: torch.Tensor, grid: tuple[int, ...]) -> torch.Tensor:
        return resample_pos_embed(pos_embed, self.grid_size, grid)


class ConvPatchFeatures(nn.Module):
    """Convolutional patch features for series: (B, C, L') -> (B*C, N, D), one token per patch window.

    Each channel passes through Conv1d(1, W/2, 7) -> GELU -> Conv1d(W/2, W, 5) -> GELU ("same" padding);
    within each window of ``patch_len`` steps every ``stride`` the max and the mean of the W responses are
    taken (over observed steps only), and the 2W values are projected to width D. Unlike a linear map of the
    raw patch, these features barely change when a pattern shifts inside its patch.
    """

    def __init__(self, width: int, dim: int, patch_len: int, stride: int) -> None:
        super().__init__()
        if width < 2:
            raise ValueError(f"expected a conv_stem width >= 2, got {width}")
        self.width, self.patch_len, self.stride = width, patch_len, stride
        self.convs = nn.Sequential(
            nn.Conv1d(1, width // 2, 7, padding=3), nn.GELU(), nn.Conv1d(width // 2, width, 5, padding=2), nn.GELU(),
        )
        self.proj = nn.Linear(2 * width, dim)

    def forward(self, values: torch.Tensor, observed: torch.Tensor | None = None) -> torch.Tensor:
        batch, chans, length = values.shape
        feats = self.convs(values.reshape(batch * chans, 1, length))  # (B*C, W, L')
        seen = None if observed is None else observed.reshape(batch * chans, 1, length)
        return self.proj(window_max_mean(feats, seen, self.patch_len, self.stride))  # (B*C, N, D)


def conv_stem_flops(width: int, steps: int, num_patches: int, dim: int) -> int:
    """Forward FLOPs of :class:`ConvPatchFeatures` per channel-series of ``steps`` padded steps (the two
    convolutions and the projection; GELU and pooling are not counted)."""
    half = width // 2
    return 2 * steps * (7 * half + 5 * half * width) + 2 * num_patches * 2 * width * dim


@contextlib.contextmanager
def declared_missing(model: nn.Module, missing: bool | None) -> Iterator[nn.Module]:
    """Within the block, every :class:`SeriesPatchTokenizer` of ``model`` takes ``missing`` as declared (``False``:
    the batches hold no NaN, so no forward reads one back to the host; ``True``: always the missing-value path;
    ``None``: each forward looks, the default); each one's own setting comes back afterwards.

    Example: ``with declared_missing(model, False): fit(model, ...)`` trains on NaN-free series with no GPU sync
    in the tokenizer, computing exactly what the default computes on them."""
    if not (missing is None or isinstance(missing, bool)):
        raise ValueError(f"expected missing to be None, True or False, got {missing!r}")
    tokenizers = [m for m in model.modules() if isinstance(m, SeriesPatchTokenizer)]
    before = [t.missing for t in tokenizers]
    for t in tokenizers:
        t.missing = missing
    try:
        yield model
    finally:
        for t, value in zip(tokenizers, before, strict=True):
            t.missing = value
