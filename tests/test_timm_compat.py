"""Output parity with timm's VisionTransformer (random init, no download)."""

from __future__ import annotations

import pytest
import torch

timm = pytest.importorskip("timm")

import jumbokit  # noqa: E402
from jumbokit.encoders import from_timm  # noqa: E402
from jumbokit.encoders.timm_compat import to_timm  # noqa: E402

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


# ------------------------------------------------------------------ to_timm: the way back
ROUND_TRIP = {  # timm models in jumbokit's layout (position rows for patches only): exact both ways
    "cls": dict(no_embed_class=True),
    "registers_no_embed_class": VARIANTS["registers_no_embed_class"],
    "gap_fc_norm": VARIANTS["gap_fc_norm"],
    "layer_scale": dict(init_values=1e-2, no_embed_class=True),
    "registers_gap": VARIANTS["registers_gap"],
}


def _same_state(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("variant", list(ROUND_TRIP))
def test_to_timm_of_from_timm_is_exact(variant):
    ref = _timm_vit(**ROUND_TRIP[variant])
    back = to_timm(from_timm(ref))
    assert type(back) is type(ref) and _same_state(back, ref)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(back(x), ref(x))
        assert torch.equal(back.forward_features(x), ref.forward_features(x))


def test_to_timm_of_a_model_that_embeds_its_class_token_folds_the_rows():
    ref = _timm_vit()  # timm's default: the position table covers the class token too
    back = to_timm(from_timm(ref))
    assert back.pos_embed.shape[1] == ref.pos_embed.shape[1] - 1
    assert torch.equal(back.cls_token, ref.cls_token + ref.pos_embed[:, :1])
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(back(x), ref(x), atol=1e-6)


@pytest.mark.parametrize("name,extra", [("vit_pico_cls", {}), ("vit_pico_reg16", {}), ("vit_pico_gap", {}),
                                        ("vit_pico_reg16", dict(class_token=False)),
                                        ("vit_pico_cls", dict(init_values=0.1, global_pool="avg"))])
def test_from_timm_of_to_timm_is_exact(name, extra):
    torch.manual_seed(0)
    ours = jumbokit.create_model(name, img_size=32, patch_size=8, depth=2, num_classes=5, **extra).eval()
    theirs = to_timm(ours)
    back = from_timm(theirs).eval()
    assert _same_state(back, ours)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(theirs(x), ours(x)) and torch.equal(back(x), ours(x))


def test_to_timm_refuses_what_timm_cannot_hold():
    with pytest.raises(ValueError, match="Jumbo"):
        to_timm(jumbokit.create_model("vit_pico_jumbo", img_size=32, patch_size=8, depth=1))
    with pytest.raises(ValueError, match="MultiStageEncoder"):
        to_timm(jumbokit.create_model("vit_res_pico"))
    with pytest.raises(ValueError, match="image encoders"):
        to_timm(jumbokit.create_model("patchtst", seq_len=32, in_chans=2, num_classes=3))
