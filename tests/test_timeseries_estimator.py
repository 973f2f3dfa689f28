"""The aeon estimator: aeon's shared estimator contract and the docstring's example."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small models: one thread is fastest


def test_patchtst_classifier_passes_aeon_check_estimator():
    """Every check aeon runs for a classifier (constructor, tags, fit/predict contract, cloning, pickling,
    expected output shapes), on the estimator's own tiny test parameters."""
    from aeon.testing.estimator_checking import check_estimator

    from jumbokit.timeseries.estimator import PatchTSTClassifier

    results = check_estimator(PatchTSTClassifier, raise_exceptions=True)
    checks = {name.split("(")[0] for name in results}
    assert {"check_classifier_output", "check_fit_updates_state_and_cloning", "check_persistence_via_pickle",
            "check_non_state_changing_method"} <= checks
    assert all(outcome == "PASSED" for outcome in results.values()), results


@pytest.mark.slow
def test_patchtst_classifier_docstring_example_runs():
    from jumbokit.timeseries import estimator

    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(estimator.PatchTSTClassifier, "PatchTSTClassifier", globs={}):
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 5


def test_estimator_level_scale_auto_follows_the_scale_spread():
    """level_scale="auto" builds the level-and-scale model only for series whose scales differ widely."""
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(12, 1, 16)), np.array([0, 1] * 6)
    spread = X * np.logspace(0, 4, 12)[:, None, None]
    kw = dict(model="patchtst", patches=4, epochs=1, batch_size=8, random_state=0, level_scale="auto")
    even, wide = PatchTSTClassifier(**kw).fit(X, y), PatchTSTClassifier(**kw).fit(spread, y)
    assert even.network_.config["level_scale"] is False and wide.network_.config["level_scale"] is True


def test_estimator_passes_the_head_and_loss_options_to_the_sweep_config():
    """jumbo_pool sets the Jumbo head's width per channel (D, J*D, (J+1)*D); label smoothing and clipping train;
    a bad value is refused with what was expected."""
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(12, 2, 32)), np.array([0, 1] * 6)
    kw = dict(model="patchtst_jumbo", patches=4, epochs=1, batch_size=8, random_state=0, label_smoothing=0.1,
              grad_clip=1.0)
    widths = {pool: PatchTSTClassifier(jumbo_pool=pool, **kw).fit(X, y).network_.head.in_features
              for pool in ("segments", "jumbo", "jumbo+mean")}
    d = widths["segments"] // 2
    j = widths["jumbo"] // (2 * d)
    assert j > 1 and widths["jumbo+mean"] == 2 * (j + 1) * d
    with pytest.raises(ValueError, match="jumbo_pool must be one of .*got 'mean'"):
        PatchTSTClassifier(jumbo_pool="mean", **kw).fit(X, y)
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\)"):
        PatchTSTClassifier(**dict(kw, label_smoothing=1.0)).fit(X, y)
    with pytest.raises(ValueError, match="grad_clip must be None .* got 0.0"):
        PatchTSTClassifier(**dict(kw, grad_clip=0)).fit(X, y)


def test_estimator_trains_the_trunk_alone_layer_scale_no_positions_and_stochastic_depth():
    """model="series_cnn" trains the trunk without transformer layers (and refuses to run without a trunk);
    layer_scale adds LayerScale to every block (its factors start at the value; one step moves them by about lr);
    pos_embed="none" builds no position table, layers=1 one layer, drop_path=R stochastic depth rising to R, dim=16
    a width of 16 with 2 heads and an FFN of 32."""
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(12, 2, 32)), np.array([0, 1] * 6)
    kw = dict(patches=4, epochs=1, batch_size=8, random_state=0)
    cnn = PatchTSTClassifier(model="series_cnn", trunk="resnet", trunk_width=4, trunk_depth=1, **kw).fit(X, y)
    assert len(cnn.network_.blocks) == 0 and cnn.predict_proba(X).shape == (12, 2)
    with pytest.raises(ValueError, match="series_cnn .* needs a trunk"):
        PatchTSTClassifier(model="series_cnn", **kw).fit(X, y)
    scaled = PatchTSTClassifier(model="patchtst_jumbo", layer_scale=1e-3, **kw).fit(X, y)
    gammas = [p for n, p in scaled.network_.named_parameters() if "gamma" in n]
    assert len(gammas) >= 2 * len(scaled.network_.blocks) and all(float(g.detach().abs().max()) < 0.01 for g in gammas)
    with pytest.raises(ValueError, match=r"layer_scale must be >= 0 \(0 = off\), got -1.0"):
        PatchTSTClassifier(layer_scale=-1, **kw).fit(X, y)
    plain = PatchTSTClassifier(pos_embed="none", layers=1, **kw).fit(X, y).network_
    assert plain.pos_embed is None and len(plain.blocks) == 1
    with pytest.raises(ValueError, match="pos_embed must be one of learn, sincos, none, got 'rope'"):
        PatchTSTClassifier(pos_embed="rope", **kw).fit(X, y)
    dropped = PatchTSTClassifier(drop_path=0.2, **kw).fit(X, y).network_
    assert [getattr(b.drop_path1, "p", 0.0) for b in dropped.blocks] == pytest.approx([0.0, 0.1, 0.2])
    with pytest.raises(ValueError, match=r"drop_path must be in \[0, 1\) \(0 = off\), got 1.5"):
        PatchTSTClassifier(drop_path=1.5, **kw).fit(X, y)
    narrow = PatchTSTClassifier(dim=16, **kw).fit(X, y).network_
    assert (narrow.config["dim"], narrow.config["num_heads"], narrow.config["mlp_hidden"]) == (16, 2, 32)
    with pytest.raises(ValueError, match="dim must be None or a multiple of 8, got 12"):
        PatchTSTClassifier(dim=12, **kw).fit(X, y)


def test_estimator_fuses_a_rocket_classifier_and_predict_reads_the_saved_folder(tmp_path):
    """fuse="minirocket": the network's probabilities mixed with MiniRocket's at the weight chosen on a held-out
    quarter of the training series ("auto") or given; saved and loaded (safetensors + JSON) with the same
    probabilities, which jumbokit's series predictor reads from the folder too; bad settings refused."""
    from aeon.datasets import load_arrow_head

    from jumbokit.inference.series import load_series_predictor
    from jumbokit.timeseries.estimator import PatchTSTClassifier
    from jumbokit.timeseries.fusion import FUSION_WEIGHTS, rocket_proba
    from jumbokit.timeseries.run import predict_proba

    X, y = load_arrow_head(split="train")
    X_test, _ = load_arrow_head(split="test")
    X_test = X_test[:30]
    clf = PatchTSTClassifier(model="patchtst", steps=3, batch_size=16, random_state=0, fuse="minirocket")
    proba = clf.fit(X, y).predict_proba(X_test)
    assert clf.fuse_weight_ in FUSION_WEIGHTS
    names = [str(c) for c in clf.classes_]
    network = predict_proba(clf.network_, clf.normalizer_(clf._equal_length(X_test, clf.seq_len_)), 256)
    expected = clf.fuse_weight_ * network + (1 - clf.fuse_weight_) * rocket_proba(clf.rocket_, X_test, names)
    np.testing.assert_allclose(proba, expected, rtol=1e-6, atol=1e-7)
    clf.save(tmp_path / "fused")
    again = PatchTSTClassifier.load(tmp_path / "fused")
    np.testing.assert_array_equal(again.predict_proba(X_test), proba)
    predictor = load_series_predictor(tmp_path / "fused")
    assert predictor.fused and predictor.weight == clf.fuse_weight_
    from jumbokit.timeseries.data_config import prepare_series

    np.testing.assert_allclose(predictor.proba(prepare_series(X_test, predictor.cfg), X_test), proba, atol=1e-6)
    # a weight of 0: MiniRocket alone
    rocket_only = PatchTSTClassifier(model="patchtst", steps=1, batch_size=16, random_state=0, fuse="minirocket",
                                     fuse_weight=0.0).fit(X, y)
    np.testing.assert_array_equal(rocket_only.predict(X_test), rocket_only.rocket_.predict(X_test))
    for params, message in ((dict(fuse="rocket"), "expected fuse to be None or one of"),
                            (dict(fuse="minirocket", fuse_weight=1.5), "expected fuse_weight to be 'auto' or"),
                            (dict(fuse="minirocket", fuse_weight="best"), "expected fuse_weight to be 'auto' or")):
        with pytest.raises(ValueError, match=message):
            PatchTSTClassifier(model="patchtst", steps=1, **params).fit(X, y)
    holes = X.copy()
    holes[0, 0, 5] = np.nan
    with pytest.raises(ValueError, match="missing values before their end"):
        PatchTSTClassifier(model="patchtst", steps=1, fuse="minirocket", fuse_weight=0.5).fit(holes, y)


def test_estimator_stops_on_a_held_out_share_of_the_training_series(monkeypatch, tmp_path):
    """early_stop: a stratified share of the training series is held out (never trained on), the network stops on it
    within its budget and keeps the best scoring's step, which save/load keep; without it, every series trains and
    the budget runs out; bad settings are refused before training."""
    from aeon.datasets import load_arrow_head

    from jumbokit.timeseries import run
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    X, y = load_arrow_head(split="train")
    seen = []
    fit_series_model = run.fit_series_model

    def recording(net, data, *args, **kwargs):
        seen.append((data.train.x, data.train.y, data.val.x, data.val.y))
        return fit_series_model(net, data, *args, **kwargs)

    monkeypatch.setattr(run, "fit_series_model", recording)
    kw = dict(model="patchtst", patches=4, steps=40, batch_size=8, random_state=0, lr=3e-2)  # a rate that stops
    clf = PatchTSTClassifier(early_stop=1, eval_every=5, early_stop_from=5, validation_fraction=0.25, **kw).fit(X, y)
    train_x, train_y, val_x, val_y = seen[-1]
    assert len(train_x) + len(val_x) == len(X) and len(val_x) == 9
    assert np.bincount(val_y).tolist() == [3, 3, 3] and np.bincount(train_y).sum() == 27
    rows = {row.tobytes() for row in train_x}
    assert not any(row.tobytes() in rows for row in val_x)  # held out: never trained on
    record = clf.history_[-1]["early_stop"]
    assert record["budget_steps"] == 40 and record["last_step"] == clf.n_steps_ <= 40
    assert record["stopped"] and clf.best_step_ == record["best_step"] and clf.best_step_ % 5 == 0
    assert clf.n_steps_ == clf.best_step_ + 5 < 40  # patience 1: stopped one scoring after the best
    clf.save(tmp_path / "stopped")
    again = PatchTSTClassifier.load(tmp_path / "stopped")
    assert (again.n_steps_, again.best_step_) == (clf.n_steps_, clf.best_step_)
    np.testing.assert_array_equal(again.predict_proba(X[:5]), clf.predict_proba(X[:5]))

    cycled = PatchTSTClassifier(early_stop=1, eval_every="cycle", lr_cycles=2, early_stop_metric="top1",
                                **kw).fit(X, y)  # scored at the end of each 20-step cycle, on the held-out accuracy
    curve = cycled.history_[-1]["early_stop"]["curve"]
    assert [point["step"] for point in curve] == [20, 40]  # the budget's end
    assert cycled.history_[-1]["early_stop"]["rule"]["metric"] == "top1" and cycled.best_step_ in (20, 40)
    short = PatchTSTClassifier(early_stop=1, eval_every=20, early_stop_from=20, **dict(kw, steps=20)).fit(X, y)
    assert curve[0]["val_loss"] == pytest.approx(short.history_[-1]["early_stop"]["curve"][0]["val_loss"], rel=1e-6)
    plain = PatchTSTClassifier(**kw).fit(X, y)
    assert len(seen[-1][0]) == len(X) and plain.n_steps_ == 40 and plain.best_step_ is None

    one = y.copy()
    one[np.flatnonzero(y == y[0])[1:]] = y[np.flatnonzero(y != y[0])[0]]  # the first class keeps one series
    for params, labels, message in (
            (dict(validation_fraction=0.0), y, "expected validation_fraction to be a number between 0 and 1"),
            (dict(validation_fraction=1.0), y, "expected validation_fraction to be a number between 0 and 1"),
            (dict(early_stop=-1), y, "early_stop must be an integer >= 0"),
            (dict(early_stop=2), one, "needs two or more series of each class, got a class with 1; fit with "
                                      "early_stop=0")):
        with pytest.raises(ValueError, match=message):
            PatchTSTClassifier(**dict(kw, **params)).fit(X, labels)


def test_estimator_takes_layer_decay_as_tstrain_does():
    """layer_decay=1 trains the plain network exactly; 0.5 slows the lower layers, so the network differs."""
    from aeon.datasets import load_arrow_head

    from jumbokit.timeseries.estimator import PatchTSTClassifier

    X, y = load_arrow_head(split="train")
    kw = dict(model="patchtst", patches=4, steps=10, batch_size=8, random_state=0)
    plain = PatchTSTClassifier(**kw).fit(X, y).predict_proba(X[:8])
    np.testing.assert_allclose(PatchTSTClassifier(layer_decay=1.0, **kw).fit(X, y).predict_proba(X[:8]), plain,
                               rtol=1e-5, atol=1e-6)
    assert not np.allclose(PatchTSTClassifier(layer_decay=0.5, **kw).fit(X, y).predict_proba(X[:8]), plain, atol=1e-4)
    with pytest.raises(ValueError, match="layer_decay must be None .off. or a rate in .0, 1."):
        PatchTSTClassifier(layer_decay=1.5, **kw).fit(X, y)
