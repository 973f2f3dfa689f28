"""The global-token kind protocol and its registry.

A *kind* of global tokens (``none``, ``cls``, ``registers``, ``jumbo``, or one registered from outside the core) is a
:class:`GlobalTokenKind`: it owns its options (flat in the encoder config, like a tokenizer kind's), builds its
plug-in module (a :class:`GlobalTokens`), and answers every question the rest of the toolkit used to answer by
switching on the kind's name: how many tokens it adds, how wide its pooled feature is, what its own FFN costs, how it
maps to timm's ``VisionTransformer``, how a progressive-join collapse keeps it, which search genes name it and how
the weight-sharing supernet holds, joins, pools and extracts it.

    register_global_tokens("sink", SinkKind())     # global_tokens="sink" builds, counts, saves, exports, searches
    global_token_kind("jumbo").num_tokens(config)
    global_token_kinds()                            # name -> kind, in registration order

The core's four kinds live one per module beside this one and register themselves on import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

__all__ = ["GlobalTokens", "GlobalTokenKind", "TokenTable", "register_global_tokens", "unregister_global_tokens",
           "global_token_kind", "global_token_kinds", "default_global_tokens", "kind_of", "global_token_options",
           "option_choices", "option_texts", "param_group_patterns", "masked_mean", "first_tokens", "prefix_mask"]


def masked_mean(tokens: torch.Tensor, pad_mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over the token axis of (B, N, D), ignoring tokens where ``pad_mask`` (B, N) is True."""
    if pad_mask is None:
        return tokens.mean(dim=1)
    weights = (~pad_mask).to(tokens.dtype).unsqueeze(-1)
    return (tokens * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)


class GlobalTokens(nn.Module):
    """The plug-in module a kind builds: the encoder's interface to its global tokens.

    num_tokens: G, the tokens that enter attention ahead of the patch tokens.
    feature_dim: width of ``pool``'s output.
    has_own_ffn: the global tokens skip the patch FFN and go through :meth:`ffn` (the blocks ask).
    """

    kind = "base"
    num_tokens = 0
    has_own_ffn = False

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.feature_dim = dim

    def tokens(self) -> torch.Tensor | None:
        """The learned global tokens, (1, G, D), or None."""
        return None

    def join(self, patches: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
        """(B, N, D) patch tokens -> (B, G + N, D); ``offset`` (B, G, D), if given, is added to the tokens."""
        tokens = self.tokens()
        if tokens is None:
            if offset is not None:
                raise ValueError(f"the {self.kind!r} plug-in has no global token to add an offset to")
            return patches
        tokens = tokens.expand(patches.shape[0], -1, -1)
        if offset is not None:
            if offset.shape != tokens.shape:
                raise ValueError(f"expected a global-token offset of shape {tuple(tokens.shape)}, "
                                 f"got {tuple(offset.shape)}")
            tokens = tokens + offset
        return torch.cat([tokens, patches], dim=1)

    def ffn(self, g: torch.Tensor, layer_idx: int, drop_path: nn.Module) -> torch.Tensor:
        raise NotImplementedError(f"the {self.kind!r} plug-in uses the patch FFN")

    def pool(self, global_tokens: torch.Tensor, patches: torch.Tensor, pad_mask: torch.Tensor | None) -> torch.Tensor:
        """(B, G, D), (B, N, D) -> (B, feature_dim)."""
        raise NotImplementedError

    def no_weight_decay(self) -> set[str]:
        return {name for name, _ in self.named_parameters(recurse=False)}

    def truncate(self, depth: int) -> None:
        """Keep the per-layer parts of the first ``depth`` layers (an encoder pruned to ``depth`` blocks)."""


@dataclass(frozen=True)
class TokenTable:
    """A learned token table of the supernet, (1, count, width), named ``name`` on the supernet itself.

    Kinds that ask for the same name share the table (the largest count wins); ``init(count, width)`` makes its
    initial tensor."""

    name: str
    count: int
    init: Callable[[int, int], torch.Tensor]


def prefix_mask(sizes: torch.Tensor, width: int) -> torch.Tensor:
    """(B,) active sizes -> (B, 1, width) float mask with the first ``size`` channels set (the supernet's channel
    masks: a sub-network uses the first channels of every elastic dimension)."""
    return (torch.arange(width, device=sizes.device)[None, :] < sizes[:, None]).float().unsqueeze(1)


def first_tokens(table: torch.Tensor, count: int, width: int | None = None) -> torch.Tensor:
    """The first ``count`` tokens (and first ``width`` channels) of a supernet token table (1, N, D)."""
    return table[:, :count] if width is None else table[:, :count, :width]


class GlobalTokenKind:
    """One kind of global tokens. Subclass, override what differs from these defaults (no token: the feature is the
    mean patch token, the patch FFN serves every token, no timm mapping, no search gene), and register an instance
    with :func:`register_global_tokens`.

    Configs: a kind reads its options from the encoder's flat config (full configs hold every registered kind's
    options at their defaults, as saved configs always did); :meth:`option` falls back on the kind's default.
    """

    name: str = ""  # set by register_global_tokens
    options: dict[str, Any] = {}  # the kind's options and their defaults (flat in the encoder config)
    choices: dict[str, tuple[Any, ...]] = {}  # the allowed values of enumerated options
    choice_texts: dict[str, dict[Any, str]] = {}  # what each value of an enumerated option means, in words
    has_own_ffn: bool = False  # its tokens skip the patch FFN (the kind's module has its own, ``ffn``)
    # parameter names of its module for timm's layer-wise grouping (``group_matcher``): the learned tokens join the
    # stem; a regex of per-layer parameters captures the layer index; a regex of parameters shared by all layers
    # joins the last group
    token_params: tuple[str, ...] = ()
    layer_params: str | None = None
    shared_params: str | None = None
    timm_note: str = ""  # why timm's VisionTransformer cannot hold this kind (shown when ``timm_args`` is None)
    gene_help: str = ""  # how a search gene names this kind ("'reg<R>'"); empty: no gene does

    def option(self, cfg: dict[str, Any], key: str) -> Any:
        return cfg.get(key, self.options[key])

    # ------------------------------------------------------------------ build, count, pool
    def build(self, cfg: dict[str, Any], dim: int, depth: int, learn_tokens: bool = True) -> GlobalTokens:
        """The plug-in module of an encoder (or stage) of width ``dim`` and ``depth`` blocks.

        learn_tokens=False: no learned token parameters (a later stage of a multi-stage encoder, whose global tokens
        arrive from the stage before)."""
        raise NotImplementedError

    def num_tokens(self, cfg: dict[str, Any]) -> int:
        """G, the tokens it puts ahead of the patch tokens."""
        return 0

    def feature_dim(self, cfg: dict[str, Any], dim: int) -> int:
        """Width of its pooled feature (``global_pool="token"``) at token width ``dim``."""
        return dim

    # ------------------------------------------------------------------ FLOPs
    def ffn_flops(self, cfg: dict[str, Any], dim: int) -> int:
        """Forward FLOPs of its own FFN in one layer for one sequence (0: its tokens use the patch FFN)."""
        return 0

    # ------------------------------------------------------------------ timm
    def timm_args(self, cfg: dict[str, Any]) -> dict[str, Any] | None:
        """timm ``VisionTransformer`` arguments of its prefix tokens (``class_token``, ``reg_tokens``), or None when
        timm cannot hold the kind."""
        return None

    def timm_prefix(self, cfg: dict[str, Any]) -> list[tuple[str, str, int]]:
        """Its token parameters in timm's prefix order: (name in the encoder, name in timm, token count)."""
        return []

    def from_timm(self, class_token: bool, reg_tokens: int, global_pool: str) -> dict[str, Any] | None:
        """The options of this kind for a timm model with these prefix tokens, or None when it is not this kind
        (a ValueError when it is, but cannot be held)."""
        return None

    # ------------------------------------------------------------------ progressive join
    def collapsed_options(self, cfg: dict[str, Any]) -> dict[str, Any]:
        """Options a collapsed (L/n-layer) config of a progressive-join model sets for this kind: what must stay
        when the blocks' LayerScale is folded away."""
        return {}

    # ------------------------------------------------------------------ architecture search
    def parse_gene(self, gene: str) -> dict[str, Any] | None:
        """The options of a search-space gene naming this kind (e.g. "reg4" -> ``num_registers=4``), None when the
        gene names another kind; ValueError for a gene of this kind with a bad value."""
        return None

    def supernet_tokens(self, genes: list[dict[str, Any]]) -> list[TokenTable]:
        """The learned token tables a supernet holds for ``genes`` (the options of every gene of this kind)."""
        return []

    def supernet_stage(self, net: nn.Module, stage: nn.Module, dim: int, depth: int,
                       genes: list[dict[str, Any]]) -> None:
        """Add this kind's per-stage modules (at the stage's largest width) to a supernet stage."""

    def supernet_heads(self, net: nn.Module, genes: list[dict[str, Any]]) -> None:
        """Add heads of its own to the supernet (the shared ``net.head`` reads a feature of the last width)."""

    def supernet_join(self, net: nn.Module, opts: dict[str, Any]) -> list[torch.Tensor]:
        """The (1, n, D_max) token slices joined ahead of the patches, in order."""
        return []

    def supernet_ffn(self, net: nn.Module, stage: nn.Module, index: int, g: torch.Tensor, mask: torch.Tensor,
                     count: torch.Tensor, keep: torch.Tensor, opts: dict[str, Any]) -> torch.Tensor:
        """(B, G, D_max) global tokens after attention -> after this kind's own FFN (``has_own_ffn`` kinds)."""
        raise NotImplementedError(f"the {self.name!r} kind uses the patch FFN")

    def supernet_feature(self, h: torch.Tensor, num_global: int, opts: dict[str, Any]) -> torch.Tensor:
        """The pooled (B, D_max) feature of the normed last-stage tokens (B, G + N, D_max) for ``net.head``."""
        return h[:, num_global:].mean(dim=1)

    def supernet_logits(self, net: nn.Module, h: torch.Tensor, num_global: int, opts: dict[str, Any]) -> torch.Tensor:
        """Logits of the normed last-stage tokens."""
        return net.head(self.supernet_feature(h, num_global, opts))

    def supernet_extract(self, net: nn.Module, model: nn.Module, opts: dict[str, Any], dims: list[int],
                         kept: list[list[int]]) -> None:
        """Copy this kind's tensors from the supernet into ``model``, the extracted MultiStageEncoder: its tokens,
        per-stage parts (``kept[s]``: the supernet blocks kept in stage s, in order) and head."""
        d = dims[-1]
        model.head.weight.copy_(net.head.weight[:, :d])
        model.head.bias.copy_(net.head.bias)


_KINDS: dict[str, GlobalTokenKind] = {}
_DEFAULT: list[str] = []


def register_global_tokens(name: str, kind: GlobalTokenKind, default: bool = False) -> None:
    """Make ``global_tokens=name`` buildable by every encoder (and countable, exportable where it maps, searchable
    where it has genes). ``default``: the kind of configs that name none (the core's CLS token)."""
    if not isinstance(kind, GlobalTokenKind):
        raise TypeError(f"expected a GlobalTokenKind, got {type(kind).__name__}")
    taken = {key: other for other, k in _KINDS.items() if other != name for key in k.options}
    clash = sorted(key for key in kind.options if key in taken)
    if clash:
        raise ValueError(f"global-token kind {name!r}: option(s) {', '.join(clash)} belong to kind "
                         f"{taken[clash[0]]!r}; give the kind options of its own")
    kind.name = name
    _KINDS[name] = kind
    if default:
        _DEFAULT[:] = [name]


def unregister_global_tokens(name: str) -> None:
    """Remove a registered kind (a plug-in's tests register and remove theirs)."""
    if name in _DEFAULT:
        raise ValueError(f"{name!r} is the default global-token kind and stays registered")
    _KINDS.pop(name, None)


def global_token_kinds() -> dict[str, GlobalTokenKind]:
    """The registered kinds by name, in registration order."""
    return dict(_KINDS)


def global_token_kind(name: Any) -> GlobalTokenKind:
    """The registered kind ``name`` (ValueError naming the registered ones otherwise)."""
    if name not in _KINDS:
        raise ValueError(f"unknown global_tokens {name!r}; expected one of {tuple(_KINDS)}")
    return _KINDS[name]


def default_global_tokens() -> str:
    """The kind of a config that names none."""
    return _DEFAULT[0]


def kind_of(config: dict[str, Any]) -> GlobalTokenKind:
    """The kind a config names (``global_tokens``; the default kind when it names none)."""
    return global_token_kind(config.get("global_tokens", default_global_tokens()))


def global_token_options() -> dict[str, Any]:
    """Every registered kind's options with their defaults (every full encoder config holds them)."""
    return {key: value for kind in _KINDS.values() for key, value in kind.options.items()}


def param_group_patterns(prefix: str) -> tuple[str | None, list[str], list[str]]:
    """Regexes of the kinds' parameters for timm's ``group_matcher``, each after ``prefix`` (a regex: where the
    plug-in sits in the model): the learned tokens (one alternation, or None), the per-layer parameters (capturing the
    layer index) and the parameters shared by all layers."""
    names = list(dict.fromkeys(name for kind in _KINDS.values() for name in kind.token_params))
    tokens = f"^{prefix}(?:{'|'.join(names)})" if names else None
    layers = [f"^{prefix}{kind.layer_params}" for kind in _KINDS.values() if kind.layer_params]
    shared = [f"^{prefix}{kind.shared_params}" for kind in _KINDS.values() if kind.shared_params]
    return tokens, layers, shared


def option_choices(key: str) -> tuple[Any, ...]:
    """The allowed values of an enumerated kind option (e.g. ``jumbo_pool``)."""
    for kind in _KINDS.values():
        if key in kind.choices:
            return tuple(kind.choices[key])
    raise KeyError(f"no registered global-token kind enumerates option {key!r}")


def option_texts(key: str) -> dict[Any, str]:
    """What each value of an enumerated kind option means, in words (values without words are left out)."""
    for kind in _KINDS.values():
        if key in kind.choice_texts:
            return dict(kind.choice_texts[key])
    raise KeyError(f"no registered global-token kind describes option {key!r}")
