"""Late fusion of a series model with a ROCKET-family classifier (jumbokit.timeseries.fusion) and its sweep rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jumbokit.timeseries import fusion, store
from jumbokit.timeseries.data import load_dataset
from jumbokit.timeseries.protocol import RECIPES, SweepConfig
from jumbokit.timeseries.sweep import run_sweep


def test_ridge_proba_is_a_softmax_of_the_scores_in_class_order():
    binary = fusion.ridge_proba(np.array([0.9, -1.1, 0.0]), 2)
    np.testing.assert_allclose(binary.sum(1), 1.0)
    np.testing.assert_array_equal(binary.argmax(1)[:2], [1, 0])  # positive score: the second class
    np.testing.assert_allclose(binary[2], [0.5, 0.5])
    scores = np.array([[1.0, -1.0, -1.0], [-1.0, -1.0, 1.0]])
    proba = fusion.ridge_proba(scores, 3)
    np.testing.assert_array_equal(proba.argmax(1), [0, 2])
    expected = np.exp(fusion.RIDGE_TEMPERATURE * 2.0)  # a gap of 2 between the codes: odds e^(2T) to 1
    assert proba[0, 0] / proba[0, 1] == pytest.approx(expected)
    with pytest.raises(ValueError, match=r"expected scores \(n, 3\) for 3 classes, got shape \(4,\)"):
        fusion.ridge_proba(np.zeros(4), 3)
    with pytest.raises(ValueError, match=r"expected scores \(n, 3\), got shape \(4, 2\)"):
        fusion.ridge_proba(np.zeros((4, 2)), 3)


def test_late_fusion_chooses_the_weight_on_validation_only():
    rng = np.random.default_rng(0)
    y_val, y_test = rng.integers(0, 3, 60), rng.integers(0, 3, 60)

    def onehot(y, confidence):
        p = np.full((len(y), 3), (1 - confidence) / 2)
        p[np.arange(len(y)), y] = confidence
        return p

    right_val, right_test = onehot(y_val, 0.6), onehot(y_test, 0.6)
    wrong_val, wrong_test = onehot((y_val + 1) % 3, 0.9), onehot((y_test + 1) % 3, 0.9)
    # the model is right on validation, the ridge confidently wrong: only a large model share is right there
    out = fusion.late_fusion({"val": right_val, "test": wrong_test}, {"val": wrong_val, "test": right_test},
                             y_val, y_test)
    assert out["val_top1"] == 100.0 and out["weight"] > 0.5
    tied = [w for w in fusion.FUSION_WEIGHTS if ((w * right_val + (1 - w) * wrong_val).argmax(1) == y_val).all()]
    assert out["weights_tied"] == len(tied) and out["weight"] == min(tied, key=lambda w: (abs(w - 0.5), w))
    mixed = out["weight"] * wrong_test + (1 - out["weight"]) * right_test
    assert out["test_top1"] == pytest.approx(100.0 * (mixed.argmax(1) == y_test).mean())  # the test half only scores
    # both right everywhere: every weight ties, the even mixture is kept
    even = fusion.late_fusion({"val": right_val, "test": right_test}, {"val": right_val, "test": right_test},
                              y_val, y_test)
    assert even["weight"] == 0.5 and even["weights_tied"] == len(fusion.FUSION_WEIGHTS)
    with pytest.raises(ValueError, match="expected 60 test probabilities of the same classes from both models"):
        fusion.late_fusion({"val": right_val, "test": right_test[:, :2]}, {"val": right_val, "test": right_test},
                           y_val, y_test)


def test_sweep_fuses_the_chosen_run_with_the_stored_ridge_scores(tmp_path):
    """--fuse minirocket: the baseline runs (asked or not), keeps its validation / test scores beside its record,
    and each model gets a row model+minirocket that late_fusion recomputes from the stored files."""
    cfg = SweepConfig(**{k: v for k, v in RECIPES["small-data"].items()
                         if k in ("batch_size", "normalize", "augment")}, steps=3, recipe="small-data")
    result = run_sweep(["ItalyPowerDemand"], ["patchtst"], cfg, tmp_path, lrs=[1e-3], dropouts=[0.1],
                       progress=False, cpu=True, fuse="minirocket")
    rows = {r.model: r for r in result.rows}
    assert set(rows) == {"patchtst", "minirocket", "patchtst+minirocket"}
    fused = rows["patchtst+minirocket"]
    assert fused.fusion_weight in fusion.FUSION_WEIGHTS
    assert fused.wall_seconds == pytest.approx(rows["patchtst"].wall_seconds + rows["minirocket"].wall_seconds)
    data = load_dataset("ItalyPowerDemand")
    record = tmp_path / "runs" / "ItalyPowerDemand" / "minirocket.json"
    assert "scores" not in json.loads(record.read_text())
    scores = store.load_proba(store.baseline_scores_path(record))
    assert scores["val"].shape == (len(data.val.y),) and scores["test"].shape == (len(data.test.y),)
    run = next((tmp_path / "runs" / "ItalyPowerDemand" / "patchtst").glob("lr*.json"))
    proba = store.load_proba(store.proba_path(run))
    ridge = {half: fusion.ridge_proba(scores[half], 2) for half in ("val", "test")}
    again = fusion.late_fusion(proba, ridge, data.val.y, data.test.y)
    assert (again["weight"], again["test_top1"]) == (fused.fusion_weight, fused.test_top1)
    # the ridge alone, from its stored scores, is the baseline's own row
    assert 100.0 * (ridge["test"].argmax(1) == data.test.y).mean() == pytest.approx(rows["minirocket"].test_top1)
    assert "patchtst+minirocket" in result.ranks_all
    saved = {r["model"]: r for r in json.loads((tmp_path / "results.json").read_text())["summary"]}
    assert saved["patchtst+minirocket"]["fusion_weight"] == fused.fusion_weight


def test_a_fused_model_is_kept_and_scores_as_the_sweep_did(tmp_path, offline_cache, hub_api):
    """tstrain --fuse keeps the fused model as one folder (the transformer, the fitted MiniRocket, fusion.json);
    validate and predict load it and give the sweep's accuracies on the validation and test halves, from the
    prepared and the raw series, and so does its copy pushed to the Hub (a fake API) and read back; the transformer
    alone is refused by load_series_models; columns follow the transformer's class names."""
    from jumbokit.inference.series import load_series_models, load_series_predictor, read_series_file
    from jumbokit.recipes import predict, validate
    from jumbokit.timeseries.data import load_raw

    cfg = SweepConfig(**{k: v for k, v in RECIPES["small-data"].items()
                         if k in ("batch_size", "normalize", "augment")}, steps=3, recipe="small-data")
    out = tmp_path / "sweep"
    result = run_sweep(["ArrowHead"], ["patchtst"], cfg, out, lrs=[1e-3], dropouts=[0.1],
                       progress=False, cpu=True, fuse="minirocket")
    fused = {r.model: r for r in result.rows}["patchtst+minirocket"]
    folder = out / "models" / "ArrowHead" / "patchtst+minirocket"
    record = json.loads((folder / fusion.FUSION_FILE).read_text())
    assert (record["model"], record["baseline"], record["weight"]) == ("patchtst", "minirocket", fused.fusion_weight)
    assert (folder / fusion.ROCKET_FILE).is_file() and (folder / "model.safetensors").is_file()
    assert (out / "runs" / "ArrowHead" / "minirocket.rocket.safetensors").is_file()
    for split, expected in (("val", fused.val_top1), ("test", fused.test_top1)):
        row = validate.main(["--checkpoint", str(folder), "--split", split, "--no-progress",
                             "--out", str(tmp_path / f"validate_{split}")])
        assert row["top1"] == pytest.approx(expected) and "fused with minirocket" in row["model"]
    # the whole official test file through predict: the halves' accuracies, weighted by their sizes
    data = load_dataset("ArrowHead")
    x, y = load_raw("ArrowHead", "test")
    lines = ["\t".join([str(label), *(f"{v:.9g}" for v in series[0])]) for series, label in zip(x, y)]
    tsv = tmp_path / "ArrowHead_TEST.tsv"
    tsv.write_text("\n".join(lines) + "\n")
    rows = predict.main(["--checkpoint", str(folder), str(tsv), "--no-progress", "--out",
                         str(tmp_path / "predict.csv")])["rows"]
    right = sum(r["top1_label"] == r["label"] for r in rows)
    n_val, n_test = len(data.val.y), len(data.test.y)
    assert right == round((fused.val_top1 * n_val + fused.test_top1 * n_test) / 100)
    # to the Hub and back: the whole fused model travels (the transformer alone would score otherwise)
    from jumbokit.hub import push_to_hub

    push_to_hub(folder, "org/fused", api=hub_api)
    assert hub_api.calls[-1][2] == ["README.md", "fusion.json", "kept.json", "model.safetensors", "model_config.json",
                                    "rocket.safetensors"]
    card = (offline_cache / "models--org--fused" / "snapshots" / hub_api.commit / "README.md").read_text()
    for text in ("`patchtst+minirocket`", "## Fusion", f"transformer share {fused.fusion_weight}",
                 f"| test | {fused.test_top1:.2f} |", 'load_series_predictor("hf-hub:org/fused")'):
        assert text in card, text
    via_hub = predict.main(["--checkpoint", "hf-hub:org/fused", str(tsv), "--no-progress", "--out",
                            str(tmp_path / "hub.csv")])["rows"]
    assert [r["top1_prob"] for r in via_hub] == [r["top1_prob"] for r in rows]
    row = validate.main(["--checkpoint", "hf-hub:org/fused", "--split", "test", "--no-progress", "--out",
                         str(tmp_path / "validate_hub")])
    assert row["top1"] == pytest.approx(fused.test_top1) and "fused with minirocket" in row["model"]
    assert load_series_predictor("hf-hub:org/fused").fused
    with pytest.raises(ValueError, match="is a fused model"):
        load_series_models(folder)
    from jumbokit.recipes import export

    with pytest.raises(ValueError, match="is a fused series model"):  # ONNX would hold the transformer alone
        export.main([str(folder), "--out", str(tmp_path / "fused.onnx")])
    assert not (tmp_path / "fused.onnx").exists()
    predictor = load_series_predictor(folder)
    series = read_series_file(tsv, predictor.cfg)
    with pytest.raises(ValueError, match="expected 175 raw series, got none"):
        predictor.proba(series.x)
    names = [str(n) for n in predictor.cfg["label_names"]]
    forward = fusion.rocket_proba(predictor.rocket, series.raw, names)
    np.testing.assert_array_equal(fusion.rocket_proba(predictor.rocket, series.raw, names[::-1]), forward[:, ::-1])
    holes = series.raw.copy()
    holes[0, 0, 10] = np.nan
    with pytest.raises(ValueError, match="missing values before their end"):
        fusion.rocket_proba(predictor.rocket, holes, names)
    np.save(tmp_path / "holes.npy", holes[:, 0, :])
    with pytest.raises(ValueError, match=r"holes\.npy, series 0: a value is missing before the series' end"):
        predict.main(["--checkpoint", str(folder), str(tmp_path / "holes.npy"), "--no-progress", "--out",
                      str(tmp_path / "holes.csv")])
    assert not (tmp_path / "holes.csv").exists()
    with pytest.raises(ValueError, match="not one fused model"):
        fusion.rocket_proba(predictor.rocket, series.raw, ["a", "b", "c"])
