"""Output parity with timm's VisionTransformer (random init, no download)."""

from __future__ import annotations

import pytest
import torch

timm = pytest.importorskip("timm")

from jumbokit.encoders import from_timm  # noqa: E402

VARIANTS = {
    "cls": dict(),
    "registers_no_embed_class": dict(reg_tokens=4, no_embed_class=True),
    "registers_embed_class": dict(reg_tokens=2),
    "gap_fc_norm": dict(global_pool="avg", class_token=False, fc_norm=True),
    "registers_gap": dict(reg_tokens=4, class_token=False, global_pool="avg", no_embed_class=True),
    "layer_scale": dict(init_values=1e-2),
}


def _timm_vit(**kw):
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2,
                              num_classes=7, **kw).eval()
    with torch.no_grad():  # move every tensor off its init so folding mistakes show
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_parity_with_timm_model(variant):
    ref = _timm_vit(**VARIANTS[variant])
    ours = from_timm(ref).eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(ref(x), ours(x), atol=1e-5)
        assert torch.allclose(ref.forward_head(ref.forward_features(x), pre_logits=True),
                              ours.forward_head(ours.forward_features(x), pre_logits=True), atol=1e-5)


@pytest.mark.parametrize("variant", ["cls", "registers_no_embed_class", "gap_fc_norm"])
def test_parity_from_state_dict(variant):
    ref = _timm_vit(**VARIANTS[variant])
    ours = from_timm(ref.state_dict()).eval()
    assert ours.config["num_heads"] == 3
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(ref(x), ours(x), atol=1e-5)


def test_dynamic_size_matches_timm_resampling():
    ref = _timm_vit(dynamic_img_size=True)
    ours = from_timm(ref).eval()
    x = torch.randn(2, 3, 48, 40)
    with torch.no_grad():
        assert torch.allclose(ref(x), ours(x), atol=1e-4)


def test_bad_state_dict():
    with pytest.raises(ValueError, match="patch_embed.proj.weight"):
        from_timm({"foo": torch.zeros(1)})
    state = _timm_vit().state_dict()
    state["patch_embed.proj.weight"] = torch.zeros(200, 3, 8, 8)
    with pytest.raises(ValueError, match="num_heads"):
        from_timm(state)
