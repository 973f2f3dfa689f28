"""timm's VisionTransformer and jumbokit's encoders, both ways: ``from_timm`` and ``to_timm``.

State-dict names already match timm's; the only change is that jumbokit keeps position embeddings for patches only,
so a timm model whose table also covers its prefix tokens (``no_embed_class=False``) has those rows
folded into the tokens themselves (exact, since the tokens are constants). ``to_timm`` builds timm's model with
``no_embed_class=True`` (jumbokit's layout), so the round trips are exact for such models; timm models that embed
their prefix tokens come back with the rows folded (the same outputs, not the same tensors).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from .encoder import Encoder
from .global_kinds import global_token_kind, global_token_kinds, kind_of
from .io import load_state_dict_checked

__all__ = ["from_timm", "to_timm", "timm_config", "convert_timm_state_dict"]

_HEADS_BY_WIDTH = {96: 3, 128: 4, 192: 3, 384: 6, 512: 8, 768: 12, 1024: 16, 1280: 16}


def timm_config(model: nn.Module) -> dict[str, Any]:
    """The jumbokit config of a timm ``VisionTransformer`` instance."""
    blocks = list(model.blocks)
    if not blocks:
        raise ValueError("the timm model has no blocks")
    first = blocks[0]
    if not isinstance(getattr(first.attn, "q_norm", nn.Identity()), nn.Identity):
        raise ValueError("timm models with qk-norm are not supported")
    if getattr(model, "attn_pool", None) is not None:
        raise ValueError("timm models with attention pooling (global_pool='map') are not supported")
    if not isinstance(getattr(model, "norm_pre", nn.Identity()), nn.Identity):
        raise ValueError("timm models with a pre-norm (CLIP-style norm_pre) are not supported")
    patch = model.patch_embed
    has_cls = getattr(model, "cls_token", None) is not None
    num_reg = int(getattr(model, "num_reg_tokens", 0) or 0)
    global_pool = getattr(model, "global_pool", "token")
    if global_pool not in ("token", "avg"):
        raise ValueError(f"timm global_pool {global_pool!r} is not supported; expected 'token' or 'avg'")
    head = getattr(model, "head", None)
    init_values = None
    if hasattr(first.ls1, "gamma"):
        init_values = 1.0  # real values come with the weights
    config = dict(
        tokenizer="image",
        img_size=tuple(patch.img_size),
        patch_size=tuple(patch.patch_size),
        in_chans=patch.proj.in_channels,
        dim=model.embed_dim,
        depth=len(blocks),
        num_heads=first.attn.num_heads,
        mlp_hidden=first.mlp.fc1.out_features,
        qkv_bias=first.attn.qkv.bias is not None,
        init_values=init_values,
        global_pool="avg" if global_pool == "avg" else "token",
        fc_norm=not isinstance(getattr(model, "fc_norm", nn.Identity()), nn.Identity),
        num_classes=head.out_features if isinstance(head, nn.Linear) else 0,
        pos_embed="learn" if getattr(model, "pos_embed", None) is not None else "none",
        dynamic_img_size=True,
    )
    config.update(_global_token_config(has_cls, num_reg, global_pool))
    return config


def _global_token_config(has_cls: bool, num_reg: int, global_pool: str) -> dict[str, Any]:
    """The global-token kind (and its options) that holds timm's prefix tokens: the first registered kind that claims
    them (``GlobalTokenKind.from_timm``)."""
    for name, kind in global_token_kinds().items():
        options = kind.from_timm(has_cls, num_reg, global_pool)
        if options is not None:
            return dict(global_tokens=name, **options)
    raise ValueError(f"no global-token kind holds timm's prefix tokens (class_token={has_cls}, reg_tokens={num_reg}, "
                     f"global_pool={global_pool!r})")


def _config_from_state_dict(state: dict[str, torch.Tensor], **overrides: Any) -> dict[str, Any]:
    proj = state["patch_embed.proj.weight"]
    dim, in_chans, ph, pw = proj.shape
    depth = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("blocks."))
    if "num_heads" not in overrides and dim not in _HEADS_BY_WIDTH:
        raise ValueError(f"cannot infer num_heads for width {dim} from a state dict; pass num_heads=...")
    has_cls = "cls_token" in state
    num_reg = state["reg_token"].shape[1] if "reg_token" in state else 0
    fc_norm = "fc_norm.weight" in state
    pos = state.get("pos_embed")
    num_prefix = int(has_cls) + num_reg
    img_size = overrides.pop("img_size", None)
    if img_size is None:
        if pos is None:
            raise ValueError("a state dict without pos_embed needs img_size=...")
        n = pos.shape[1]
        side = math.isqrt(n)
        if side * side != n:
            side = math.isqrt(n - num_prefix)
        img_size = side * ph
    head = state.get("head.weight")
    config = dict(
        tokenizer="image", img_size=img_size, patch_size=(ph, pw), in_chans=in_chans, dim=dim, depth=depth,
        num_heads=_HEADS_BY_WIDTH.get(dim), mlp_hidden=state["blocks.0.mlp.fc1.weight"].shape[0],
        qkv_bias="blocks.0.attn.qkv.bias" in state,
        init_values=1.0 if "blocks.0.ls1.gamma" in state else None,
        global_pool="avg" if fc_norm or not has_cls else "token", fc_norm=fc_norm,
        num_classes=head.shape[0] if head is not None else 0,
        pos_embed="learn" if pos is not None else "none",
    )
    config.update(_global_token_config(has_cls, num_reg, config["global_pool"]))
    config.update(overrides)
    return config


def convert_timm_state_dict(state: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Map a timm ViT state dict onto jumbokit names for ``config`` (folds prefix position rows)."""
    state = {k: v for k, v in state.items()}
    tokens = kind_of(config).timm_prefix(config)  # (our name, timm's name, count) in timm's prefix order
    pos = state.get("pos_embed")
    if pos is not None:
        grid = _grid(config)
        n_patches = grid[0] * grid[1]
        prefix = pos.shape[1] - n_patches
        if prefix not in _prefix_lengths(tokens):
            raise ValueError(f"pos_embed has {pos.shape[1]} rows, expected {n_patches} patches "
                             f"(+ prefix tokens) for img_size={config['img_size']}")
        if prefix:
            prefix_pos, state["pos_embed"] = pos[:, :prefix], pos[:, prefix:].clone()
            offset = 0
            for _, theirs, count in tokens:  # fold each prefix token's position row into the token
                if theirs in state and prefix > offset:
                    state[theirs] = state[theirs] + prefix_pos[:, offset:offset + count]
                    offset += count
    for ours, theirs, _ in tokens:
        if theirs != ours and theirs in state:
            state[ours] = state.pop(theirs)
    for key in [k for k in state if k.startswith("norm_pre") or k.startswith("attn_pool")]:
        state.pop(key)
    return state


def _prefix_lengths(tokens: list[tuple[str, str, int]]) -> set[int]:
    """The position-table prefixes timm may hold for these prefix tokens: none, or the leading tokens' rows."""
    lengths, total = {0}, 0
    for _, _, count in tokens:
        total += count
        lengths.add(total)
    return lengths


def _grid(config: dict[str, Any]) -> tuple[int, int]:
    img, patch = config["img_size"], config["patch_size"]
    ih, iw = (img, img) if isinstance(img, int) else img
    ph, pw = (patch, patch) if isinstance(patch, int) else patch
    return ih // ph, iw // pw


def from_timm(model_or_state_dict: nn.Module | dict[str, torch.Tensor], **overrides: Any) -> Encoder:
    """The jumbokit ``Encoder`` equivalent to a timm ViT (or its state dict), weights loaded.

    Supports CLS-token models, register models, ``no_embed_class``, global-average-pool variants and
    LayerScale. A bare state dict cannot tell the number of heads for unusual widths: pass ``num_heads``.
    """
    if isinstance(model_or_state_dict, nn.Module):
        config = {**timm_config(model_or_state_dict), **overrides}
        state = model_or_state_dict.state_dict()
    else:
        state = dict(model_or_state_dict)
        if "patch_embed.proj.weight" not in state:
            raise ValueError("expected a timm VisionTransformer state dict (with patch_embed.proj.weight)")
        config = _config_from_state_dict(state, **overrides)
    model = Encoder(**config)
    load_state_dict_checked(model, convert_timm_state_dict(state, config), source="timm weights")
    return model


def to_timm(encoder: nn.Module, **overrides: Any) -> nn.Module:
    """timm's ``VisionTransformer`` equivalent to a jumbokit image encoder (CLS, registers, or no global token),
    weights loaded: the same outputs, and ``from_timm(to_timm(encoder))`` gives back the same state dict.

    ``overrides`` go to timm's constructor (``dynamic_img_size=False``, ``drop_path_rate=0.1``, ...). Jumbo
    encoders (timm's blocks have no Jumbo FFN), multi-stage encoders (no residual spatial reduction in timm), series
    encoders and collapsed progressive-join encoders (wider q/k than the width) are refused with ``ValueError``.
    """
    from timm.models.vision_transformer import VisionTransformer

    if not isinstance(encoder, Encoder):
        raise ValueError(f"to_timm converts a plain jumbokit Encoder (CLS or registers), got a "
                         f"{type(encoder).__name__}: timm's VisionTransformer has no stages or branches")
    cfg = encoder.config
    if cfg["tokenizer"] != "image":
        raise ValueError(f"to_timm converts image encoders, got tokenizer={cfg['tokenizer']!r}")
    kind = global_token_kind(cfg["global_tokens"])
    prefix = kind.timm_args(cfg)
    if prefix is None:
        mapped = [repr(name) for name, k in global_token_kinds().items() if k.timm_args(cfg) is not None]
        raise ValueError(f"timm's VisionTransformer has no {kind.name!r} global tokens{kind.timm_note}; "
                         f"to_timm converts global_tokens {', '.join(mapped[:-1])} or {mapped[-1]}")
    if cfg["qk_dim"] not in (None, cfg["dim"]) or cfg["v_dim"] not in (None, cfg["dim"]):
        raise ValueError(f"timm's attention has q/k/v of the model width {cfg['dim']}, got qk_dim={cfg['qk_dim']}, "
                         f"v_dim={cfg['v_dim']} (a collapsed progressive-join encoder)")
    dim = int(cfg["dim"])
    hidden = encoder.blocks[0].mlp.fc1.out_features if encoder.depth else dim * 4
    if int(dim * (hidden / dim)) != hidden:
        raise ValueError(f"timm sizes the MLP as int(dim * mlp_ratio); no ratio gives {hidden} at width {dim}")
    class_token = bool(prefix["class_token"])
    args = dict(
        img_size=tuple(encoder.patch_embed.img_size), patch_size=tuple(encoder.patch_embed.patch_size),
        in_chans=cfg["in_chans"], num_classes=encoder.num_classes,
        global_pool="token" if class_token and cfg["global_pool"] == "token" else "avg",
        embed_dim=dim, depth=encoder.depth, num_heads=cfg["num_heads"], mlp_ratio=hidden / dim,
        qkv_bias=cfg["qkv_bias"], init_values=1.0 if cfg["init_values"] else None, class_token=class_token,
        reg_tokens=int(prefix["reg_tokens"]), no_embed_class=True,
        pos_embed="none" if encoder.pos_embed is None else "learn",
        fc_norm=not isinstance(encoder.fc_norm, nn.Identity), dynamic_img_size=cfg["dynamic_img_size"],
        drop_rate=cfg["head_drop_rate"], proj_drop_rate=cfg["drop_rate"], attn_drop_rate=cfg["attn_drop_rate"],
        drop_path_rate=cfg["drop_path_rate"],
    )
    model = VisionTransformer(**{**args, **overrides})
    state = encoder.state_dict()
    for ours, theirs, _ in kind.timm_prefix(cfg):  # the kind's token names -> timm's
        if ours != theirs:
            state[theirs] = state.pop(ours)
    load_state_dict_checked(model, state, source="the jumbokit encoder")
    return model.train(encoder.training)
