"""The full-resolution convolutional trunk of the series tokenizer: shapes, missing steps, the first
difference, token statistics and the per-channel level and scale."""

from __future__ import annotations

import pytest
import torch

import jumbokit
from jumbokit.timeseries.models.scale import LevelScale
from jumbokit.timeseries.models.trunk import TokenStats, TrunkPatchFeatures, first_difference
from jumbokit.timeseries.models.tokenizer import SeriesPatchTokenizer

FRONTS = [dict(trunk="inception"), dict(trunk="inception", trunk_depth=3, trunk_diff=True, token_stats=True),
          dict(trunk="resnet", trunk_width=8, trunk_depth=2), dict(token_stats=True),
          dict(trunk="resnet", trunk_width=8, trunk_depth=1, level_scale=True)]


@pytest.mark.parametrize("kind, width, depth, out", [("inception", 4, 1, 16), ("inception", 4, 6, 16),
                                                      ("resnet", 8, 2, 8)])
def test_trunk_features_give_one_token_per_patch_window(kind, width, depth, out):
    feats = TrunkPatchFeatures(kind, width, depth, dim=24, patch_len=10, stride=5)
    assert feats.trunk.out_chans == out
    tokens = feats(torch.randn(3, 2, 60))
    assert tokens.shape == (6, (60 - 10) // 5 + 1, 24)  # (B*C, N, D)


@pytest.mark.parametrize("front", FRONTS)
def test_the_trunk_sees_every_step_at_full_resolution(front):
    """A change at one step moves the features of the windows holding it; a trunk also moves its neighbours'
    (receptive field), the linear patch projection alone does not."""
    torch.manual_seed(0)
    tok = SeriesPatchTokenizer(seq_len=64, patch_len=8, stride=8, dim=16, pad_end=False, **front).eval()
    x = torch.randn(1, 1, 64)
    y = x.clone()
    y[..., 20] += 1.0  # step 20 lies in window 2 (steps 16-23)
    moved = (tok(x).tokens - tok(y).tokens).abs().sum(-1)[0]
    assert moved[2] > 0
    others = torch.cat([moved[:2], moved[3:]])
    if front.get("trunk"):
        assert moved[1] > 0 and moved[3] > 0
    else:
        assert others.sum() == 0


@pytest.mark.parametrize("front", FRONTS)
def test_missing_steps_are_ignored_and_unequal_lengths_run(front):
    """NaN padding at the end gives the tokens of the observed part of a series that is NaN-free and as long
    (the trunk reads padding as 0, so only windows that touch the padding differ), with the padding masked."""
    torch.manual_seed(0)
    tok = SeriesPatchTokenizer(seq_len=48, patch_len=8, stride=4, dim=16, **front).eval()
    x = torch.randn(2, 1, 48)
    x[1, :, 30:] = float("nan")
    out = tok(x)
    assert torch.isfinite(out.tokens).all()
    assert out.pad_mask is not None and out.pad_mask[1].any() and not out.pad_mask[0].any()
    short = tok(x[1:2, :, :30])  # the same series, cut where the NaNs start
    assert torch.isfinite(short.tokens).all()
    if not front.get("trunk"):  # without a trunk, the first windows depend on their own steps only
        torch.testing.assert_close(out.tokens[1, :5], short.tokens[0, :5])


def test_models_with_a_trunk_train_and_keep_the_global_token_plugins():
    for name in ("patchtst", "patchtst_registers", "patchtst_jumbo"):
        model = jumbokit.create_model(name, num_classes=3, in_chans=2, seq_len=40, patches=8, trunk="inception",
                                      trunk_width=4, trunk_depth=1, trunk_diff=True, token_stats=True)
        x = torch.randn(4, 2, 40)
        x[0, :, 25:] = float("nan")
        loss = model(x).logsumexp(-1).mean()
        loss.backward()
        assert all(p.grad is not None for p in model.patch_embed.trunk.parameters())
        assert model.config["global_tokens"] in ("cls", "registers", "jumbo")


def test_first_difference_is_zero_where_a_step_is_missing():
    x = torch.tensor([[[1.0, 3.0, 0.0, 4.0, 6.0]]])
    seen = torch.tensor([[[True, True, False, True, True]]])
    assert first_difference(x, seen).tolist() == [[[0.0, 2.0, 0.0, 0.0, 2.0]]]
    assert first_difference(x, None).tolist() == [[[0.0, 2.0, -3.0, 4.0, 2.0]]]


def test_token_stats_are_the_observed_mean_and_std_of_each_window():
    stats = TokenStats(dim=2, patch_len=4, stride=4)
    with torch.no_grad():
        stats.proj.weight.copy_(torch.eye(2))
        stats.proj.bias.zero_()
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 0.0, 0.0]]])
    seen = torch.tensor([[[True] * 6 + [False] * 2]])
    out = stats(x, seen)[0]
    torch.testing.assert_close(out[0], torch.tensor([2.5, (1.25 + 1e-5) ** 0.5]))
    torch.testing.assert_close(out[1], torch.tensor([5.0, 1e-5 ** 0.5]))


def test_level_scale_normalises_observed_steps_and_embeds_mean_and_log_std():
    scale = LevelScale(dim=2)
    with torch.no_grad():
        scale.proj.weight.copy_(torch.eye(2))
        scale.proj.bias.zero_()
    x = torch.tensor([[[1.0, 3.0, 5.0, 0.0], [2.0, 2.0, 2.0, 2.0]]])  # (B=1, C=2, L=4)
    seen = torch.tensor([[[True, True, True, False], [True] * 4]])
    normalised, embedding = scale(x, seen)
    std = (8.0 / 3.0 + 1e-10) ** 0.5
    torch.testing.assert_close(normalised[0, 0], torch.tensor([-2.0 / std, 0.0, 2.0 / std, 0.0]))
    torch.testing.assert_close(normalised[0, 1], torch.zeros(4))  # a constant channel: 0, not NaN
    assert embedding.shape == (2, 1, 2)  # (B*C, 1, D)
    asinh = torch.asinh(torch.tensor([3.0, 2.0]))
    torch.testing.assert_close(embedding[0, 0], torch.stack([asinh[0], torch.tensor(std).log()]))
    torch.testing.assert_close(embedding[1, 0], torch.stack([asinh[1], torch.tensor(1e-5).log()]))  # the floor


def test_level_scale_tokens_of_a_rescaled_series_differ_by_one_vector_per_channel():
    """Scaling and shifting a channel leaves its normalised patches alone: its tokens move by one vector (the
    level/scale embedding), the same for every token; without the option a rescaled series is read as is."""
    torch.manual_seed(0)
    tok = SeriesPatchTokenizer(seq_len=40, patch_len=8, stride=4, in_chans=2, dim=16, trunk="resnet", trunk_width=4,
                               trunk_depth=1, level_scale=True).eval()
    x = torch.randn(3, 2, 40)
    with torch.no_grad():
        moved = tok(x * 7.0 + 3.0).tokens - tok(x).tokens  # (B*C, N, D)
    assert moved.abs().amax() > 0.1
    torch.testing.assert_close(moved, moved[:, :1].expand_as(moved), atol=1e-4, rtol=1e-4)
    tok.level_scale = None  # the same weights reading the series as they come
    with torch.no_grad():
        plain = tok(x * 7.0 + 3.0).tokens - tok(x).tokens
    assert (plain - plain[:, :1]).abs().amax() > 0.1


@pytest.mark.parametrize("bad, message", [
    (dict(trunk="lstm"), "unknown trunk 'lstm'"), (dict(trunk="inception", trunk_width=0), "trunk_width"),
    (dict(trunk_diff=True), "trunk_diff feeds the first difference to a convolutional trunk"),
    (dict(trunk_mix=True), "trunk_mix sets how the channels are read by a convolutional trunk"),
])
def test_bad_trunk_settings_name_the_setting(bad, message):
    with pytest.raises(ValueError, match=message):
        jumbokit.create_model("patchtst", num_classes=2, seq_len=40, **bad)


def test_image_encoders_refuse_series_options():
    with pytest.raises(ValueError, match="trunk applies to series tokenizers only"):
        jumbokit.create_model("vit_pico_cls", trunk="inception")


def test_relative_position_bias_is_added_by_patch_offset():
    """With the table at zero the model equals the one without it; a bias on offset 0 changes it; offsets follow
    kept positions under token drop; branches refuse it."""
    from jumbokit.timeseries.models.rel_pos import RelativePositionBias

    torch.manual_seed(0)
    kw = dict(num_classes=3, in_chans=2, seq_len=40, patches=8)
    plain = jumbokit.create_model("patchtst_jumbo", **kw).eval()
    biased = jumbokit.create_model("patchtst_jumbo", rel_pos_bias=True, **kw).eval()
    biased.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(3, 2, 40)
    x[0, :, 30:] = float("nan")
    torch.testing.assert_close(biased(x), plain(x))
    with torch.no_grad():
        biased.rel_pos.table[:, biased.num_patches - 1] = 2.0  # offset 0: attend to yourself
    assert not torch.allclose(biased(x), plain(x))

    rel = RelativePositionBias(num_heads=2, num_patches=4, num_global=1)
    with torch.no_grad():
        rel.table.copy_(torch.arange(14.0).reshape(2, 7))
    full = rel(4)
    assert full.shape == (1, 2, 5, 5) and (full[:, :, 0] == 0).all() and (full[:, :, :, 0] == 0).all()
    assert full[0, 0, 1 + 3, 1 + 0] == 3 + 3  # offset +3 -> table index offset + N - 1 = 6
    kept = rel(4, torch.tensor([[0, 3]]))
    assert kept[0, 1, 2, 1] == 7 + 6 and kept[0, 1, 1, 2] == 7 + 0  # offsets +3 and -3 of the kept patches
    with pytest.raises(ValueError, match="rel_pos_bias is not supported with progressive-join branches"):
        jumbokit.create_model("patchtst_jumbo", rel_pos_bias=True, branches=3, **kw)


def test_channel_mixing_trunk_reads_every_channel_and_feeds_every_channel():
    """trunk_mix: one pass over all channels; a change in channel 0 moves the tokens of channel 1 too (not so
    with the channel-independent trunk); NaN padding of one channel keeps the others' windows observed."""
    torch.manual_seed(0)
    kwargs = dict(seq_len=48, patch_len=8, stride=8, in_chans=3, dim=16, pad_end=False, trunk="inception",
                  trunk_width=4, trunk_depth=1, trunk_diff=True)
    mixing = SeriesPatchTokenizer(**kwargs, trunk_mix=True).eval()
    separate = SeriesPatchTokenizer(**kwargs).eval()
    assert mixing.trunk.trunk.blocks[0].bottleneck.in_channels == 6  # 3 channels and their differences
    x = torch.randn(2, 3, 48)
    y = x.clone()
    y[0, 0, 20] += 1.0
    for tok, crosses in ((mixing, True), (separate, False)):
        moved = (tok(x).tokens - tok(y).tokens).abs().sum(-1)  # (B*C, N): rows are (series, channel)
        assert moved[0].sum() > 0 and (moved[1].sum() > 0) == crosses and moved[3:].sum() == 0
    x[1, 2, 30:] = float("nan")
    assert torch.isfinite(mixing(x).tokens).all()
    with pytest.raises(ValueError, match="built for 3 channel"):
        mixing.trunk(torch.randn(1, 2, 48))


def test_series_cnn_is_the_trunk_whose_mean_token_feeds_the_head():
    """The transformer-off reference: no layer and no global token; its feature is the LayerNorm of each
    channel's mean observed token, and every parameter learns (so distributed training has none unused)."""
    torch.manual_seed(0)
    model = jumbokit.create_model("series_cnn", num_classes=3, in_chans=2, seq_len=40, patches=8, trunk_width=4,
                                  trunk_diff=True)
    assert len(model.blocks) == 0 and model.num_global_tokens == 0
    assert model.config["trunk"] == "resnet"
    x = torch.randn(4, 2, 40)
    x[0, :, 25:] = float("nan")
    model.eval()
    out = model.forward_features(x)
    tok = model.tokenize(x)
    kept = (~tok.pad_mask).unsqueeze(-1).float()  # (B*C, N, 1)
    mean_token = (tok.tokens * kept).sum(1) / kept.sum(1)
    torch.testing.assert_close(out.feature, model.fc_norm(mean_token))
    model.train()
    model(x).logsumexp(-1).mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_series_cnn_refuses_a_missing_trunk_and_branches():
    with pytest.raises(ValueError, match="needs a trunk.*got trunk=None"):
        jumbokit.create_model("series_cnn", num_classes=3, in_chans=1, seq_len=40, trunk=None)
    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.run import build_series_model

    data = load_dataset("GunPoint", download=False)
    with pytest.raises(ValueError, match=r"no transformer layers to set or train as branches \(asked: layers=None, branches=2\)"):
        build_series_model("series_cnn", data, patches=8, branches=2, trunk="resnet", trunk_width=4)
