"""Multi-stage ViT-Res encoders (seed 002): seed numbers, FLOPs, residual spatial reduction, save/load, errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import jumbokit
from jumbokit.encoders import create_model, list_models
from jumbokit.encoders.flops import count_params, multistage_flops
from jumbokit.encoders.stages import MultiStageEncoder, ResidualSpatialReduction

# the seed's Table 3 / Sec. 3: MACs and parameters at 224 px, 1000 classes
SEED = {
    "vit_res_tiny": (1.794e9, 42.8e6),
    "vit_resnas_tiny": (1.783e9, 41.5e6),
    "vit_resnas_small": (2.846e9, 64.6e6),
    "vit_resnas_medium": (4.513e9, 97.3e6),
}

SMALL = dict(img_size=32, patch_size=4, in_chans=1, num_classes=5, dims=[16, 24, 40], head_dims=[8, 8, 8],
             heads=[[2, 1], [3], [2, 5]], mlp_hidden=[[32, 24], [40], [64, 16]], stem_chans=8)
PLUGINS = {
    "cls": dict(global_tokens="cls"),
    "registers": dict(global_tokens="registers", num_registers=3),
    "jumbo": dict(global_tokens="jumbo", jumbo_multiplier=2, jumbo_mlp_ratio=2.0),
    "jumbo+mean": dict(global_tokens="jumbo", jumbo_multiplier=3, jumbo_pool="jumbo+mean"),
    "none": dict(global_tokens="none"),
}


def counted_flops(model, x) -> int:
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops()


@pytest.mark.parametrize("name", list(SEED))
def test_zoo_matches_the_seed_macs_and_params(name):
    macs, params = SEED[name]
    assert multistage_flops(jumbokit.encoders.model_config(name)) / 2 == pytest.approx(macs, rel=1e-3)
    # the seed's parameter counts include its token-labeling head (Linear on the last-stage patches)
    model = create_model(name, patch_head=True)
    assert count_params(model) == pytest.approx(params, rel=0.01)
    assert count_params(create_model(name)) == count_params(model) - (model.embed_dim + 1) * 1000


def test_flops_equal_the_counter_at_224():
    model = create_model("vit_res_tiny").eval()
    assert multistage_flops(model) == counted_flops(model, torch.randn(1, 3, 224, 224))


@pytest.mark.parametrize("plugin", list(PLUGINS))
@pytest.mark.parametrize("stem", ["conv", "patch"])
def test_flops_equal_the_counter_at_several_sizes(plugin, stem):
    model = MultiStageEncoder(**SMALL, **PLUGINS[plugin], stem=stem).eval()
    for size in (32, 48, 64):
        assert multistage_flops(model, img_size=size) == counted_flops(model, torch.randn(1, 1, size, size)), size


def test_rsr_with_zero_weights_is_the_padded_average_pool():
    rsr = ResidualSpatialReduction(6, 10, (2, 3))
    for tensor in (rsr.conv.weight, rsr.conv.bias, rsr.token_proj.weight, rsr.token_proj.bias, rsr.pos_embed):
        torch.nn.init.zeros_(tensor)
    x = torch.randn(2, 2 + 4 * 6, 6)  # 2 global tokens, a 4x6 grid
    out, grid = rsr(x, (4, 6), num_global=2)
    assert grid == (2, 3)
    pooled = F.avg_pool2d(x[:, 2:].transpose(1, 2).reshape(2, 6, 4, 6), 2).flatten(2).transpose(1, 2)
    expected = F.pad(torch.cat([x[:, :2], pooled], dim=1), (0, 4))
    assert torch.equal(out, expected)


def test_rsr_residual_branch_follows_the_definition():
    torch.manual_seed(0)
    rsr = ResidualSpatialReduction(4, 8, (1, 2))
    x = torch.randn(3, 1 + 2 * 4, 4)
    out, _ = rsr(x, (2, 4), num_global=1)
    y = F.layer_norm(x, (4,), rsr.norm.weight, rsr.norm.bias, eps=1e-6)
    conv = F.conv2d(y[:, 1:].transpose(1, 2).reshape(3, 4, 2, 4), rsr.conv.weight, rsr.conv.bias, stride=2, padding=1)
    patches = conv.flatten(2).transpose(1, 2) + rsr.pos_embed
    skip = F.avg_pool2d(x[:, 1:].transpose(1, 2).reshape(3, 4, 2, 4), 2).flatten(2).transpose(1, 2)
    expected = torch.cat([y[:, :1] @ rsr.token_proj.weight.t() + rsr.token_proj.bias, patches], 1)
    expected = expected + F.pad(torch.cat([x[:, :1], skip], 1), (0, 4))
    assert torch.allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize("plugin", list(PLUGINS))
def test_global_tokens_cross_stages(plugin):
    model = MultiStageEncoder(**SMALL, **PLUGINS[plugin])
    out = model.forward_features(torch.randn(2, 1, 32, 32))
    g = model.num_global_tokens
    assert out.global_tokens.shape == (2, g, 40)
    assert out.patches.shape == (2, 4, 40) and out.grid == (2, 2)
    assert out.feature.shape == (2, model.num_features)
    logits = model(torch.randn(2, 1, 32, 32))
    logits.square().sum().backward()
    assert not [n for n, p in model.named_parameters() if p.grad is None]


def test_jumbo_has_one_ffn_per_stage_and_tokens_once():
    model = MultiStageEncoder(**SMALL, **PLUGINS["jumbo"])
    names = list(model.state_dict())
    assert [n for n in names if n.endswith("jumbo_token")] == ["stages.0.jumbo_token"]
    for s, dim in enumerate(SMALL["dims"]):
        assert model.state_dict()[f"stages.{s}.jumbo_mlp.fc1.weight"].shape == (2 * 2 * dim, 2 * dim)
        assert len([n for n in names if n.startswith(f"stages.{s}.jumbo_norms.") and n.endswith("weight")]) == \
            len(SMALL["heads"][s])
    assert "stages.1.downsample.conv.weight" in names and "stages.0.blocks.1.attn.qkv.weight" in names
    assert "patch_embed.conv1.bn.running_mean" in names and "patch_embed.proj.weight" in names


def test_per_block_heads_and_ffn_sizes():
    model = MultiStageEncoder(**SMALL)
    widths = [(b.attn.num_heads, b.attn.qk_dim, b.mlp.fc1.out_features) for b in model.blocks]
    assert widths == [(2, 16, 32), (1, 8, 24), (3, 24, 40), (2, 16, 64), (5, 40, 16)]


def test_save_load_round_trip(tmp_path):
    model = MultiStageEncoder(**SMALL, **PLUGINS["jumbo"]).eval()
    x = torch.randn(2, 1, 32, 32)
    jumbokit.save(model, tmp_path)
    loaded = jumbokit.load(tmp_path).eval()
    assert isinstance(loaded, MultiStageEncoder)
    assert torch.equal(model(x), loaded(x))
    assert loaded.config == model.config


def test_dynamic_image_size_and_inference_fast_path():
    model = MultiStageEncoder(**SMALL, **PLUGINS["registers"], init_values=0.1).eval()
    x = torch.randn(2, 1, 64, 64)
    out = model.forward_features(x)
    assert out.grid == (4, 4)
    with torch.no_grad():
        assert torch.allclose(model(x), model.forward_head(out), atol=1e-6)


def test_bad_configs_fail_with_one_clear_message():
    with pytest.raises(ValueError, match=r"cannot narrow tokens: dims\[1\]=8 < dims\[0\]=16"):
        MultiStageEncoder(**{**SMALL, "dims": [16, 8, 40]})
    with pytest.raises(ValueError, match="cannot halve evenly"):
        MultiStageEncoder(**{**SMALL, "img_size": 24})
    with pytest.raises(ValueError, match="not divisible by patch_size"):
        MultiStageEncoder(**{**SMALL, "img_size": 30})
    with pytest.raises(ValueError, match="did you mean 'head_dims'"):
        MultiStageEncoder(**SMALL, head_dim=[8, 8, 8])
    with pytest.raises(ValueError, match="patch_size must be even"):
        MultiStageEncoder(**{**SMALL, "patch_size": 3, "img_size": 36})
    with pytest.raises(ValueError, match="heads lists 2 blocks but mlp_hidden lists 1"):
        MultiStageEncoder(**{**SMALL, "mlp_hidden": [[32], [40], [64, 16]]})
    with pytest.raises(ValueError, match="unknown option"):
        create_model("vit_res_tiny", depth=3)
    model = MultiStageEncoder(**SMALL)
    with pytest.raises(ValueError, match="keep / pad_mask are not supported"):
        model(torch.randn(1, 1, 32, 32), keep=torch.arange(4))
    with pytest.raises(ValueError, match="odd grid"):
        model(torch.randn(1, 1, 40, 40))


def test_patch_head_for_token_labeling():
    model = MultiStageEncoder(**SMALL, patch_head=True)
    out = model.forward_features(torch.randn(2, 1, 32, 32))
    assert model.patch_logits(out).shape == (2, 4, 5)
    model.reset_classifier(7)
    assert model.patch_logits(out).shape == (2, 4, 7)
    with pytest.raises(ValueError, match="patch_head=True"):
        MultiStageEncoder(**SMALL).patch_logits(out)


def test_zoo_variants_exist():
    for name in SEED:
        assert {f"{name}_jumbo", f"{name}_reg4", name} <= set(list_models("vit_res*"))
    assert {"vit_res_pico", "vit_res_nano"} <= set(list_models("vit_res_*"))


def test_small_image_patch_sizes_of_the_recipes():
    from jumbokit.encoders.zoo import small_image_patch_size

    assert small_image_patch_size("vit_pico_cls", 32) == 8  # a 4x4 grid
    assert small_image_patch_size("vit_res_pico", 32) == 4  # 8x8 -> 4x4 -> 2x2
    assert small_image_patch_size("vit_res_pico", 64) == 8
    assert small_image_patch_size("vit_res_tiny", 224) is None  # large images keep the model's patch
    MultiStageEncoder(**{**SMALL, "img_size": 48, "patch_size": small_image_patch_size("vit_res_pico", 48)})
