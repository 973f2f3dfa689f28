"""The ROCKET hybrid: MiniRocket features fitted on the training split, projected into the first global token."""

from __future__ import annotations

import json
import pickle
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import jumbokit
from jumbokit import create_model
from jumbokit.export import check_exportable
from jumbokit.cli import tstrain_main
from jumbokit.timeseries.models.rocket import MiniRocketFeatures, RocketHybrid, build_rocket_hybrid
from jumbokit.timeseries.run import augmented_forward, build_series_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _series(n: int, chans: int, length: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, chans, length)).astype(np.float32).cumsum(-1)


@pytest.mark.parametrize("chans", [1, 3])
def test_features_are_aeons_minirocket_with_nan_as_zero(chans):
    from aeon.transformations.collection.convolution_based import MiniRocket

    x = _series(24, chans, 60)
    x[-4:, :, 50:] = np.nan  # unequal lengths: NaN end padding
    features = MiniRocketFeatures.fit(x[:16], num_features=500, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = MiniRocket(n_kernels=500, random_state=3).fit(x[:16]).transform(np.nan_to_num(x[16:]))
    ours = features(torch.from_numpy(x[16:]))
    assert ours.shape == (8, features.num_features) == reference.shape
    np.testing.assert_allclose(ours.numpy(), reference, atol=1e-6)


def _encoder(chans: int = 2, length: int = 60) -> torch.nn.Module:
    torch.manual_seed(0)
    return create_model("patchtst_jumbo", num_classes=3, in_chans=chans, seq_len=length, patches=4, dim=32,
                        depth=1, num_heads=2, mlp_hidden=32)


def test_hybrid_starts_as_the_transformer_and_learns_its_projection():
    x = torch.from_numpy(_series(10, 2, 60))
    encoder = _encoder()
    hybrid = build_rocket_hybrid(encoder, x.numpy(), num_features=200)
    assert isinstance(hybrid, RocketHybrid) and hybrid.num_global_tokens == encoder.num_global_tokens
    torch.testing.assert_close(hybrid(x), encoder(x))  # the projection starts at zero
    hybrid(x).logsumexp(-1).sum().backward()
    assert hybrid.rocket_proj.weight.grad.abs().sum() > 0
    offset = hybrid.global_offset(x)
    assert offset.shape == (10 * 2, encoder.num_global_tokens, 32)
    with pytest.raises(ValueError, match="global-token offset of shape"):
        encoder.forward_features(x, global_offset=offset[:, :1])
    with pytest.raises(ValueError, match="cannot be exported to ONNX"):
        check_exportable(hybrid)


def test_create_model_builds_the_hybrid_and_a_saved_one_loads_without_data(tmp_path):
    """create_model + fit_features is build_rocket_hybrid in two steps (same weights, same fitted state), and
    jumbokit.load rebuilds a fitted hybrid from its directory alone."""
    x = _series(12, 2, 60)
    torch.manual_seed(0)
    hybrid = create_model("patchtst_jumbo_rocket", num_classes=3, in_chans=2, seq_len=60, patches=4, dim=32,
                          depth=1, num_heads=2, mlp_hidden=32, rocket_features=200, rocket_seed=2)
    assert isinstance(hybrid, RocketHybrid) and not hybrid.feature_mean.any()  # not fitted yet
    hybrid.fit_features(x)
    reference = build_rocket_hybrid(_encoder(), x, seed=2, num_features=200)
    ours, theirs = hybrid.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    with torch.no_grad():
        hybrid.rocket_proj.weight.normal_()
    series = torch.from_numpy(_series(4, 2, 60, seed=1))
    jumbokit.save(hybrid, tmp_path)
    loaded = jumbokit.load(tmp_path)
    torch.testing.assert_close(loaded.eval()(series), hybrid.eval()(series), rtol=0, atol=0)


def test_sweep_model_fits_rocket_on_the_training_split_only():
    """Validation and test series that would poison any statistic (NaN everywhere) leave the hybrid untouched."""
    train = _series(12, 1, 40)
    poison = np.full((6, 1, 40), np.nan, dtype=np.float32)
    data = SimpleNamespace(num_classes=2, channels=1, seq_len=40, train=SimpleNamespace(x=train),
                           val=SimpleNamespace(x=poison), test=SimpleNamespace(x=poison))
    model = build_series_model("patchtst_jumbo_rocket", data, patches=4, rocket_seed=1)
    expected = MiniRocketFeatures.fit(train, seed=1)(torch.from_numpy(train))
    torch.testing.assert_close(model.feature_mean, expected.mean(0))
    with pytest.raises(ValueError, match="cannot train progressive-join branches"):
        build_series_model("patchtst_jumbo_rocket", data, patches=4, branches=2)


def test_tstrain_runs_the_hybrid_and_refuses_pretraining(tmp_path, capsys):
    out = tmp_path / "hybrid"
    common = ["--dataset", "ItalyPowerDemand", "--epochs", "2", "--lr", "1e-3", "--dropout", "0.1", "--no-progress",
              "--cpu"]
    assert tstrain_main([*common, "--model", "patchtst_jumbo_rocket", "--out", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())["summary"]
    assert [r["model"] for r in rows] == ["patchtst_jumbo_rocket"]
    plain = create_model("patchtst_jumbo", num_classes=2, in_chans=1, seq_len=24, patches=8, conv_stem=0)
    features = MiniRocketFeatures.fit(_series(8, 1, 24), seed=0).num_features
    assert rows[0]["params"] == sum(p.numel() for p in plain.parameters()) + (features + 1) * 128  # + rocket_proj
    capsys.readouterr()
    bad = tmp_path / "bad"
    assert tstrain_main([*common, "--model", "patchtst_jumbo_rocket", "--pretrain-epochs", "1", "--out", str(bad)]) == 2
    assert "cannot be pretrained" in capsys.readouterr().err and not bad.exists()


def test_features_of_seen_series_come_from_a_bounded_cache():
    x = torch.from_numpy(_series(12, 2, 50))
    features = MiniRocketFeatures.fit(x.numpy(), num_features=300, seed=0)
    calls = []
    transform = features.transform.transform
    features.transform.transform = lambda batch: calls.append(len(batch)) or transform(batch)
    first = features(x[:8])
    again = features(torch.cat([x[4:8], x[8:12]]))  # 4 seen, 4 new: only the new ones are transformed
    assert calls == [8, 4]
    torch.testing.assert_close(again[:4], first[4:])
    torch.testing.assert_close(again, torch.from_numpy(np.asarray(transform(x[4:12].numpy()), dtype=np.float32)))
    features.max_cached = 5
    features(x)
    assert len(features._cache) == 5
    features.transform.transform = transform
    assert len(pickle.loads(pickle.dumps(features))._cache) == 0  # the cache is not saved with the model


def test_training_computes_the_features_of_the_clean_series():
    """The augmented batch goes to the transformer, the clean one to MiniRocket (augmentation moves the
    features by about two standard deviations)."""
    x = torch.from_numpy(_series(6, 2, 60))
    hybrid = build_rocket_hybrid(_encoder(), x.numpy(), num_features=200)
    seen = []
    rocket = hybrid.rocket.forward
    hybrid.rocket.forward = lambda batch: seen.append(batch) or rocket(batch)
    shifted = augmented_forward(hybrid, lambda batch: batch + 5.0, x)
    assert len(seen) == 1 and torch.equal(seen[0], x)
    torch.testing.assert_close(shifted, hybrid(x + 5.0, rocket_input=x))
    with pytest.raises(ValueError, match="rocket_input must have the shape of x"):
        hybrid(x, rocket_input=x[:, :1])
    plain = _encoder()
    torch.testing.assert_close(augmented_forward(plain, lambda batch: batch + 5.0, x), plain(x + 5.0))
