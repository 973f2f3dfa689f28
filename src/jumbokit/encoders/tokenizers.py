"""Tokenizers: turn images or series into patch tokens (without position embeddings).

Both tokenizers return a :class:`Tokens` record; the encoder adds position embeddings through
:meth:`positions`, which resamples the learned table when the input grid differs from the one the
model was built for. Position embeddings belong to patch tokens only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .checks import whole_number
from .series_length import last_observed_index
from .series_scale import LevelScale
from .series_trunk import TokenStats, TrunkPatchFeatures, window_max_mean

__all__ = [
    "Tokens",
    "ImagePatchTokenizer",
    "SeriesPatchTokenizer",
    "ConvPatchFeatures",
    "conv_stem_flops",
    "sincos_pos_embed_2d",
    "sincos_pos_embed_1d",
    "resample_pos_embed",
    "to_2tuple",
]


def to_2tuple(value: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"expected an int or a pair (height, width), got {value!r}")
        return int(value[0]), int(value[1])
    return int(value), int(value)


@dataclass
class Tokens:
    """Patch tokens of a batch.

    tokens: (B', N, D) with B' = B for images and B * C for series.
    grid: patch grid (Hp, Wp) for images, (N,) for series.
    pad_mask: (B', N) bool, True where a token holds no data (padding / missing), or None.
    channels: C for series (channel-independent tokens), 1 for images.
    """

    tokens: torch.Tensor
    grid: tuple[int, ...]
    pad_mask: torch.Tensor | None = None
    channels: int = 1


def sincos_pos_embed_1d(dim: int, positions: torch.Tensor, temperature: float = 10000.0) -> torch.Tensor:
    """Fixed sine-cosine embedding of 1-D positions: (N,) -> (N, dim)."""
    if dim % 2:
        raise ValueError(f"sin-cos position embeddings need an even width, got {dim}")
    omega = torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0)
    omega = 1.0 / temperature**omega
    angles = positions.to(torch.float64)[:, None] * omega[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=1).float()


def sincos_pos_embed_2d(dim: int, grid: tuple[int, int]) -> torch.Tensor:
    """Fixed 2-D sine-cosine embedding as in MAE: (Hp*Wp, dim), half the width for rows, half for columns."""
    if dim % 4:
        raise ValueError(f"2-D sin-cos position embeddings need a width divisible by 4, got {dim}")
    rows, cols = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
    emb_w = sincos_pos_embed_1d(dim // 2, cols.reshape(-1))
    emb_h = sincos_pos_embed_1d(dim // 2, rows.reshape(-1))
    return torch.cat([emb_h, emb_w], dim=1)


def exporting() -> bool:
    """True while torch.export (or the ONNX exporter built on it) traces the model; False in eager and compiled runs."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)  # torch >= 2.5
    return bool(is_exporting and is_exporting())


def _same_grid(old_grid: tuple[int, ...], new_grid: tuple[int, ...]) -> bool:
    """Whether a table built for ``old_grid`` fits ``new_grid`` as is. While exporting (torch.export, ONNX) a
    symbolic size never counts as equal, so a graph exported with a dynamic input size resamples for every size."""
    if exporting() and not all(isinstance(n, int) for n in new_grid):
        return False
    return tuple(old_grid) == tuple(new_grid)


def resample_pos_embed(pos_embed: torch.Tensor, old_grid: tuple[int, ...], new_grid: tuple[int, ...]) -> torch.Tensor:
    """Resample a (1, N_old, D) table to a new grid: bicubic for 2-D grids, linear for 1-D."""
    if _same_grid(old_grid, new_grid):
        return pos_embed
    dim = pos_embed.shape[-1]
    orig_dtype = pos_embed.dtype
    table = pos_embed.float()
    if len(old_grid) == 2:
        table = table.reshape(1, old_grid[0], old_grid[1], dim).permute(0, 3, 1, 2)
        # antialiased bicubic, as timm's resample_abs_pos_embed, so timm weights behave identically
        table = F.interpolate(table, size=tuple(new_grid), mode="bicubic", antialias=True, align_corners=False)
        table = table.permute(0, 2, 3, 1).reshape(1, -1, dim)
    else:
        table = table.transpose(1, 2)
        table = F.interpolate(table, size=tuple(new_grid), mode="linear", align_corners=False)
        table = table.transpose(1, 2)
    return table.to(orig_dtype)


class ImagePatchTokenizer(nn.Module):
    """Convolutional patchify: (B, C, H, W) -> (B, Hp*Wp, D).

    Args:
        img_size: the size the position table is built for (int or (H, W)).
        patch_size: patch side (int or (Ph, Pw)).
        in_chans: expected image channels.
        dim: token width D.
        dynamic_img_size: accept other sizes (the position table is resampled bicubically).
        dynamic_img_pad: pad images whose size is not a multiple of the patch size instead of failing.
    """

    kind = "image"

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int | tuple[int, int] = 16,
        in_chans: int = 3,
        dim: int = 768,
        dynamic_img_size: bool = True,
        dynamic_img_pad: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.img_size = to_2tuple(img_size)
        self.patch_size = to_2tuple(patch_size)
        for side, patch in zip(self.img_size, self.patch_size):
            if patch <= 0 or side <= 0:
                raise ValueError(f"image and patch sizes must be positive, got img_size={self.img_size}, "
                                 f"patch_size={self.patch_size}")
            if side % patch and not dynamic_img_pad:
                raise ValueError(f"img_size {self.img_size} is not divisible by patch_size {self.patch_size}; "
                                 "pick sizes that divide or pass dynamic_img_pad=True")
        self.grid_size = tuple(math.ceil(s / p) for s, p in zip(self.img_size, self.patch_size))
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.in_chans = in_chans
        self.dim = dim
        self.dynamic_img_size = dynamic_img_size
        self.dynamic_img_pad = dynamic_img_pad
        self.proj = nn.Conv2d(in_chans, dim, kernel_size=self.patch_size, stride=self.patch_size, bias=bias)

    def grid_for(self, height: int, width: int) -> tuple[int, int]:
        ph, pw = self.patch_size
        if self.dynamic_img_pad:
            return math.ceil(height / ph), math.ceil(width / pw)
        return height // ph, width // pw

    def forward(self, x: torch.Tensor) -> Tokens:
        if x.ndim != 4:
            raise ValueError(f"expected images of shape (B, C, H, W), got a tensor of shape {tuple(x.shape)}")
        _, chans, height, width = x.shape
        if chans != self.in_chans:
            raise ValueError(f"expected images of {self.in_chans} channels, got {chans}; "
                             f"convert the images or build the model with in_chans={chans}")
        ph, pw = self.patch_size
        if (height, width) != self.img_size and not self.dynamic_img_size:
            raise ValueError(f"expected images of size {self.img_size}, got {(height, width)}; "
                             "build the model with dynamic_img_size=True to accept other sizes")
        if height % ph or width % pw:
            if not self.dynamic_img_pad:
                raise ValueError(f"image size {(height, width)} is not divisible by patch size {self.patch_size}; "
                                 "resize the images or build the model with dynamic_img_pad=True")
            x = F.pad(x, (0, (-width) % pw, 0, (-height) % ph))
        tokens = self.project(x)  # (B, D, Hp, Wp)
        grid = (tokens.shape[2], tokens.shape[3])
        return Tokens(tokens.flatten(2).transpose(1, 2), grid)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) whose size the patch divides -> (B, D, H/Ph, W/Pw)."""
        return self.proj(x)

    def init_pos_embed(self, kind: str) -> torch.Tensor:
        """Initial (1, N, D) position table for 'learn' (to be filled by init) or 'sincos'."""
        if kind == "sincos":
            return sincos_pos_embed_2d(self.dim, self.grid_size)[None]
        return torch.zeros(1, self.num_patches, self.dim)

    def positions(self, pos_embed: torch.Tensor, grid: tuple[int, ...]) -> torch.Tensor:
        return resample_pos_embed(pos_embed, self.grid_size, grid)


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
            per patch window, are added to each token (:class:`~jumbokit.encoders.series_trunk.TrunkPatchFeatures`).
        trunk_width, trunk_depth: the trunk's filters per branch (inception) or layer (resnet), and its modules.
        trunk_diff: feed each channel's first difference to the trunk as a second input.
        trunk_mix: one trunk over all C channels of a series together, its window features added to every
            channel's tokens (default: a trunk pass per channel).
        token_stats: add each window's observed mean and standard deviation, projected (``TokenStats``).
        level_scale: normalise each channel by its own observed mean and std first, and add the two, projected,
            to every token of the channel (:class:`~jumbokit.encoders.series_scale.LevelScale`).
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
        for name, value in (("trunk_diff", trunk_diff), ("trunk_mix", trunk_mix)):
            if value and not trunk:
                raise ValueError(f"{name} applies to a convolutional trunk; pass trunk='inception' or 'resnet' with it")
        self.trunk = (TrunkPatchFeatures(trunk, trunk_width, trunk_depth, dim, patch_len, stride, trunk_diff,
                                         mix_chans=in_chans if trunk_mix else None) if trunk else None)
        self.stats = TokenStats(dim, patch_len, stride) if token_stats else None
        self.level_scale = LevelScale(dim) if level_scale else None

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
            if not exporting() and not pad_mask.any():
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
        # an exported graph (torch.export, ONNX) has no data-dependent branch: it always takes the missing-value path
        has_missing = exporting() or not bool(observed.all())
        values = torch.nan_to_num(x, nan=0.0) if has_missing else x
        if self.pad_end:
            if has_missing:
                values, observed = self._pad_with_last_observed(values, observed)
            else:
                values = torch.cat([values, values[..., -1:].expand(-1, -1, self.stride)], dim=-1)
        if values.shape[-1] < self.patch_len:
            raise ValueError(f"a series of {length} steps is shorter than one patch of {self.patch_len} steps")
        return values, observed if has_missing else None

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
