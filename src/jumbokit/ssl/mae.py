"""Masked autoencoder (MAE) pretraining around any image encoder of the zoo.

The wrapper masks patches through the encoder's ``keep`` indices (the encoder only sees the visible
patches plus its global tokens), then a lightweight transformer decoder with fixed 2-D sin-cos position
embeddings and a learned mask token predicts the pixels of every patch. The loss is the per-patch mean
squared error on the masked patches only, against per-patch normalised pixels by default
(``norm_pix_loss``).

Global tokens of the encoder (CLS, registers + CLS, the J Jumbo tokens) are projected by the decoder
embedding and enter the decoder ahead of the patch tokens without a position embedding, as MAE does with
its CLS token; they are dropped before the pixel prediction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from jumbokit.encoders import Block, Encoder, random_keep
from jumbokit.encoders import sincos_pos_embed_2d

__all__ = [
    "MaskedAutoencoder",
    "MAEOutput",
    "num_visible",
    "random_masking",
    "patchify",
    "unpatchify",
    "normalize_patches",
    "masked_patch_loss",
]


def num_visible(num_patches: int, mask_ratio: float) -> int:
    """Patches the encoder sees: ``round(N * (1 - mask_ratio))``, at least one."""
    if not 0.0 <= mask_ratio < 1.0:
        raise ValueError(f"mask_ratio must be in [0, 1), got {mask_ratio}")
    keep = int(round(num_patches * (1.0 - mask_ratio)))
    if keep < 1:
        raise ValueError(f"mask_ratio {mask_ratio} leaves no visible patch out of {num_patches}; lower it")
    return keep


def random_masking(
    batch: int,
    num_patches: int,
    mask_ratio: float,
    device: torch.device | str | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample uniform random masking.

    Returns ``keep`` (B, K) LongTensor of visible patch indices (in random order, K = round(N*(1-ratio)))
    and ``mask`` (B, N) float, 1.0 where the patch is masked (hidden from the encoder), 0.0 where visible.
    """
    keep, _ = random_keep(batch, num_patches, num_visible(num_patches, mask_ratio), device=device,
                          generator=generator)
    mask = torch.ones(batch, num_patches, device=device)
    mask.scatter_(1, keep, 0.0)
    return keep, mask


def patchify(images: torch.Tensor, patch_size: tuple[int, int]) -> torch.Tensor:
    """(B, C, H, W) -> (B, Hp*Wp, Ph*Pw*C); patches in row-major order (the encoder's token order),
    pixels inside a patch ordered (row, column, channel)."""
    batch, chans, height, width = images.shape
    ph, pw = patch_size
    if height % ph or width % pw:
        raise ValueError(f"image size {(height, width)} is not divisible by patch size {(ph, pw)}")
    hp, wp = height // ph, width // pw
    x = images.reshape(batch, chans, hp, ph, wp, pw)
    x = x.permute(0, 2, 4, 3, 5, 1)  # (B, Hp, Wp, Ph, Pw, C)
    return x.reshape(batch, hp * wp, ph * pw * chans)


def unpatchify(patches: torch.Tensor, patch_size: tuple[int, int], grid: tuple[int, int], chans: int) -> torch.Tensor:
    """Inverse of :func:`patchify`: (B, Hp*Wp, Ph*Pw*C) -> (B, C, Hp*Ph, Wp*Pw)."""
    batch = patches.shape[0]
    ph, pw = patch_size
    hp, wp = grid
    if patches.shape[1] != hp * wp or patches.shape[2] != ph * pw * chans:
        raise ValueError(f"expected patches of shape (B, {hp * wp}, {ph * pw * chans}), got {tuple(patches.shape)}")
    x = patches.reshape(batch, hp, wp, ph, pw, chans).permute(0, 5, 1, 3, 2, 4)
    return x.reshape(batch, chans, hp * ph, wp * pw)


def normalize_patches(patches: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-patch normalisation of (B, N, P) pixels (MAE's norm_pix_loss target): returns (normed, mean, std)."""
    mean = patches.mean(dim=-1, keepdim=True)
    var = patches.var(dim=-1, keepdim=True)
    std = (var + eps).sqrt()
    return (patches - mean) / std, mean, std


def masked_patch_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over masked patches of the per-patch MSE.

    pred, target: (B, N, P); mask: (B, N), 1.0 = masked. With no masked patch at all (mask ratio 0) the
    loss is the mean over every patch (plain autoencoding), so a ratio-0 run still trains.
    """
    per_patch = (pred - target).pow(2).mean(dim=-1)
    masked = mask.sum()
    masked_mean = (per_patch * mask).sum() / masked.clamp_min(1.0)
    return torch.where(masked > 0, masked_mean, per_patch.mean())  # no host sync


@dataclass
class MAEOutput:
    """Result of :meth:`MaskedAutoencoder.forward`.

    loss: scalar; pred: (B, N, Ph*Pw*C) predicted pixels (normalised per patch when norm_pix_loss);
    mask: (B, N) 1.0 = masked; keep: (B, K) visible patch indices; grid: (Hp, Wp).
    """

    loss: torch.Tensor
    pred: torch.Tensor
    mask: torch.Tensor
    keep: torch.Tensor
    grid: tuple[int, int]


class MaskedAutoencoder(nn.Module):
    """MAE around an image :class:`~jumbokit.encoders.Encoder` (global tokens: none, cls, registers, jumbo).

    Args:
        encoder: an image encoder; its patch tokens are masked through ``forward_features(x, keep=...)``.
        decoder_dim: decoder width (divisible by 4 and by ``decoder_num_heads``).
        decoder_depth: decoder blocks.
        decoder_num_heads: decoder attention heads.
        decoder_mlp_ratio: decoder MLP hidden = ratio * decoder_dim.
        mask_ratio: fraction of patches hidden from the encoder (default 0.75).
        norm_pix_loss: regress per-patch normalised pixels (default True, as recommended by MAE).

    ``config`` holds everything needed to rebuild the wrapper (the encoder's config included).
    """

    def __init__(
        self,
        encoder: Encoder,
        decoder_dim: int = 128,
        decoder_depth: int = 2,
        decoder_num_heads: int = 4,
        decoder_mlp_ratio: float = 4.0,
        mask_ratio: float = 0.75,
        norm_pix_loss: bool = True,
    ) -> None:
        super().__init__()
        encoder_config = dict(getattr(encoder, "config", {}) or {})
        if encoder_config.get("tokenizer", "image") != "image" or not hasattr(encoder.patch_embed, "grid_size"):
            raise ValueError(f"MAE needs an image encoder (tokenizer='image'), got tokenizer="
                             f"{encoder_config.get('tokenizer')!r}")
        if decoder_dim % 4:
            raise ValueError(f"decoder_dim must be divisible by 4 (2-D sin-cos position embedding), got {decoder_dim}")
        if decoder_dim % decoder_num_heads:
            raise ValueError(f"decoder_dim {decoder_dim} is not divisible by decoder_num_heads {decoder_num_heads}")
        if decoder_depth < 0:
            raise ValueError(f"decoder_depth must be >= 0, got {decoder_depth}")
        num_visible(encoder.num_patches, mask_ratio)  # validates the ratio against the patch count
        self.encoder = encoder
        self.patch_size: tuple[int, int] = tuple(encoder.patch_embed.patch_size)
        self.grid_size: tuple[int, int] = tuple(encoder.patch_embed.grid_size)
        self.in_chans = int(encoder.patch_embed.proj.in_channels)
        self.mask_ratio = float(mask_ratio)
        self.norm_pix_loss = bool(norm_pix_loss)
        self.config: dict[str, Any] = {
            "encoder": encoder_config,
            "decoder_dim": int(decoder_dim),
            "decoder_depth": int(decoder_depth),
            "decoder_num_heads": int(decoder_num_heads),
            "decoder_mlp_ratio": float(decoder_mlp_ratio),
            "mask_ratio": self.mask_ratio,
            "norm_pix_loss": self.norm_pix_loss,
        }

        embed_dim = encoder.embed_dim
        pixels_per_patch = self.patch_size[0] * self.patch_size[1] * self.in_chans
        self.decoder_embed = nn.Linear(embed_dim, decoder_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_dim))
        self.register_buffer(
            "decoder_pos_embed", sincos_pos_embed_2d(decoder_dim, self.grid_size)[None], persistent=False
        )
        hidden = int(round(decoder_mlp_ratio * decoder_dim))
        self.decoder_blocks = nn.ModuleList(
            Block(decoder_dim, decoder_num_heads, hidden, qkv_bias=True, layer_idx=i) for i in range(decoder_depth)
        )
        self.decoder_norm = nn.LayerNorm(decoder_dim, eps=1e-6)
        self.decoder_pred = nn.Linear(decoder_dim, pixels_per_patch)
        self._init_decoder()

    def _init_decoder(self) -> None:
        nn.init.normal_(self.mask_token, std=0.02)
        decoder_modules = [self.decoder_embed, self.decoder_blocks, self.decoder_norm, self.decoder_pred]
        for module in decoder_modules:
            for m in module.modules():
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
                elif isinstance(m, nn.LayerNorm):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)

    # ------------------------------------------------------------------ helpers
    def no_weight_decay(self) -> set[str]:
        """Parameter names (relative to this module) excluded from weight decay: encoder tokens/pos, mask token."""
        names = {"mask_token"}
        if hasattr(self.encoder, "no_weight_decay"):
            names |= {f"encoder.{name}" for name in self.encoder.no_weight_decay()}
        return names

    def _decoder_positions(self, grid: tuple[int, int]) -> torch.Tensor:
        if tuple(grid) == self.grid_size:
            return self.decoder_pos_embed
        table = sincos_pos_embed_2d(self.decoder_pos_embed.shape[-1], tuple(grid))[None]
        return table.to(self.decoder_pos_embed.device)

    def _check_images(self, images: torch.Tensor) -> None:
        if images.ndim != 4:
            raise ValueError(f"expected images of shape (B, C, H, W), got a tensor of shape {tuple(images.shape)}")
        if images.shape[1] != self.in_chans:
            raise ValueError(f"expected images of {self.in_chans} channels, got {images.shape[1]}; convert the "
                             f"images or build the encoder with in_chans={images.shape[1]}")
        height, width = images.shape[-2:]
        if height % self.patch_size[0] or width % self.patch_size[1]:
            raise ValueError(f"MAE needs image sizes divisible by the patch size {self.patch_size}, "
                             f"got {(height, width)}")

    def target(self, images: torch.Tensor) -> torch.Tensor:
        """Regression target (B, N, P): pixels per patch, normalised per patch when ``norm_pix_loss``."""
        patches = patchify(images, self.patch_size)
        return normalize_patches(patches)[0] if self.norm_pix_loss else patches

    def unshuffle(self, visible: torch.Tensor, keep: torch.Tensor, num_patches: int) -> torch.Tensor:
        """Put the (B, K, Dd) decoder-embedded visible tokens back at their ``keep`` positions of a
        (B, N, Dd) sequence whose other positions hold the mask token."""
        batch, _, width = visible.shape
        full = self.mask_token.to(visible.dtype).expand(batch, num_patches, width)
        index = keep.unsqueeze(-1).expand(-1, -1, width)
        return full.scatter(1, index, visible)

    # ------------------------------------------------------------------ forward
    def forward_encoder(self, images: torch.Tensor, mask_ratio: float | None = None,
                        generator: torch.Generator | None = None):
        """Mask and encode. Returns (EncoderOutput over visible patches, keep (B, K), mask (B, N), grid)."""
        self._check_images(images)
        ratio = self.mask_ratio if mask_ratio is None else mask_ratio
        grid = (images.shape[-2] // self.patch_size[0], images.shape[-1] // self.patch_size[1])
        num_patches = grid[0] * grid[1]
        keep, mask = random_masking(images.shape[0], num_patches, ratio, device=images.device, generator=generator)
        out = self.encoder.forward_features(images, keep=keep)
        return out, keep, mask.to(images.dtype), grid

    def forward_decoder(self, out, keep: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """Decode an EncoderOutput over the visible patches into (B, N, Ph*Pw*C) pixel predictions."""
        num_patches = grid[0] * grid[1]
        patches = self.unshuffle(self.decoder_embed(out.patches), keep, num_patches)
        patches = patches + self._decoder_positions(grid).to(patches.dtype)
        global_tokens = out.global_tokens
        num_global = 0 if global_tokens is None else global_tokens.shape[1]
        x = patches if num_global == 0 else torch.cat([self.decoder_embed(global_tokens), patches], dim=1)
        for block in self.decoder_blocks:
            x = block(x)
        x = self.decoder_norm(x)
        return self.decoder_pred(x[:, num_global:])

    def forward(self, images: torch.Tensor, mask_ratio: float | None = None,
                generator: torch.Generator | None = None) -> MAEOutput:
        """images (B, C, H, W) -> MAEOutput (loss on masked patches, predictions, mask, keep)."""
        out, keep, mask, grid = self.forward_encoder(images, mask_ratio, generator)
        pred = self.forward_decoder(out, keep, grid)
        loss = masked_patch_loss(pred.float(), self.target(images).float(), mask.float())
        return MAEOutput(loss=loss, pred=pred, mask=mask, keep=keep, grid=grid)

    @torch.no_grad()
    def reconstruct(self, images: torch.Tensor, mask_ratio: float | None = None,
                    generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """Images for a visual check, all (B, C, H, W): ``masked`` (hidden patches zeroed), ``reconstruction``
        (prediction in pixel space; with norm_pix_loss un-normalised with each true patch's mean/std, as MAE's
        visualisations do), ``pasted`` (visible patches from the input, masked ones from the prediction)."""
        was_training = self.training
        self.eval()
        try:
            result = self.forward(images, mask_ratio, generator)
        finally:
            self.train(was_training)
        pred = result.pred.float()
        patches = patchify(images.float(), self.patch_size)
        if self.norm_pix_loss:
            _, mean, std = normalize_patches(patches)
            pred = pred * std + mean
        mask = result.mask.float().unsqueeze(-1)
        to_image = lambda p: unpatchify(p, self.patch_size, result.grid, self.in_chans)  # noqa: E731
        return {
            "original": images.float(),
            "masked": to_image(patches * (1.0 - mask)),
            "reconstruction": to_image(pred),
            "pasted": to_image(patches * (1.0 - mask) + pred * mask),
            "mask": result.mask,
        }
