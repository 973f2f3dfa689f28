"""Series models in use: the data config saved with them, kept sweep models, the estimator's save/load, and
``jumbokit predict`` / ``jumbokit validate`` on series."""

import numpy as np
import pytest

import jumbokit
from jumbokit.timeseries.data import load_dataset, load_raw
from jumbokit.timeseries.data_config import prepare_series, series_data_config


def _official_test(data):
    """The sweep's validation and test halves put back in the official test split's order."""
    full = np.empty((len(data.val) + len(data.test),) + data.val.x.shape[1:], dtype=np.float32)
    full[data.val_index], full[data.test_index] = data.val.x, data.test.x
    return full


@pytest.mark.parametrize("unequal_length", ["pad", "resample", "zero"])
@pytest.mark.parametrize("normalize", ["train", "instance"])
def test_saved_series_config_prepares_raw_series_as_training_did(unequal_length, normalize):
    data = load_dataset("JapaneseVowels", unequal_length=unequal_length, normalize=normalize)
    cfg = series_data_config(data)
    assert cfg["in_chans"] == 12 and cfg["label_names"] == [str(c) for c in data.classes]
    raw_train, raw_test = load_raw("JapaneseVowels", "train")[0], load_raw("JapaneseVowels", "test")[0]
    assert np.array_equal(prepare_series(raw_train, cfg), data.train.x, equal_nan=True)
    assert np.array_equal(prepare_series(raw_test, cfg), _official_test(data), equal_nan=True)
    with pytest.raises(ValueError, match="of 12 channel"):
        prepare_series([s[:3] for s in raw_test], cfg)


def test_series_config_travels_with_the_weights(tmp_path):
    from jumbokit.timeseries.run import build_series_model

    data = load_dataset("GunPoint")
    cfg = series_data_config(data)
    assert cfg["normalize"] == "train" and len(cfg["mean"]) == 1 and cfg["seq_len"] == 150
    jumbokit.save(build_series_model("patchtst", data, 8), tmp_path, data_config=cfg)
    assert jumbokit.load(tmp_path).pretrained_cfg == cfg


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A tiny tstrain sweep on GunPoint (paper protocol): two runs of patchtst, the top-2 ensemble scored."""
    from jumbokit.cli import tstrain_main

    out = tmp_path_factory.mktemp("series") / "sweep"
    assert tstrain_main(["--dataset", "GunPoint", "--model", "patchtst", "--epochs", "2", "--lr", "1e-3,3e-3",
                         "--dropout", "0.1", "--ensemble", "2", "--out", str(out), "--no-progress", "--cpu"]) == 0
    return out


def test_tstrain_keeps_the_chosen_run_and_the_ensemble(sweep):
    import json

    from jumbokit.timeseries.run import predict_proba
    from jumbokit.timeseries.store import load_proba

    folder = sweep / "models" / "GunPoint" / "patchtst"
    kept = json.loads((folder / "kept.json").read_text())
    row = next(r for r in json.loads((sweep / "results.json").read_text())["summary"] if r["model"] == "patchtst")
    assert kept["chosen"]["test_top1"] == row["test_top1"] and kept["chosen"]["val_top1"] == row["val_top1"]
    assert [m["file"] for m in kept["ensemble"]][0].startswith("ensemble/1_" + kept["chosen"]["run"])
    assert (folder / "model_config.json").is_file() and len(kept["ensemble"]) == 2
    data = load_dataset("GunPoint")
    model = jumbokit.load(folder)
    assert model.pretrained_cfg["label_names"] == ["1", "2"]
    stored = load_proba(sweep / "runs" / "GunPoint" / "patchtst" / f"{kept['chosen']['run']}.proba.safetensors")
    assert np.array_equal(predict_proba(model, data.test.x), stored["test"])
    for member in kept["ensemble"]:
        assert jumbokit.load(folder / member["file"]).pretrained_cfg == model.pretrained_cfg


def test_a_sweep_without_run_weights_resumes_and_says_so(sweep, tmp_path, caplog):
    import shutil

    from jumbokit.cli import tstrain_main

    old = tmp_path / "old"
    shutil.copytree(sweep, old)
    shutil.rmtree(old / "models")
    for weights in (old / "runs").rglob("*.model.safetensors"):
        weights.unlink()
    assert tstrain_main(["--dataset", "GunPoint", "--model", "patchtst", "--epochs", "2", "--lr", "1e-3,3e-3",
                         "--dropout", "0.1", "--ensemble", "2", "--out", str(old), "--no-progress", "--cpu"]) == 0
    assert not (old / "models").exists() and not list((old / "runs").rglob("*.model.safetensors"))
    assert "no model kept" in caplog.text and "have no saved weights" in caplog.text

    # the runs' weights deleted after the sweep to free space: the kept models stay and a resume keeps them
    freed = tmp_path / "freed"
    shutil.copytree(sweep, freed)
    for weights in (freed / "runs").rglob("*.model.safetensors"):
        weights.unlink()
    kept = {p: p.read_bytes() for p in (freed / "models").rglob("*") if p.is_file()}
    caplog.clear()
    assert tstrain_main(["--dataset", "GunPoint", "--model", "patchtst", "--epochs", "2", "--lr", "1e-3,3e-3",
                         "--dropout", "0.1", "--ensemble", "2", "--out", str(freed), "--no-progress", "--cpu"]) == 0
    assert {p: p.read_bytes() for p in (freed / "models").rglob("*") if p.is_file()} == kept
    assert "no model kept" not in caplog.text


def test_estimator_saved_and_loaded_predicts_identical_probabilities(tmp_path):
    from aeon.datasets import load_basic_motions

    from jumbokit.timeseries.estimator import PatchTSTClassifier

    X_train, y_train = load_basic_motions(split="train")
    X_test, _ = load_basic_motions(split="test")
    clf = PatchTSTClassifier(model="patchtst", patches=4, epochs=2, batch_size=8, random_state=0,
                             save_last_model=True, file_path=str(tmp_path), last_file_name="fitted")
    clf.fit(X_train, y_train)
    for path in (tmp_path / "fitted", clf.save(tmp_path / "again")):
        back = PatchTSTClassifier.load(path)
        assert np.array_equal(back.predict_proba(X_test), clf.predict_proba(X_test))
        assert list(back.classes_) == list(clf.classes_) and back.get_params() == clf.get_params()
        assert np.array_equal(back.predict(X_test), clf.predict(X_test))
    assert jumbokit.load(tmp_path / "again").pretrained_cfg["label_names"] == [str(c) for c in clf.classes_]
    with pytest.raises(FileNotFoundError, match="estimator.json"):
        PatchTSTClassifier.load(tmp_path)


def _gunpoint_test_file():
    """aeon's bundled GunPoint_TEST.ts (the official test split as a file)."""
    from pathlib import Path

    import aeon

    return Path(aeon.__file__).parent / "datasets" / "data" / "GunPoint" / "GunPoint_TEST.ts"


@pytest.mark.parametrize("ensemble", [False, True])
def test_predict_and_validate_give_the_accuracy_the_sweep_reported(sweep, tmp_path, ensemble):
    """Paper protocol: the sweep tested on a stratified half of the official test split; predict reads the whole
    official test file, and the rows of that half give the reported accuracy to the last series."""
    import csv
    import json

    from jumbokit.recipes import predict, validate

    row = next(r for r in json.loads((sweep / "results.json").read_text())["summary"] if r["model"] == "patchtst")
    reported = row["ens_test_top1"] if ensemble else row["test_top1"]
    flag = ["--ensemble"] if ensemble else []
    out = tmp_path / "pred.csv"
    test_file = _gunpoint_test_file()
    predict.main(["--checkpoint", str(sweep), str(test_file), "--out", str(out), "--no-progress", "--topk", "2",
                  *flag])
    rows = list(csv.DictReader(out.open()))
    data = load_dataset("GunPoint")
    assert len(rows) == 150 and [int(r["series"]) for r in rows] == list(range(150))
    half = [rows[i] for i in data.test_index]
    assert [r["label"] for r in half] == list(data.decode(data.test.y))
    right = sum(r["top1_label"] == r["label"] for r in half)
    assert 100.0 * right / len(half) == pytest.approx(reported, abs=1e-9)
    checked = validate.main(["--checkpoint", str(sweep / "models" / "GunPoint" / "patchtst"), "--split", "test",
                             "--out", str(tmp_path / "val"), "--no-progress", *flag])
    assert checked["n"] == len(data.test) and checked["top1"] == pytest.approx(reported, abs=1e-9)
    assert (tmp_path / "val" / "confusion.csv").is_file() and (tmp_path / "val" / "results.csv").is_file()


def test_series_inputs_of_every_format_agree(sweep, tmp_path):
    from jumbokit.recipes import predict
    from jumbokit.timeseries.data import load_raw

    x, labels = load_raw("GunPoint", "test")
    np.save(tmp_path / "a.npy", x[:7, 0])  # (n, L)
    np.save(tmp_path / "b.npy", x[:7])  # (n, C, L)
    np.savetxt(tmp_path / "c.csv", x[:7, 0], delimiter=",")
    (tmp_path / "d.tsv").write_text("".join(f"{y}\t" + "\t".join(repr(float(v)) for v in s[0]) + "\n"
                                            for y, s in zip(labels[:7], x[:7])))
    got = predict.main(["--checkpoint", str(sweep), str(tmp_path), "--out", str(tmp_path / "p.csv"),
                        "--no-progress"])["rows"]
    by_file = {}
    for r in got:
        by_file.setdefault(r["file"], []).append((r["top1_label"], r["top1_prob"]))
    assert len(by_file) == 4 and len({tuple(v) for v in by_file.values()}) == 1, by_file


def test_bad_series_inputs_get_one_line_and_no_file(sweep, tmp_path, jumbokit_cli):
    from jumbokit.timeseries.data import load_raw

    x, _ = load_raw("GunPoint", "test")
    np.save(tmp_path / "three.npy", np.repeat(x[:4], 3, axis=1))
    (tmp_path / "broken.ts").write_text("@problemName X\n@data\n1,2,:nonsense\n")
    (tmp_path / "broken.npy").write_bytes(b"\x93NUMPY not really")
    (tmp_path / "words.csv").write_text("1,2,three\n")
    out = tmp_path / "pred.csv"
    cases = {"three.npy": "takes series of 1 channel(s), got 3", "broken.ts": "cannot read series file",
             "broken.npy": "cannot read series file", "words.csv": "expected numbers"}
    for name, message in cases.items():
        status, _, err = jumbokit_cli(["predict", "--checkpoint", str(sweep), str(tmp_path / name), "--out",
                                       str(out), "--no-progress"])
        assert status != 0 and message in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists() and not list(tmp_path.glob(".pred.csv*"))


def test_an_early_stopped_run_is_kept_with_its_best_weights_and_predicts_the_reported_accuracy(tmp_path):
    """A run stopped on the validation half keeps the best scoring's weights: the kept model, read by predict from
    the official test file, scores the reported test accuracy on the test half's rows."""
    import json

    from jumbokit.cli import tstrain_main
    from jumbokit.recipes import predict

    out = tmp_path / "sweep"
    assert tstrain_main(["--dataset", "GunPoint", "--model", "patchtst", "--steps", "40", "--batch-size", "16",
                         "--lr", "3e-2", "--dropout", "0.1", "--early-stop", "1", "--eval-every", "5",
                         "--out", str(out), "--no-progress", "--cpu"]) == 0
    [record] = [json.loads(p.read_text()) for p in (out / "runs" / "GunPoint" / "patchtst").glob("*.json")]
    stop = record["extra"]["early_stop"]
    assert stop["stopped"] and stop["best_step"] < stop["last_step"] < 40  # stopped, and not on its last weights
    reported = json.loads((out / "results.json").read_text())["summary"][0]["test_top1"]
    rows = predict.main(["--checkpoint", str(out), str(_gunpoint_test_file()), "--out", str(tmp_path / "p.csv"),
                         "--no-progress"])["rows"]
    half = [rows[i] for i in load_dataset("GunPoint").test_index]
    assert 100.0 * sum(r["top1_label"] == r["label"] for r in half) / len(half) == pytest.approx(reported, abs=1e-9)


def test_official_protocol_predict_on_the_test_file_gives_the_reported_accuracy(tmp_path):
    """The official protocol tests on the whole official test split: predict on the test file as it is."""
    import json

    from jumbokit.cli import tstrain_main
    from jumbokit.recipes import predict

    out = tmp_path / "sweep"
    assert tstrain_main(["--dataset", "GunPoint", "--model", "patchtst", "--epochs", "2", "--lr", "1e-3",
                         "--dropout", "0.1", "--protocol", "official", "--out", str(out), "--no-progress",
                         "--cpu"]) == 0
    reported = json.loads((out / "results.json").read_text())["summary"][0]["test_top1"]
    test_file = _gunpoint_test_file()
    rows = predict.main(["--checkpoint", str(out), str(test_file), "--out", str(tmp_path / "p.csv"),
                         "--no-progress"])["rows"]
    assert len(rows) == 150
    assert 100.0 * sum(r["top1_label"] == r["label"] for r in rows) / len(rows) == pytest.approx(reported, abs=1e-9)


def test_a_kept_series_model_goes_to_the_hub_and_back(sweep, tmp_path, offline_cache, hub_api):
    """push_to_hub of a sweep's kept model (a fake HfApi writing a local Hub cache), then predict from it."""
    import json

    from jumbokit.hub import push_to_hub
    from jumbokit.recipes import predict

    folder = sweep / "models" / "GunPoint" / "patchtst"
    push_to_hub(folder, "org/gunpoint", api=hub_api)
    card = (offline_cache / "models--org--gunpoint" / "snapshots" / hub_api.commit / "README.md").read_text()
    chosen = json.loads((folder / "kept.json").read_text())["chosen"]
    for text in ("time-series classifier: `patchtst`", "on `GunPoint`", "1 channel(s) x 150 steps",
                 f"| test | {chosen['test_top1']:.2f} |", "jumbokit predict --checkpoint hf-hub:org/gunpoint"):
        assert text in card, text
    assert jumbokit.load("hf-hub:org/gunpoint").pretrained_cfg == jumbokit.load(folder).pretrained_cfg
    test_file = _gunpoint_test_file()
    via_hub = predict.main(["--checkpoint", "hf-hub:org/gunpoint", str(test_file), "--out", str(tmp_path / "a.csv"),
                            "--no-progress"])["rows"]
    local = predict.main(["--checkpoint", str(folder), str(test_file), "--out", str(tmp_path / "b.csv"),
                          "--no-progress"])["rows"]
    assert [r["top1_prob"] for r in via_hub] == [r["top1_prob"] for r in local]
    # the top-2 ensemble travels with it (kept.json and its members): --ensemble scores the same from the Hub
    assert {"kept.json", "ensemble"} <= set(hub_api.calls[-1][2])
    ensembles = [predict.main(["--checkpoint", source, str(test_file), "--ensemble", "--out",
                               str(tmp_path / f"ens_{i}.csv"), "--no-progress"])["rows"]
                 for i, source in enumerate(("hf-hub:org/gunpoint", str(folder)))]
    assert [r["top1_prob"] for r in ensembles[0]] == [r["top1_prob"] for r in ensembles[1]]
    assert [r["top1_prob"] for r in ensembles[0]] != [r["top1_prob"] for r in local]  # two members, not the chosen run
