"""Tokenizer kinds and the plug-ins they bring to an :class:`~jumbokit.encoders.Encoder`.

An encoder's config names its tokenizer (``tokenizer="image"``, ``"series"``, ...); the kind owns its options,
which sit flat in the encoder's config beside the shared ones (:data:`~jumbokit.encoders.DEFAULT_CONFIG`), and
builds the tokenizer from them. A kind may also bring plug-ins the encoder runs without knowing what they are:

- :class:`EncoderExtra` modules (built before the blocks): each may add an offset to the global tokens
  (``global_offset``) and an additive bias to every layer's attention logits (``attention_bias``);
- an auxiliary head (built after the main head): a second classifier on each sequence's mean tokenizer token,
  whose logits go to the loss in training (``Encoder.take_aux_logits``) and whose probabilities are averaged
  with the main head's at evaluation (:func:`mean_probability_logits`).

The image kind is the core's own; the series kind is registered by ``jumbokit.timeseries.models``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

__all__ = ["EncoderExtra", "TokenizerKind", "register_tokenizer", "tokenizer_kind", "tokenizer_kinds",
           "mean_probability_logits"]


class EncoderExtra(nn.Module):
    """A plug-in module the encoder calls around its blocks; override the hooks it answers (None = nothing)."""

    def global_offset(self, x: torch.Tensor) -> torch.Tensor | None:
        """The encoder's input x -> (B', G, D) added to the global tokens before the first block, or None."""
        return None

    def attention_bias(self, num_tokens: int, keep: torch.Tensor | None) -> torch.Tensor | None:
        """(B' or 1, heads, G + K, G + K) added to every layer's attention logits, or None. ``num_tokens``: patch
        tokens of the input (before ``keep``); ``keep``: (B', K) kept patch indices or None."""
        return None


@dataclass(frozen=True)
class TokenizerKind:
    """A registered tokenizer.

    options: the kind's options and their defaults (stored flat in the encoder config).
    build: full encoder config -> the tokenizer module; it has ``num_patches``, ``init_pos_embed(kind)`` and
        ``positions(table, grid)``, and returns :class:`~jumbokit.encoders.tokenizers.Tokens`.
    extras: (full config, number of global tokens) -> named :class:`EncoderExtra` modules (attribute names).
    aux_head_name: the attribute of the auxiliary head (None: the kind has none).
    aux_head: (full config, number of classes) -> the auxiliary head or None (not asked for, or no classes); it
        maps each sequence's mean token (B', D) and the channel count to logits (B, classes).
    flops: (full config, patches, sequences per sample) -> forward FLOPs of the tokenizer and its plug-ins per
        sample, as ``FlopCounterMode`` counts them.
    num_patches: full config -> patches per sequence at the configured input size.
    channel_independent: each input channel is a sequence of its own (B' = B * C), its features concatenated
        over channels before the head.
    """

    options: dict[str, Any]
    build: Callable[[dict[str, Any]], nn.Module]
    flops: Callable[[dict[str, Any], int, int], int]
    num_patches: Callable[[dict[str, Any]], int]
    channel_independent: bool = False
    extras: Callable[[dict[str, Any], int], dict[str, nn.Module]] = field(default=lambda cfg, num_global: {})
    aux_head_name: str | None = None
    aux_head: Callable[[dict[str, Any], int], nn.Module | None] = field(default=lambda cfg, num_classes: None)


_KINDS: dict[str, TokenizerKind] = {}


def register_tokenizer(name: str, kind: TokenizerKind) -> None:
    """Make ``tokenizer=name`` buildable by every encoder."""
    _KINDS[name] = kind


def tokenizer_kinds() -> dict[str, TokenizerKind]:
    """The registered kinds by name."""
    return dict(_KINDS)


def tokenizer_kind(name: Any) -> TokenizerKind:
    """The registered kind ``name`` (ValueError naming the registered ones otherwise)."""
    if name not in _KINDS:
        raise ValueError(f"unknown tokenizer {name!r}; expected one of {', '.join(map(repr, _KINDS))}")
    return _KINDS[name]


def mean_probability_logits(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Logits (B, K) whose softmax is the mean of the softmax of ``first`` and of ``second`` (both (B, K))."""
    pair = torch.stack([first.log_softmax(-1), second.log_softmax(-1)])
    return torch.logsumexp(pair, dim=0) - math.log(2.0)
