"""Analytic FLOPs vs PyTorch's FLOP counter, and Proposition 1."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from jumbokit.encoders import Encoder
from jumbokit.encoders.flops import encoder_flops, matching_registers, prop1_layer_macs

CONFIGS = {
    "cls": dict(global_tokens="cls"),
    "registers": dict(global_tokens="registers", num_registers=5),
    "jumbo": dict(global_tokens="jumbo", jumbo_multiplier=3, jumbo_mlp_ratio=2.0),
    "none": dict(global_tokens="none"),
}


def counted_flops(model: Encoder, x: torch.Tensor) -> int:
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops()


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_image_flops_match_counter(kind):
    model = Encoder(img_size=32, patch_size=8, in_chans=3, dim=48, depth=3, num_heads=4, num_classes=0,
                    **CONFIGS[kind]).eval()
    x = torch.randn(1, 3, 32, 32)
    assert encoder_flops(model) == counted_flops(model, x)


@pytest.mark.parametrize("kind, conv_stem", [("cls", 0), ("jumbo", 0), ("jumbo", 8)])
def test_series_flops_match_counter(kind, conv_stem):
    model = Encoder(tokenizer="series", seq_len=30, patch_len=6, stride=3, in_chans=2, dim=32, depth=2,
                    num_heads=4, mlp_hidden=64, num_classes=0, conv_stem=conv_stem, **CONFIGS[kind]).eval()
    assert encoder_flops(model) == counted_flops(model, torch.randn(1, 2, 30))


@pytest.mark.parametrize("front", [
    dict(trunk="inception"), dict(trunk="inception", trunk_depth=4, trunk_diff=True, token_stats=True),
    dict(trunk="inception", trunk_depth=6, trunk_width=4), dict(trunk="resnet", trunk_width=8, trunk_diff=True),
    dict(trunk="resnet", trunk_depth=1, token_stats=True), dict(token_stats=True, rel_pos_bias=True),
    dict(trunk="inception", trunk_mix=True, trunk_diff=True), dict(trunk="resnet", trunk_mix=True, trunk_width=8),
    dict(trunk="resnet", trunk_width=8, level_scale=True), dict(level_scale=True, token_stats=True),
    dict(length_embed=True), dict(trunk="resnet", trunk_width=8, length_embed=True),
])
def test_series_trunk_flops_match_counter(front):
    model = Encoder(tokenizer="series", seq_len=30, patch_len=6, stride=3, in_chans=2, dim=32, depth=2,
                    num_heads=4, mlp_hidden=64, num_classes=0, **CONFIGS["jumbo"], **front).eval()
    assert encoder_flops(model) == counted_flops(model, torch.randn(1, 2, 30))


@pytest.mark.parametrize("kind", ["cls", "registers", "jumbo"])
def test_length_embed_flops_match_counter_on_padded_series(kind):
    model = Encoder(tokenizer="series", seq_len=30, patch_len=6, stride=3, in_chans=2, dim=32, depth=2,
                    num_heads=4, mlp_hidden=64, num_classes=0, length_embed=True, **CONFIGS[kind]).eval()
    x = torch.randn(1, 2, 30)
    x[..., 20:] = float("nan")
    assert encoder_flops(model) == counted_flops(model, x)


@pytest.mark.parametrize("dim,patches,j", [(128, 8, 4), (128, 42, 4), (192, 196, 6), (64, 10, 2)])
def test_proposition_1_equalises_layer_flops(dim, patches, j):
    r = matching_registers(dim, patches, j)
    assert r > 0
    reg = 8 * (patches + r) * dim**2 + 2 * (patches + r) ** 2 * dim
    assert reg == pytest.approx(prop1_layer_macs(dim, patches, jumbo_multiplier=j), rel=1e-9)
    # rounding to whole registers stays within one register's cost
    assert abs(prop1_layer_macs(dim, patches, registers=round(r)) - prop1_layer_macs(dim, patches, jumbo_multiplier=j)) \
        <= prop1_layer_macs(dim, patches, registers=round(r) + 1) - prop1_layer_macs(dim, patches, registers=round(r))


def test_prop1_is_half_of_counted_layer_flops():
    """Prop. 1 counts multiply-adds of one layer (FFN hidden 2D, no CLS): 2x that = counted FLOPs."""
    dim, patches, j = 32, 10, 2
    jumbo = Encoder(tokenizer="series", seq_len=30, patch_len=6, stride=3, in_chans=1, dim=dim, depth=1, num_heads=4,
                    mlp_hidden=2 * dim, global_tokens="jumbo", jumbo_multiplier=j, jumbo_mlp_ratio=2.0,
                    pos_embed="none").eval()
    assert jumbo.num_patches == patches
    embed = 2 * patches * dim * 6
    assert counted_flops(jumbo, torch.randn(1, 1, 30)) - embed == 2 * prop1_layer_macs(dim, patches, jumbo_multiplier=j)


def test_series_cnn_flops_match_counter():
    """The trunk alone (no transformer layer, the mean token into the head)."""
    from jumbokit import create_model

    model = create_model("series_cnn", num_classes=0, in_chans=2, seq_len=30, patches=6, trunk_width=8,
                         trunk_diff=True).eval()
    assert encoder_flops(model) == counted_flops(model, torch.randn(1, 2, 30))
