"""Test-time adaptation: parameter selection, SAM/SAR updates, recovery, EATA, Tent (tiny CPU models)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import jumbokit
from jumbokit.adaptation import (
    EATA, SAM, SAR, NoAdapt, Tent, collect_params, compute_fishers, configure_model, default_lr,
    sar_collect_params, softmax_entropy,
)

torch.set_num_threads(1)


def tiny_encoder(kind: str, depth: int = 12) -> nn.Module:
    torch.manual_seed(0)
    return jumbokit.create_model(f"vit_pico_{kind}", img_size=16, patch_size=8, in_chans=1, num_classes=5,
                                 dim=16, num_heads=2, depth=depth)


class TinyNet(nn.Module):
    """x (B, 4) -> Linear -> LayerNorm -> Linear -> logits (B, 3)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.fc1 = nn.Linear(4, 6)
        self.ln = nn.LayerNorm(6)
        self.head = nn.Linear(6, 3)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln(self.fc1(x)))


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------------------------------ parameter selection

@pytest.mark.parametrize("kind", ["cls", "reg16", "jumbo", "gap"])
def test_sar_selects_norms_below_block_9_for_every_global_token_kind(kind):
    model = tiny_encoder(kind)
    _, names = sar_collect_params(model)
    expected = [f"blocks.{i}.{n}.{a}" for i in range(9) for n in ("norm1", "norm2") for a in ("weight", "bias")]
    if kind == "jumbo":
        expected += [f"global_tokens.jumbo_norms.{i}.{a}" for i in range(9) for a in ("weight", "bias")]
    assert sorted(names) == sorted(expected)
    _, all_names = collect_params(model)  # Tent / EATA: every norm, the final ones included
    assert set(names) < set(all_names)
    assert any(n.startswith(("norm.", "fc_norm.")) for n in all_names)
    assert any(n.startswith("blocks.11.") for n in all_names)


def test_sar_selection_on_timm_vit_and_custom_exclusion():
    timm = pytest.importorskip("timm")
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, num_classes=10)
    _, names = sar_collect_params(model)
    assert len(names) == 9 * 4 and names[0] == "blocks.0.norm1.weight" and names[-1] == "blocks.8.norm2.bias"
    _, names0 = sar_collect_params(model, exclude_last_blocks=0, exclude_final_norm=False)
    assert "blocks.11.norm2.bias" in names0 and "norm.weight" in names0
    with pytest.raises(ValueError, match="exclude_last_blocks"):
        sar_collect_params(model, exclude_last_blocks=13)


def test_configure_model_freezes_all_but_norm_affines_and_handles_batchnorm():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(3))
    model(torch.randn(2, 1, 5, 5))
    configure_model(model)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"1.weight", "1.bias"}
    assert model[1].training and not model[0].training and model[1].running_mean is None


def test_model_without_norm_layers_is_a_clear_error():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    with pytest.raises(ValueError, match="no adaptable normalization layers"):
        Tent(model)
    with pytest.raises(ValueError, match="no adaptable normalization layers"):
        SAR(model)


def test_default_lr_follows_the_reference():
    # the SAR reference (ViT): lr = 0.001 * B / 64 for every method; doubled only for SAR at batch size 1
    assert default_lr(64) == pytest.approx(1e-3)
    assert default_lr(16) == pytest.approx(0.001 * 16 / 64)  # Tent / EATA: no doubling below batch 32
    assert default_lr(1) == pytest.approx(0.001 / 64)
    assert default_lr(1, method="sar") == pytest.approx(2 * 0.001 / 64)
    assert default_lr(16, method="sar") == pytest.approx(0.001 * 16 / 64)
    with pytest.raises(ValueError):
        default_lr(0)


def test_methods_build_sgd_with_the_reference_lr():
    from jumbokit.adaptation import build_method

    lrs = {name: build_method(name, TinyNet(), batch_size=b, num_classes=3).optimizer.param_groups[0]["lr"]
           for name, b in (("tent", 16), ("eata", 1))}
    assert lrs == {"tent": pytest.approx(0.001 * 16 / 64), "eata": pytest.approx(0.001 / 64)}
    assert build_method("sar", TinyNet(), 1, 3).optimizer.param_groups[0]["lr"] == pytest.approx(2 * 0.001 / 64)
    assert build_method("sar", TinyNet(), 16, 3).optimizer.param_groups[0]["lr"] == pytest.approx(0.001 * 16 / 64)


# ------------------------------------------------------------------------------------------ SAM and SAR updates

def test_sam_restore_and_state_dict_round_trip():
    w = nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = SAM([w], torch.optim.SGD, rho=0.5, lr=0.1, momentum=0.9)
    (w ** 2).sum().backward()
    opt.first_step(zero_grad=True)
    g = torch.tensor([2.0, -4.0])
    assert torch.allclose(w.detach(), torch.tensor([1.0, -2.0]) + 0.5 * g / g.norm())
    opt.restore()
    assert torch.equal(w.detach(), torch.tensor([1.0, -2.0]))
    state = opt.state_dict()
    assert state["state"] == {}
    with pytest.raises(ValueError, match="rho"):
        SAM([w], rho=-1.0, lr=0.1)


def _entropy_filtered(model: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, keep: torch.Tensor | None,
                      margin: float):
    logits = torch.func.functional_call(model, params, (x,))
    ent = softmax_entropy(logits)
    if keep is not None:
        ent = ent[keep]
    mask = ent < margin
    return ent[mask].mean(), mask


def test_sar_step_matches_a_hand_computation():
    model = TinyNet()
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(3))
    margin, rho, lr = 1.0, 0.05, 0.1
    names = ["ln.weight", "ln.bias"]
    theta = {k: v.detach().clone() for k, v in model.named_parameters()}

    # by hand: gradient of the filtered entropy, ascent step of size rho, gradient there, SGD (momentum 0.9,
    # first step: buffer = gradient) from the original weights
    base = {k: v.clone().requires_grad_(k in names) for k, v in theta.items()}
    loss1, keep1 = _entropy_filtered(model, base, x, None, margin)
    grads1 = torch.autograd.grad(loss1, [base[n] for n in names])
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads1]))
    perturbed = dict(base)
    for n, g in zip(names, grads1):
        perturbed[n] = (theta[n] + rho * g / (norm + 1e-12)).requires_grad_(True)
    logits2 = torch.func.functional_call(model, perturbed, (x,))
    ent2 = softmax_entropy(logits2)[keep1]
    loss2 = ent2[ent2 < margin].mean()
    grads2 = torch.autograd.grad(loss2, [perturbed[n] for n in names])
    expected = {n: theta[n] - lr * g for n, g in zip(names, grads2)}
    assert 0 < keep1.sum() < len(x)  # the filter really filters in this case

    sar = SAR(model, lr=lr, rho=rho, margin_e0=margin, reset_constant=0.0, exclude_last_blocks=0)
    logits = sar(x)
    assert torch.allclose(logits, torch.func.functional_call(model, theta, (x,)), atol=1e-6)  # first-pass scores
    for n in names:
        assert torch.allclose(dict(model.named_parameters())[n], expected[n], atol=1e-6), n
    for n in ("fc1.weight", "head.weight"):
        assert torch.equal(dict(model.named_parameters())[n], theta[n])
    assert sar.stats["updates"] == 1 and sar.ema == pytest.approx(float(loss2.detach()), rel=1e-5)


def test_sar_empty_filter_makes_no_update():
    model = TinyNet()
    x = torch.randn(6, 4)
    sar = SAR(model, lr=0.1, margin_e0=0.0, exclude_last_blocks=0)  # no entropy is below 0
    before = snapshot(model)
    logits = sar(x)
    assert torch.isfinite(logits).all()
    assert same_state(before, snapshot(model))
    assert sar.optimizer.state_dict()["state"] == {}  # no momentum buffer was created
    assert sar.ema is None and sar.stats["skipped"] == 1 and sar.stats["updates"] == 0


def test_sar_second_filter_empty_restores_weights_without_update():
    model = TinyNet()
    x = torch.randn(1, 4, generator=torch.Generator().manual_seed(5))
    theta = {k: v.detach().clone() for k, v in model.named_parameters()}
    probe = SAR(TinyNet(), lr=0.1, margin_e0=10.0, reset_constant=0.0, exclude_last_blocks=0)
    ent1 = float(softmax_entropy(probe.model(x)).detach())
    # SAM ascends the entropy: the perturbed entropy is higher; a margin in between keeps the sample only once
    probe.optimizer.zero_grad()
    softmax_entropy(probe.model(x)).mean().backward()
    probe.optimizer.first_step(zero_grad=True)
    ent2 = float(softmax_entropy(probe.model(x)).detach())
    probe.optimizer.restore()
    assert ent2 > ent1
    sar = SAR(model, lr=0.1, margin_e0=(ent1 + ent2) / 2, exclude_last_blocks=0)
    sar(x)
    assert all(torch.equal(p, theta[n]) for n, p in model.named_parameters())
    assert sar.optimizer.state_dict()["state"] == {} and sar.stats["skipped"] == 1


def test_sar_recovery_restores_the_exact_saved_state_and_restarts_the_average():
    model = TinyNet()
    sar = SAR(model, lr=0.5, margin_e0=10.0, reset_constant=0.0, exclude_last_blocks=0)
    source = snapshot(model)
    x = torch.randn(8, 4)
    sar(x)
    sar(x)
    assert not same_state(source, snapshot(model))
    assert sar.optimizer.state_dict()["state"]  # momentum buffers exist now
    sar.reset_constant = 100.0  # any moving average is below it: the next update triggers recovery
    sar(x)
    assert same_state(source, snapshot(model))
    assert sar.optimizer.state_dict()["state"] == {}
    assert sar.ema is None and sar.stats["recoveries"] == 1
    sar.reset_constant = 0.0
    sar(x)  # the average starts again from this batch's loss instead of blending the old one
    loss = sar.ema
    sar.reset()
    fresh = SAR(TinyNet(), lr=0.5, margin_e0=10.0, reset_constant=0.0, exclude_last_blocks=0)
    fresh(x)
    assert loss == pytest.approx(fresh.ema, rel=1e-6)


def test_sar_on_jumbo_encoder_adapts_only_selected_params_and_stays_finite():
    model = tiny_encoder("jumbo", depth=4)
    source = {k: v.detach().clone() for k, v in model.named_parameters()}
    sar = SAR(model, lr=0.05, margin_e0=10.0, batch_size=4)
    x = torch.randn(4, 1, 16, 16)
    for _ in range(2):
        assert torch.isfinite(sar(x)).all()
    _, selected = sar_collect_params(model)
    changed = {k for k, v in model.named_parameters() if not torch.equal(v, source[k])}
    assert changed and changed <= set(selected)
    assert any(k.startswith("global_tokens.jumbo_norms.") for k in changed)


def test_episodic_mode_resets_before_each_batch():
    model = TinyNet()
    tent = Tent(model, lr=0.5, episodic=True)
    x = torch.randn(8, 4)
    first = tent(x)
    second = tent(x)
    assert torch.allclose(first, second)


# ------------------------------------------------------------------------------------------ Tent, EATA, none

def test_tent_updates_all_norm_affines_and_reset_restores():
    model = TinyNet()
    source = snapshot(model)
    tent = Tent(model, lr=0.5)
    tent(torch.randn(8, 4))
    changed = {k for k, v in snapshot(model).items() if not torch.equal(v, source[k])}
    assert changed == {"ln.weight", "ln.bias"}
    tent.reset()
    assert same_state(source, snapshot(model))


def test_no_adapt_leaves_the_model_unchanged():
    model = TinyNet()
    source = snapshot(model)
    out = NoAdapt(model)(torch.randn(5, 4))
    assert out.shape == (5, 3) and not out.requires_grad
    assert same_state(source, snapshot(model))


def test_eata_filters_weights_and_regularises():
    model = TinyNet()
    x = torch.randn(16, 4)
    configure_model(model)
    _, names = collect_params(model)
    fishers = compute_fishers(model, [x[:8], x[8:]], names)
    assert set(fishers) == set(names)
    squares = []  # by hand: squared gradients of the cross-entropy with the model's own predictions, batch mean
    for batch in (x[:8], x[8:]):
        logits = model(batch)
        grad = torch.autograd.grad(F.cross_entropy(logits, logits.argmax(dim=1)), model.ln.weight)[0]
        squares.append(grad ** 2)
    assert torch.allclose(fishers["ln.weight"][0], (squares[0] + squares[1]) / 2, atol=1e-9)
    assert torch.equal(fishers["ln.weight"][1], model.ln.weight.detach())
    eata = EATA(model, fishers=fishers, fisher_alpha=1.0, e_margin=10.0, d_margin=0.05, lr=0.1)
    assert float(eata.fisher_penalty().detach()) == 0.0  # at the anchor
    eata(x)
    assert eata.stats["updates"] == 1 and eata.moving_probs is not None
    assert float(eata.fisher_penalty().detach()) > 0.0
    eata.d_margin = -1.0  # every sample is now redundant: no update
    before = snapshot(model)
    eata(x)
    assert same_state(before, snapshot(model)) and eata.stats["updates"] == 1
    eata.reset()
    assert eata.moving_probs is None


def test_eata_reliability_weight_matches_definition():
    model = TinyNet()
    x = torch.randn(6, 4)
    eata = EATA(model, e_margin=10.0, d_margin=1.0, lr=1.0)
    for p in model.parameters():
        p.grad = None
    theta = {k: v.detach().clone() for k, v in model.named_parameters()}
    params = {k: v.clone().requires_grad_(k.startswith("ln.")) for k, v in theta.items()}
    ent = softmax_entropy(torch.func.functional_call(model, params, (x,)))
    loss = (ent * torch.exp(10.0 - ent.detach())).mean()
    grads = torch.autograd.grad(loss, [params["ln.weight"], params["ln.bias"]])
    eata(x)
    assert torch.allclose(model.ln.weight, theta["ln.weight"] - grads[0], atol=1e-5)
    assert torch.allclose(model.ln.bias, theta["ln.bias"] - grads[1], atol=1e-5)
    assert math.isclose(eata.e_margin, 10.0)


def test_entropy_of_uniform_logits_is_log_classes():
    assert float(softmax_entropy(torch.zeros(1, 7))) == pytest.approx(math.log(7))
    assert F.softmax(torch.zeros(1, 3), 1).sum() == pytest.approx(1.0)


# ------------------------------------------------------------------------------------------ blocks wherever they sit

class Normalize(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - 0.5) / 0.25


@pytest.mark.parametrize("kind", ["cls", "jumbo"])
def test_sar_selection_on_a_wrapped_encoder(kind):
    wrapped = nn.Sequential(Normalize(), tiny_encoder(kind))
    _, names = sar_collect_params(wrapped)
    expected = [f"1.blocks.{i}.{n}.{a}" for i in range(9) for n in ("norm1", "norm2") for a in ("weight", "bias")]
    if kind == "jumbo":
        expected += [f"1.global_tokens.jumbo_norms.{i}.{a}" for i in range(9) for a in ("weight", "bias")]
    assert sorted(names) == sorted(expected)  # neither blocks 9-11 nor the final norm


def test_sar_selection_on_a_wrapped_timm_vit():
    timm = pytest.importorskip("timm")
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, num_classes=10)
    _, names = sar_collect_params(nn.Sequential(Normalize(), vit))
    assert len(names) == 36 and names[0] == "1.blocks.0.norm1.weight" and names[-1] == "1.blocks.8.norm2.bias"


class StageBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1, self.fc1, self.norm2, self.fc2 = nn.LayerNorm(dim), nn.Linear(dim, dim), nn.LayerNorm(dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.fc1(self.norm1(x))
        return x + self.fc2(F.gelu(self.norm2(x)))


class Stage(nn.Module):
    def __init__(self, dim: int, depth: int, downsample: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(StageBlock(dim) for _ in range(depth))
        self.downsample = nn.Sequential() if not downsample else nn.Sequential()
        if downsample:
            self.downsample.add_module("norm", nn.LayerNorm(dim))
            self.downsample.add_module("proj", nn.Linear(dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.downsample(x)


class MultiStage(nn.Module):
    """A ViT-ResNAS-like layout: BatchNorm2d conv stem at ``patch_embed``, blocks at ``stages.{s}.blocks.{i}``."""

    def __init__(self, dim: int = 8, classes: int = 5) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.patch_embed = nn.Sequential(nn.Conv2d(1, dim, 3, stride=2, padding=1), nn.BatchNorm2d(dim), nn.ReLU())
        self.stages = nn.ModuleList([Stage(dim, 4, downsample=True), Stage(dim, 4, downsample=False)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)
        self.patch_embed(torch.randn(16, 1, 8, 8) * 2 + 1)  # source running statistics away from (0, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        for stage in self.stages:
            x = stage(x)
        return self.head(self.norm(x).mean(dim=1))


def test_blocks_are_counted_across_stages_and_the_stem_batchnorm_is_left_out():
    from jumbokit.adaptation import norm_layers, transformer_blocks

    model = MultiStage()
    blocks = [name for name, _ in transformer_blocks(model)]
    assert blocks == [f"stages.{s}.blocks.{i}" for s in range(2) for i in range(4)]
    assert "patch_embed.1" not in {n for n, _ in norm_layers(model)}
    assert "patch_embed.1" in {n for n, _ in norm_layers(model, adapt_batchnorm=True)}

    stem = model.patch_embed[1]
    mean, var = stem.running_mean.clone(), stem.running_var.clone()
    with pytest.warns(UserWarning, match=r"LayerNorm-only.*patch_embed\.1"):
        sar = SAR(model, lr=0.1, margin_e0=10.0)
    _, names = sar_collect_params(model)
    layers = sorted({n.rsplit(".", 1)[0] for n in names})
    expected = sorted([f"stages.0.blocks.{i}.norm{k}" for i in range(4) for k in (1, 2)]
                      + [f"stages.1.blocks.{i}.norm{k}" for i in range(2) for k in (1, 2)]
                      + ["stages.0.downsample.norm"])  # the last quarter (2 of 8 blocks) and the final norm stay
    assert layers == expected
    assert {id(p) for g in sar.optimizer.param_groups for p in g["params"]} == {
        id(p) for p in sar_collect_params(model)[0]}
    x = torch.randn(6, 1, 8, 8)
    sar(x)
    sar(x)
    assert not stem.training and not stem.weight.requires_grad
    assert torch.equal(stem.running_mean, mean) and torch.equal(stem.running_var, var)
    # the stem normalises with source statistics: single samples are scored as in the batch
    with torch.no_grad():
        assert torch.allclose(model(x[:1]), model(x)[:1], atol=1e-6)

    tent_model = MultiStage()
    with pytest.warns(UserWarning, match="BatchNorm"):
        Tent(tent_model, lr=0.1)
    adapted = {n for n, p in tent_model.named_parameters() if p.requires_grad}
    assert "patch_embed.1.weight" not in adapted and "norm.weight" in adapted and "stages.1.blocks.3.norm2.bias" in adapted
    forced = MultiStage()
    Tent(forced, lr=0.1, adapt_batchnorm=True)
    assert forced.patch_embed[1].training and forced.patch_embed[1].weight.requires_grad


def test_sar_and_tent_on_the_multi_stage_zoo_encoder():
    torch.manual_seed(0)
    model = jumbokit.create_model("vit_res_pico_jumbo", num_classes=5)
    blocks = [name for name, _ in jumbokit.adaptation.transformer_blocks(model)]
    assert blocks == [f"stages.{s}.blocks.{i}" for s, n in enumerate((4, 3, 3)) for i in range(n)]
    _, names = sar_collect_params(model)
    layers = {n.rsplit(".", 1)[0] for n in names}
    # 10 blocks: the last two (stages.2.blocks.1-2) and their Jumbo norms stay, as do the final norm and the stem
    assert not any(n.startswith(("stages.2.blocks.1.", "stages.2.blocks.2.", "norm.", "patch_embed.")) for n in names)
    assert {"stages.2.blocks.0.norm1", "stages.2.global_tokens.jumbo_norms.0", "stages.1.downsample.norm"} <= layers
    assert not layers & {"stages.2.global_tokens.jumbo_norms.1", "stages.2.global_tokens.jumbo_norms.2"}
    stem_bn = [m for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)]
    stats = [m.running_mean.clone() for m in stem_bn]
    with pytest.warns(UserWarning, match="3 BatchNorm layer"):
        tent = Tent(model, lr=0.1, batch_size=1)
    x = torch.randn(1, 3, 32, 32)
    out = tent(x)
    assert torch.isfinite(out).all() and tent.stats["updates"] == 1
    assert all(not m.training and torch.equal(m.running_mean, s) for m, s in zip(stem_bn, stats))


def test_branched_training_form_asks_to_reparameterize_first():
    from jumbokit.encoders.branches import build_branched_encoder
    from jumbokit.encoders import model_config

    config = model_config("vit_pico_jumbo", img_size=16, patch_size=8, in_chans=1, num_classes=5, dim=16,
                          num_heads=2, depth=4)
    branched = build_branched_encoder(config, branches=2)
    for method in (Tent, SAR, EATA):
        with pytest.raises(ValueError, match="reparameterize first"):
            method(branched)
    branched.set_join(1.0)
    plain = jumbokit.reparameterize(branched)
    assert torch.isfinite(Tent(plain, lr=0.1)(torch.randn(2, 1, 16, 16))).all()


# ------------------------------------------------------------------------------------------ recovery

class ConfidentNet(nn.Module):
    """x (B, C) -> LayerNorm(C) -> scale * identity: predicts argmax(x); ``scale`` sets the confidence."""

    def __init__(self, classes: int = 10, scale: float = 2.0) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(classes)
        self.head = nn.Linear(classes, classes)
        with torch.no_grad():
            self.head.weight.copy_(scale * torch.eye(classes))
            self.head.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln(x))


def confident_batch(labels: list[int], classes: int = 10, seed: int = 0) -> torch.Tensor:
    noise = 0.05 * torch.randn(len(labels), classes, generator=torch.Generator().manual_seed(seed))
    return F.one_hot(torch.tensor(labels), classes).float() + noise


def test_recovery_threshold_scales_with_log_classes():
    from jumbokit.adaptation import recovery_threshold

    assert recovery_threshold(1000) == pytest.approx(0.2)
    assert recovery_threshold(10) == pytest.approx(0.2 * math.log(10) / math.log(1000))
    assert recovery_threshold(100, 0.3) == pytest.approx(0.3 * 2 / 3)


def test_sar_adapts_a_confident_ten_class_model_instead_of_recovering_every_update():
    x = [confident_batch(list(range(10)), seed=s) for s in range(4)]
    probe = ConfidentNet()
    entropy = float(softmax_entropy(probe(x[0])).mean().detach())
    assert 0.2 * math.log(10) / math.log(1000) < entropy < 0.2  # between the scaled and the reference threshold

    model = ConfidentNet()
    source = snapshot(model)
    sar = SAR(model, lr=0.1, exclude_last_blocks=0)
    for batch in x:
        sar(batch)
    assert sar.reset_constant == pytest.approx(0.2 * math.log(10) / math.log(1000))
    assert sar.stats["updates"] == 4 and sar.stats["recoveries"] == 0
    assert not same_state(source, snapshot(model))

    # the unscaled reference constant undoes every update: counted, and warned about once
    model = ConfidentNet()
    sar = SAR(model, lr=0.1, reset_constant=0.2, exclude_last_blocks=0)
    with pytest.warns(RuntimeWarning, match="consecutive updates") as record:
        for batch in x:
            sar(batch)
    assert len([w for w in record if issubclass(w.category, RuntimeWarning)]) == 1
    assert sar.stats["recoveries"] == 4 and sar.stats["consecutive_recoveries"] == 3
    assert same_state(source, snapshot(model))
    sar.reset()  # an episode boundary ends the streak
    sar.reset_constant = 0.0
    sar(x[0])
    assert sar.stats["consecutive_recoveries"] == 3


def test_recoveries_reach_the_stream_results():
    from jumbokit.adaptation import build_method
    from jumbokit.adaptation.wild import MethodSettings, build_episodes, run_episodes

    data = torch.utils.data.TensorDataset(torch.cat([confident_batch(list(range(10)), seed=s) for s in range(3)]),
                                          torch.arange(30) % 10)
    episodes = build_episodes("normal", {"shift": data}, batch_size=10)
    adapter = build_method("sar", ConfidentNet(), 10, 10, MethodSettings(lr=0.1, sar_reset_constant=0.2,
                                                                         sar_exclude_last_blocks=0))
    with pytest.warns(RuntimeWarning):
        result = run_episodes(adapter, episodes)
    assert result.stats["recoveries"] == 3 and result.stats["consecutive_recoveries"] == 2


# ------------------------------------------------------------------------------------------ end to end

def _source_and_stream(batches: int = 3):
    torch.manual_seed(0)
    model = tiny_encoder("jumbo", depth=4)
    with torch.no_grad():
        model.head.weight.mul_(15.0)  # a confident source classifier (entropy ~0.25 nats of ln 5)
    gen = torch.Generator().manual_seed(7)
    clean = [torch.randn(8, 1, 16, 16, generator=gen) for _ in range(2)]
    shifted = [0.6 * torch.randn(8, 1, 16, 16, generator=gen) + 0.8 for _ in range(batches)]  # contrast/brightness
    return model.eval(), clean, shifted


def test_adaptation_changes_predictions_end_to_end_and_reset_restores_bit_for_bit():
    from jumbokit.adaptation import build_method
    from jumbokit.adaptation.wild import MethodSettings

    source, clean, stream = _source_and_stream()
    with torch.no_grad():
        source_logits = [source(x) for x in stream]
    margin = 0.4 * math.log(5)
    kept = (softmax_entropy(source_logits[0]) < margin).float().mean()
    assert 0 < kept  # confident samples: SAR and EATA have something to learn from
    source_state = snapshot(source)
    settings = MethodSettings(lr=0.05)
    for name in ("none", "tent", "sar", "eata"):
        adapter = build_method(name, source, 8, 5, settings, clean_batches=clean if name == "eata" else None)
        first = adapter(stream[0])
        outputs = [first] + [adapter(x) for x in stream[1:]]
        adapted = snapshot(adapter.model)
        if name == "none":
            assert same_state(adapted, source_state)
            assert all(torch.equal(o, s) for o, s in zip(outputs, source_logits))
        else:
            assert adapter.stats["updates"] >= 1, name
            changed = [k for k in adapted if not torch.equal(adapted[k], source_state[k])]
            assert changed and all(k.endswith(("weight", "bias")) and "norm" in k for k in changed), (name, changed)
            assert (outputs[-1] - source_logits[-1]).abs().max() > 1e-4, name  # predictions moved
        adapter.reset()
        assert same_state(snapshot(adapter.model), source_state), name  # bit for bit
        if adapter.optimizer is not None:
            assert adapter.optimizer.state_dict()["state"] == {}, name
        assert torch.equal(adapter(stream[0]), first), name  # the same first step again
    assert same_state(snapshot(source), source_state)  # build_method adapted copies


def test_eata_diversity_filter_with_a_real_moving_average():
    model = ConfidentNet(classes=10, scale=3.0)
    eata = EATA(model, e_margin=0.4 * math.log(10), d_margin=0.05, lr=0.01)
    eata(confident_batch([0, 1, 2, 3, 4] * 2, seed=1))  # history: classes 0-4
    history = eata.moving_probs.clone()
    assert eata.stats["selected"] == 10

    x = confident_batch([0, 1, 2, 5, 6, 7, 8, 9], seed=2)
    with torch.no_grad():
        probs = model(x).softmax(dim=1)
    cosine = F.cosine_similarity(history.unsqueeze(0), probs, dim=1)
    novel = cosine.abs() < 0.05
    assert novel.tolist() == [False] * 3 + [True] * 5  # seen classes are redundant, new ones are kept
    eata(x)
    assert eata.stats["reliable"] == 18 and eata.stats["selected"] == 10 + 5 and eata.stats["updates"] == 2
    assert torch.allclose(eata.moving_probs, 0.9 * history + 0.1 * probs[novel].mean(dim=0), atol=1e-6)
