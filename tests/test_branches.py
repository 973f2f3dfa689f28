"""Progressive-join branches: training-time math, schedules, exact collapse, save/load, bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import jumbokit
from jumbokit.encoders import Block, Encoder
from jumbokit.encoders.branches import (
    JOIN_SCHEDULES,
    BranchedBlock,
    BranchedEncoder,
    build_branched_encoder,
    fold_layernorm_into_linear,
    join_lambda_at,
    join_schedule_value,
    reparameterize,
)

TOL = 1e-5

IMAGE = dict(tokenizer="image", img_size=16, patch_size=4, in_chans=3)
SERIES = dict(tokenizer="series", seq_len=24, patch_len=6, stride=4, in_chans=2)
GLOBAL_KINDS = {
    "none": dict(global_tokens="none"),
    "cls": dict(global_tokens="cls"),
    "registers": dict(global_tokens="registers", num_registers=2),
    "jumbo": dict(global_tokens="jumbo", jumbo_multiplier=2, jumbo_mlp_ratio=2.0),
}


def tiny_config(tokenizer: str = "image", kind: str = "cls", depth: int = 12, **extra) -> dict:
    base = IMAGE if tokenizer == "image" else SERIES
    return dict(base, dim=24, depth=depth, num_heads=2, mlp_ratio=2.0, num_classes=3, **GLOBAL_KINDS[kind], **extra)


def tiny_input(tokenizer: str, batch: int = 2, missing: bool = False) -> torch.Tensor:
    if tokenizer == "image":
        return torch.randn(batch, 3, 16, 16)
    x = torch.randn(batch, 2, 24)
    if missing:
        x[0, 1, -7:] = float("nan")  # a missing tail -> a padded patch (attention mask path)
    return x


def perturb(model: nn.Module, scale: float = 0.2) -> None:
    """Move every parameter off its initial value (unit norms, zero biases) so folding is exercised."""
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * scale)


def branched(config: dict, branches: int, **options) -> BranchedEncoder:
    model = build_branched_encoder(config, branches=branches, **options)
    perturb(model)
    return model.eval()


# --------------------------------------------------------------------------------------------------
# exact collapse
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokenizer", ["image", "series"])
@pytest.mark.parametrize("kind", list(GLOBAL_KINDS))
@pytest.mark.parametrize("n", [2, 3, 4])
def test_collapse_is_exact(tokenizer: str, kind: str, n: int) -> None:
    torch.manual_seed(n)
    model = branched(tiny_config(tokenizer, kind, init_values=0.3), n)
    model.set_join(1.0)
    plain = jumbokit.reparameterize(model).eval()
    assert isinstance(plain, Encoder) and not isinstance(plain, BranchedEncoder)
    assert plain.config["depth"] == 12 // n and len(plain.blocks) == 12 // n
    x = tiny_input(tokenizer, missing=True)
    with torch.no_grad():
        ref, out = model.forward_features(x), plain.forward_features(x)
        assert (model(x) - plain(x)).abs().max().item() <= TOL
    assert (ref.feature - out.feature).abs().max().item() <= TOL
    assert (ref.patches - out.patches).abs().max().item() <= TOL
    if ref.global_tokens.numel():
        assert (ref.global_tokens - out.global_tokens).abs().max().item() <= TOL


@pytest.mark.parametrize("front", [dict(conv_stem=8), dict(trunk="inception", trunk_width=2, trunk_diff=True,
                                                          token_stats=True)])
def test_collapse_keeps_the_series_front_end(front) -> None:
    torch.manual_seed(0)
    model = branched(tiny_config("series", "jumbo", depth=4, **front), 2).eval()
    model.set_join(1.0)
    plain = jumbokit.reparameterize(model).eval()
    assert (plain.patch_embed.conv is not None) == bool(front.get("conv_stem"))
    assert (plain.patch_embed.trunk is not None) == bool(front.get("trunk"))
    x = tiny_input("series", missing=True)
    with torch.no_grad():
        assert (model(x) - plain(x)).abs().max().item() <= TOL


@pytest.mark.parametrize("qk_form", ["concat", "product"])
@pytest.mark.parametrize("join_values", [True, False])
@pytest.mark.parametrize("rescale", [True, False])
def test_collapse_forms_and_routes(qk_form: str, join_values: bool, rescale: bool) -> None:
    torch.manual_seed(1)
    model = branched(tiny_config("image", "registers", depth=6), 3, join_values=join_values, join_rescale=rescale)
    model.set_join(1.0)
    plain = model.reparameterize(qk_form=qk_form).eval()
    cfg = plain.config if "qk_dim" in plain.config else plain.saved_config()["branched"]["collapsed"]
    head_dim = 24 // 2
    assert cfg["qk_dim"] == 2 * (3 * head_dim if qk_form == "concat" else 24)
    assert cfg["v_dim"] == (24 if join_values else 3 * 24)
    x = tiny_input("image")
    with torch.no_grad():
        assert (model(x) - plain(x)).abs().max().item() <= TOL


def test_collapse_with_keep_and_without_qkv_bias() -> None:
    torch.manual_seed(2)
    model = branched(tiny_config("image", "jumbo", depth=4, qkv_bias=False), 2)
    model.set_join(1.0)
    plain = model.reparameterize().eval()
    x, keep = tiny_input("image"), torch.tensor([[0, 3, 5, 9], [1, 2, 14, 15]])
    with torch.no_grad():
        a, b = model.forward_features(x, keep=keep), plain.forward_features(x, keep=keep)
    assert (a.patches - b.patches).abs().max().item() <= TOL
    assert (a.feature - b.feature).abs().max().item() <= TOL


def test_timm_reparameterize_model_fuses_blocks() -> None:
    from timm.utils.model import reparameterize_model

    torch.manual_seed(3)
    model = branched(tiny_config("image", "cls", depth=4), 2)
    model.set_join(1.0)
    fused = reparameterize_model(model)
    assert not any(isinstance(b, BranchedBlock) for b in fused.blocks)
    x = tiny_input("image")
    with torch.no_grad():
        assert (model(x) - fused(x)).abs().max().item() <= TOL
        # a model fused that way still collapses into the plain Encoder
        assert (model(x) - fused.reparameterize().eval()(x)).abs().max().item() <= TOL


# --------------------------------------------------------------------------------------------------
# the training-time model against a literal reference
# --------------------------------------------------------------------------------------------------


def reference_block(block: BranchedBlock, x: torch.Tensor, lam: float) -> torch.Tensor:
    """Branch by branch, head by head, as the method reads (per-branch LN affine, blockwise projection)."""
    n, H, D = block.branches, block.num_heads, block.dim
    d = D // H
    r = math.sqrt(1 + (n - 1) * lam**2)
    xn = F.layer_norm(x, (D,), eps=1e-6)
    attn, mlp = block.attn, block.mlp
    q, k, v = [], [], []
    for b in range(n):
        xb = xn * attn.norm.weight[b] + attn.norm.bias[b]
        qkv = xb @ attn.qkv.weight[b].T + attn.qkv.bias[b]
        q.append(qkv[..., :D]), k.append(qkv[..., D:2 * D]), v.append(qkv[..., 2 * D:])
    out = x.clone()
    for b in range(n):
        branch_out = attn.proj.bias[b].expand_as(x).clone()
        for h in range(H):
            sl = slice(h * d, (h + 1) * d)
            logits = [q[c][..., sl] @ k[c][..., sl].transpose(-1, -2) for c in range(n)]
            joined = logits[b] + lam * sum(logits[c] for c in range(n) if c != b)
            weights = (joined / (r * math.sqrt(d))).softmax(-1)
            values = (v[b][..., sl] + lam * sum(v[c][..., sl] for c in range(n) if c != b)) / r
            branch_out = branch_out + (weights @ values) @ attn.proj.weight[b][:, sl].T
        out = out + branch_out
    xn2 = F.layer_norm(out, (D,), eps=1e-6)
    hidden = [(xn2 * mlp.norm.weight[b] + mlp.norm.bias[b]) @ mlp.fc1.weight[b].T + mlp.fc1.bias[b] for b in range(n)]
    result = out.clone()
    for b in range(n):
        joined = (hidden[b] + lam * sum(hidden[c] for c in range(n) if c != b)) / r
        result = result + F.gelu(joined) @ mlp.fc2.weight[b].T + mlp.fc2.bias[b]
    return result


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("lam", [0.0, 0.37, 1.0])
def test_branched_block_matches_reference(n: int, lam: float) -> None:
    torch.manual_seed(4)
    block = BranchedBlock(dim=24, num_heads=2, mlp_hidden=40, branches=n)
    perturb(block)
    block.eval().join_lambda.fill_(lam)
    x = torch.randn(2, 7, 24)
    with torch.no_grad():
        assert (block(x) - reference_block(block, x, lam)).abs().max().item() <= TOL


def test_join_changes_output_until_lambda_one() -> None:
    torch.manual_seed(5)
    model = branched(tiny_config("image", "cls", depth=4), 2)
    x = tiny_input("image")
    outs = []
    for lam in (0.0, 0.5, 1.0):
        model.set_join(lam)
        with torch.no_grad():
            outs.append(model(x))
    assert (outs[0] - outs[1]).abs().max() > 1e-4 and (outs[1] - outs[2]).abs().max() > 1e-4


def test_split_width_attention_path_matches_fused_path_at_equal_widths() -> None:
    from jumbokit.encoders import Attention

    torch.manual_seed(12)
    core, wide = Attention(24, 2).eval(), Attention(24, 2, qk_dim=24, v_dim=24).eval()
    wide.uniform = False  # force the split-width path
    wide.load_state_dict(core.state_dict())
    x, mask = torch.randn(2, 6, 24), torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    with torch.no_grad():
        assert (core(x, mask) - wide(x, mask)).abs().max().item() <= 1e-6


# --------------------------------------------------------------------------------------------------
# LayerNorm folding
# --------------------------------------------------------------------------------------------------


def test_fold_layernorm_into_linear() -> None:
    torch.manual_seed(6)
    norm, linear = nn.LayerNorm(16, eps=1e-6), nn.Linear(16, 8)
    perturb(norm), perturb(linear)
    weight, bias = fold_layernorm_into_linear(linear.weight, linear.bias, norm.weight, norm.bias)
    x = torch.randn(4, 16)
    bare = F.layer_norm(x, (16,), eps=1e-6)
    assert (linear(norm(x)) - (bare @ weight.T + bias)).abs().max().item() <= TOL


def test_plain_block_with_folded_layernorms_is_equal() -> None:
    torch.manual_seed(7)
    block = Block(24, 2, 40).eval()
    perturb(block)
    folded = Block(24, 2, 40).eval()
    state = {k: v.clone() for k, v in block.state_dict().items()}
    for norm, linear in (("norm1", "attn.qkv"), ("norm2", "mlp.fc1")):
        w, b = fold_layernorm_into_linear(state[f"{linear}.weight"], state[f"{linear}.bias"],
                                          state[f"{norm}.weight"], state[f"{norm}.bias"])
        state.update({f"{linear}.weight": w, f"{linear}.bias": b,
                      f"{norm}.weight": torch.ones(24), f"{norm}.bias": torch.zeros(24)})
    folded.load_state_dict(state)
    x = torch.randn(2, 9, 24)
    with torch.no_grad():
        assert (block(x) - folded(x)).abs().max().item() <= TOL


def test_branch_affine_is_a_folded_layernorm() -> None:
    """One branch's (shared LN, own affine) equals a full LayerNorm with that affine."""
    torch.manual_seed(8)
    block = BranchedBlock(dim=24, num_heads=2, mlp_hidden=40, branches=2)
    perturb(block)
    x = torch.randn(2, 5, 24)
    per_branch = block.attn.norm(block.norm1(x))  # (B, n, T, D)
    for b in range(2):
        full = F.layer_norm(x, (24,), block.attn.norm.weight[b], block.attn.norm.bias[b], eps=1e-6)
        assert (per_branch[:, b] - full).abs().max().item() <= TOL


# --------------------------------------------------------------------------------------------------
# schedules
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(JOIN_SCHEDULES))
def test_schedule_endpoints_and_monotonic(name: str) -> None:
    assert join_schedule_value(name, 0.0) == 0.0
    assert join_schedule_value(name, 1.0) == 1.0
    values = [join_schedule_value(name, i / 200) for i in range(201)]
    assert all(b >= a for a, b in zip(values, values[1:]))
    assert all(0.0 <= v <= 1.0 for v in values)
    steps = [join_lambda_at(s, warmup_steps=50, schedule=name, start_step=10) for s in range(0, 100)]
    assert steps[:11] == [0.0] * 11 and steps[60:] == [1.0] * 40
    assert all(b >= a for a, b in zip(steps, steps[1:]))


def test_schedule_shapes() -> None:
    assert join_schedule_value("linear", 0.25) == pytest.approx(0.25)
    assert join_schedule_value("cosine", 0.5) == pytest.approx(0.5)
    assert join_schedule_value("sqrt", 0.25) == pytest.approx(0.5)
    assert join_schedule_value("exp", 0.2) > join_schedule_value("linear", 0.2)
    assert join_lambda_at(3, warmup_steps=0) == 1.0  # warm-up 0 = instant joining


def test_update_join_drives_every_block() -> None:
    model = build_branched_encoder(tiny_config("image", "cls", depth=4), 2, join_schedule="cosine",
                                   join_warmup_steps=10)
    assert model.join_lambda == 0.0
    assert model.update_join(5) == pytest.approx(0.5)
    assert all(float(b.join_lambda) == pytest.approx(0.5) for b in model.blocks)
    model.update_join(10)
    assert model.join_lambda == 1.0


# --------------------------------------------------------------------------------------------------
# parameter count, save / load
# --------------------------------------------------------------------------------------------------


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("kind", list(GLOBAL_KINDS))
@pytest.mark.parametrize("n", [2, 3, 4])
def test_parameter_count_equals_the_deep_model(kind: str, n: int) -> None:
    config = tiny_config("image", kind)
    deep, model = Encoder(**config), build_branched_encoder(config, branches=n)
    difference = count(deep) - count(model)
    if kind == "jumbo":  # exception: one per-layer Jumbo LayerNorm(J*D) per block instead of per layer
        width = 2 * 24
        assert difference == (12 - 12 // n) * 2 * width
    else:
        assert difference == 0


@pytest.mark.parametrize("tokenizer", ["image", "series"])
def test_collapsed_state_dict_loads_into_plain_encoder(tokenizer: str, tmp_path) -> None:
    torch.manual_seed(9)
    model = branched(tiny_config(tokenizer, "jumbo", depth=6), 3)
    model.set_join(1.0)
    plain = model.reparameterize().eval()
    rebuilt = Encoder(**model.collapsed_config()).eval()
    rebuilt.load_state_dict(plain.state_dict())  # strict
    assert set(plain.state_dict()) == set(rebuilt.state_dict())
    assert all(k.startswith(("blocks.", "patch_embed.", "pos_embed", "jumbo_", "norm", "fc_norm", "head"))
               for k in plain.state_dict())
    jumbokit.save(plain, tmp_path / "collapsed")
    loaded = jumbokit.load(tmp_path / "collapsed").eval()
    x = tiny_input(tokenizer)
    with torch.no_grad():
        assert (model(x) - loaded(x)).abs().max().item() <= TOL
        assert (rebuilt(x) - plain(x)).abs().max().item() == 0.0


def test_branched_model_save_load_round_trip(tmp_path) -> None:
    torch.manual_seed(10)
    model = branched(tiny_config("series", "registers", depth=4), 2, join_schedule="sqrt",
                     join_warmup_steps=7, diversity_weight=0.05)
    model.set_join(0.4)
    jumbokit.save(model, tmp_path / "run")
    loaded = jumbokit.load(tmp_path / "run").eval()
    assert isinstance(loaded, BranchedEncoder)
    assert loaded.branches == 2 and loaded.join_schedule == "sqrt" and loaded.join_warmup_steps == 7
    assert loaded.join_lambda == pytest.approx(0.4)
    x = tiny_input("series")
    with torch.no_grad():
        assert (model(x) - loaded(x)).abs().max().item() == 0.0


def test_create_model_with_branches() -> None:
    model = jumbokit.create_model("vit_pico_jumbo", img_size=32, patch_size=8, num_classes=4, depth=4,
                                  branches=2, join_schedule="exp", join_warmup_steps=100)
    assert isinstance(model, BranchedEncoder) and len(model.blocks) == 2
    model.set_join(1.0)
    plain = reparameterize(model)
    assert len(plain.blocks) == 2 and reparameterize(plain) is plain


# --------------------------------------------------------------------------------------------------
# training behaviour
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["cls", "jumbo"])
def test_forward_backward_every_parameter_gets_a_gradient(kind: str) -> None:
    torch.manual_seed(11)
    model = build_branched_encoder(tiny_config("image", kind, depth=4, drop_path_rate=0.1, init_values=1e-2),
                                   branches=2, diversity_weight=0.05)
    model.train().set_join(0.5)
    loss = model(tiny_input("image", batch=4)).square().mean()
    assert model.aux_loss is not None and model.aux_loss.ndim == 0 and torch.isfinite(model.aux_loss)
    (loss + model.aux_loss).backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, missing


def test_aux_loss_only_when_training_with_weight() -> None:
    model = build_branched_encoder(tiny_config("image", "cls", depth=4), branches=2)
    model.train()(tiny_input("image"))
    assert model.aux_loss is None
    model.diversity_weight = 0.05
    model.train()(tiny_input("image"))
    assert model.aux_loss is not None and 0.0 <= float(model.aux_loss.detach()) <= 0.05
    model.eval()(tiny_input("image"))
    assert model.aux_loss is None


def test_no_weight_decay_lists_branch_biases_and_norms() -> None:
    model = build_branched_encoder(tiny_config("image", "cls", depth=4, init_values=0.1), branches=2)
    names = model.no_weight_decay()
    assert {"pos_embed", "blocks.0.attn.qkv.bias", "blocks.0.attn.norm.weight", "blocks.1.mlp.norm.bias",
            "blocks.0.ls1.gamma"} <= names
    assert "blocks.0.attn.qkv.weight" not in names


# --------------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------------


def test_bad_inputs_raise_clearly() -> None:
    config = tiny_config("image", "cls", depth=6)
    with pytest.raises(ValueError, match="does not divide depth=6"):
        build_branched_encoder(config, branches=4)
    with pytest.raises(ValueError, match="integer >= 2"):
        build_branched_encoder(config, branches=1)
    with pytest.raises(ValueError, match="unknown join_schedule 'warp'"):
        build_branched_encoder(config, branches=2, join_schedule="warp")
    with pytest.raises(ValueError, match=">= 0"):
        build_branched_encoder(config, branches=2, join_warmup_steps=-1)
    model = build_branched_encoder(config, branches=2)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        model.set_join(1.5)
    model.set_join(0.99)
    with pytest.raises(ValueError, match="lambda=0.99.*needs lambda=1"):
        model.reparameterize()
    with pytest.raises(ValueError, match="needs lambda=1"):
        jumbokit.reparameterize(model)
    with pytest.raises(ValueError, match="unknown qk_form"):
        model.set_join(1.0) or model.reparameterize(qk_form="wide")
    with pytest.raises(TypeError, match="expected a jumbokit Encoder"):
        reparameterize(nn.Linear(2, 2))
    custom = build_branched_encoder(config, branches=2, join_schedule=lambda t: t * t)
    assert custom.update_join(5000) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="custom"):
        custom.saved_config()
