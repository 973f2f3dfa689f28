"""The encoder core: the image tokenizer and tokenizer kinds, global-token kinds (registered plug-ins), blocks, the
Encoder, the zoo, timm interop, FLOPs. Series models plug in from ``jumbokit.timeseries.models``."""

from . import flops
from .attention import Attention
from .blocks import Block, DropPath, LayerScale, Mlp
from .encoder import DEFAULT_CONFIG, Encoder, EncoderOutput, gather_tokens, random_keep
from .stages import MultiStageEncoder
from .global_tokens import (
    GLOBAL_TOKEN_KINDS,
    ClsToken,
    GlobalTokens,
    Jumbo,
    NoGlobalTokens,
    Registers,
    make_global_tokens,
    masked_mean,
)
from .global_kinds import (GlobalTokenKind, TokenTable, global_token_kind, global_token_kinds, register_global_tokens,
                           unregister_global_tokens)
from .timm_compat import from_timm, to_timm
from .extras import EncoderExtra, TokenizerKind, register_tokenizer
from .tokenizers import ImagePatchTokenizer, Tokens, sincos_pos_embed_1d, sincos_pos_embed_2d
from .io import atomic_write, load_state_dict_checked
from .zoo import (build_model, create_model, list_models, load, load_config, model_config, register_architecture,
                  register_model, save)

__all__ = [
    "Attention", "Block", "DropPath", "LayerScale", "Mlp", "DEFAULT_CONFIG", "Encoder", "EncoderOutput",
    "gather_tokens", "random_keep", "GLOBAL_TOKEN_KINDS", "ClsToken", "GlobalTokens", "Jumbo", "NoGlobalTokens",
    "Registers", "make_global_tokens", "masked_mean", "from_timm", "to_timm", "ImagePatchTokenizer",
    "Tokens", "sincos_pos_embed_1d", "sincos_pos_embed_2d", "build_model", "create_model", "list_models", "load",
    "load_config", "load_state_dict_checked", "model_config", "atomic_write", "register_model", "register_architecture",
    "save", "flops", "MultiStageEncoder", "EncoderExtra", "TokenizerKind", "register_tokenizer",
    "GlobalTokenKind", "TokenTable", "global_token_kind", "global_token_kinds", "register_global_tokens",
    "unregister_global_tokens",
]
