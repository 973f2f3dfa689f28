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
