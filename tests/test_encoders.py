"""The encoder core: every zoo model, tokenizers, global tokens, keep/drop, masks, save/load, bad input."""

from __future__ import annotations

import json

import pytest
import torch

import jumbokit
from jumbokit.encoders import Encoder, create_model, list_models, random_keep
from jumbokit.encoders.flops import count_params
from jumbokit.timeseries.models import SeriesPatchTokenizer

torch.manual_seed(0)

TINY_IMAGE = dict(img_size=16, patch_size=4, depth=2, num_classes=3)


def tiny(name: str, **overrides) -> Encoder:
    """A zoo model shrunk for CPU tests (same plug-in and width family)."""
    if name.startswith(("patchtst", "series_")):  # series models need the series length
        return create_model(name, **{"num_classes": 3, "seq_len": 64, **overrides})
    cfg = jumbokit.encoders.model_config(name)
    if cfg.get("encoder") == "multistage":  # keep stages and per-block head counts, shrink widths
        shrunk = dict(img_size=16, patch_size=4, num_classes=3, dims=[16, 32, 64], head_dims=[4, 4, 4],
                      mlp_hidden=[[32] * len(h) for h in cfg["heads"]], stem_chans=8)
        return create_model(name, **{**shrunk, **overrides})
    dims = dict(dim=cfg["num_heads"] * 8)  # keep the head count, shrink the width
    return create_model(name, **{**TINY_IMAGE, **dims, **overrides})


def sample_input(model: Encoder, batch: int = 2) -> torch.Tensor:
    cfg = model.config
    if cfg["tokenizer"] == "series":
        return torch.randn(batch, cfg["in_chans"], cfg["seq_len"])
    size = cfg["img_size"] if isinstance(cfg["img_size"], int) else cfg["img_size"][0]
    return torch.randn(batch, cfg["in_chans"], size, size)


@pytest.mark.parametrize("name", list_models())
def test_every_zoo_model_forward_backward(name):
    model = tiny(name)
    x = sample_input(model)
    logits = model(x)
    assert logits.shape == (2, 3)
    assert torch.isfinite(logits).all()
    logits.square().sum().backward()
    no_grad = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not no_grad, f"parameters without gradient: {no_grad}"


def test_list_models_pattern_and_unknown_name():
    plain = {n for n in list_models("vit_*_jumbo") if not n.startswith("vit_res")}
    assert plain == {f"vit_{s}_jumbo" for s in ("pico", "nano", "tiny", "small", "base")}
    with pytest.raises(ValueError, match="closest: vit_tiny_jumbo"):
        create_model("vit_tiny_jumb")
    with pytest.raises(ValueError, match="unknown option"):
        create_model("vit_tiny_cls", not_an_option=1)


def test_pretrained_names_the_timm_route():
    """jumbokit has no hub weights: pretrained=True says how to load timm's instead; pretrained=False is a no-op."""
    with pytest.raises(ValueError, match=r"no hub weights for 'vit_tiny_cls'.*from_timm\(timm.create_model\(name, "
                                         r"pretrained=True\)\)"):
        create_model("vit_tiny_cls", pretrained=True)
    assert isinstance(create_model("vit_pico_cls", pretrained=False, img_size=16, patch_size=8), Encoder)


def test_zoo_sizes_follow_the_papers():
    for size, dim, heads in [("pico", 96, 3), ("nano", 128, 4), ("tiny", 192, 3), ("small", 384, 6), ("base", 768, 12)]:
        cfg = jumbokit.encoders.model_config(f"vit_{size}_jumbo")
        assert (cfg["dim"], cfg["num_heads"], cfg["depth"], cfg["patch_size"]) == (dim, heads, 12, 16)
        assert cfg["jumbo_multiplier"] == (3 if size == "base" else 6)
        assert jumbokit.encoders.model_config(f"vit_{size}_reg16")["num_registers"] == 16


def test_feature_widths_per_plugin():
    x = torch.randn(2, 3, 16, 16)
    for name, width in [("vit_pico_cls", 24), ("vit_pico_reg16", 24), ("vit_pico_gap", 24), ("vit_pico_jumbo", 6 * 24)]:
        out = tiny(name).forward_features(x)
        assert out.feature.shape == (2, width)
        assert out.patches.shape == (2, 16, 24)
    out = tiny("vit_pico_jumbo", jumbo_pool="jumbo+mean").forward_features(x)
    assert out.feature.shape == (2, 7 * 24)
    out = tiny("vit_pico_jumbo", jumbo_pool="segments").forward_features(x)
    assert out.feature.shape == (2, 24)


def test_registers_discarded_at_pooling():
    model = tiny("vit_pico_reg16").eval()
    out = model.forward_features(torch.randn(2, 3, 16, 16))
    assert out.global_tokens.shape == (2, 17, 24)
    assert torch.equal(out.feature, out.global_tokens[:, 0])


def test_dynamic_image_size_and_non_square():
    model = tiny("vit_pico_jumbo").eval()
    out = model.forward_features(torch.randn(1, 3, 24, 32))
    assert out.patches.shape[1] == 6 * 8 and out.grid == (6, 8)
    fixed = tiny("vit_pico_cls", dynamic_img_size=False)
    with pytest.raises(ValueError, match="expected images of size"):
        fixed(torch.randn(1, 3, 24, 24))
    rect = tiny("vit_pico_cls", img_size=(8, 16))
    assert rect.num_patches == 8 and rect(torch.randn(1, 3, 8, 16)).shape == (1, 3)


@pytest.mark.parametrize("name", ["vit_pico_cls", "vit_pico_reg16", "vit_pico_jumbo", "vit_pico_gap"])
def test_keep_all_equals_no_keep(name):
    model = tiny(name).eval()
    x = torch.randn(3, 3, 16, 16)
    full = model.forward_features(x)
    kept = model.forward_features(x, keep=torch.arange(16))
    assert torch.equal(full.feature, kept.feature)
    assert torch.equal(full.patches, kept.patches)


def test_keep_subset_selects_patches():
    model = tiny("vit_pico_jumbo").eval()
    keep, restore = random_keep(2, 16, 4, generator=torch.Generator().manual_seed(0))
    out = model.forward_features(torch.randn(2, 3, 16, 16), keep=keep)
    assert out.patches.shape == (2, 4, 24) and out.global_tokens.shape == (2, 6, 24)
    assert torch.equal(out.keep, keep)
    assert restore.shape == (2, 16)
    with pytest.raises(ValueError, match="integer patch indices"):
        model.forward_features(torch.randn(2, 3, 16, 16), keep=torch.zeros(2, 4))


def test_jumbo_shared_ffn_exists_once_and_share_false():
    shared = tiny("vit_pico_jumbo", depth=4)
    names = [n for n, _ in shared.named_parameters() if "jumbo_mlp" in n]
    assert names == ["global_tokens.jumbo_mlp.fc1.weight", "global_tokens.jumbo_mlp.fc1.bias",
                     "global_tokens.jumbo_mlp.fc2.weight", "global_tokens.jumbo_mlp.fc2.bias"]
    assert "jumbo_mlp.fc1.weight" in shared.state_dict()
    width = 6 * 24
    assert shared.state_dict()["jumbo_mlp.fc1.weight"].shape == (4 * width, width)
    unshared = tiny("vit_pico_jumbo", depth=4, jumbo_share=False)
    extra = count_params(unshared) - count_params(shared)
    assert extra == 3 * sum(p.numel() for p in shared.global_tokens.jumbo_mlp.parameters())


def test_jumbo_lora_starts_identical():
    torch.manual_seed(1)
    plain = tiny("vit_pico_jumbo").eval()
    lora = tiny("vit_pico_jumbo", jumbo_lora_rank=4).eval()
    missing = lora.load_state_dict(plain.state_dict(), strict=False)
    assert all("jumbo_lora" in k for k in missing.missing_keys) and not missing.unexpected_keys
    x = torch.randn(2, 3, 16, 16)
    assert torch.equal(plain(x), lora(x))
    # and the LoRA parameters are trainable
    lora(x).sum().backward()
    assert lora.global_tokens.jumbo_lora[0].fc1.lora_b.grad is not None


def test_state_dict_names_follow_timm():
    keys = set(tiny("vit_pico_reg16").state_dict())
    for key in ["patch_embed.proj.weight", "pos_embed", "cls_token", "reg_token", "blocks.0.norm1.weight",
                "blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight", "blocks.0.norm2.weight",
                "blocks.0.mlp.fc1.weight", "blocks.0.mlp.fc2.weight", "norm.weight", "head.weight"]:
        assert key in keys
    assert not any(k.startswith("global_tokens.") for k in keys)
    assert "jumbo_token" in tiny("vit_pico_jumbo").state_dict()


def test_sincos_pos_embed_is_fixed():
    model = tiny("vit_pico_cls", pos_embed="sincos")
    assert not model.pos_embed.requires_grad
    assert model(torch.randn(1, 3, 16, 16)).shape == (1, 3)


# ---------------------------------------------------------------- series
def series_model(kind: str = "cls", **kw) -> Encoder:
    cfg = dict(tokenizer="series", seq_len=40, patch_len=8, stride=4, in_chans=3, dim=32, depth=2, num_heads=4,
               num_classes=4, global_tokens=kind)
    if kind == "registers":
        cfg["num_registers"] = 3
    if kind == "jumbo":
        cfg.update(jumbo_multiplier=2, jumbo_pool="segments")
    cfg.update(kw)
    return Encoder(**cfg).eval()


def test_series_tokenizer_shapes_and_end_padding():
    tok = SeriesPatchTokenizer(seq_len=40, patch_len=8, stride=4, in_chans=3, dim=16)
    out = tok(torch.randn(5, 3, 40))
    # (40 + 4 - 8) // 4 + 1 = 10 patches per channel
    assert out.tokens.shape == (15, 10, 16) and out.pad_mask is None and out.channels == 3
    no_pad = SeriesPatchTokenizer(seq_len=40, patch_len=8, stride=4, pad_end=False, dim=16, in_chans=3)
    assert no_pad(torch.randn(5, 3, 40)).tokens.shape == (15, 9, 16)


@pytest.mark.parametrize("kind", ["none", "cls", "registers", "jumbo"])
def test_series_models_concat_channels(kind):
    model = series_model(kind)
    out = model.forward_features(torch.randn(2, 3, 40))
    assert out.feature.shape == (6, 32) and out.channels == 3
    assert model(torch.randn(2, 3, 40)).shape == (2, 4)


@pytest.mark.parametrize("kind", ["none", "cls", "registers", "jumbo"])
def test_padding_mask_leaves_unpadded_results_unchanged(kind):
    """A series padded with NaN to a longer length gives the same output as the short series."""
    torch.manual_seed(0)
    # non-overlapping patches, so the padded region holds whole patches
    model = series_model(kind, seq_len=24, pad_end=False, stride=8)
    short = torch.randn(2, 3, 24)
    padded = torch.cat([short, torch.full((2, 3, 16), float("nan"))], dim=-1)
    out_short = model.forward_features(short)
    out_pad = model.forward_features(padded)
    assert out_pad.pad_mask is not None and out_pad.pad_mask.sum() == 6 * 2
    valid = ~out_pad.pad_mask
    # patch positions come from the (resampled) table for the longer grid, so compare with a model
    # whose table is sized for the padded length instead: same weights, no resampling.
    model_long = series_model(kind, seq_len=40, pad_end=False, stride=8)
    state = model.state_dict()
    state["pos_embed"] = torch.cat([state["pos_embed"], torch.zeros(1, 2, 32)], dim=1)
    model_long.load_state_dict(state)
    out_long = model_long.forward_features(padded)
    assert torch.allclose(out_long.patches[valid].reshape(6, 3, 32), out_short.patches, atol=1e-5)
    assert torch.allclose(out_long.feature, out_short.feature, atol=1e-5)
    assert torch.isfinite(out_pad.feature).all()


def test_missing_values_inside_a_patch_do_not_break():
    model = series_model("cls")
    x = torch.randn(2, 3, 40)
    x[0, 1, 5:7] = float("nan")
    out = model(x)
    assert torch.isfinite(out).all()


def test_series_bad_input():
    with pytest.raises(ValueError, match="shorter than one patch"):
        Encoder(tokenizer="series", seq_len=4, patch_len=8, stride=4, pad_end=False, in_chans=1, dim=16, depth=1,
                num_heads=2)
    model = series_model("cls")
    with pytest.raises(ValueError, match="expected series of 3 channels, got 2"):
        model(torch.randn(2, 2, 40))
    with pytest.raises(ValueError, match="needs"):
        Encoder(tokenizer="series", in_chans=1, dim=16, depth=1, num_heads=2)
    gap = series_model("none")
    with pytest.raises(ValueError, match="no observed patch"):
        gap(torch.full((1, 3, 40), float("nan")))


# ---------------------------------------------------------------- bad image input
def test_image_bad_input():
    model = tiny("vit_pico_cls")
    with pytest.raises(ValueError, match="expected images of 3 channels, got 1"):
        model(torch.randn(1, 1, 16, 16))
    with pytest.raises(ValueError, match="not divisible by patch size"):
        model(torch.randn(1, 3, 18, 16))
    with pytest.raises(ValueError, match="not divisible by patch_size"):
        tiny("vit_pico_cls", img_size=18)
    padded = tiny("vit_pico_cls", dynamic_img_pad=True)
    assert padded.forward_features(torch.randn(1, 3, 18, 16)).grid == (5, 4)
    with pytest.raises(ValueError, match=r"shape \(B, C, H, W\)"):
        model(torch.randn(3, 16, 16))
    with pytest.raises(ValueError, match="unknown global_tokens"):
        Encoder(global_tokens="jumbos")


# ---------------------------------------------------------------- save / load
@pytest.mark.parametrize("name", ["vit_pico_jumbo", "vit_pico_reg16"])
def test_save_load_round_trip(tmp_path, name):
    model = tiny(name, jumbo_lora_rank=2) if "jumbo" in name else tiny(name)
    model.eval()
    path = jumbokit.save(model, tmp_path / "run")
    assert path.name == "model.safetensors" and (tmp_path / "run" / "model_config.json").exists()
    loaded = jumbokit.load(tmp_path / "run").eval()
    x = torch.randn(2, 3, 16, 16)
    assert torch.equal(model(x), loaded(x))
    # a lone .safetensors file carries its config in the metadata
    single = jumbokit.save(model, tmp_path / "weights.safetensors")
    assert torch.equal(model(x), jumbokit.load(single).eval()(x))
    assert json.loads((tmp_path / "run" / "model_config.json").read_text())["global_tokens"] in ("jumbo", "registers")
    assert not list((tmp_path / "run").glob(".*"))  # no temp files left behind


def test_series_save_load_round_trip(tmp_path):
    model = series_model("jumbo")
    jumbokit.save(model, tmp_path)
    x = torch.randn(2, 3, 40)
    assert torch.equal(model(x), jumbokit.load(tmp_path).eval()(x))


def test_encoder_config_is_modality_agnostic_and_kinds_own_their_options():
    """DEFAULT_CONFIG holds only shared keys; a model's config holds its own kind's options and no other kind's."""
    from jumbokit.encoders import DEFAULT_CONFIG
    from jumbokit.timeseries.models import ENCODER_KEYS

    assert not set(DEFAULT_CONFIG) & {"img_size", "patch_size", *ENCODER_KEYS}
    image, series = tiny("vit_pico_cls"), series_model("jumbo")
    assert "patch_size" in image.config and not set(image.config) & set(ENCODER_KEYS)
    assert set(ENCODER_KEYS) <= set(series.config) and "img_size" not in series.config


def test_configs_saved_with_every_kinds_keys_still_load(tmp_path):
    """Configs saved before the tokenizer kinds owned their options carry every kind's keys at their defaults."""
    legacy_image = dict(img_size=224, patch_size=16, dynamic_img_size=True, dynamic_img_pad=False)
    legacy_series = dict(seq_len=None, patch_len=None, stride=None, pad_end=True, conv_stem=0, trunk=None,
                         trunk_width=16, trunk_depth=3, trunk_diff=False, trunk_mix=False, trunk_head=False,
                         token_stats=False, level_scale=False, rel_pos_bias=False, length_embed=False)
    from safetensors.torch import load_file, save_file

    cases = [(tiny("vit_pico_jumbo"), torch.randn(2, 3, 16, 16)), (series_model("jumbo"), torch.randn(2, 3, 40))]
    for model, x in cases:
        jumbokit.save(model, tmp_path / "run")
        path = tmp_path / "run" / "model_config.json"
        config = json.loads(path.read_text())
        old = {**legacy_image, **legacy_series, **config}
        path.unlink()
        weights = tmp_path / "run" / "model.safetensors"
        save_file(load_file(str(weights)), str(weights), metadata={"jumbokit_config": json.dumps(old)})
        loaded = jumbokit.load(tmp_path / "run").eval()
        assert loaded.config == model.config and torch.equal(loaded(x), model.eval()(x))


def test_load_checkpoint_of_a_different_config(tmp_path):
    jumbokit.save(tiny("vit_pico_jumbo"), tmp_path)
    other = tiny("vit_pico_reg16")
    from safetensors.torch import load_file

    with pytest.raises(ValueError, match="does not fit this model config"):
        jumbokit.encoders.load_state_dict_checked(other, load_file(str(tmp_path / "model.safetensors")))
    with pytest.raises(ValueError, match="shape mismatch"):
        jumbokit.load(tmp_path, dim=48)
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        jumbokit.load(tmp_path / "nothing_here" if False else tmp_path.parent)


@pytest.mark.parametrize("name", ["vit_pico_cls", "vit_pico_jumbo", "vit_pico_gap"])
def test_inference_fast_path_equals_autograd_path(name):
    """Without autograd the blocks add residuals in place; results must not change, nor the input."""
    model = tiny(name, init_values=1e-2).eval()
    x = torch.randn(2, 3, 16, 16)
    x_copy = x.clone()
    with_grad = model(x)
    with torch.no_grad():
        without = model(x)
    assert torch.allclose(with_grad, without, atol=1e-6)
    assert torch.equal(x, x_copy)
