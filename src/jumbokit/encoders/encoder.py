"""The modality-agnostic plain transformer encoder.

``input -> tokenizer -> (B', N, D) patch tokens + positions -> [keep subset] -> global tokens join ->
Block x L -> norm -> EncoderOutput``. One class serves images and series; its constructor takes a flat,
JSON-able config (kept in ``model.config``) so a saved model rebuilds from its config alone: the shared keys of
:data:`DEFAULT_CONFIG` plus the options of the tokenizer kind it names (``tokenizer="image"``: ``img_size``,
``patch_size``, ...; ``"series"``: the :class:`~jumbokit.timeseries.models.config.SeriesModelConfig` options), and
the options of every registered global-token kind (:mod:`jumbokit.encoders.global_kinds`), which builds the plug-in
the config names (``global_tokens``). The tokenizer kind may bring plug-ins the encoder runs through hooks
(:mod:`jumbokit.encoders.extras`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .blocks import Block, TimmTrainingAPI, run_block
from .extras import mean_probability_logits, tokenizer_kind, tokenizer_kinds
from .global_kinds import (GlobalTokens, default_global_tokens, global_token_options, kind_of, masked_mean,
                           param_group_patterns)
from .tokenizers import Tokens, exporting

__all__ = ["Encoder", "EncoderOutput", "DEFAULT_CONFIG", "encoder_options", "full_config", "gather_tokens",
           "random_keep", "unknown_options"]

DEFAULT_CONFIG: dict[str, Any] = {
    "tokenizer": "image",  # a registered tokenizer kind; its own options sit beside these (extras.TokenizerKind)
    "in_chans": 3,
    "pos_embed": "learn",
    "dim": 192,
    "depth": 12,
    "num_heads": 3,
    "mlp_ratio": 4.0,
    "mlp_hidden": None,
    "qkv_bias": True,
    "qk_dim": None,  # total q/k width (None = dim); wider after a progressive-join collapse
    "v_dim": None,  # total value width (None = dim)
    "init_values": None,
    "drop_rate": 0.0,
    "attn_drop_rate": 0.0,
    "drop_path_rate": 0.0,
    "head_drop_rate": 0.0,
    # a registered global-token kind; every kind's own options sit beside it (global_kinds.GlobalTokenKind)
    "global_tokens": default_global_tokens(),
    # pooling and head
    "global_pool": "token",
    "fc_norm": None,
    "num_classes": 0,
}

_PLUGIN_PREFIX = "global_tokens."


@dataclass
class EncoderOutput:
    """What heads consume.

    feature: (B', F) pooled feature (the plug-in's pooling, or the mean patch token).
    patches: (B', K, D) patch tokens after the final norm (K = kept patches); with ``fc_norm`` (timm's
        mean-pooling style) the norm is applied to the pooled feature instead and patches are unnormalised.
    global_tokens: (B', G, D) global tokens after the final norm (G may be 0).
    keep: (B', K) indices of the kept patches, or None when all were kept.
    pad_mask: (B', K) bool, True = padded / missing token, or None.
    channels: C for channel-independent series (B' = B * C), 1 for images.
    grid: the patch grid of the input ((Hp, Wp) for images, (N,) for series).
    token_mean: (B', D) each sequence's mean tokenizer token, before any block (only with an auxiliary head).
    """

    feature: torch.Tensor
    patches: torch.Tensor
    global_tokens: torch.Tensor
    keep: torch.Tensor | None = None
    pad_mask: torch.Tensor | None = None
    channels: int = 1
    grid: tuple[int, ...] = ()
    token_mean: torch.Tensor | None = None


def unknown_options(unknown: Any, known: Any) -> str:
    """``'dpeth' (did you mean 'depth'?), 'foo'``: each unknown key with its closest known key, if any."""
    import difflib

    hints = []
    for key in sorted(map(str, unknown)):
        close = difflib.get_close_matches(key, [str(k) for k in known], n=1)
        hints.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    return ", ".join(hints)


def gather_tokens(tokens: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Select tokens (B, N, ...) at indices keep (B, K) -> (B, K, ...)."""
    index = keep.reshape(keep.shape + (1,) * (tokens.ndim - 2)).expand(-1, -1, *tokens.shape[2:])
    return tokens.gather(1, index)


def random_keep(
    batch: int, num_patches: int, keep_count: int, device: torch.device | str | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random per-sample subsets of patches: returns ``keep`` (B, K) and ``restore`` (B, N).

    ``restore`` undoes the shuffle: ``shuffled.gather(1, restore)`` puts tokens back in patch order, where
    ``shuffled`` lists the kept tokens first and the dropped ones after (MAE's ``ids_restore``).
    """
    if not 0 < keep_count <= num_patches:
        raise ValueError(f"keep_count must be in [1, {num_patches}], got {keep_count}")
    noise = torch.rand(batch, num_patches, generator=generator, device=device)
    shuffle = noise.argsort(dim=1)
    restore = shuffle.argsort(dim=1)
    return shuffle[:, :keep_count], restore


def encoder_options(tokenizer: str | None = DEFAULT_CONFIG["tokenizer"]) -> dict[str, Any]:
    """Every option of an encoder with tokenizer kind ``tokenizer``, with its default: the shared keys of
    :data:`DEFAULT_CONFIG`, the options of every registered global-token kind, and the tokenizer kind's own options
    (``None``: the options of every registered tokenizer kind)."""
    kinds = tokenizer_kinds().values() if tokenizer is None else [tokenizer_kind(tokenizer)]
    shared: dict[str, Any] = {}
    for key, value in DEFAULT_CONFIG.items():
        shared[key] = value
        if key == "global_tokens":  # every registered global-token kind's options, whichever kind the config names
            shared.update(global_token_options())
    return {**shared, **{k: v for kind in kinds for k, v in kind.options.items()}}


def full_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with every default filled in: the shared keys and the options of its tokenizer kind.

    Options of another kind are refused unless they hold that kind's default (configs saved before the kinds
    owned their options carried every kind's keys, at their defaults)."""
    kind_name = config.get("tokenizer", DEFAULT_CONFIG["tokenizer"])
    kind = tokenizer_kind(kind_name)
    config = dict(config)
    foreign: dict[str, list[str]] = {}
    for name, other in tokenizer_kinds().items():
        if name == kind_name:
            continue
        for key in [k for k in config if k in other.options and k not in kind.options]:
            if config[key] == other.options[key]:
                del config[key]
            else:
                foreign.setdefault(name, []).append(key)
    for name, keys in foreign.items():
        verb = "applies" if len(keys) == 1 else "apply"
        raise ValueError(f"{', '.join(keys)} {verb} to {name} tokenizers only, got "
                         f"{', '.join(f'{k}={config[k]!r}' for k in keys)} with tokenizer={kind_name!r}")
    known = encoder_options(kind_name)
    unknown = set(config) - set(known)
    if unknown:
        raise ValueError(f"unknown encoder option(s) {unknown_options(unknown, known)} (the keys of DEFAULT_CONFIG "
                         f"and the {kind_name!r} tokenizer's options)")
    return {**known, **config}


class Encoder(TimmTrainingAPI, nn.Module):
    """Tokenizer + global-token plug-in + pre-norm blocks + norm (+ optional linear head).

    Construct with a flat config (keys of :data:`DEFAULT_CONFIG`); see ``jumbokit.create_model`` for
    named configurations. ``forward_features`` returns an :class:`EncoderOutput`; ``forward`` returns
    logits (B, num_classes), or the pooled feature when ``num_classes == 0``.
    """

    def __init__(self, **config: Any) -> None:
        super().__init__()
        cfg = full_config(config)
        self.config = cfg
        dim, depth = int(cfg["dim"]), int(cfg["depth"])
        self.embed_dim = dim
        self.depth = depth

        kind = tokenizer_kind(cfg["tokenizer"])
        self.patch_embed = kind.build(cfg)
        self.num_patches = self.patch_embed.num_patches

        if cfg["pos_embed"] not in ("learn", "sincos", "none"):
            raise ValueError(f"unknown pos_embed {cfg['pos_embed']!r}; expected 'learn', 'sincos' or 'none'")
        if cfg["pos_embed"] == "none":
            self.pos_embed = None
        else:
            table = self.patch_embed.init_pos_embed(cfg["pos_embed"])
            self.pos_embed = nn.Parameter(table, requires_grad=cfg["pos_embed"] == "learn")
            if cfg["pos_embed"] == "learn":
                nn.init.trunc_normal_(self.pos_embed, std=0.02)

        self.global_tokens: GlobalTokens = kind_of(cfg).build(cfg, dim, depth)
        self.num_global_tokens = self.global_tokens.num_tokens
        extras = kind.extras(cfg, self.num_global_tokens)  # the tokenizer kind's plug-ins (extras.EncoderExtra)
        for name, module in extras.items():
            self.add_module(name, module)
        self._extra_names = tuple(extras)

        mlp_hidden = int(cfg["mlp_hidden"] or round(cfg["mlp_ratio"] * dim))
        rates = torch.linspace(0, cfg["drop_path_rate"], depth).tolist() if depth else []
        self.blocks = nn.ModuleList(
            Block(dim, cfg["num_heads"], mlp_hidden, qkv_bias=cfg["qkv_bias"], drop=cfg["drop_rate"],
                  attn_drop=cfg["attn_drop_rate"], drop_path=rate, init_values=cfg["init_values"], layer_idx=i,
                  qk_dim=cfg["qk_dim"], v_dim=cfg["v_dim"])
            for i, rate in enumerate(rates)
        )

        if cfg["global_pool"] not in ("token", "avg"):
            raise ValueError(f"unknown global_pool {cfg['global_pool']!r}; expected 'token' or 'avg'")
        self.num_features = dim if cfg["global_pool"] == "avg" else self.global_tokens.feature_dim
        use_fc_norm = cfg["global_pool"] == "avg" if cfg["fc_norm"] is None else bool(cfg["fc_norm"])
        self.norm = nn.Identity() if use_fc_norm else nn.LayerNorm(dim, eps=1e-6)
        self.fc_norm = nn.LayerNorm(self.num_features, eps=1e-6) if use_fc_norm else nn.Identity()
        self.head_drop = nn.Dropout(cfg["head_drop_rate"]) if cfg["head_drop_rate"] > 0 else nn.Identity()
        self.channel_independent = kind.channel_independent
        self.head_in_features = self.num_features * (cfg["in_chans"] if self.channel_independent else 1)
        self.num_classes = int(cfg["num_classes"])
        self.head = nn.Linear(self.head_in_features, self.num_classes) if self.num_classes > 0 else nn.Identity()
        self._aux_head_name = kind.aux_head_name
        self._set_aux_head()
        self._aux_logits: torch.Tensor | None = None  # the auxiliary head's logits of the last training forward

        self.apply(_init_linear)
        self._plugin_keys = set(self.global_tokens.state_dict().keys())
        self.register_state_dict_post_hook(_strip_plugin_prefix)
        self.register_load_state_dict_pre_hook(_add_plugin_prefix)

    # ------------------------------------------------------------------ api
    @property
    def patch_size(self):
        return getattr(self.patch_embed, "patch_size", getattr(self.patch_embed, "patch_len", None))

    def no_weight_decay(self) -> set[str]:
        """Names (as in ``named_parameters``) of tokens and position embeddings."""
        names = {_PLUGIN_PREFIX + n for n in self.global_tokens.no_weight_decay()}
        if self.pos_embed is not None:
            names.add("pos_embed")
        return names

    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """timm's parameter grouping (layer-wise lr decay): the stem (patch embedding, positions, global tokens),
        then one group per block (a plug-in's per-layer parts, e.g. the Jumbo norm, LoRA and LayerScale, join their
        block; its parts shared by every block, e.g. the Jumbo FFN, join the last block with the final norm), the
        head last. The global-token kinds name their parameters (``GlobalTokenKind.token_params`` ...)."""
        tokens, layers, shared = param_group_patterns(r"global_tokens\.")
        return dict(
            stem="|".join([r"^patch_embed", r"^pos_embed"] + ([tokens] if tokens else [])),
            blocks=[(r"^blocks\.(\d+)", None)] + [(p, None) for p in layers]
            + [("|".join([r"^norm", *shared]), (99999,))],
        )

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new head for ``num_classes`` (0: none, ``forward`` returns the feature). ``global_pool`` (timm's
        argument) may only repeat the model's pooling: the feature width and norms depend on it."""
        if global_pool is not None and global_pool != self.config["global_pool"]:
            raise ValueError(f"this model pools with global_pool={self.config['global_pool']!r}, got "
                             f"global_pool={global_pool!r}; build the model with the pooling it needs")
        self.num_classes = num_classes
        self.config["num_classes"] = num_classes
        device = self.patch_embed.proj.weight.device
        self.head = nn.Linear(self.head_in_features, num_classes).to(device) if num_classes > 0 else nn.Identity()
        if num_classes > 0:
            _init_linear(self.head)
        self._set_aux_head()
        if self.aux_head is not None:
            self.aux_head.to(device)

    @property
    def aux_head(self) -> nn.Module | None:
        """The tokenizer kind's auxiliary head (e.g. a series encoder's ``trunk_head``), or None."""
        return getattr(self, self._aux_head_name) if self._aux_head_name else None

    def _set_aux_head(self) -> None:
        """(Re)build the auxiliary head for the current classes, under the kind's attribute name."""
        if self._aux_head_name:
            kind = tokenizer_kind(self.config["tokenizer"])
            setattr(self, self._aux_head_name, kind.aux_head(self.config, self.num_classes))

    def tokenize(self, x: torch.Tensor) -> Tokens:
        """Patch tokens with position embeddings added: Tokens.tokens is (B', N, D)."""
        tok = self.patch_embed(x)
        if self.pos_embed is not None:
            tok.tokens = tok.tokens + self.patch_embed.positions(self.pos_embed, tok.grid)
        return tok

    def forward_features(
        self, x: torch.Tensor, keep: torch.Tensor | None = None, pad_mask: torch.Tensor | None = None,
        global_offset: torch.Tensor | None = None, layer: int | None = None,
    ) -> EncoderOutput:
        """x: images (B, C, H, W) or series (B, C, L) -> :class:`EncoderOutput`.

        keep: (B', K) or (K,) indices of patch tokens to keep; None keeps all.
        pad_mask: (B', N) bool, True = ignore this patch (merged with the tokenizer's own mask).
        global_offset: (B', G, D) added to the global tokens before the first block (input-dependent tokens).
        layer: the block whose output is normed and pooled (negative counts from the end); None = the last, so the
            blocks after it are not run (intermediate-layer features, e.g. a linear probe of block ``layer``).
        """
        blocks = self.blocks if layer is None else self.blocks[:self._block_index(layer) + 1]
        state = self._embed(x, keep, pad_mask, global_offset)
        x = state.pop("x")
        inplace = not torch.is_grad_enabled()  # x is this call's own buffer: residuals may go in place
        for block in blocks:
            x = run_block(block, x, state["attn_mask"], self.global_tokens, self.grad_checkpointing, inplace)
        return self._output(x, state)

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | tuple[int, ...] | None = None,
        return_prefix_tokens: bool = False,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str | None = None,
        intermediates_only: bool = False,
        pad_mask: torch.Tensor | None = None,
    ) -> list[Any] | tuple[EncoderOutput, list[Any]]:
        """The outputs of chosen blocks, with timm's signature and semantics.

        indices: an int n takes the last n blocks, a list takes those block indices (negative from the end), None
            takes every block.
        return_prefix_tokens: each intermediate becomes a pair (patch tokens, global tokens), the global tokens
            (B', G, D) being the plug-in's (CLS, CLS + registers, or the J Jumbo tokens). Without global tokens the
            intermediates stay plain tensors, as timm's are without prefix tokens.
        norm: apply the final norm to the intermediates (Identity for ``fc_norm`` models, as in timm).
        stop_early: run no block after the last one taken.
        output_fmt: ``"NCHW"`` patch tokens as (B, D, Hp, Wp) maps (images), ``"NLC"`` as (B', N, D); None = NCHW for
            images, NLC for series.
        intermediates_only: return only the list of intermediates.

        Returns ``(final, intermediates)``, ``final`` being the :class:`EncoderOutput` of ``forward_features`` (after
        the last block run), so ``forward_head(final)`` gives the logits; or the list alone.
        """
        take, last = self._take_indices(indices)
        if output_fmt not in (None, "NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        state = self._embed(x, None, pad_mask, None)
        x = state.pop("x")
        output_fmt = output_fmt or ("NCHW" if len(state["grid"]) == 2 else "NLC")
        if output_fmt == "NCHW" and len(state["grid"]) != 2:
            raise ValueError(f"output_fmt='NCHW' needs a 2-D patch grid (images), got grid {tuple(state['grid'])}; "
                             "use output_fmt='NLC'")
        blocks = self.blocks[:last + 1] if stop_early else self.blocks
        intermediates = []
        for i, block in enumerate(blocks):
            x = run_block(block, x, state["attn_mask"], self.global_tokens, self.grad_checkpointing)
            if i in take:
                intermediates.append(self.norm(x) if norm else x)
        num_global = self.num_global_tokens
        pairs = []
        for y in intermediates:
            g, p = y.split([num_global, y.shape[1] - num_global], dim=1)
            if output_fmt == "NCHW":
                p = p.reshape(p.shape[0], *state["grid"], p.shape[-1]).permute(0, 3, 1, 2).contiguous()
            pairs.append((p, g) if return_prefix_tokens and num_global else p)
        if intermediates_only:
            return pairs
        return self._output(x, state), pairs

    def prune_intermediate_layers(
        self, indices: int | list[int] | tuple[int, ...] = 1, prune_norm: bool = False, prune_head: bool = True,
    ) -> list[int]:
        """Drop the blocks after the last one ``indices`` takes (as in :meth:`forward_intermediates`); returns the
        taken block indices. ``prune_norm`` replaces the final norm by Identity; ``prune_head`` removes the
        classifier (``reset_classifier(0)``). The config follows (depth), so a pruned model saves and loads."""
        take, last = self._take_indices(indices)
        self.blocks = self.blocks[:last + 1]
        self.global_tokens.truncate(last + 1)
        self.depth = self.config["depth"] = last + 1
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0)
        return take

    def _block_index(self, index: int) -> int:
        if not -self.depth <= index < self.depth:
            raise ValueError(f"block index {index} is out of range for {self.depth} blocks "
                             f"(expected {-self.depth} to {self.depth - 1})")
        return index % self.depth

    def _take_indices(self, indices: int | list[int] | tuple[int, ...] | None) -> tuple[list[int], int]:
        """timm's ``feature_take_indices``: absolute block indices and the largest one."""
        if indices is None:
            indices = self.depth
        if isinstance(indices, int):
            if not 0 < indices <= self.depth:
                raise ValueError(f"last-n indices={indices} is out of range (1 to {self.depth} blocks)")
            take = list(range(self.depth - indices, self.depth))
        else:
            take = [self._block_index(int(i)) for i in indices]
            if not take:
                raise ValueError("indices is an empty list; give block indices or a count of last blocks")
        return take, max(take)

    def _embed(self, x: torch.Tensor, keep: torch.Tensor | None, pad_mask: torch.Tensor | None,
               global_offset: torch.Tensor | None) -> dict[str, Any]:
        """Everything before the first block: the joined tokens ``x`` and what the blocks and the output need."""
        tok = self.tokenize(x)
        tokens, mask = tok.tokens, tok.pad_mask
        num_tokens = tokens.shape[1]
        token_mean = masked_mean(tokens, mask) if self.aux_head is not None else None
        if pad_mask is not None:
            if pad_mask.shape != tokens.shape[:2]:
                raise ValueError(f"pad_mask must have shape {tuple(tokens.shape[:2])}, got {tuple(pad_mask.shape)}")
            mask = pad_mask if mask is None else (mask | pad_mask)
        if keep is not None:
            keep = self._check_keep(keep, tokens)
            tokens = gather_tokens(tokens, keep)
            if mask is not None:
                mask = mask.gather(1, keep)
        for extra in self._extras():
            offset = extra.global_offset(x)
            if offset is not None:
                global_offset = offset if global_offset is None else global_offset + offset
        joined = self.global_tokens.join(tokens, global_offset)
        return dict(x=joined, attn_mask=self._attention_mask(mask, num_tokens, keep, joined.dtype), mask=mask,
                    keep=keep, channels=tok.channels, grid=tuple(tok.grid), token_mean=token_mean)

    def _output(self, x: torch.Tensor, state: dict[str, Any]) -> EncoderOutput:
        """The last block's tokens -> final norm, pooling -> :class:`EncoderOutput`."""
        x = self.norm(x)
        g, p = x.split([self.num_global_tokens, x.shape[1] - self.num_global_tokens], dim=1)
        mask = state["mask"]
        if self.config["global_pool"] == "avg":
            feature = masked_mean(p, mask)
        else:
            feature = self.global_tokens.pool(g, p, mask)
        feature = self.fc_norm(feature)
        return EncoderOutput(feature, p, g, state["keep"], mask, state["channels"], state["grid"],
                             state["token_mean"])

    def _attention_mask(self, mask: torch.Tensor | None, num_tokens: int, keep: torch.Tensor | None,
                        dtype: torch.dtype) -> torch.Tensor | None:
        """None, a bool mask (B', 1, 1, T) (True = may attend), or with a plug-in's attention bias a float mask
        (B' or 1, heads, T, T): the bias, -inf where attention is not allowed."""
        allowed = None
        if mask is not None:
            if self.num_global_tokens == 0 and not exporting() and bool(mask.all(dim=1).any()):
                raise ValueError("a sample has no observed patch and the encoder has no global token to attend to; "
                                 "drop fully-missing samples/channels or use a global-token plug-in")
            full = torch.cat([mask.new_zeros(mask.shape[0], self.num_global_tokens), mask], dim=1)
            allowed = (~full)[:, None, None, :]
        bias = None
        for extra in self._extras():
            term = extra.attention_bias(num_tokens, keep)
            if term is not None:
                bias = term if bias is None else bias + term
        if bias is None:
            return allowed
        bias = bias.to(dtype)
        return bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))

    def _extras(self) -> list[nn.Module]:
        return [getattr(self, name) for name in self._extra_names]

    def forward_head(self, out: EncoderOutput, pre_logits: bool = False) -> torch.Tensor:
        """Pooled feature -> logits (B, num_classes); series features are concatenated over channels."""
        feature = out.feature
        if out.channels > 1 or self.channel_independent:
            feature = feature.reshape(-1, out.channels * feature.shape[-1])
        feature = self.head_drop(feature)
        return feature if pre_logits else self.head(feature)

    def classify(self, out: EncoderOutput) -> torch.Tensor:
        """Logits (B, num_classes) of :meth:`forward_head`. With an auxiliary head (``trunk_head``), a training
        forward keeps its logits for :meth:`take_aux_logits` (the loss) and an evaluation returns the logits of the
        two heads' mean probabilities."""
        logits = self.forward_head(out)
        aux_head = self.aux_head
        if aux_head is None:
            return logits
        aux = aux_head(out.token_mean, out.channels)
        self._aux_logits = aux if self.training else None
        return logits if self.training else mean_probability_logits(logits, aux)

    def take_aux_logits(self) -> torch.Tensor | None:
        """The auxiliary head's logits (B, num_classes) of the last training forward, once (then None)."""
        aux, self._aux_logits = self._aux_logits, None
        return aux

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        return self.classify(self.forward_features(x, keep=keep))

    def extra_repr(self) -> str:
        cfg = self.config
        return (f"tokenizer={cfg['tokenizer']}, global_tokens={cfg['global_tokens']}, dim={cfg['dim']}, "
                f"depth={cfg['depth']}, heads={cfg['num_heads']}")

    def plain_config(self) -> dict[str, Any]:
        """A deep copy of the JSON-able config."""
        return copy.deepcopy(self.config)

    # ------------------------------------------------------------ helpers
    def _check_keep(self, keep: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        if keep.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"keep must hold integer patch indices, got dtype {keep.dtype}")
        if keep.ndim == 1:
            keep = keep.unsqueeze(0).expand(tokens.shape[0], -1)
        if keep.ndim != 2 or keep.shape[0] != tokens.shape[0]:
            raise ValueError(f"keep must have shape (K,) or ({tokens.shape[0]}, K), got {tuple(keep.shape)}")
        return keep.long()


def _init_linear(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


def _strip_plugin_prefix(module: Encoder, state_dict, prefix: str, local_metadata) -> None:
    """State dicts name plug-in tensors as timm does (``cls_token``, not ``global_tokens.cls_token``)."""
    for key in list(state_dict.keys()):
        if key.startswith(prefix + _PLUGIN_PREFIX):
            state_dict[prefix + key[len(prefix) + len(_PLUGIN_PREFIX):]] = state_dict.pop(key)


def _add_plugin_prefix(module: Encoder, state_dict, prefix: str, *args) -> None:
    for local in module._plugin_keys:
        if prefix + local in state_dict:
            state_dict[prefix + _PLUGIN_PREFIX + local] = state_dict.pop(prefix + local)
