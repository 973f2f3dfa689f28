"""trunk_head: a second classifier on the trunk's mean token, its cross-entropy added in training, the two
heads' mean probabilities in evaluation."""

import pytest
import torch
from torch import nn

import jumbokit
from jumbokit.encoders import Encoder
from jumbokit.encoders.extras import mean_probability_logits
from jumbokit.timeseries.models import PATCHTST_MODELS
from jumbokit.training import classification_loss


def trunk_model(name: str = "patchtst_jumbo", **extra) -> nn.Module:
    torch.manual_seed(0)
    return jumbokit.create_model(name, num_classes=3, in_chans=2, seq_len=48, patches=6, dim=16,
                                 depth=1, num_heads=2, mlp_hidden=32, trunk="resnet", trunk_width=4,
                                 trunk_head=True, **extra)


@pytest.mark.parametrize("name", PATCHTST_MODELS)
def test_training_forward_keeps_the_trunk_logits_once(name):
    model = trunk_model(name).train()
    x = torch.randn(5, 2, 48)
    logits = model(x)
    aux = model.take_aux_logits()
    assert logits.shape == aux.shape == (5, 3)
    assert model.take_aux_logits() is None  # handed over once
    out = model.forward_features(x)
    assert torch.allclose(logits, model.forward_head(out), atol=1e-6)  # training returns the main head's logits


@pytest.mark.parametrize("name", PATCHTST_MODELS)
def test_evaluation_returns_the_mean_probabilities_of_both_heads(name):
    model = trunk_model(name).eval()
    x = torch.randn(4, 2, 48)
    x[1, 0, 30:] = float("nan")  # a shorter channel: the mean token skips its padded patches
    with torch.no_grad():
        out = model.forward_features(x)
        main = model.forward_head(out).softmax(-1)
        trunk = model.trunk_head(out.token_mean, out.channels).softmax(-1)
        got = model(x)
    assert torch.isfinite(got).all()
    assert torch.allclose(got.exp(), (main + trunk) / 2, atol=1e-6)
    assert model.take_aux_logits() is None  # nothing kept outside training


def test_mean_probability_logits_is_the_log_of_the_mean_probability():
    a, b = torch.randn(3, 5), torch.randn(3, 5)
    expected = ((a.softmax(-1) + b.softmax(-1)) / 2).log()
    assert torch.allclose(mean_probability_logits(a, b), expected, atol=1e-6)


def test_the_loss_adds_the_trunk_heads_cross_entropy():
    model = trunk_model().train()
    x, y = torch.randn(6, 2, 48), torch.tensor([0, 1, 2, 0, 1, 2])
    torch.manual_seed(1)
    loss, logs = classification_loss()(model, (x, y))
    torch.manual_seed(1)
    logits = model(x)
    ce = nn.functional.cross_entropy
    aux_ce = ce(model.take_aux_logits(), y)
    assert torch.allclose(loss, ce(logits, y) + aux_ce, atol=1e-6)
    assert torch.allclose(logs["aux_ce"], aux_ce, atol=1e-6) and not logs["aux_ce"].requires_grad
    loss.backward()
    assert model.trunk_head.fc.weight.grad.abs().sum() > 0


def test_reset_classifier_resizes_the_trunk_head():
    model = trunk_model()
    model.reset_classifier(7)
    assert model.trunk_head.fc.out_features == 7
    assert model.eval()(torch.randn(2, 2, 48)).shape == (2, 7)
    model.reset_classifier(0)
    assert model.trunk_head is None


def test_refused_without_a_trunk_and_on_images():
    with pytest.raises(ValueError, match="trunk_head adds a second head on a convolutional trunk"):
        jumbokit.create_model("patchtst_jumbo", num_classes=3, seq_len=48, patches=6, trunk_head=True)
    with pytest.raises(ValueError, match="trunk_head applies to series tokenizers only"):
        Encoder(tokenizer="image", img_size=32, patch_size=8, num_classes=3, trunk_head=True)


def test_the_sweep_gives_the_head_to_the_transformers_not_to_the_trunk_alone():
    """``--recipe small-data-trunk`` turns the head on; ``series_cnn`` already classifies from the trunk's mean
    token, so its model is built without a second one."""
    from jumbokit.cli import series as flags
    from jumbokit.timeseries.run import head_options

    cfg = flags.sweep_settings(["--recipe", "small-data-trunk"]).config
    assert cfg.model.trunk_head is True
    assert head_options("patchtst_jumbo", cfg) == {"jumbo_pool": "segments", "trunk_head": True}
    assert head_options("patchtst", cfg) == {"trunk_head": True}
    assert head_options("series_cnn", cfg) == {}
    assert flags.sweep_settings(["--recipe", "small-data-trunk", "--no-trunk-head"]).config.model.trunk_head is False
