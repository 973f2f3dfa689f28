"""Multi-stage ViT-Res encoders (the ViT-ResNAS paper): conv stem, stages of pre-norm blocks with their own
head counts and FFN sizes, and residual spatial reduction (RSR) between stages.

``images -> ConvStem -> (B, H*W, d1) + pos -> global tokens join -> stage 1 blocks -> RSR -> stage 2 blocks
-> RSR -> stage 3 blocks -> norm -> EncoderOutput``. Each RSR halves the patch grid and widens the tokens:

    y = LN(x)
    residual: patches of y as (B, d_in, H, W) -> Conv2d(d_in, d_out, 3, stride 2, pad 1) -> + pos embed
              global tokens of y -> Linear(d_in, d_out) (one linear shared by every global token)
    skip:     patches of x -> AvgPool2d(2); global tokens of x as they are; both zero-padded to d_out
    out = residual + skip

Global tokens (the plug-ins of ``global_tokens.py``) ride through every stage: CLS and registers are mapped
to the next width by the RSR linear; Jumbo keeps J tokens of the stage's width and one shared Jumbo FFN
(width J * d_stage) per stage. The config is flat and JSON-able (``model.config``); per-block head counts
and FFN hidden sizes are lists per stage, so a searched architecture is just a config.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .blocks import Block, TimmTrainingAPI, masked_layer_norm, run_block
from .encoder import DEFAULT_CONFIG, EncoderOutput, _add_plugin_prefix, _init_linear, _strip_plugin_prefix, unknown_options
from .global_kinds import GlobalTokens, global_token_options, kind_of, masked_mean, param_group_patterns
from .tokenizers import IMAGE_OPTIONS, ImagePatchTokenizer, resample_pos_embed, sincos_pos_embed_2d, to_2tuple

__all__ = ["MULTISTAGE_CONFIG", "MultiStageEncoder", "ConvStem", "ResidualSpatialReduction", "Stage",
           "multistage_config_check", "multistage_options"]

# options with the same meaning as in the plain encoder with an image tokenizer (and its defaults); the options of
# the registered global-token kinds join them in multistage_options()
_SHARED_OPTIONS = ("in_chans", "dynamic_img_size", "pos_embed", "qkv_bias", "init_values", "drop_rate",
                   "attn_drop_rate", "drop_path_rate", "head_drop_rate", "global_tokens", "global_pool", "num_classes")

MULTISTAGE_CONFIG: dict[str, Any] = {
    "encoder": "multistage",
    "tokenizer": "image",  # multi-stage encoders reduce a 2-D patch grid: images only
    "img_size": 224,
    "patch_size": 14,  # total stride of the stem: 224 / 14 = a 16 x 16 grid in stage 1
    "stem": "conv",  # "conv" (the ViT-ResNAS paper's 3-conv stem) or "patch" (one patchify conv, as the plain ViT)
    "stem_chans": 24,
    "dims": [192, 384, 768],  # token width of each stage
    "head_dims": [64, 64, 64],  # attention head width of each stage
    "heads": [[3] * 4, [6] * 4, [12] * 4],  # per block of each stage
    "mlp_hidden": [[768] * 4, [1536] * 4, [3072] * 4],  # per block of each stage (absolute sizes)
    "patch_head": False,  # the paper's token-labeling head: Linear(d_last, num_classes) on every last-stage patch
    **{key: {**DEFAULT_CONFIG, **IMAGE_OPTIONS}[key] for key in _SHARED_OPTIONS},
}


def multistage_options() -> dict[str, Any]:
    """Every option of a multi-stage encoder with its default: :data:`MULTISTAGE_CONFIG` and the options of every
    registered global-token kind."""
    options: dict[str, Any] = {}
    for key, value in MULTISTAGE_CONFIG.items():
        options[key] = value
        if key == "global_tokens":
            options.update(global_token_options())
    return options


def multistage_config_check(config: dict[str, Any]) -> dict[str, Any]:
    """Fill defaults and validate a multi-stage config; returns the full config or raises ValueError."""
    known = multistage_options()
    unknown = set(config) - set(known)
    if unknown:
        raise ValueError(f"unknown multi-stage encoder option(s) {unknown_options(unknown, known)}")
    cfg = {**copy.deepcopy(known), **copy.deepcopy(config)}
    dims, heads, hidden = cfg["dims"], cfg["heads"], cfg["mlp_hidden"]
    stages = len(dims)
    if stages < 1:
        raise ValueError("dims must list at least one stage width, got []")
    for key in ("head_dims", "heads", "mlp_hidden"):
        if len(cfg[key]) != stages:
            raise ValueError(f"{key} must have one entry per stage ({stages} from dims={dims}), got {len(cfg[key])}")
    for s in range(stages):
        if len(heads[s]) != len(hidden[s]):
            raise ValueError(f"stage {s}: heads lists {len(heads[s])} blocks but mlp_hidden lists {len(hidden[s])}")
        if any(int(h) < 1 for h in heads[s]) or any(int(f) < 1 for f in hidden[s]):
            raise ValueError(f"stage {s}: head counts and FFN sizes must be >= 1, got heads={heads[s]}, "
                             f"mlp_hidden={hidden[s]}")
        if s and dims[s] < dims[s - 1]:
            raise ValueError(f"residual spatial reduction cannot narrow tokens: dims[{s}]={dims[s]} < "
                             f"dims[{s - 1}]={dims[s - 1]} (the skip branch zero-pads d_in to d_out)")
    if cfg["tokenizer"] != "image" or cfg["encoder"] != "multistage":
        raise ValueError(f"multi-stage encoders take images (tokenizer='image', encoder='multistage'), got "
                         f"tokenizer={cfg['tokenizer']!r}, encoder={cfg['encoder']!r}")
    if cfg["stem"] not in ("conv", "patch"):
        raise ValueError(f"unknown stem {cfg['stem']!r}; expected 'conv' or 'patch'")
    stage_grids(cfg["img_size"], cfg["patch_size"], stages, cfg["stem"])
    return cfg


def stage_grids(img_size, patch_size, stages: int, stem: str = "conv") -> list[tuple[int, int]]:
    """Patch grid of every stage for an image size; raises when the stem or a reduction does not divide."""
    (ih, iw), (ph, pw) = to_2tuple(img_size), to_2tuple(patch_size)
    if stem == "conv" and (ph % 2 or pw % 2):
        raise ValueError(f"the conv stem halves the image first, so patch_size must be even, got {patch_size}; "
                         "use stem='patch' for odd patch sizes")
    if ih % ph or iw % pw:
        raise ValueError(f"img_size {(ih, iw)} is not divisible by patch_size {(ph, pw)}")
    grid = (ih // ph, iw // pw)
    factor = 2 ** (stages - 1)
    if grid[0] % factor or grid[1] % factor:
        raise ValueError(f"img_size {(ih, iw)} with patch_size {(ph, pw)} gives a {grid[0]}x{grid[1]} grid, which "
                         f"{stages - 1} spatial reduction(s) cannot halve evenly (need multiples of {factor}); "
                         f"use an image size that is a multiple of {ph * factor}")
    return [(grid[0] // 2**s, grid[1] // 2**s) for s in range(stages)]


class ConvBNReLU(nn.Module):
    """conv3x3 (no bias) + BatchNorm + ReLU."""

    def __init__(self, in_chans: int, out_chans: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_chans, out_chans, 3, stride=stride, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(out_chans)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class ConvStem(ImagePatchTokenizer):
    """The ViT-ResNAS paper's convolutional tokenizer: (B, C, H, W) -> (B, H/P * W/P, D).

    conv3x3/2 (C -> c) + BN + ReLU = r; two conv3x3 (c -> c) + BN + ReLU; + r; then a conv with kernel =
    stride = P/2 to D channels (P = patch_size = 14 at 224 px: a 16 x 16 grid).
    """

    def __init__(self, img_size=224, patch_size=14, in_chans: int = 3, dim: int = 192, stem_chans: int = 24,
                 dynamic_img_size: bool = True) -> None:
        super().__init__(img_size, patch_size, in_chans, dim, dynamic_img_size=dynamic_img_size)
        ph, pw = self.patch_size
        if ph % 2 or pw % 2:
            raise ValueError(f"the conv stem needs an even patch_size (it halves the image first), got "
                             f"{self.patch_size}")
        self.conv1 = ConvBNReLU(in_chans, stem_chans, stride=2)
        self.conv2 = ConvBNReLU(stem_chans, stem_chans)
        self.conv3 = ConvBNReLU(stem_chans, stem_chans)
        self.proj = nn.Conv2d(stem_chans, dim, kernel_size=(ph // 2, pw // 2), stride=(ph // 2, pw // 2))

    def project(self, x: torch.Tensor) -> torch.Tensor:
        r = self.conv1(x)
        return self.proj(self.conv3(self.conv2(r)) + r)


class ResidualSpatialReduction(nn.Module):
    """RSR between stages: (B, G + H*W, d_in) -> (B, G + H/2 * W/2, d_out); see the module docstring.

    grid_size: the output grid the position table is built for (resampled for other input sizes).
    """

    def __init__(self, in_dim: int, out_dim: int, grid_size: tuple[int, int], pos_embed: str = "learn") -> None:
        super().__init__()
        if out_dim < in_dim:
            raise ValueError(f"residual spatial reduction needs out_dim >= in_dim, got {in_dim} -> {out_dim}")
        self.in_dim, self.out_dim = in_dim, out_dim
        self.grid_size = tuple(grid_size)
        self.norm = nn.LayerNorm(in_dim, eps=1e-6)
        self.conv = nn.Conv2d(in_dim, out_dim, kernel_size=3, stride=2, padding=1)
        self.token_proj = nn.Linear(in_dim, out_dim)
        table = (sincos_pos_embed_2d(out_dim, self.grid_size)[None] if pos_embed == "sincos"
                 else torch.zeros(1, self.grid_size[0] * self.grid_size[1], out_dim))
        self.pos_embed = nn.Parameter(table, requires_grad=pos_embed == "learn") if pos_embed != "none" else None
        if pos_embed == "learn":
            nn.init.trunc_normal_(self.pos_embed, std=0.02)

    def forward(self, x: torch.Tensor, grid: tuple[int, int], num_global: int, in_mask: torch.Tensor | None = None,
                in_count: torch.Tensor | None = None, out_mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, tuple[int, int]]:
        """x: (B, G + H*W, d_in), grid (H, W) -> (B, G + H/2*W/2, d_out), (H/2, W/2).

        in_mask / in_count / out_mask (supernet use): (B, 1, d_in) active input channels and their count, and
        (B, 1, d_out) active output channels; the LayerNorm then normalises over the active channels only.
        """
        batch, _, dim = x.shape
        height, width = grid
        if height % 2 or width % 2:
            raise ValueError(f"spatial reduction halves the patch grid, got an odd grid {grid}; use an image size "
                             "whose grid stays even down to the last stage")
        y = masked_layer_norm(x, in_mask, in_count, self.norm.weight, self.norm.bias, self.norm.eps)
        patches = y[:, num_global:].transpose(1, 2).reshape(batch, dim, height, width)
        patches = self.conv(patches).flatten(2).transpose(1, 2)
        new_grid = (height // 2, width // 2)
        if self.pos_embed is not None:
            patches = patches + resample_pos_embed(self.pos_embed, self.grid_size, new_grid)
        skip = x[:, num_global:].transpose(1, 2).reshape(batch, dim, height, width)
        skip = F.avg_pool2d(skip, 2).flatten(2).transpose(1, 2)
        skip = torch.cat([x[:, :num_global], skip], dim=1)
        out = torch.cat([self.token_proj(y[:, :num_global]), patches], dim=1)
        out = out + F.pad(skip, (0, self.out_dim - self.in_dim))
        return (out if out_mask is None else out * out_mask), new_grid

    def extra_repr(self) -> str:
        return f"{self.in_dim} -> {self.out_dim}, grid={self.grid_size}"


class Stage(nn.Module):
    """[RSR] + pre-norm blocks (own head count and FFN size each) + this stage's global-token plug-in.

    The plug-in's state-dict names drop the ``global_tokens.`` prefix (``stages.0.cls_token``,
    ``stages.1.jumbo_mlp.fc1.weight``), as the plain encoder's do.
    """

    def __init__(self, dim: int, head_dim: int, heads: list[int], mlp_hidden: list[int], plugin: GlobalTokens,
                 downsample: ResidualSpatialReduction | None, drop_path: list[float], cfg: dict[str, Any]) -> None:
        super().__init__()
        self.dim = dim
        self.downsample = downsample
        self.blocks = nn.ModuleList(
            Block(dim, int(h), int(f), qkv_bias=cfg["qkv_bias"], drop=cfg["drop_rate"],
                  attn_drop=cfg["attn_drop_rate"], drop_path=rate, init_values=cfg["init_values"], layer_idx=i,
                  qk_dim=int(h) * head_dim, v_dim=int(h) * head_dim)
            for i, (h, f, rate) in enumerate(zip(heads, mlp_hidden, drop_path))
        )
        self.global_tokens = plugin
        self._plugin_keys = set(plugin.state_dict().keys())
        self.register_state_dict_post_hook(_strip_plugin_prefix)
        self.register_load_state_dict_pre_hook(_add_plugin_prefix)


class MultiStageEncoder(TimmTrainingAPI, nn.Module):
    """ViT-Res: conv stem + stages joined by residual spatial reduction (+ optional linear head).

    Same interface as :class:`~jumbokit.encoders.Encoder`: ``forward_features`` -> EncoderOutput (patches and
    grid of the last stage), ``forward`` -> logits (B, num_classes) or the pooled feature when num_classes=0.
    Token keep/drop is not supported: RSR pools the full 2-D grid.
    """

    def __init__(self, **config: Any) -> None:
        super().__init__()
        cfg = multistage_config_check(config)
        self.config = cfg
        dims = [int(d) for d in cfg["dims"]]
        self.dims = dims
        self.embed_dim = dims[-1]
        self.num_stages = len(dims)
        self.depth = sum(len(h) for h in cfg["heads"])
        grids = stage_grids(cfg["img_size"], cfg["patch_size"], self.num_stages, cfg["stem"])
        if cfg["pos_embed"] not in ("learn", "sincos", "none"):
            raise ValueError(f"unknown pos_embed {cfg['pos_embed']!r}; expected 'learn', 'sincos' or 'none'")

        if cfg["stem"] == "conv":
            self.patch_embed: ImagePatchTokenizer = ConvStem(cfg["img_size"], cfg["patch_size"], cfg["in_chans"],
                                                             dims[0], cfg["stem_chans"], cfg["dynamic_img_size"])
        else:
            self.patch_embed = ImagePatchTokenizer(cfg["img_size"], cfg["patch_size"], cfg["in_chans"], dims[0],
                                                   dynamic_img_size=cfg["dynamic_img_size"])
        self.num_patches = self.patch_embed.num_patches
        self.pos_embed = None
        if cfg["pos_embed"] != "none":
            self.pos_embed = nn.Parameter(self.patch_embed.init_pos_embed(cfg["pos_embed"]),
                                          requires_grad=cfg["pos_embed"] == "learn")
            if cfg["pos_embed"] == "learn":
                nn.init.trunc_normal_(self.pos_embed, std=0.02)

        rates = torch.linspace(0, cfg["drop_path_rate"], self.depth).tolist() if self.depth else []
        kind = kind_of(cfg)
        stages, start = [], 0
        for s, dim in enumerate(dims):
            depth = len(cfg["heads"][s])
            plugin = kind.build(cfg, dim, depth, learn_tokens=s == 0)
            downsample = ResidualSpatialReduction(dims[s - 1], dim, grids[s], cfg["pos_embed"]) if s else None
            stages.append(Stage(dim, int(cfg["head_dims"][s]), cfg["heads"][s], cfg["mlp_hidden"][s], plugin,
                                downsample, rates[start:start + depth], cfg))
            start += depth
        self.stages = nn.ModuleList(stages)
        self.num_global_tokens = self.stages[0].global_tokens.num_tokens

        if cfg["global_pool"] not in ("token", "avg"):
            raise ValueError(f"unknown global_pool {cfg['global_pool']!r}; expected 'token' or 'avg'")
        last = self.stages[-1].global_tokens
        self.num_features = dims[-1] if cfg["global_pool"] == "avg" else last.feature_dim
        self.head_in_features = self.num_features
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head_drop = nn.Dropout(cfg["head_drop_rate"]) if cfg["head_drop_rate"] > 0 else nn.Identity()
        self.num_classes = int(cfg["num_classes"])
        self.head = nn.Linear(self.num_features, self.num_classes) if self.num_classes > 0 else nn.Identity()
        self.patch_head = nn.Linear(dims[-1], self.num_classes) if cfg["patch_head"] and self.num_classes else None
        self.apply(_init_linear)

    # ------------------------------------------------------------------ api
    @property
    def patch_size(self):
        return self.patch_embed.patch_size

    @property
    def blocks(self) -> list[Block]:
        """All transformer blocks in forward order (across stages)."""
        return [block for stage in self.stages for block in stage.blocks]

    def no_weight_decay(self) -> set[str]:
        """Names (as in ``named_parameters``) of tokens and position embeddings."""
        names = {f"stages.{s}.global_tokens.{n}" for s, stage in enumerate(self.stages)
                 for n in stage.global_tokens.no_weight_decay()}
        if self.pos_embed is not None:
            names.add("pos_embed")
        names |= {f"stages.{s}.downsample.pos_embed" for s, stage in enumerate(self.stages)
                  if stage.downsample is not None and stage.downsample.pos_embed is not None}
        return names

    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """timm's parameter grouping (layer-wise lr decay): the stem, then per stage its spatial reduction and one
        group per block (a plug-in's per-layer parts, e.g. the Jumbo norms, join their block, its shared parts, e.g.
        the Jumbo FFN, the stage's last block), the final norm, the head last."""
        tokens, _, _ = param_group_patterns(r"stages\.0\.global_tokens\.")
        _, layers, shared = param_group_patterns(r"stages\.(\d+)\.global_tokens\.")
        return dict(
            stem="|".join([r"^patch_embed", r"^pos_embed"] + ([tokens] if tokens else [])),
            blocks=[(r"^stages\.(\d+)\.downsample", (0,)), (r"^stages\.(\d+)\.blocks\.(\d+)", None)]
            + [(p, None) for p in layers] + [(p, (99999,)) for p in shared] + [(r"^norm", (99999,))],
        )

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new head for ``num_classes`` (0: none). ``global_pool`` (timm's argument) may only repeat the model's
        pooling."""
        if global_pool is not None and global_pool != self.config["global_pool"]:
            raise ValueError(f"this model pools with global_pool={self.config['global_pool']!r}, got "
                             f"global_pool={global_pool!r}; build the model with the pooling it needs")
        self.num_classes = num_classes
        self.config["num_classes"] = num_classes
        device = self.pos_embed.device if self.pos_embed is not None else next(self.parameters()).device
        self.head = nn.Linear(self.num_features, num_classes).to(device) if num_classes > 0 else nn.Identity()
        self.patch_head = (nn.Linear(self.embed_dim, num_classes).to(device)
                           if self.config["patch_head"] and num_classes > 0 else None)
        for layer in (self.head, self.patch_head):
            if isinstance(layer, nn.Linear):
                _init_linear(layer)

    def forward_features(self, x: torch.Tensor, keep: torch.Tensor | None = None,
                         pad_mask: torch.Tensor | None = None) -> EncoderOutput:
        """Images (B, C, H, W) -> EncoderOutput with the last stage's patches (B, H/P/2^(S-1) * ..., d_S)."""
        if keep is not None or pad_mask is not None:
            raise ValueError("multi-stage encoders take every patch (residual spatial reduction pools the full "
                             "2-D grid): keep / pad_mask are not supported; use a plain encoder for MAE or token drop")
        x, grid, _ = self._run_stages(x, (), self.num_stages - 1, inplace=not torch.is_grad_enabled())
        return self._output(x, grid)

    def _run_stages(self, x: torch.Tensor, take, last: int, inplace: bool = False):
        """The stem and stages 0..``last`` on images ``x``: (tokens after stage ``last``, its grid, the patch maps
        (B, d_s, H_s, W_s) of the stages in ``take``)."""
        tok = self.patch_embed(x)
        tokens, grid = tok.tokens, tuple(tok.grid)
        if self.pos_embed is not None:
            tokens = tokens + self.patch_embed.positions(self.pos_embed, grid)
        num_global = self.num_global_tokens
        x = self.stages[0].global_tokens.join(tokens)
        maps = []
        for s, stage in enumerate(self.stages[:last + 1]):
            if stage.downsample is not None:
                x, grid = stage.downsample(x, grid, num_global)
            for block in stage.blocks:
                x = run_block(block, x, None, stage.global_tokens, self.grad_checkpointing, inplace)
            if s in take:
                p = x[:, num_global:]
                maps.append(p.reshape(p.shape[0], *grid, p.shape[-1]).permute(0, 3, 1, 2).contiguous())
        return x, grid, maps

    def _output(self, x: torch.Tensor, grid) -> EncoderOutput:
        """The final norm and the pooled feature of the last stage's tokens."""
        num_global = self.num_global_tokens
        x = self.norm(x)
        g, p = x.split([num_global, x.shape[1] - num_global], dim=1)
        if self.config["global_pool"] == "avg":
            feature = masked_mean(p, None)
        else:
            feature = self.stages[-1].global_tokens.pool(g, p, None)
        return EncoderOutput(feature, p, g, None, None, 1, grid)

    @property
    def feature_info(self) -> list[dict[str, Any]]:
        """timm's feature description: one entry per stage (its width and its stride in input pixels)."""
        cfg = self.config
        grids = stage_grids(cfg["img_size"], cfg["patch_size"], self.num_stages, cfg["stem"])
        height = to_2tuple(cfg["img_size"])[0]
        return [dict(module=f"stages.{s}", num_chs=dim, reduction=height // grids[s][0])
                for s, dim in enumerate(self.dims)]

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | tuple[int, ...] | None = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str | None = None,
        intermediates_only: bool = False,
    ) -> list[torch.Tensor] | tuple[EncoderOutput, list[torch.Tensor]]:
        """Each chosen stage's patch tokens as (B, d_s, H_s, W_s) maps, with timm's signature for hierarchical
        models: ``indices`` an int n takes the last n stages, a list takes those stage indices (negative from the
        end), None every stage; ``norm`` applies the final norm to the last stage's map; ``stop_early`` runs no
        stage after the last one taken. Returns ``(forward_features output, maps)`` or the maps alone."""
        if output_fmt not in (None, "NCHW"):
            raise ValueError(f"multi-stage encoders give NCHW maps, got output_fmt={output_fmt!r}")
        take, last = self._take_stages(indices)
        if not intermediates_only and stop_early and last < self.num_stages - 1:
            raise ValueError("stop_early with an earlier last stage has no final output; pass intermediates_only=True")
        x, grid, maps = self._run_stages(x, take, last if stop_early else self.num_stages - 1)
        if norm and self.num_stages - 1 in take:  # the final norm belongs to the last stage's width
            maps[-1] = self.norm(maps[-1].permute(0, 2, 3, 1)).permute(0, 3, 1, 2).contiguous()
        return maps if intermediates_only else (self._output(x, grid), maps)

    def prune_intermediate_layers(
        self, indices: int | list[int] | tuple[int, ...] = 1, prune_norm: bool = False, prune_head: bool = True,
    ) -> list[int]:
        """Drop the stages after the last one ``indices`` takes; returns the taken stage indices. The final norm
        goes with a dropped last stage (it has that stage's width) or with ``prune_norm``; ``prune_head`` removes
        the classifier. The config follows, so a pruned model saves and loads."""
        take, last = self._take_stages(indices)
        if last < self.num_stages - 1:
            self.stages = self.stages[:last + 1]
            for key in ("dims", "heads", "head_dims", "mlp_hidden"):
                self.config[key] = list(self.config[key])[:last + 1]
            self.dims = self.dims[:last + 1]
            self.num_stages, self.embed_dim = last + 1, self.dims[-1]
            self.depth = sum(len(stage.blocks) for stage in self.stages)
            prune_norm, prune_head = True, True
            self.config["global_pool"] = "avg"  # the pooled feature of a truncated model: its last stage's mean
            self.num_features = self.head_in_features = self.embed_dim
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0)
        return take

    def _take_stages(self, indices: int | list[int] | tuple[int, ...] | None) -> tuple[list[int], int]:
        """Absolute stage indices of ``indices`` (timm's ``feature_take_indices``) and the largest one."""
        n = self.num_stages
        if indices is None:
            indices = n
        if isinstance(indices, int):
            if not 0 < indices <= n:
                raise ValueError(f"last-n indices={indices} is out of range (1 to {n} stages)")
            take = list(range(n - indices, n))
        else:
            take = []
            for i in indices:
                if not -n <= int(i) < n:
                    raise ValueError(f"stage index {i} is out of range for {n} stages (expected {-n} to {n - 1})")
                take.append(int(i) % n)
            if not take:
                raise ValueError("indices is an empty list; give stage indices or a count of last stages")
        return take, max(take)

    def patch_logits(self, out: EncoderOutput) -> torch.Tensor:
        """Token-labeling logits of every last-stage patch: (B, N_last, num_classes) (needs patch_head=True)."""
        if self.patch_head is None:
            raise ValueError("this model has no patch head; build it with patch_head=True and num_classes > 0")
        return self.patch_head(out.patches)

    def forward_head(self, out: EncoderOutput, pre_logits: bool = False) -> torch.Tensor:
        feature = self.head_drop(out.feature)
        return feature if pre_logits else self.head(feature)

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        return self.forward_head(self.forward_features(x, keep=keep))

    def plain_config(self) -> dict[str, Any]:
        """A deep copy of the JSON-able config."""
        return copy.deepcopy(self.config)

    def saved_config(self) -> dict[str, Any]:
        """The config ``jumbokit.save`` stores (``jumbokit.load`` rebuilds the model from it)."""
        return self.plain_config()

    def extra_repr(self) -> str:
        cfg = self.config
        return (f"stem={cfg['stem']}, dims={cfg['dims']}, depths={[len(h) for h in cfg['heads']]}, "
                f"global_tokens={cfg['global_tokens']}")

