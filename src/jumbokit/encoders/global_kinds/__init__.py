"""Global-token kinds, registered plug-ins like the tokenizer kinds: the protocol and registry
(:mod:`.registry`) and the core's four kinds, one module each, registered on import in this order: ``none``,
``cls`` (the default), ``registers``, ``jumbo``."""

from .registry import (GlobalTokenKind, GlobalTokens, TokenTable, default_global_tokens, first_tokens,
                       global_token_kind, global_token_kinds, global_token_options, kind_of, masked_mean,
                       option_choices, option_texts, param_group_patterns, prefix_mask, register_global_tokens,
                       unregister_global_tokens)
from .none import NoGlobalTokens, NoneKind
from .cls import ClsKind, ClsToken
from .registers import Registers, RegistersKind
from .jumbo import Jumbo, JumboKind, JumboLoRA, LoRALinear

__all__ = ["GlobalTokenKind", "GlobalTokens", "TokenTable", "default_global_tokens", "first_tokens",
           "global_token_kind", "global_token_kinds", "global_token_options", "kind_of", "masked_mean",
           "option_choices", "option_texts", "param_group_patterns", "prefix_mask", "register_global_tokens",
           "unregister_global_tokens",
           "NoGlobalTokens", "NoneKind", "ClsKind", "ClsToken", "Registers", "RegistersKind", "Jumbo", "JumboKind",
           "JumboLoRA", "LoRALinear"]
