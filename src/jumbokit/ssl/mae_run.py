"""The pieces of an MAE pretraining run around a zoo encoder: building the wrapper, the masked validation loss,
reconstruction plots, the saved files and the report (``jumbokit mae-pretrain`` wires them together)."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Sequence

import torch

from .mae import MaskedAutoencoder

logger = logging.getLogger(__name__)

__all__ = ["require_plain_encoder", "build_image_mae", "masked_val_loss", "save_reconstructions", "save_mae",
           "mae_report"]

EXAMPLE_PLAIN_MODEL = "vit_pico_jumbo"


def require_plain_encoder(name: str) -> None:
    """Raise ``ValueError`` when zoo model ``name`` is not a plain encoder: MAE keeps and drops patch tokens, which
    multi-stage encoders (ViT-Res, their spatial reductions) cannot do."""
    from jumbokit.encoders import model_config

    config = model_config(name)
    if config.get("encoder") == "multistage":
        raise ValueError(f"--model {name}: MAE needs a plain encoder (keep/drop of patch tokens); vit_res_* models "
                         f"are multi-stage; pick e.g. {EXAMPLE_PLAIN_MODEL}")


def build_image_mae(
    model: str,
    img_size: int,
    in_chans: int,
    *,
    patch_size: int | None = None,
    depth: int | None = None,
    pos_embed: str = "sincos",
    drop_path: float = 0.0,
    decoder_dim: int = 128,
    decoder_depth: int = 2,
    decoder_heads: int = 4,
    decoder_mlp_ratio: float = 4.0,
    mask_ratio: float = 0.75,
    norm_pix_loss: bool = True,
) -> MaskedAutoencoder:
    """MAE around a new zoo encoder ``model`` (no classifier) for (in_chans, img_size, img_size) images;
    ``patch_size`` / ``depth`` override the zoo config when given."""
    from jumbokit.encoders import create_model

    require_plain_encoder(model)
    overrides: dict[str, Any] = dict(img_size=img_size, in_chans=in_chans, num_classes=0, pos_embed=pos_embed,
                                     drop_path_rate=drop_path)
    if patch_size is not None:
        overrides["patch_size"] = patch_size
    if depth is not None:
        overrides["depth"] = depth
    return MaskedAutoencoder(create_model(model, **overrides), decoder_dim=decoder_dim, decoder_depth=decoder_depth,
                             decoder_num_heads=decoder_heads, decoder_mlp_ratio=decoder_mlp_ratio,
                             mask_ratio=mask_ratio, norm_pix_loss=norm_pix_loss)


@torch.no_grad()
def masked_val_loss(model: MaskedAutoencoder, images: torch.Tensor, batch_size: int = 128, seed: int = 0) -> float:
    """Mean masked-patch loss over fixed validation images (M, C, H, W) with a fixed masking seed."""
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    total, count = 0.0, 0
    for start in range(0, len(images), batch_size):
        chunk = images[start:start + batch_size].to(device)
        total += model(chunk, generator=generator).loss.float().item() * len(chunk)
        count += len(chunk)
    return total / max(count, 1)


_ROWS = (("original", "original"), ("masked", "masked"), ("reconstruction", "reconstruction"),
         ("pasted", "reconstruction + visible"))


def save_reconstructions(model: MaskedAutoencoder, images: torch.Tensor, mean: Sequence[float],
                         std: Sequence[float], path: str | Path, title: str, seed: int = 0) -> Path:
    """PNG grid of normalised images (B, C, H, W): rows original / masked / reconstruction / reconstruction +
    visible, one column per image; written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jumbokit.data import denormalize
    from jumbokit.training import atomic_save_figure

    device = next(model.parameters()).device
    pics = model.reconstruct(images.to(device), generator=torch.Generator(device=device).manual_seed(seed))
    count = images.shape[0]
    fig, axes = plt.subplots(len(_ROWS), count, figsize=(1.3 * count, 1.45 * len(_ROWS)), squeeze=False)
    for r, (key, label) in enumerate(_ROWS):
        batch = denormalize(pics[key].cpu(), mean, std).clamp(0, 1)
        for c in range(count):
            ax, img = axes[r][c], batch[c]
            if img.shape[0] == 1:
                ax.imshow(img[0].numpy(), cmap="gray", vmin=0, vmax=1)
            else:
                ax.imshow(img.permute(1, 2, 0).numpy())
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(label, fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return atomic_save_figure(Path(path), fig, dpi=110)


def save_mae(model: MaskedAutoencoder, out: str | Path) -> None:
    """Write the encoder alone (``model.safetensors`` + ``model_config.json``, for ``jumbokit.load``) and the whole
    wrapper (``mae.safetensors``, its config in the metadata), atomically."""
    from safetensors.torch import save_file

    from jumbokit.encoders import atomic_write, save

    out = Path(out)
    save(model.encoder, out)
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    metadata = {"mae_config": json.dumps(model.config)}
    atomic_write(out / "mae.safetensors", lambda tmp: save_file(tensors, tmp, metadata=metadata))


def mae_report(title: str, summary: dict[str, Any], epochs: list[dict[str, Any]], norm_pix_loss: bool,
               png_name: str, out: str | Path) -> str:
    """The markdown of ``report.md``: the summary, the loss per epoch, the reconstructions and how to go on."""
    from jumbokit.training import markdown_table

    return "\n".join([
        f"# {title}", "", markdown_table([summary], digits=4), "",
        "## Loss per epoch (masked patches only" + (", normalised pixels" if norm_pix_loss else "") + ")", "",
        markdown_table(epochs, digits=4), "", f"![reconstructions]({png_name})", "",
        f"Encoder: `jumbokit.load('{out}')`; linear probe: `jumbokit linear-probe --checkpoint {out}`.", "",
    ])
