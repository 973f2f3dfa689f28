"""forward_intermediates / prune_intermediate_layers (timm's semantics), intermediate-layer features and gradient
checkpointing of the encoders."""

from __future__ import annotations

import pytest
import torch

import jumbokit
from jumbokit.encoders import Encoder

IMAGE = dict(tokenizer="image", img_size=16, patch_size=4, in_chans=3, dim=32, depth=3, num_heads=2)
PLUGINS = {
    "cls": dict(global_tokens="cls"),
    "registers": dict(global_tokens="registers", num_registers=3),
    "jumbo": dict(global_tokens="jumbo", jumbo_multiplier=2),
    "jumbo_layer_scale": dict(global_tokens="jumbo", jumbo_multiplier=2, jumbo_share=False, init_values=0.1),
    "gap_fc_norm": dict(global_tokens="none", global_pool="avg"),
}


def image_encoder(plugin: str) -> Encoder:
    torch.manual_seed(0)
    return Encoder(**IMAGE, **PLUGINS[plugin], num_classes=5).eval()


def series_encoder(plugin: str = "jumbo") -> Encoder:
    torch.manual_seed(0)
    return Encoder(tokenizer="series", seq_len=24, patch_len=8, stride=4, in_chans=2, dim=32, depth=3, num_heads=2,
                   **PLUGINS[plugin], num_classes=4).eval()


def hooked_block_outputs(model: Encoder, x: torch.Tensor) -> list[torch.Tensor]:
    """Every block's output through forward hooks on a plain forward."""
    outputs: list[torch.Tensor] = []
    handles = [block.register_forward_hook(lambda module, args, out: outputs.append(out.clone()))
               for block in model.blocks]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return outputs


CASES = [("image", p) for p in PLUGINS] + [("series", "jumbo"), ("series", "cls")]


@pytest.mark.parametrize("modality,plugin", CASES)
def test_intermediates_equal_forward_hooks(modality, plugin):
    model = image_encoder(plugin) if modality == "image" else series_encoder(plugin)
    x = torch.randn(2, 3, 16, 16) if modality == "image" else torch.randn(2, 2, 24)
    hooked = hooked_block_outputs(model, x)
    g = model.num_global_tokens
    with torch.no_grad():
        final, pairs = model.forward_intermediates(x, indices=[0, -1], return_prefix_tokens=True, output_fmt="NLC")
        everything = model.forward_intermediates(x, output_fmt="NLC", intermediates_only=True)
        normed = model.forward_intermediates(x, indices=1, norm=True, output_fmt="NLC", intermediates_only=True)
        reference = model.forward_features(x)
    assert len(everything) == model.depth
    for i, item in enumerate(everything):
        patches = item[0] if isinstance(item, tuple) else item
        assert torch.equal(patches, hooked[i][:, g:])
    for (patches, global_tokens), i in zip(pairs if g else [], [0, 2]):
        assert global_tokens.shape == (x.shape[0] * (2 if modality == "series" else 1), g, 32)
        assert torch.equal(global_tokens, hooked[i][:, :g]) and torch.equal(patches, hooked[i][:, g:])
    assert torch.equal(normed[-1], model.norm(hooked[-1])[:, g:])
    for field in ("feature", "patches", "global_tokens"):
        assert torch.equal(getattr(final, field), getattr(reference, field))
    assert torch.equal(model.forward_head(final), model.forward_head(reference))


def test_nchw_maps_last_n_and_stop_early():
    model = image_encoder("registers")
    x = torch.randn(2, 3, 16, 16)
    hooked = hooked_block_outputs(model, x)
    with torch.no_grad():
        maps = model.forward_intermediates(x, indices=2, intermediates_only=True)
        early = model.forward_intermediates(x, indices=[0], stop_early=True, return_prefix_tokens=True)
    assert [m.shape for m in maps] == [(2, 32, 4, 4)] * 2
    assert torch.equal(maps[0], hooked[1][:, 4:].reshape(2, 4, 4, 32).permute(0, 3, 1, 2))
    final, [(patches, global_tokens)] = early
    assert global_tokens.shape == (2, 4, 32) and patches.shape == (2, 32, 4, 4)
    assert torch.equal(final.global_tokens, model.norm(hooked[0])[:, :4])  # the run stopped after block 0


def test_layer_features_and_bad_indices():
    model = image_encoder("jumbo")
    x = torch.randn(2, 3, 16, 16)
    hooked = hooked_block_outputs(model, x)
    with torch.no_grad():
        assert torch.equal(model.forward_features(x, layer=-1).feature, model.forward_features(x).feature)
        assert torch.equal(model.forward_features(x, layer=2).feature, model.forward_features(x).feature)
        first = model.forward_features(x, layer=0)
    tokens = model.norm(hooked[0])
    assert torch.equal(first.feature, model.global_tokens.pool(tokens[:, :2], tokens[:, 2:], None))
    with pytest.raises(ValueError, match="out of range"):
        model.forward_features(x, layer=3)
    with pytest.raises(ValueError, match="out of range"):
        model.forward_intermediates(x, indices=4)
    with pytest.raises(ValueError, match="output_fmt"):
        model.forward_intermediates(x, output_fmt="NHWC")
    with pytest.raises(ValueError, match="NLC"):
        series_encoder().forward_intermediates(torch.randn(2, 2, 24), output_fmt="NCHW")


def test_prune_intermediate_layers_keeps_the_taken_outputs(tmp_path):
    model = image_encoder("jumbo_layer_scale")
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        before = model.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
    assert model.prune_intermediate_layers([0, 1]) == [0, 1]
    assert len(model.blocks) == 2 and model.config["depth"] == 2 and len(model.global_tokens.jumbo_norms) == 2
    assert model.num_classes == 0
    with torch.no_grad():
        after = model.forward_intermediates(x, indices=2, intermediates_only=True)
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    jumbokit.save(model, tmp_path)
    reloaded = jumbokit.load(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(reloaded(x), model(x))


@pytest.mark.parametrize("name", ["vit_pico_jumbo", "vit_pico_reg16", "vit_res_pico_jumbo"])
def test_gradient_checkpointing_gives_identical_gradients(name):
    torch.manual_seed(0)
    model = jumbokit.create_model(name, img_size=32, patch_size=8 if "res" not in name else 4, num_classes=3,
                                  drop_path_rate=0.1)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([0, 2])

    def grads(checkpointing: bool) -> dict[str, torch.Tensor]:
        model.zero_grad()
        model.set_grad_checkpointing(checkpointing)
        torch.manual_seed(1)  # the same drop-path draws; checkpoint replays them in the recomputation
        torch.nn.functional.cross_entropy(model(x), y).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain, checkpointed = grads(False), grads(True)
    assert plain.keys() == checkpointed.keys() and len(plain) == sum(1 for _ in model.parameters())
    assert all(torch.equal(plain[n], checkpointed[n]) for n in plain)


def test_progressive_join_form_has_the_same_api():
    model = jumbokit.create_model("vit_pico_jumbo", img_size=32, patch_size=8, depth=4, branches=2).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        reference = model.forward_features(x)
        final, [last] = model.forward_intermediates(x, indices=1, output_fmt="NLC")
        assert torch.equal(model.forward_features(x, layer=-1).feature, reference.feature)
    assert torch.equal(final.feature, reference.feature) and torch.equal(last, hooked_block_outputs(model, x)[-1][:, 6:])
