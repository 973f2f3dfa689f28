"""Masked autoencoder (MAE) pretraining around any image or series encoder of the zoo.

The wrapper masks patches through the encoder's ``keep`` indices (the encoder only sees the visible
patches plus its global tokens), then a lightweight transformer decoder with fixed sin-cos position
embeddings (2-D for images, 1-D for series) and a learned mask token predicts the values of every patch.
The loss is the per-patch mean squared error on the masked patches only.

- Images: patches of pixels, regressed against per-patch normalised pixels by default (``norm_pix_loss``).
- Series (``tokenizer="series"``, the PatchTST family): PatchTST's self-supervised mode. Every channel is
  patched and masked on its own (channel independence: rows of (B*C, N) patches); the raw patch values are
  regressed by default. Missing / NaN-padded steps are never targets: a patch with no observed step is never
  masked (nor counted in the mask ratio), and inside a partly observed patch only observed steps enter the
  error. Each row masks ``round(ratio * observed patches)`` of its observed patches (keeping one visible).
  Series patches overlap by half, so a masked patch shares steps with visible neighbours: only the steps no
  visible patch covers are targets, and they enter the encoder as missing, so features that read across
  patch borders (``conv_stem``, the trunk, ``level_scale``) cannot see them (at ratio 0.4 about 14% of the steps).

Global tokens of the encoder (CLS, registers + CLS, the J Jumbo tokens) are projected by the decoder
embedding and enter the decoder ahead of the patch tokens without a position embedding, as MAE does with
its CLS token; they are dropped before the pixel prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from jumbokit.encoders import Block, Encoder, random_keep
from jumbokit.encoders import sincos_pos_embed_1d, sincos_pos_embed_2d

__all__ = [
    "MaskedAutoencoder",
    "MAEOutput",
    "num_visible",
    "random_masking",
    "observed_masking",
    "patchify",
    "unpatchify",
    "normalize_patches",
    "masked_patch_loss",
    "masked_series_loss",
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


def observed_masking(
    observed: torch.Tensor, mask_ratio: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random masking among the observed patches of each row (series with missing / padded patches).

    observed: (B, N) bool, True where a patch holds at least one observed step. Each row hides
    ``round(ratio * n_obs)`` of its ``n_obs`` observed patches (at most ``n_obs - 1``); the others are visible.
    Returns ``keep`` (B, K) and ``mask`` (B, N) float (1.0 = masked). K is the largest visible count over the
    rows; rows with fewer visible patches fill ``keep`` with unobserved patches, which the encoder ignores
    (they are padding in its own mask). Without unobserved patches this is :func:`random_masking`'s ratio.
    """
    if not 0.0 <= mask_ratio < 1.0:
        raise ValueError(f"mask_ratio must be in [0, 1), got {mask_ratio}")
    batch, num_patches = observed.shape
    n_obs = observed.sum(dim=1)
    hidden = torch.minimum(torch.round(n_obs.double() * mask_ratio).long(), (n_obs - 1).clamp_min(0))
    noise = torch.rand(batch, num_patches, generator=generator, device=observed.device)
    # rank of each observed patch among its row's observed patches, in random order
    order = torch.where(observed, noise, noise + 2.0).argsort(dim=1)
    rank = order.argsort(dim=1)
    visible = observed & (rank < (n_obs - hidden)[:, None])
    mask = (observed & ~visible).float()
    # sort key: visible observed first, then unobserved (fillers), then masked observed
    key = torch.where(visible, noise, torch.where(observed, noise + 4.0, noise + 2.0))
    count = max(1, int((n_obs - hidden).max().item()))
    keep = key.argsort(dim=1)[:, :count]
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


def masked_series_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over masked patches of the per-patch MSE over observed steps.

    pred: (B, N, P); target: (B, N, P) with NaN at missing / padded steps (never a target); mask: (B, N),
    1.0 = masked. Masked patches without any observed step are left out; with none left the loss is the
    mean over every observed step (plain autoencoding, as :func:`masked_patch_loss` at mask ratio 0).
    """
    observed = ~torch.isnan(target)
    err = (pred - torch.nan_to_num(target, nan=0.0)).pow(2) * observed
    steps = observed.sum(dim=-1)
    per_patch = err.sum(dim=-1) / steps.clamp_min(1)
    weight = mask * (steps > 0)
    masked = weight.sum()
    masked_mean = (per_patch * weight).sum() / masked.clamp_min(1.0)
    plain = err.sum() / observed.sum().clamp_min(1)
    return torch.where(masked > 0, masked_mean, plain)


def _observed_stats(patches: torch.Tensor, observed: torch.Tensor | None,
                    eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-patch mean and std (B, N, 1) over observed steps (all steps when ``observed`` is None), as
    :func:`normalize_patches` computes them."""
    if observed is None:
        return normalize_patches(patches, eps)[1:]
    count = observed.sum(-1, keepdim=True).clamp_min(1)
    mean = (patches * observed).sum(-1, keepdim=True) / count
    var = ((patches - mean).pow(2) * observed).sum(-1, keepdim=True) / (count - 1).clamp_min(1)
    return mean, (var + eps).sqrt()


@dataclass
class MAEOutput:
    """Result of :meth:`MaskedAutoencoder.forward`.

    loss: scalar; pred: (B, N, Ph*Pw*C) predicted pixels (normalised per patch when norm_pix_loss);
    mask: (B, N) 1.0 = masked; keep: (B, K) visible patch indices; grid: (Hp, Wp).
    Series: B is B*C (one row per series and channel), pred is (B*C, N, patch_len) and grid is (N,).
    """

    loss: torch.Tensor
    pred: torch.Tensor
    mask: torch.Tensor
    keep: torch.Tensor
    grid: tuple[int, int]


class MaskedAutoencoder(nn.Module):
    """MAE around an image or series :class:`~jumbokit.encoders.Encoder` (global tokens: none, cls,
    registers, jumbo).

    Args:
        encoder: an image or series encoder; its patch tokens are masked through
            ``forward_features(x, keep=...)``.
        decoder_dim: decoder width (divisible by ``decoder_num_heads``; by 4 for images, by 2 for series).
        decoder_depth: decoder blocks.
        decoder_num_heads: decoder attention heads.
        decoder_mlp_ratio: decoder MLP hidden = ratio * decoder_dim.
        mask_ratio: fraction of patches hidden from the encoder (default 0.75; PatchTST masks 0.4 of a series).
        norm_pix_loss: regress per-patch normalised values; None (default) = True for images (as MAE
            recommends), False for series (PatchTST regresses the patch values, which keep level information).

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
        norm_pix_loss: bool | None = None,
    ) -> None:
        super().__init__()
        encoder_config = dict(getattr(encoder, "config", {}) or {})
        tokenizer = encoder_config.get("tokenizer", "image")
        patch_embed = getattr(encoder, "patch_embed", None)
        if encoder_config.get("encoder") == "multistage":
            raise ValueError("MAE needs a plain encoder (keep/drop of patch tokens); multi-stage encoders "
                             f"(vit_res_*) are not, got {type(encoder).__name__}")
        if tokenizer not in ("image", "series") or not hasattr(patch_embed, "grid_size"):
            raise ValueError(f"MAE needs an image or series encoder (tokenizer='image' or 'series' with a patch "
                             f"tokenizer), got tokenizer={tokenizer!r} ({type(encoder).__name__})")
        self.modality = tokenizer
        if norm_pix_loss is None:
            norm_pix_loss = tokenizer == "image"
        multiple = 4 if tokenizer == "image" else 2
        if decoder_dim % multiple:
            raise ValueError(f"decoder_dim must be divisible by {multiple} ({'2-D' if multiple == 4 else '1-D'} "
                             f"sin-cos position embedding), got {decoder_dim}")
        if decoder_dim % decoder_num_heads:
            raise ValueError(f"decoder_dim {decoder_dim} is not divisible by decoder_num_heads {decoder_num_heads}")
        if decoder_depth < 0:
            raise ValueError(f"decoder_depth must be >= 0, got {decoder_depth}")
        num_visible(encoder.num_patches, mask_ratio)  # validates the ratio against the patch count
        self.encoder = encoder
        self.grid_size: tuple[int, ...] = tuple(patch_embed.grid_size)
        if tokenizer == "image":
            self.patch_size: tuple[int, ...] = tuple(patch_embed.patch_size)
            self.in_chans = int(patch_embed.proj.in_channels)
            values_per_patch = self.patch_size[0] * self.patch_size[1] * self.in_chans
        else:
            self.patch_size = (int(patch_embed.patch_len),)
            self.in_chans = int(patch_embed.in_chans)
            values_per_patch = self.patch_size[0]  # channel-independent: one channel per row
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
        self.decoder_embed = nn.Linear(embed_dim, decoder_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_dim))
        self.register_buffer(
            "decoder_pos_embed", self._sincos(decoder_dim, self.grid_size)[None], persistent=False
        )
        hidden = int(round(decoder_mlp_ratio * decoder_dim))
        self.decoder_blocks = nn.ModuleList(
            Block(decoder_dim, decoder_num_heads, hidden, qkv_bias=True, layer_idx=i) for i in range(decoder_depth)
        )
        self.decoder_norm = nn.LayerNorm(decoder_dim, eps=1e-6)
        self.decoder_pred = nn.Linear(decoder_dim, values_per_patch)
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

    @staticmethod
    def _sincos(dim: int, grid: tuple[int, ...]) -> torch.Tensor:
        if len(grid) == 2:
            return sincos_pos_embed_2d(dim, tuple(grid))
        return sincos_pos_embed_1d(dim, torch.arange(grid[0]))

    def _decoder_positions(self, grid: tuple[int, ...]) -> torch.Tensor:
        if tuple(grid) == self.grid_size:
            return self.decoder_pos_embed
        table = self._sincos(self.decoder_pos_embed.shape[-1], tuple(grid))[None]
        return table.to(self.decoder_pos_embed.device)

    def _check_input(self, x: torch.Tensor) -> None:
        if self.modality == "image":
            self._check_images(x)
        elif x.ndim != 3 or x.shape[1] != self.in_chans:
            raise ValueError(f"expected series of shape (B, {self.in_chans}, L), got a tensor of shape "
                             f"{tuple(x.shape)}")

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

    def target(self, x: torch.Tensor) -> torch.Tensor:
        """Regression target (B, N, P): pixels per patch, normalised per patch when ``norm_pix_loss``.

        Series (B, C, L) give (B*C, N, patch_len) patch values, NaN at missing / padded steps (normalised
        over each patch's observed steps when ``norm_pix_loss``)."""
        if self.modality == "image":
            patches = patchify(x, self.patch_size)
            return normalize_patches(patches)[0] if self.norm_pix_loss else patches
        patches, observed = self._series_patches(x)
        if self.norm_pix_loss:
            mean, std = _observed_stats(patches, observed)
            patches = (patches - mean) / std
        return patches if observed is None else patches.masked_fill(~observed, float("nan"))

    def series_target(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """:meth:`target` of series x (B, C, L) with NaN wherever the encoder saw the step: (B*C, N, P); only
        the steps that no visible patch covers (:meth:`hidden_steps` under ``mask`` (B*C, N)) are targets."""
        tok = self.encoder.patch_embed
        hidden = self.hidden_steps(mask).unfold(-1, tok.patch_len, tok.stride)[:, :mask.shape[1]]
        return self.target(x).masked_fill(~hidden, float("nan"))

    def _series_patches(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B*C, N, P) patch values (missing = 0) and observed steps (B*C, N, P) bool or None."""
        patches, observed = self.encoder.patch_embed.patchify(x)
        rows = patches.shape[0] * patches.shape[1]
        patches = patches.reshape(rows, patches.shape[2], patches.shape[3])
        return patches, None if observed is None else observed.reshape(patches.shape)

    def unshuffle(self, visible: torch.Tensor, keep: torch.Tensor, num_patches: int) -> torch.Tensor:
        """Put the (B, K, Dd) decoder-embedded visible tokens back at their ``keep`` positions of a
        (B, N, Dd) sequence whose other positions hold the mask token."""
        batch, _, width = visible.shape
        full = self.mask_token.to(visible.dtype).expand(batch, num_patches, width)
        index = keep.unsqueeze(-1).expand(-1, -1, width)
        return full.scatter(1, index, visible)

    # ------------------------------------------------------------------ forward
    def forward_encoder(self, x: torch.Tensor, mask_ratio: float | None = None,
                        generator: torch.Generator | None = None):
        """Mask and encode. Returns (EncoderOutput over visible patches, keep (B', K), mask (B', N), grid);
        B' = B for images, B*C for series."""
        self._check_input(x)
        ratio = self.mask_ratio if mask_ratio is None else mask_ratio
        if self.modality == "image":
            grid: tuple[int, ...] = (x.shape[-2] // self.patch_size[0], x.shape[-1] // self.patch_size[1])
            keep, mask = random_masking(x.shape[0], grid[0] * grid[1], ratio, device=x.device, generator=generator)
        else:
            patches, observed = self._series_patches(x)
            grid = (patches.shape[1],)
            if observed is None:
                keep, mask = random_masking(patches.shape[0], grid[0], ratio, device=x.device, generator=generator)
            else:
                keep, mask = observed_masking(observed.any(-1), ratio, generator=generator)
            x = x.masked_fill(self.hidden_steps(mask, x.shape[-1]).reshape(x.shape), float("nan"))
        out = self.encoder.forward_features(x, keep=keep)
        return out, keep, mask.to(x.dtype), grid

    def hidden_steps(self, mask: torch.Tensor, length: int | None = None) -> torch.Tensor:
        """Series steps that only masked patches cover: (B*C, L) bool for a (B*C, N) mask (1 = masked).

        Patches overlap (stride < patch length), so a masked patch shares steps with its visible neighbours;
        the steps no visible patch covers are hidden from the encoder's input (as missing), so convolutional
        features (``conv_stem``, the trunk) and ``level_scale`` cannot read them, and they alone are the
        reconstruction targets. ``length``: the input's L (default: every step the patches cover, the
        tokenizer's end padding included)."""
        tok = self.encoder.patch_embed
        rows, num = mask.shape
        covered = max((num - 1) * tok.stride + tok.patch_len, length or 0)
        step_of = (torch.arange(num, device=mask.device)[:, None] * tok.stride
                   + torch.arange(tok.patch_len, device=mask.device)).flatten()  # (N*P,) the step of each patch step
        masked = mask.to(torch.float32)[:, :, None].expand(-1, -1, tok.patch_len).reshape(rows, -1)
        by_masked = masked.new_zeros(rows, covered).index_add_(1, step_of, masked)
        by_visible = masked.new_zeros(rows, covered).index_add_(1, step_of, 1.0 - masked)
        return ((by_masked > 0) & (by_visible == 0))[:, :length]

    def forward_decoder(self, out, keep: torch.Tensor, grid: tuple[int, ...]) -> torch.Tensor:
        """Decode an EncoderOutput over the visible patches into (B', N, P) predictions (P: pixels per image
        patch, or steps per series patch). Series patches without an observed step are masked in attention."""
        num_patches = math.prod(grid)
        patches = self.unshuffle(self.decoder_embed(out.patches), keep, num_patches)
        patches = patches + self._decoder_positions(grid).to(patches.dtype)
        global_tokens = out.global_tokens
        num_global = 0 if global_tokens is None else global_tokens.shape[1]
        x = patches if num_global == 0 else torch.cat([self.decoder_embed(global_tokens), patches], dim=1)
        attn_mask = None
        if out.pad_mask is not None and num_global > 0:
            # padding among the visible patches, scattered back to patch order; mask tokens are attended
            padded = torch.zeros(keep.shape[0], num_patches, dtype=torch.bool, device=keep.device)
            padded = padded.scatter(1, keep, out.pad_mask)
            full = torch.cat([padded.new_zeros(padded.shape[0], num_global), padded], dim=1)
            attn_mask = (~full)[:, None, None, :]
        for block in self.decoder_blocks:
            x = block(x, attn_mask)
        x = self.decoder_norm(x)
        return self.decoder_pred(x[:, num_global:])

    def forward(self, x: torch.Tensor, mask_ratio: float | None = None,
                generator: torch.Generator | None = None) -> MAEOutput:
        """images (B, C, H, W) or series (B, C, L) -> MAEOutput (loss on masked patches, predictions, mask, keep)."""
        out, keep, mask, grid = self.forward_encoder(x, mask_ratio, generator)
        pred = self.forward_decoder(out, keep, grid)
        if self.modality == "image":
            loss = masked_patch_loss(pred.float(), self.target(x).float(), mask.float())
        else:
            loss = masked_series_loss(pred.float(), self.series_target(x, mask).float(), mask.float())
        return MAEOutput(loss=loss, pred=pred, mask=mask, keep=keep, grid=grid)

    @torch.no_grad()
    def reconstruct(self, images: torch.Tensor, mask_ratio: float | None = None,
                    generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """Images for a visual check, all (B, C, H, W): ``masked`` (hidden patches zeroed), ``reconstruction``
        (prediction in pixel space; with norm_pix_loss un-normalised with each true patch's mean/std, as MAE's
        visualisations do), ``pasted`` (visible patches from the input, masked ones from the prediction).

        Series give the same keys as patches (B*C, N, patch_len) (the input is ``patches``, NaN = missing)."""
        was_training = self.training
        self.eval()
        try:
            result = self.forward(images, mask_ratio, generator)
        finally:
            self.train(was_training)
        pred = result.pred.float()
        mask = result.mask.float().unsqueeze(-1)
        if self.modality == "series":
            patches, observed = self._series_patches(images.float())
            if self.norm_pix_loss:
                mean, std = _observed_stats(patches, observed)
                pred = pred * std + mean
            if observed is not None:
                patches = patches.masked_fill(~observed, float("nan"))
            return {"patches": patches, "masked": patches * (1.0 - mask), "reconstruction": pred,
                    "pasted": patches * (1.0 - mask) + pred * mask, "mask": result.mask}
        patches = patchify(images.float(), self.patch_size)
        if self.norm_pix_loss:
            _, mean, std = normalize_patches(patches)
            pred = pred * std + mean
        to_image = lambda p: unpatchify(p, self.patch_size, result.grid, self.in_chans)  # noqa: E731
        return {
            "original": images.float(),
            "masked": to_image(patches * (1.0 - mask)),
            "reconstruction": to_image(pred),
            "pasted": to_image(patches * (1.0 - mask) + pred * mask),
            "mask": result.mask,
        }
