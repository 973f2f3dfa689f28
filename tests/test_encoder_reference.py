"""The Jumbo encoder against an independent hand-written forward pass, and the encoder's answers to bad config."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import jumbokit
from jumbokit.encoders import Encoder

torch.set_num_threads(1)

D, J, HEADS, DEPTH, CLASSES = 16, 3, 2, 2, 4


def jumbo_encoder(**overrides) -> Encoder:
    torch.manual_seed(0)
    config = dict(tokenizer="image", img_size=16, patch_size=8, in_chans=1, dim=D, depth=DEPTH, num_heads=HEADS,
                  global_tokens="jumbo", jumbo_multiplier=J, jumbo_mlp_ratio=2.0, init_values=0.5,
                  num_classes=CLASSES)
    model = Encoder(**{**config, **overrides}).eval()
    with torch.no_grad():  # LayerScales, norms and biases away from their initial values: every term counts
        for name, p in model.named_parameters():
            if name.endswith("gamma") or "norm" in name or name.endswith("bias"):
                p.copy_(torch.rand_like(p) + 0.5 if not name.endswith("bias") else 0.1 * torch.randn_like(p))
    return model


def hand_forward(sd: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """ViT + Jumbo written out from the state dict: patches -> [J Jumbo tokens | patches] -> blocks (attention
    over all tokens; patch FFN with ls2; the J tokens concatenated in order into one J*D vector, its own
    LayerNorm, the shared Jumbo FFN and its LayerScale, split back) -> norm -> the J*D vector -> head."""
    batch = x.shape[0]

    def ln(t, prefix, width):
        return F.layer_norm(t, (width,), sd[f"{prefix}.weight"], sd[f"{prefix}.bias"], eps=1e-6)

    def linear(t, prefix):
        return t @ sd[f"{prefix}.weight"].T + sd[f"{prefix}.bias"]

    patches = F.conv2d(x, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"], stride=8)  # (B, D, 2, 2)
    patches = patches.flatten(2).transpose(1, 2) + sd["pos_embed"]  # row-major patch order
    tokens = torch.cat([sd["jumbo_token"].expand(batch, -1, -1), patches], dim=1)
    length, head_dim = tokens.shape[1], D // HEADS
    for i in range(DEPTH):
        b = f"blocks.{i}"
        q, k, v = linear(ln(tokens, f"{b}.norm1", D), f"{b}.attn.qkv").split(D, dim=-1)
        q, k, v = (t.reshape(batch, length, HEADS, head_dim).transpose(1, 2) for t in (q, k, v))
        weights = (q @ k.transpose(-1, -2) / math.sqrt(head_dim)).softmax(dim=-1)
        attended = (weights @ v).transpose(1, 2).reshape(batch, length, D)
        tokens = tokens + sd[f"{b}.ls1.gamma"] * linear(attended, f"{b}.attn.proj")
        jumbo, patches = tokens[:, :J], tokens[:, J:]
        hidden = F.gelu(linear(ln(patches, f"{b}.norm2", D), f"{b}.mlp.fc1"))
        patches = patches + sd[f"{b}.ls2.gamma"] * linear(hidden, f"{b}.mlp.fc2")
        wide = torch.cat([jumbo[:, j] for j in range(J)], dim=-1)  # token 0 first: (B, J*D)
        hidden = F.gelu(linear(ln(wide, f"jumbo_norms.{i}", J * D), "jumbo_mlp.fc1"))
        wide = wide + sd[f"jumbo_ls.{i}.gamma"] * linear(hidden, "jumbo_mlp.fc2")
        jumbo = torch.stack([wide[:, j * D:(j + 1) * D] for j in range(J)], dim=1)
        tokens = torch.cat([jumbo, patches], dim=1)
    tokens = ln(tokens, "norm", D)
    feature = torch.cat([tokens[:, j] for j in range(J)], dim=-1)
    return linear(feature, "head")


def test_jumbo_forward_matches_a_hand_computation_with_layerscale():
    model = jumbo_encoder()
    sd = model.state_dict()
    assert sd["jumbo_ls.0.gamma"].shape == (J * D,)  # one LayerScale of width J*D per layer
    x = torch.randn(3, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    expected = hand_forward(sd, x)
    assert torch.allclose(model(x), expected, atol=1e-5)
    with torch.no_grad():
        assert torch.allclose(model(x), expected, atol=1e-5)  # the in-place inference path too


def test_jumbo_layerscale_only_with_init_values_and_kept_by_the_collapse():
    assert not any("jumbo_ls" in k for k in jumbo_encoder(init_values=None).state_dict())
    from jumbokit.encoders.branches import build_branched_encoder

    config = jumbo_encoder().config | {"depth": 4}
    branched = build_branched_encoder(config, branches=2)
    branched.set_join(1.0)
    with torch.no_grad():
        for p in branched.global_tokens.jumbo_ls.parameters():
            p.uniform_(0.5, 1.5)
    plain = jumbokit.reparameterize(branched).eval()
    assert plain.config["init_values"] is None and plain.config["jumbo_init_values"] == 0.5
    x = torch.randn(2, 1, 16, 16)
    with torch.no_grad():
        assert torch.allclose(branched.eval()(x), plain(x), atol=1e-5)


def test_unknown_options_suggest_the_closest_key():
    with pytest.raises(ValueError, match=r"'dpeth' \(did you mean 'depth'\?\)") as info:
        jumbokit.create_model("vit_pico_cls", dpeth=3)
    assert "jumbo_lora_rank" not in str(info.value)  # no list of every option
    with pytest.raises(ValueError, match=r"'num_head' \(did you mean 'num_heads'\?\)") as info:
        Encoder(num_head=3)
    assert "jumbo_lora_rank" not in str(info.value)
    with pytest.raises(ValueError, match=r"'jumbo_multipler' \(did you mean 'jumbo_multiplier'\?\)"):
        jumbokit.create_model("patchtst_jumbo", seq_len=64, jumbo_multipler=2)


@pytest.mark.parametrize("name", ["vit_pico_jumbo", "patchtst_jumbo"])
def test_zero_jumbo_multiplier_names_the_key(name):
    extra = {"seq_len": 64} if name.startswith("patchtst") else {}
    with pytest.raises(ValueError, match="jumbo_multiplier must be an integer >= 1.*jumbo_multiplier=0"):
        jumbokit.create_model(name, jumbo_multiplier=0, **extra)


def test_truncated_safetensors_names_the_file(tmp_path):
    model = jumbokit.create_model("vit_pico_cls", img_size=16, patch_size=8, in_chans=1, num_classes=3, dim=16,
                                  num_heads=2, depth=1)
    path = jumbokit.save(model, tmp_path / "run")
    data = path.read_bytes()
    for cut in (len(data) // 2, 4):
        broken = tmp_path / f"cut{cut}.safetensors"
        broken.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=rf"{broken.name} is not a readable \.safetensors file.*truncated"):
            jumbokit.load(broken)
    from jumbokit.encoders.zoo import read_safetensors

    with pytest.raises(ValueError, match="cut4.safetensors"):
        read_safetensors(tmp_path / "cut4.safetensors")
