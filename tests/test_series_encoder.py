"""One series encoder pretrained across sets (jumbokit series-pretrain) and tstrain --init, which fine-tunes from it."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

import jumbokit
from jumbokit.cli import run_front_door, tstrain_main
from jumbokit.timeseries import data as ts_data
from jumbokit.timeseries import pool as ts_pool
from jumbokit.timeseries import encoder_pretrain as ep
from jumbokit.timeseries.models import width_options
from jumbokit.timeseries.protocol import RECIPES, SweepConfig
from jumbokit.timeseries.sweep import run_sweep

TINY = dict(length=32, steps=2, batch_size=8, cpu=True, dim=16)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """A tiny encoder pretrained on GunPoint's and Trace's training splits, saved."""
    folder = tmp_path_factory.mktemp("encoder")
    model, record = ep.pretrain_encoder(["GunPoint", "Trace"], **TINY)
    ep.save_encoder(model, folder, record)
    return folder


def test_the_corpus_reads_training_splits_only(monkeypatch):
    read = []
    original = ts_data.load_raw

    def spy(name, split, *args, **kwargs):
        read.append((name, split))
        return original(name, split, *args, **kwargs)

    monkeypatch.setattr(ts_pool, "load_raw", spy)  # the one reader of training series
    x, counts = ep.corpus_series(["GunPoint", "BasicMotions"], length=24)
    assert set(read) == {("GunPoint", "train"), ("BasicMotions", "train")}
    assert counts == {"GunPoint": 50, "BasicMotions": 40 * 6}  # every channel one series
    assert x.shape == (290, 1, 24) and x.dtype == np.float32
    np.testing.assert_allclose(x.mean(axis=-1), 0, atol=1e-5)  # each standardised on its own
    with pytest.raises(ValueError, match="expected an encoder length of at least 16 steps"):
        ep.corpus_series(["GunPoint"], length=8)


def test_a_saved_encoder_loads_and_records_its_corpus(encoder):
    record = json.loads((encoder / ep.CORPUS_FILE).read_text())
    assert record["sets"] == {"GunPoint": 50, "Trace": 100} and record["splits"] == "train"
    assert record["steps"] == 2 and record["length"] == 32 and np.isfinite(record["final_loss"])
    assert record["cpu_kernels"] == torch.backends.cpu.get_cpu_capability() and record["torch"] == torch.__version__
    model = jumbokit.load(encoder)
    assert model.num_classes == 0 and model.pretrained_cfg["seq_len"] == 32
    assert model.pretrained_cfg["unequal_length"] == "resample" and ep.encoder_length(encoder) == 32
    # a run's model for any channels and classes takes every weight but its head
    run = jumbokit.create_model("patchtst_jumbo", num_classes=3, in_chans=2, seq_len=32, **ep.ENCODER_OPTIONS,
                                **width_options(16))
    ep.load_into(run, ep.encoder_state(encoder))
    encoder_state = ep.encoder_state(encoder)
    assert all(run.state_dict()[k].equal(v) for k, v in encoder_state.items())
    wide = jumbokit.create_model("patchtst_jumbo", num_classes=3, in_chans=1, seq_len=32, **ep.ENCODER_OPTIONS)
    with pytest.raises(ValueError, match=r"does not fit this run's model: build it as the encoder was built .*"
                                         r"different shapes: blocks\.0\.attn\.proj\.bias \(16,\) vs \(128,\)"):
        ep.load_into(wide, encoder_state)
    classifier = jumbokit.create_model("patchtst_jumbo", num_classes=2, in_chans=1, seq_len=32, patches=16)
    jumbokit.save(classifier, encoder.parent / "classifier")
    with pytest.raises(ValueError, match="expected a pretrained series encoder"):
        ep.encoder_length(encoder.parent / "classifier")


def test_tstrain_init_resamples_every_set_and_starts_from_the_encoder(encoder, tmp_path):
    cfg = SweepConfig(**{k: v for k, v in RECIPES["fast"].items() if k in ("batch_size", "normalize", "augment")},
                      model=SweepConfig().model.__class__(patches=16, conv_stem=32), steps=2, dim=16,
                      init=str(encoder), recipe="fast")
    result = run_sweep(["ItalyPowerDemand", "BasicMotions"], ["patchtst_jumbo"], cfg, tmp_path, lrs=[1e-3],
                       dropouts=[0.1], progress=False, cpu=True)
    assert {r.dataset for r in result.runs} == {"ItalyPowerDemand", "BasicMotions"}
    assert all(r.extra["init"] == str(encoder) for r in result.runs)
    kept = jumbokit.load(tmp_path / "models" / "ItalyPowerDemand" / "patchtst_jumbo")
    assert kept.pretrained_cfg["seq_len"] == 32 and kept.pretrained_cfg["unequal_length"] == "resample"
    # a model without the encoder's front end is refused before anything is written
    plain = SweepConfig(steps=2, dim=16, init=str(encoder))
    with pytest.raises(ValueError, match="does not fit this run's model"):
        run_sweep(["ItalyPowerDemand"], ["patchtst_jumbo"], plain, tmp_path / "refused", lrs=[1e-3],
                  dropouts=[0.1], progress=False, cpu=True)
    assert not (tmp_path / "refused").exists()
    with pytest.raises(ValueError, match="init must be None with pretrain_epochs"):
        SweepConfig(init=str(encoder), pretrain_epochs=1)


def test_tstrain_init_gives_each_model_its_own_encoder(encoder, tmp_path):
    """--init MODEL=PATH,...: each kind starts from the encoder of its own kind (a Jumbo encoder's weights do not fit
    the plain model, so one folder for both is refused); a mapping that leaves a model out, names one twice or
    pairs encoders of two lengths is refused before anything is written."""
    plain, longer = tmp_path / "plain", tmp_path / "longer"
    for folder, length in ((plain, 32), (longer, 48)):
        model, record = ep.pretrain_encoder(["GunPoint"], model="patchtst", **{**TINY, "length": length})
        ep.save_encoder(model, folder, record)
    cfg = dict(model=SweepConfig().model.__class__(patches=16, conv_stem=32), steps=2, dim=16, recipe="fast")
    both = ["patchtst", "patchtst_jumbo"]
    with pytest.raises(ValueError, match=r"is a patchtst_jumbo encoder and cannot start patchtst: pass --model "
                                         r"patchtst_jumbo .* or give each model its own encoder"):
        run_sweep(["ItalyPowerDemand"], both, SweepConfig(**cfg, init=str(encoder)), tmp_path / "one", lrs=[1e-3],
                  dropouts=[0.1], progress=False, cpu=True)
    spec = f"patchtst={plain},patchtst_jumbo={encoder}"
    result = run_sweep(["ItalyPowerDemand"], both, SweepConfig(**cfg, init=spec), tmp_path / "each", lrs=[1e-3],
                       dropouts=[0.1], progress=False, cpu=True)
    assert {r.model: r.extra["init"] for r in result.runs} == {"patchtst": str(plain), "patchtst_jumbo": str(encoder)}
    assert ep.init_paths(str(encoder), both) == {m: str(encoder) for m in both}  # one folder: every model
    for bad, message in ((f"patchtst={plain}", "missing: patchtst_jumbo"),
                         (f"{spec},patchtst_registers={plain}", "not in the sweep: patchtst_registers"),
                         (f"patchtst={plain},patchtst={encoder}", "patchtst is given two encoders"),
                         (f"patchtst={plain},{encoder}", "expected one encoder folder or MODEL=FOLDER"),
                         (f"patchtst={longer},patchtst_jumbo={encoder}", "must take one series length")):
        with pytest.raises(ValueError, match=message):
            run_sweep(["ItalyPowerDemand"], both, SweepConfig(**cfg, init=bad), tmp_path / "refused", lrs=[1e-3],
                      dropouts=[0.1], progress=False, cpu=True)
    assert not (tmp_path / "refused").exists() and not (tmp_path / "one").exists()


def test_a_baseline_beside_an_encoder_reads_the_raw_series_at_their_own_length():
    """tstrain --init resamples a set to the encoder's length (here 32 of GunPoint's 150 steps); the ROCKET
    baselines of the same sweep still read the raw series, so they score as they do without --init."""
    from jumbokit.timeseries.baselines import rocket_baseline

    resampled = ts_data.load_dataset("GunPoint", unequal_length="resample", length=32)
    assert resampled.seq_len == 32
    own = rocket_baseline("minirocket", ts_data.load_dataset("GunPoint"), seed=0)
    beside = rocket_baseline("minirocket", resampled, seed=0)
    assert "skipped" not in beside and beside["test_top1"] == own["test_top1"]
    np.testing.assert_array_equal(beside["scores"]["test"], own["scores"]["test"])


def test_series_pretrain_front_door_refuses_bad_input_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "enc"
    assert run_front_door("series-pretrain", ["--dataset", "GunPoint", "--exclude", "Trace", "--out", str(out)]) == 2
    assert "--exclude names sets that are not in the corpus: Trace" in capsys.readouterr().err
    assert run_front_door("series-pretrain", ["--dataset", "GunPoint", "--length", "4", "--out", str(out)]) == 2
    assert "--length must be at least 16, got 4" in capsys.readouterr().err
    assert not out.exists()
    assert run_front_door("series-pretrain", ["--dataset", "GunPoint,Trace", "--exclude", "Trace", "--length", "32",
                                              "--steps", "2", "--batch-size", "8", "--dim", "16", "--out", str(out),
                                              "--cpu", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "50 series of 32 steps from the training splits of 1 set(s)" in printed
    hint = re.search(r"fine-tune with: tstrain (.*?) \(add --frozen", printed).group(1).split()
    assert hint == ["--dataset", "NAME", "--model", "patchtst_jumbo", "--recipe", "fine-tune", "--init", str(out),
                    "--dim", "16"]
    hint[1] = "GunPoint"  # the printed command runs as given
    assert tstrain_main([*hint, "--steps", "4", "--out", str(tmp_path / "tuned"), "--cpu", "--no-progress"]) == 0
    assert json.loads((out / ep.CORPUS_FILE).read_text())["excluded"] == ["Trace"]
    assert run_front_door("series-pretrain", ["--dataset", "GunPoint", "--out", str(out)]) == 2
    assert "holds an encoder already" in capsys.readouterr().err


def test_the_estimator_fine_tunes_from_the_encoder_and_saves_the_resampling(encoder, tmp_path):
    """PatchTSTClassifier(init=...): every series resampled to the encoder's length, the network starting from its
    weights (a learning rate of 1e-8 leaves them as they are), the saved model's data config resampling as tstrain's kept models do."""
    from jumbokit.inference.series import load_series_predictor
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    data = ts_data.load_dataset("ItalyPowerDemand")
    clf = PatchTSTClassifier(model="patchtst_jumbo", patches=16, conv_stem=32, dim=16, steps=2, lr=1e-8,
                             batch_size=8, random_state=0, init=str(encoder))
    clf.fit(data.train.x[:40], data.classes[data.train.y[:40]])
    assert clf.seq_len_ == 32
    pretrained = ep.encoder_state(encoder)
    own = clf.network_.state_dict()
    assert all(np.allclose(own[k].numpy(), v.numpy(), atol=1e-6) for k, v in pretrained.items() if k in own)
    assert sum(k in own for k in pretrained) == len(pretrained)
    clf.save(tmp_path / "clf")
    predictor = load_series_predictor(tmp_path / "clf")
    assert predictor.cfg["unequal_length"] == "resample" and predictor.cfg["seq_len"] == 32
    with pytest.raises(ValueError, match="does not fit this run's model"):
        PatchTSTClassifier(model="patchtst_jumbo", dim=16, steps=1, init=str(encoder)).fit(
            data.train.x[:20], data.classes[data.train.y[:20]])


def _run_model(encoder, num_classes: int, in_chans: int = 1):
    run = jumbokit.create_model("patchtst_jumbo", num_classes=num_classes, in_chans=in_chans, seq_len=32,
                                **ep.ENCODER_OPTIONS, **width_options(16))
    return ep.load_into(run, ep.encoder_state(encoder))


@pytest.mark.parametrize("codes", [(0, 1, 2), (0, 2)], ids=["three classes", "two of three seen"])
def test_a_frozen_encoders_ridge_head_scores_as_the_ridge_classifier_of_its_features(encoder, codes):
    """fit_ridge_head writes the ridge regression into the model's own head: its logits are the ridge classifier's
    scores of the scaled features times the fusion's temperature (two classes: -s and +s; a class without training
    series: the score of a -1 code), and no other weight moves."""
    import torch

    from jumbokit.timeseries.fusion import RIDGE_TEMPERATURE
    from jumbokit.timeseries.ridge_head import encoder_features, fit_ridge_head
    from jumbokit.timeseries.rocket_classifiers import FeatureRidgeClassifierCV

    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 1, 32)).astype(np.float32)
    y = np.asarray(codes)[rng.integers(0, len(codes), size=30)]
    y[:len(codes)] = codes
    model = _run_model(encoder, num_classes=3)
    before = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("head")}
    chosen = fit_ridge_head(model, x, y, batch_size=7)
    assert all(model.state_dict()[k].equal(v) for k, v in before.items())
    features = encoder_features(model, x)
    scale = features.astype(np.float64).std(axis=0)
    ridge = FeatureRidgeClassifierCV().fit((features / scale).astype(np.float32), y)
    assert chosen["alpha"] == ridge.alpha_ and chosen["features"] == features.shape[1] == 16
    scores = ridge.decision_function((features / scale).astype(np.float32))
    with torch.no_grad():
        logits = model(torch.from_numpy(x)).double().numpy()
    np.testing.assert_allclose(chosen["train_logits"], logits, rtol=1e-4, atol=1e-4)
    if len(codes) == 3:
        np.testing.assert_allclose(logits, RIDGE_TEMPERATURE * scores, rtol=1e-4, atol=1e-4)
    else:
        np.testing.assert_allclose(logits[:, 2], RIDGE_TEMPERATURE * scores, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(logits[:, 0], -RIDGE_TEMPERATURE * scores, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(logits[:, 1], -RIDGE_TEMPERATURE)
    np.testing.assert_array_equal(logits.argmax(axis=1), ridge.predict((features / scale).astype(np.float32)))


def test_tstrain_frozen_keeps_the_encoder_and_fits_a_ridge_head(encoder, tmp_path):
    """tstrain --init ... --frozen: every run's encoder weights are the pretrained ones (one channel and six), its
    head a ridge classifier; the kept model scores the test half as the sweep did. A grid of frozen runs, a frozen
    model without an encoder or with a second head is refused before anything is written."""
    import torch

    from jumbokit.timeseries.rocket_classifiers import ALPHAS
    from jumbokit.timeseries.run import predict_proba

    model = SweepConfig().model.__class__(patches=16, conv_stem=32)
    cfg = SweepConfig(model=model, steps=2, dim=16, recipe="fast", init=str(encoder), frozen=True)
    result = run_sweep(["ItalyPowerDemand", "BasicMotions"], ["patchtst_jumbo"], cfg, tmp_path / "sweep", lrs=[1e-3],
                       dropouts=[0.1], progress=False, cpu=True)
    pretrained = ep.encoder_state(encoder)
    for run in result.runs:
        assert run.steps == 0 and run.extra["init"] == str(encoder) and run.extra["ridge_alpha"] in ALPHAS
        kept = jumbokit.load(tmp_path / "sweep" / "models" / run.dataset / "patchtst_jumbo")
        assert all(kept.state_dict()[k].equal(v) for k, v in pretrained.items())
        data = ts_data.load_dataset(run.dataset, unequal_length="resample", length=32, normalize="auto")
        proba = predict_proba(kept, torch.from_numpy(data.test.x))
        assert 100.0 * float((proba.argmax(1) == data.test.y).mean()) == pytest.approx(run.test_top1)
    refused = tmp_path / "refused"
    with pytest.raises(ValueError, match=r"fitted once.*asked: 2 learning rate\(s\), 1 dropout\(s\), 1 seed"):
        run_sweep(["ItalyPowerDemand"], ["patchtst_jumbo"], cfg, refused, lrs=[1e-3, 1e-4], dropouts=[0.1],
                  progress=False, cpu=True)
    with pytest.raises(ValueError, match="frozen must be False without init"):
        SweepConfig(frozen=True)
    with pytest.raises(ValueError, match="frozen must be False with branches=1, trunk_head=True"):
        SweepConfig(model=model.__class__(patches=16, trunk="resnet", trunk_head=True), init=str(encoder),
                    frozen=True)
    assert not refused.exists()
    assert run_front_door("tstrain", ["--dataset", "ItalyPowerDemand", "--frozen", "--out", str(refused)]) == 2
    assert not refused.exists()


def test_the_estimator_fits_a_frozen_encoders_ridge_head(encoder):
    """PatchTSTClassifier(init=..., frozen=True): the network keeps the encoder's weights, its head fitted in one
    pass (no optimizer step), and predicts the classes of the series it was fitted on as a ridge classifier does."""
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    data = ts_data.load_dataset("ItalyPowerDemand")
    labels = data.classes[data.train.y]
    clf = PatchTSTClassifier(model="patchtst_jumbo", patches=16, conv_stem=32, dim=16, random_state=0,
                             init=str(encoder), frozen=True).fit(data.train.x, labels)
    own = clf.network_.state_dict()
    assert all(own[k].equal(v) for k, v in ep.encoder_state(encoder).items())
    (record,) = clf.history_
    assert record["features"] == 16 and record["train_top1"] == pytest.approx(
        100.0 * float((clf.predict(data.train.x) == labels).mean()))


def test_a_ridge_head_refuses_non_finite_features_and_a_single_class(encoder, monkeypatch):
    from jumbokit.timeseries import ridge_head

    model = _run_model(encoder, num_classes=2)
    x, y = np.zeros((6, 1, 32), dtype=np.float32), np.array([0, 1, 0, 1, 0, 1])
    head = model.head.weight.detach().clone()
    with pytest.raises(ValueError, match="two classes or more, got 1"):
        ridge_head.fit_ridge_head(model, x, np.zeros(6, dtype=int))
    with pytest.raises(ValueError, match=r"class codes in 0\.\.1 \(the head's classes\), got 0\.\.2"):
        ridge_head.fit_ridge_head(model, x, np.array([0, 1, 2, 0, 1, 2]))
    features = np.ones((6, 16), dtype=np.float32)
    features[[1, 4], 3] = np.nan
    monkeypatch.setattr(ridge_head, "encoder_features", lambda *args, **kwargs: features)
    with pytest.raises(ValueError, match=r"non-finite features for 2 of 6 training series \(first: \[1, 4\]\)"):
        ridge_head.fit_ridge_head(model, x, y)
    assert model.head.weight.equal(head)  # nothing written into the head on a refusal
