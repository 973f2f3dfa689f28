"""Global-token plug-ins behind one interface: the modules of the registered kinds (:mod:`.global_kinds`).

A plug-in decides which tokens join the patch tokens before the blocks (``join``), whether those tokens
have their own FFN (``has_own_ffn`` / ``ffn``, Jumbo only), and how the encoder's output is pooled into
one feature per sample (``pool``). Parameter names follow timm (``cls_token``, ``reg_token``) and the
Jumbo paper's reference code (``jumbo_token``, ``jumbo_mlp``). Each kind lives in its own module of
:mod:`jumbokit.encoders.global_kinds`, with everything else the toolkit asks of it; this module keeps the names
the plug-ins always had.
"""

from __future__ import annotations

from .global_kinds import (ClsToken, GlobalTokens, Jumbo, JumboLoRA, LoRALinear, NoGlobalTokens, Registers,
                           global_token_kind, global_token_kinds, masked_mean)

__all__ = [
    "GlobalTokens",
    "NoGlobalTokens",
    "ClsToken",
    "Registers",
    "Jumbo",
    "JumboLoRA",
    "LoRALinear",
    "make_global_tokens",
    "masked_mean",
    "GLOBAL_TOKEN_KINDS",
]

GLOBAL_TOKEN_KINDS = tuple(global_token_kinds())  # the core's kinds; global_token_kinds() also lists registered ones


def make_global_tokens(kind: str, dim: int, depth: int, learn_tokens: bool = True, **options) -> GlobalTokens:
    """Build the plug-in of kind ``kind`` from its options (``num_registers``, ``jumbo_multiplier``, ...), e.g.
    ``make_global_tokens("registers", 192, 12, num_registers=4)``.

    Keywords besides the kind's options: ``drop`` (the Jumbo FFN's dropout), ``init_values`` (LayerScale of the Jumbo
    FFN); learn_tokens=False: no learned token parameters (the tokens come from an earlier stage).
    """
    cfg = dict(options)
    cfg["drop_rate"] = cfg.pop("drop", 0.0)
    return global_token_kind(kind).build(cfg, dim, depth, learn_tokens=learn_tokens)
