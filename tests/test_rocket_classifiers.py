"""The bounded-memory ROCKET baselines compute what aeon's classifiers compute: scikit-learn's RidgeClassifierCV on
the same features (both eigendecompositions, blocked), and aeon's MiniRocket / MultiRocket / Hydra classifiers with
the same random state on bundled sets."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from jumbokit.timeseries.rocket_classifiers import (ALPHAS, FeatureRidgeClassifierCV, RocketClassifier, load_rocket,
                                                    save_rocket)


def _features(n: int, p: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p)) * rng.uniform(0.5, 3.0, size=p) + rng.normal(size=p)
    labels = np.array([f"c{i}" for i in range(classes)])
    y = labels[(x[:, :3].sum(1) * 2 + rng.normal(size=n)).argsort().argsort() * classes // n]
    x[:, 5] = 1.5  # a constant feature
    return x.astype(np.float32), y


@pytest.mark.parametrize("n, p, classes", [(60, 200, 2), (60, 200, 4), (150, 40, 2), (150, 40, 3)],
                         ids=["gram-binary", "gram-multiclass", "covariance-binary", "covariance-multiclass"])
def test_ridge_equals_scikit_learns_ridge_classifier_cv(n, p, classes):
    """Same alpha, coefficients and intercept to float32 rounding, same predictions; float64 work blocks of a few
    columns / rows (block_bytes) give the same as one block."""
    from sklearn.linear_model import RidgeClassifierCV

    x, y = _features(n, p, classes)
    reference = RidgeClassifierCV(alphas=ALPHAS).fit(x, y)
    for block_bytes in (8 * 7 * max(n, p), 2**30):
        ours = FeatureRidgeClassifierCV(block_bytes=block_bytes).fit(x, y)
        assert ours.alpha_ == reference.alpha_
        assert ours.coef_.dtype == np.float32 and ours.coef_.shape == reference.coef_.shape
        np.testing.assert_allclose(ours.coef_, reference.coef_, rtol=1e-4, atol=1e-6 * np.abs(reference.coef_).max())
        np.testing.assert_allclose(ours.intercept_, reference.intercept_, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(ours.best_score_, reference.best_score_, rtol=1e-6)
        np.testing.assert_array_equal(ours.classes_, reference.classes_)
        np.testing.assert_array_equal(ours.predict(x), reference.predict(x))


def test_ridge_refuses_bad_input():
    x, y = _features(20, 30, 2)
    with pytest.raises(ValueError, match="expected a 2-D feature matrix"):
        FeatureRidgeClassifierCV().fit(x[None], y)
    with pytest.raises(ValueError, match="expected 20 labels"):
        FeatureRidgeClassifierCV().fit(x, y[:-1])
    with pytest.raises(ValueError, match="expected 30 features, got 29"):
        FeatureRidgeClassifierCV().fit(x, y).predict(x[:, 1:])


def _aeon(name: str):
    from aeon.classification.convolution_based import (HydraClassifier, MiniRocketClassifier,
                                                       MultiRocketClassifier, MultiRocketHydraClassifier)

    return {"minirocket": MiniRocketClassifier, "multirocket": MultiRocketClassifier, "hydra": HydraClassifier,
            "multirocket_hydra": MultiRocketHydraClassifier}[name]


def _ridge_of(name: str, reference):
    """The fitted RidgeClassifierCV inside aeon's classifier."""
    if name == "hydra":
        return reference.clf_.steps[-1][1]
    if name == "multirocket_hydra":
        return reference.classifier
    return reference.pipeline_.steps[-1][1]


def _check_equals_aeon(name: str, dataset: str, chunk_bytes: int) -> None:
    """Test accuracy equal to aeon's classifier with the same random state, at least 99% of the predictions equal
    (float rounding: the scaling's statistics and the ridge fit sum in another order), the chosen alpha equal."""
    from aeon.datasets import load_classification

    x_train, y_train = load_classification(dataset, split="train")
    x_test, y_test = load_classification(dataset, split="test")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = _aeon(name)(random_state=0).fit(x_train, y_train)
        expected = reference.predict(x_test)
        ours = RocketClassifier(name, random_state=0, chunk_bytes=chunk_bytes).fit(x_train, y_train)
        pred = ours.predict(x_test)
    assert ours.ridge_.alpha_ == _ridge_of(name, reference).alpha_
    assert (pred == y_test).mean() == (expected == y_test).mean()
    assert (pred == expected).mean() >= 0.99
    assert ours._rows_per_chunk(x_train.shape[-1]) < len(x_test)  # the chunks were smaller than the sets


@pytest.mark.parametrize("name", ["minirocket", "hydra"])
def test_rocket_classifier_equals_aeons_classifier(name):
    _check_equals_aeon(name, "ItalyPowerDemand", chunk_bytes=64 * 10_000)


@pytest.mark.slow  # numba compiles MultiRocket's kernels on first use: about 90 s on a 2-core CPU
def test_multirocket_classifier_equals_aeons_classifier():
    _check_equals_aeon("multirocket", "ItalyPowerDemand", chunk_bytes=64 * 50_000)
    _check_equals_aeon("multirocket", "GunPoint", chunk_bytes=16 * 50_000)


@pytest.mark.slow  # MultiRocket's numba compilation, as above
def test_multirocket_hydra_classifier_equals_aeons_classifier():
    """Hydra's and MultiRocket's features in one ridge classifier, as aeon's MultiRocketHydraClassifier (which
    centres MultiRocket's part; the ridge fit centres it anyway)."""
    _check_equals_aeon("multirocket_hydra", "ItalyPowerDemand", chunk_bytes=64 * 60_000)


def test_decision_function_scores_predict_by_argmax_and_sign():
    """Scores (n,) for two classes (positive: classes_[1]), (n, K) for more; predict picks by them; chunked
    scoring equals one chunk."""
    rng = np.random.default_rng(0)
    for classes in (2, 3):
        y = np.arange(24) % classes
        x = rng.normal(size=(24, 1, 40)) + y[:, None, None] * np.sin(np.arange(40) / 3)
        clf = RocketClassifier("minirocket", random_state=0).fit(x, y)
        scores = clf.decision_function(x)
        assert scores.shape == ((24,) if classes == 2 else (24, classes))
        picked = (scores > 0).astype(int) if classes == 2 else scores.argmax(1)
        np.testing.assert_array_equal(clf.predict(x), clf.classes_[picked])
        clf.chunk_bytes = 1  # one series a chunk
        np.testing.assert_allclose(clf.decision_function(x), scores, rtol=1e-5, atol=1e-5)


def test_rocket_classifier_refuses_bad_input():
    with pytest.raises(ValueError, match="unknown classifier 'rocketx'"):
        RocketClassifier("rocketx").fit(np.zeros((4, 1, 20)), np.array([0, 1, 0, 1]))
    with pytest.raises(ValueError, match=r"expected series of shape \(n_cases, n_channels, n_timepoints\)"):
        RocketClassifier("hydra").fit(np.zeros((4, 1, 1, 20)), np.array([0, 1, 0, 1]))
    with pytest.raises(ValueError, match="expected 4 labels"):
        RocketClassifier("hydra").fit(np.zeros((4, 1, 20)), np.array([0, 1, 0]))


@pytest.mark.parametrize("name,chans,classes", [("minirocket", 2, 3), ("multirocket", 1, 2), ("hydra", 2, 2),
                                                 ("multirocket_hydra", 1, 3)])
def test_a_saved_classifier_loads_and_scores_bit_identically(tmp_path, name, chans, classes):
    """save_rocket / load_rocket: one safetensors file (no pickle); the loaded classifier's scores equal the fitted
    one's exactly, for univariate and multivariate series, two classes (one score column) and three."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.array(["a", "b", "c"][:classes]), 8)
    x, x_new = rng.normal(size=(len(y), chans, 40)), rng.normal(size=(7, chans, 40))
    fitted = RocketClassifier(name, random_state=3).fit(x, y)
    path = save_rocket(fitted, tmp_path / "rocket.safetensors")
    loaded = load_rocket(path)
    assert loaded.input_shape_ == (chans, 40) and list(loaded.classes_) == list(fitted.classes_)
    np.testing.assert_array_equal(loaded.decision_function(x_new), fitted.decision_function(x_new))
    assert (loaded.predict(x_new) == fitted.predict(x_new)).all()


def test_a_saved_classifier_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(ValueError, match="expected a fitted RocketClassifier"):
        save_rocket(RocketClassifier("minirocket"), tmp_path / "unfitted.safetensors")
    assert not (tmp_path / "unfitted.safetensors").exists()
    (tmp_path / "other.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="expected a ROCKET classifier saved by jumbokit"):
        load_rocket(tmp_path / "other.safetensors")
    fitted = RocketClassifier("hydra", random_state=0).fit(np.random.default_rng(0).normal(size=(8, 1, 30)),
                                                           np.repeat(["a", "b"], 4))
    path = save_rocket(fitted, tmp_path / "hydra.safetensors")
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(path), framework="numpy") as fh:  # as if another aeon held one array fewer
        arrays, meta = {k: fh.get_tensor(k) for k in fh.keys() if k != "hydra._hydra.W"}, fh.metadata()
    save_file(arrays, str(tmp_path / "older.safetensors"), metadata=meta)
    with pytest.raises(ValueError, match=r"whose hydra transformer holds other arrays .*hydra\._hydra\.W"):
        load_rocket(tmp_path / "older.safetensors")


def test_memory_benchmark_pairs_the_paths_and_checks_its_flags(monkeypatch):
    """benchmarks/rocket_memory.py: the aeon path runs for --aeon's classifiers only; agreement pairs each aeon row
    with its bounded row (killed or failed rows are left out)."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import rocket_memory

    args = rocket_memory.parse_args(["--models", "minirocket,hydra", "--aeon", "hydra", "--datasets", "A"])
    assert args.models == ["minirocket", "hydra"] and args.aeon == ["hydra"] and args.datasets == ["A"]
    assert rocket_memory.parse_args(["--aeon", "none"]).aeon == []
    for bad in (["--models", "rocketx"], ["--models", "hydra", "--aeon", "minirocket"], ["--max-train", "1"]):
        with pytest.raises(SystemExit):
            rocket_memory.parse_args(bad)
    row = {"dataset": "A", "model": "hydra", "status": "ok"}
    rows = [{**row, "path": "aeon", "accuracy": 0.5, "predictions": ["a", "b", "a", "a"]},
            {**row, "path": "bounded", "accuracy": 0.75, "predictions": ["a", "b", "b", "a"]},
            {**row, "model": "multirocket", "path": "aeon", "status": "killed: resident memory passed 14 GiB"},
            {**row, "model": "multirocket", "path": "bounded", "accuracy": 0.5, "predictions": ["a"] * 4}]
    assert rocket_memory.agreement(rows) == [{"dataset": "A", "model": "hydra", "aeon_accuracy": 0.5,
                                              "bounded_accuracy": 0.75, "prediction_agreement": 0.75}]
