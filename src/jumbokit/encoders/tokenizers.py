"""The image tokenizer and what every tokenizer shares: the :class:`Tokens` record, sin-cos tables, resampling.

Tokenizers return a :class:`Tokens` record; the encoder adds position embeddings through
:meth:`positions`, which resamples the learned table when the input grid differs from the one the
model was built for. Position embeddings belong to patch tokens only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .extras import TokenizerKind, register_tokenizer

__all__ = [
    "Tokens",
    "ImagePatchTokenizer",
    "IMAGE_OPTIONS",
    "exporting",
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


IMAGE_OPTIONS: dict[str, Any] = {
    "img_size": 224,
    "patch_size": 16,
    "dynamic_img_size": True,
    "dynamic_img_pad": False,
}


def _image_grid(config: dict[str, Any]) -> tuple[int, int]:
    (ih, iw) = to_2tuple(config.get("img_size", IMAGE_OPTIONS["img_size"]))
    (ph, pw) = to_2tuple(config.get("patch_size", IMAGE_OPTIONS["patch_size"]))
    return math.ceil(ih / ph), math.ceil(iw / pw)


def _image_flops(config: dict[str, Any], num_patches: int, sequences: int) -> int:
    """The patchify convolution: 2 * patches * D * Ph * Pw * C per image."""
    ph, pw = to_2tuple(config.get("patch_size", IMAGE_OPTIONS["patch_size"]))
    return sequences * 2 * num_patches * config["dim"] * ph * pw * config.get("in_chans", 3)


register_tokenizer("image", TokenizerKind(
    options=IMAGE_OPTIONS,
    build=lambda cfg: ImagePatchTokenizer(cfg["img_size"], cfg["patch_size"], cfg["in_chans"], int(cfg["dim"]),
                                          dynamic_img_size=cfg["dynamic_img_size"],
                                          dynamic_img_pad=cfg["dynamic_img_pad"]),
    flops=_image_flops,
    num_patches=lambda cfg: math.prod(_image_grid(cfg)),
))
