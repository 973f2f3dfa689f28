"""The series tokenizer's NaN check: declared NaN-free batches compute exactly what the per-batch check computes,
with no host read (a GPU sync) in the forward or backward; the check itself still gives the previous results."""

import types

import numpy as np
import pytest
import torch

import jumbokit
from jumbokit.benchmarking.hostsync import HostReads
from jumbokit.encoders.tokenizers import Tokens, exporting
from jumbokit.timeseries.models.tokenizer import SeriesPatchTokenizer, declared_missing


# ----------------------------------------------------------------------------------- the previous code, verbatim
def previous_forward(self, x):
    values, observed = previous_padded(self, x)
    level_scale = None
    if self.level_scale is not None:
        values, level_scale = self.level_scale(values, observed)
    patches = self._windows(values)
    batch, chans, num, _ = patches.shape
    tokens = self.proj(patches.reshape(batch * chans, num, self.patch_len))
    if level_scale is not None:
        tokens = tokens + level_scale
    for features in (self.conv, self.trunk, self.stats):
        if features is not None:
            tokens = tokens + features(values, observed)
    pad_mask = None
    if observed is not None:
        pad_mask = ~self._windows(observed).any(-1).reshape(batch * chans, -1)
        if not exporting() and not pad_mask.any():
            pad_mask = None
    return Tokens(tokens, (num,), pad_mask, chans)


def previous_padded(self, x):
    if x.ndim == 2:
        x = x[:, None, :]
    observed = ~torch.isnan(x)
    has_missing = exporting() or not bool(observed.all())
    values = torch.nan_to_num(x, nan=0.0) if has_missing else x
    if self.pad_end:
        if has_missing:
            values, observed = self._pad_with_last_observed(values, observed)
        else:
            values = torch.cat([values, values[..., -1:].expand(-1, -1, self.stride)], dim=-1)
    return values, observed if has_missing else None


def previous_outputs(model, x):
    """(logits, pooled feature) of ``model`` with its tokenizer running the previous code."""
    tok = model.patch_embed
    tok.forward = types.MethodType(previous_forward, tok)
    try:
        return outputs(model, x)
    finally:
        del tok.forward


def outputs(model, x):
    with torch.no_grad():
        return model(x), model.forward_features(x).feature


MODELS = {
    "patchtst_jumbo": dict(),
    "patchtst_registers": dict(),
    "patchtst": dict(),
    "patchtst_jumbo features": dict(conv_stem=8, trunk="inception", token_stats=True, level_scale=True),
}


def build(key, chans=2):
    torch.manual_seed(0)
    return jumbokit.create_model(key.split()[0], num_classes=3, in_chans=chans, seq_len=64, patches=8,
                                 **MODELS[key]).eval()


def series(missing: str, chans=2):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, chans, 64, generator=g)
    if missing == "scattered":  # a few missing steps: no patch is wholly missing
        x[0, 0, 5] = x[2, 1, 40] = float("nan")
    elif missing == "tail":  # unequal lengths: whole patches missing at the end
        x[1, :, 40:] = float("nan")
        x[3, 0, 20:] = float("nan")
    return x


@pytest.mark.parametrize("key", MODELS)
def test_declared_nan_free_batches_compute_exactly_the_previous_result(key, one_torch_thread):
    model, x = build(key), series("none")
    before = previous_outputs(model, x)
    for declared in (None, False):
        with declared_missing(model, declared):
            now = outputs(model, x)
        assert all(torch.equal(a, b) for a, b in zip(before, now, strict=True)), (key, declared)


@pytest.mark.parametrize("missing", ["scattered", "tail"])
@pytest.mark.parametrize("key", MODELS)
def test_batches_with_missing_values_compute_the_previous_result(key, missing, one_torch_thread):
    model, x = build(key), series(missing)
    before = previous_outputs(model, x)
    assert all(torch.isfinite(t).all() for t in before)
    now = outputs(model, x)  # the default: looks, as before
    assert all(torch.equal(a, b) for a, b in zip(before, now, strict=True))
    with declared_missing(model, True):  # always the missing-value path, as an exported graph
        declared = outputs(model, x)
    for a, b in zip(before, declared, strict=True):
        if missing == "tail":  # a padded patch: the previous code took this path too
            assert torch.equal(a, b)
        else:  # an all-False mask instead of none: the same numbers up to rounding
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_declared_nan_free_forward_and_backward_read_nothing_back(one_torch_thread):
    """HostReads sees every item()/bool()/nonzero of a tensor (on a GPU: a sync). The default reads the batch once
    per forward (in the tokenizer, nowhere else); declared NaN-free, a training step reads nothing."""
    for key in MODELS:
        model, x = build(key).train(), series("none")
        y = torch.tensor([0, 1, 2, 0])
        opt = torch.optim.AdamW(model.parameters())

        def step(model=model, x=x, y=y, opt=opt):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()

        step()
        with HostReads() as default:
            step()
        assert [c.op for c in default.calls] == ["_local_scalar_dense"], default.describe()
        assert "tokenizer.py" in default.calls[0].where and "padded" in default.calls[0].where
        with declared_missing(model, False), HostReads() as declared:
            step()
        assert declared.calls == [], (key, declared.describe())


def test_declared_missing_values_path_reads_nothing_back(one_torch_thread):
    model, x = build("patchtst_jumbo"), series("scattered")
    with declared_missing(model, True), HostReads() as reads, torch.no_grad():
        model(x)
    assert reads.calls == [], reads.describe()


def test_declared_missing_restores_each_setting_and_checks_its_value():
    model = build("patchtst_jumbo")
    tok = model.patch_embed
    assert isinstance(tok, SeriesPatchTokenizer) and tok.missing is None
    tok.missing = True
    with declared_missing(model, False):
        assert tok.missing is False
    assert tok.missing is True
    with pytest.raises(RuntimeError), declared_missing(model, None):
        assert tok.missing is None
        raise RuntimeError("inside")
    assert tok.missing is True
    for bad in (0, 1, "no", np.bool_(False)):
        with pytest.raises(ValueError, match="None, True or False"):
            with declared_missing(model, bad):
                pass


@pytest.mark.parametrize("with_nan", [False, True])
def test_tstrain_declares_a_nan_free_training_split_while_it_trains(with_nan, monkeypatch):
    """fit_series_model trains with ``missing=False`` on a split without NaN (no sync per step) and leaves the
    per-batch check on a split with NaN; the model's own setting comes back after training."""
    import jumbokit.training
    from jumbokit.timeseries.data import ClassificationData, SeriesSplit
    from jumbokit.timeseries.protocol import SweepConfig
    from jumbokit.timeseries.run import fit_series_model
    from jumbokit.training.loop import FitResult

    x = np.random.default_rng(0).standard_normal((8, 1, 64)).astype(np.float32)
    if with_nan:
        x[3, 0, 50:] = np.nan
    split = SeriesSplit(x, np.arange(8) % 2, np.full(8, 64))
    data = ClassificationData("toy", split, split, split, np.array(["a", "b"]), "test")
    model = build("patchtst_jumbo", chans=1)
    seen = []

    def fake_fit(model, loader, loss, cfg, accelerator=None):
        seen.append(model.patch_embed.missing)
        return FitResult(history=[], final={"train_loss": 0.0}, model=model, accelerator=None)

    monkeypatch.setattr(jumbokit.training, "fit", fake_fit)
    fitted = fit_series_model(model, data, 1e-3, SweepConfig(), seed=0)
    assert seen == [None if with_nan else False]
    assert fitted.model.patch_embed.missing is None
