"""The encoder core: tokenizers, global-token plug-ins, blocks, the Encoder, the zoo, timm interop, FLOPs."""

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
from .timm_compat import from_timm
from .tokenizers import ImagePatchTokenizer, SeriesPatchTokenizer, Tokens, sincos_pos_embed_1d, sincos_pos_embed_2d
from .io import atomic_write, load_state_dict_checked
from .zoo import build_model, create_model, list_models, load, load_config, model_config, register_model, save

__all__ = [
    "Attention", "Block", "DropPath", "LayerScale", "Mlp", "DEFAULT_CONFIG", "Encoder", "EncoderOutput",
    "gather_tokens", "random_keep", "GLOBAL_TOKEN_KINDS", "ClsToken", "GlobalTokens", "Jumbo", "NoGlobalTokens",
    "Registers", "make_global_tokens", "masked_mean", "from_timm", "ImagePatchTokenizer",
    "SeriesPatchTokenizer", "Tokens", "sincos_pos_embed_1d", "sincos_pos_embed_2d", "build_model", "create_model", "list_models", "load", "load_config",
    "load_state_dict_checked", "model_config", "atomic_write", "register_model", "save", "flops", "MultiStageEncoder",
]
