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
    assert default_lr(64) == pytest.approx(1e-3)
    assert default_lr(1) == pytest.approx(2e-3 / 64)
    with pytest.raises(ValueError):
        default_lr(0)


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
    assert set(fishers) == set(names) and all((f >= 0).all() for f, _ in fishers.values())
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
