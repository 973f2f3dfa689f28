"""``length_embed`` / ``--length-embed``: each series' length, relative to the model's, added to the global tokens."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

import jumbokit
from jumbokit.encoders import Encoder
from jumbokit.timeseries.models.length import LengthEmbed, series_span
from jumbokit.cli import tstrain_main
from jumbokit.timeseries import protocol as ts_protocol
from jumbokit.timeseries.models import PATCHTST_MODELS
from jumbokit.timeseries.models.config import SeriesModelConfig

NAN = float("nan")
SERIES = dict(num_classes=3, in_chans=2, seq_len=40, patches=8)


def test_series_span_ends_at_the_last_observed_step():
    x = torch.randn(2, 2, 6)
    x[0, 0, 4:] = NAN  # padded after 4 steps
    x[0, 1, 2] = NAN  # a missing step inside does not shorten the series
    x[1, 1] = NAN  # nothing observed
    assert series_span(x).tolist() == [4, 6, 6, 0]


def test_length_features_are_zero_at_the_full_length():
    x = torch.randn(4, 1, 8)
    x[1, :, 4:] = NAN
    x[2, :, 1:] = NAN
    x[3] = NAN  # no observed step: floored at one step
    expected = torch.tensor([[0.0, 0.0], [math.log(0.5), -0.5], [math.log(1 / 8), -7 / 8], [math.log(1 / 8), -7 / 8]])
    torch.testing.assert_close(LengthEmbed(8, 2, 4).features(x), expected)


def _trained(name: str, length_embed: bool, x: torch.Tensor, y: torch.Tensor) -> torch.nn.Module:
    torch.manual_seed(0)
    model = jumbokit.create_model(name, length_embed=length_embed, drop_rate=0.1, **SERIES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
    torch.manual_seed(1)
    for _ in range(3):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model


@pytest.mark.parametrize("name", PATCHTST_MODELS)
def test_equal_lengths_train_exactly_as_without_it(name):
    """No random draw at construction, a zero offset for full-length series: the same weights after AdamW steps
    (weight decay, dropout), and the length weights still 0."""
    x, y = torch.randn(8, 2, 40), torch.randint(0, 3, (8,))
    plain = _trained(name, False, x, y).state_dict()
    with_length = _trained(name, True, x, y).state_dict()
    assert not with_length.pop("length_embed.weight").any()
    assert plain.keys() == with_length.keys()
    assert all(torch.equal(plain[k], with_length[k]) for k in plain)


def test_the_offset_reaches_only_the_shorter_series_and_learns():
    torch.manual_seed(0)
    model = jumbokit.create_model("patchtst_jumbo", length_embed=True, **SERIES).eval()
    x = torch.randn(6, 2, 40)
    x[3:, :, 25:] = NAN
    before = model(x).detach()
    F.cross_entropy(model(x), torch.tensor([0, 0, 0, 1, 1, 1])).backward()
    assert model.length_embed.weight.grad.abs().sum() > 0
    with torch.no_grad():
        model.length_embed.weight.normal_()
        after = model(x)
    assert torch.equal(after[:3], before[:3]) and not torch.allclose(after[3:], before[3:])


def test_collapsing_branches_keeps_the_length_embedding():
    torch.manual_seed(0)
    branched = jumbokit.create_model("patchtst_jumbo", length_embed=True, branches=3, **SERIES).eval()
    branched.set_join(1.0)
    with torch.no_grad():
        branched.length_embed.weight.normal_()
    x = torch.randn(4, 2, 40)
    x[2:, :, 30:] = NAN
    plain = branched.reparameterize()
    torch.testing.assert_close(plain(x), branched(x), rtol=1e-4, atol=1e-5)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="this plug-in has none"):
        Encoder(tokenizer="series", seq_len=20, patch_len=4, stride=2, in_chans=1, dim=16, depth=1, num_heads=2,
                global_tokens="none", length_embed=True)
    with pytest.raises(ValueError, match="length_embed applies to series tokenizers only"):
        Encoder(img_size=16, patch_size=8, dim=16, depth=1, num_heads=2, length_embed=True)
    with pytest.raises(ValueError, match="length_embed must be False with unequal_length='zero'"):
        ts_protocol.SweepConfig(model=SeriesModelConfig(length_embed=True), unequal_length="zero")


def test_tstrain_length_embed_is_recorded_and_said(tmp_path, capsys):
    out = tmp_path / "length"
    base = ["--dataset", "JapaneseVowels", "--model", "patchtst_jumbo", "--epochs", "1", "--lr", "1e-3",
            "--dropout", "0.1", "--no-progress", "--cpu", "--length-embed"]
    assert tstrain_main([*base, "--unequal-length", "resample", "--out", str(tmp_path / "bad")]) == 2
    assert "length_embed must be False with unequal_length='resample'" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    assert tstrain_main([*base, "--out", str(out)]) == 0
    assert json.loads((out / "sweep.json").read_text())["model"]["length_embed"] is True
    assert "each series' length added to the global tokens" in (out / "report.md").read_text()
    assert ts_protocol.SweepConfig().identity()["model"]["length_embed"] is False
