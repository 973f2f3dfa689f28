"""Time series: the ``tstrain`` CLI end to end, resuming, bad input, and the aeon estimator."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jumbokit.cli import tstrain_main
from jumbokit.cli.series import build_parser
from jumbokit.timeseries.results import rank_values, rank_models, summarize

OUTPUTS = ("results.csv", "results.json", "report.md", "accuracy.png", "sweep.json")


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small models: one thread is fastest


def tiny(out, *extra: str) -> list[str]:
    return ["--dataset", "ItalyPowerDemand", "--epochs", "2", "--lr", "1e-3", "--dropout", "0.1",
            "--out", str(out), "--no-progress", "--cpu", *extra]


def test_tstrain_end_to_end_and_resume(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert tstrain_main(tiny(out, "--data-dir", str(tmp_path / "cache"))) == 0
    printed = capsys.readouterr().out
    assert "ItalyPowerDemand" in printed and "mean rank" in printed
    for name in OUTPUTS:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    runs = sorted((out / "runs").rglob("*.json"))
    assert len(runs) == 3  # one run per model
    report = json.loads((out / "results.json").read_text())
    assert {r["model"] for r in report["summary"]} == {"patchtst", "patchtst_registers", "patchtst_jumbo"}
    tested = {json.loads(p.read_text())["model"]: json.loads(p.read_text())["test_top1"] for p in runs}
    for row in report["summary"]:  # one run per model: the summary reports that run's test accuracy
        assert row["runs"] == 1 and row["test_top1"] == tested[row["model"]]
    assert (out / "accuracy.png").read_bytes()[:4] == b"\x89PNG"
    csv_lines = (out / "results.csv").read_text().splitlines()
    assert csv_lines[0].startswith("dataset,model") and len(csv_lines) == 4

    # resuming skips finished runs (their files are untouched)
    stamps = {p: p.stat().st_mtime_ns for p in runs}
    assert tstrain_main(tiny(out, "--data-dir", str(tmp_path / "cache"))) == 0
    assert {p: p.stat().st_mtime_ns for p in runs} == stamps
    capsys.readouterr()  # the resumed sweep's log lines (stderr)

    # the same directory with a different sweep definition is refused, nothing changes
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    code = tstrain_main(["--dataset", "ItalyPowerDemand", "--epochs", "3", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "different sweep" in err and "epochs" in err and len(err.strip().splitlines()) == 1
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_tstrain_bad_input(tmp_path, capsys, monkeypatch):
    import aeon.datasets

    out = tmp_path / "out"
    common = ["--out", str(out), "--data-dir", str(tmp_path / "cache"), "--no-progress"]
    cases = [
        (["--dataset", "ItalyPowerDemand", "--patches", "42"], "--patches 42 is larger"),
        (["--dataset", "GunPoint", "--model", "patchtst_big"], "unknown model"),
        (["--dataset", "GunPoint", "--dropout", "1.5"], "--dropout must be in"),
        (["--dataset", "GunPiont"], "did you mean GunPoint"),
    ]
    for args, message in cases:
        code = tstrain_main(args + common)
        err = capsys.readouterr().err
        assert code == 2, args
        assert message in err and err.startswith("error:") and len(err.strip().splitlines()) == 1, err
        assert not out.exists(), args  # nothing written

    def offline(name, **kwargs):
        raise ValueError("Could not download files: <urlopen error Name or service not known>")

    monkeypatch.setattr(aeon.datasets, "load_classification", offline)
    assert tstrain_main(["--dataset", "Adiac"] + common) == 2  # a real dataset, not available offline
    err = capsys.readouterr().err
    assert "'Adiac' is not available locally" in err and "ArrowHead" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "cache" / "Adiac").exists()
    monkeypatch.undo()

    # a directory that is not a tstrain output is refused
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    assert tstrain_main(tiny(other)) == 2
    assert "not empty" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]

    with pytest.raises(SystemExit) as exc:
        tstrain_main(["--patches", "0"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        tstrain_main(["--dataset", "GunPoint", "--ema", "1.5"] + common)
    assert exc.value.code == 2 and "--ema: expected a decay in [0, 1)" in capsys.readouterr().err
    assert not out.exists()


def test_tstrain_ema_scores_the_weight_average(tmp_path):
    """--ema reaches the runs (other scores than the last weights), sweep.json and the report; off (0) by
    default."""
    def run(out, *extra):
        assert tstrain_main(tiny(out, "--model", "patchtst", *extra)) == 0
        record = json.loads(next((out / "runs").rglob("*.json")).read_text())
        return json.loads((out / "sweep.json").read_text()), record

    plain_sweep, plain = run(tmp_path / "plain")
    ema_sweep, ema = run(tmp_path / "ema", "--ema", "0.5")
    assert plain_sweep["ema_decay"] == 0.0 and ema_sweep["ema_decay"] == 0.5
    assert ema["val_loss"] != plain["val_loss"]
    assert "moving average of the weights (decay 0.5)" in (tmp_path / "ema" / "report.md").read_text()


def test_tstrain_nan_only_channel_and_one_class(tmp_path, capsys, write_ts):
    rng = np.random.default_rng(0)
    series = rng.normal(size=(6, 20))
    series[3] = np.nan
    for split in ("train", "test"):
        write_ts(tmp_path, "HoleSet", split, series, ["a", "b"] * 3)
        write_ts(tmp_path, "OneClassSet", split, rng.normal(size=(6, 20)), ["a"] * 6)
    for name, message in (("HoleSet", "no observed value in channel 0"), ("OneClassSet", "at least 2 classes")):
        out = tmp_path / f"out_{name}"
        code = tstrain_main(["--dataset", name, "--data-dir", str(tmp_path), "--out", str(out), "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2 and message in err, err
        assert not out.exists()


def test_tstrain_help_and_list(capsys):
    with pytest.raises(SystemExit) as exc:
        tstrain_main(["--help"])
    assert exc.value.code == 0
    assert "--archive" in capsys.readouterr().out
    assert tstrain_main(["--list"]) == 0
    listing = capsys.readouterr().out
    assert "UEA" in listing and "BasicMotions" in listing and "GunPoint" in listing


def test_tstrain_help_states_each_default_once():
    """Every valued flag has a help line giving its default once (or its value under each recipe); the paper's
    split is called "paper"; --no-progress hides bars, not the summary."""
    parser = build_parser()
    for action in parser._actions:
        if not action.option_strings or action.nargs == 0:  # positional, --help and on/off switches
            continue
        text = action.help or ""
        assert text.strip(), action.option_strings
        stated = text.count("(default:") + text.count("(paper:")
        assert stated == 1, (action.option_strings, text)
    protocol = next(a for a in parser._actions if "--protocol" in a.option_strings)
    assert protocol.choices == ("paper", "official") and "seed" not in protocol.help
    assert "--datasets" not in parser.format_help() and "--dataset NAMES" in parser.format_help()


def test_summary_selection_and_ranks():
    def run(d, m, lr, val, test, loss=1.0):
        return dict(dataset=d, model=m, lr=lr, dropout=0.0, val_top1=val, test_top1=test, val_loss=loss,
                    train_seconds=1.0, wall_seconds=1.0, step_ms=1.0, params=1, patch_len=2, stride=1, num_patches=8,
                    global_tokens=1)

    runs = [run("A", "patchtst", 1e-3, 90, 50), run("A", "patchtst", 1e-4, 80, 90),
            run("A", "patchtst_jumbo", 1e-3, 90, 70, loss=0.5), run("A", "patchtst_jumbo", 1e-4, 90, 10, loss=0.9)]
    rows = {r.model: r for r in summarize(runs)}
    assert rows["patchtst"].test_top1 == 50  # chosen on validation, not on test
    assert rows["patchtst_jumbo"].test_top1 == 70  # validation tie -> lower validation loss
    assert rows["patchtst"].avg_test_top1 == pytest.approx(70)
    ranks = rank_models(list(rows.values()), ["patchtst", "patchtst_jumbo"])
    assert ranks["patchtst_jumbo"]["best"] == 1.0 and ranks["patchtst"]["avg"] == 1.0
    assert rank_values([0.9, 0.5, 0.9]) == [1.5, 3.0, 1.5]


def test_runs_are_reproducible(tmp_path):
    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.protocol import SweepConfig
    from jumbokit.timeseries.run import train_run

    data = load_dataset("ItalyPowerDemand", data_dir=tmp_path)
    cfg = SweepConfig(epochs=2, seed=3)
    first = train_run(data, "patchtst_jumbo", 1e-3, 0.1, cfg, cpu=True)
    second = train_run(data, "patchtst_jumbo", 1e-3, 0.1, cfg, cpu=True)
    assert (first.val_loss, first.test_top1, first.train_loss) == (second.val_loss, second.test_top1, second.train_loss)
    assert first.steps == 2 and first.num_patches == 8


def test_estimator_unequal_length():
    from aeon.datasets import load_classification

    from jumbokit.timeseries.estimator import PatchTSTClassifier

    X, y = load_classification("JapaneseVowels", split="train")
    assert isinstance(X, list)  # unequal length
    pick = np.concatenate([np.flatnonzero(y == c)[:4] for c in np.unique(y)])
    X_train, y_train = [X[i] for i in pick], y[pick]
    clf = PatchTSTClassifier(model="patchtst_jumbo", epochs=2, batch_size=16, random_state=0)
    clf.fit(X_train, y_train)
    X_test, _ = load_classification("JapaneseVowels", split="test")
    X_test = X_test[:10]
    with pytest.warns(UserWarning, match="longer than the longest training series") if max(
            s.shape[-1] for s in X_test) > clf.seq_len_ else _no_warning():
        proba = clf.predict_proba(X_test)
    assert proba.shape == (10, len(np.unique(y_train)))
    np.testing.assert_allclose(proba.sum(1), 1, rtol=1e-5)
    pred = clf.predict(X_train[:6])
    assert set(pred) <= set(np.unique(y_train))  # original labels, decoded
    assert clf.get_tag("capability:unequal_length") and clf.get_tag("capability:multivariate")


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.slow
def test_tstrain_with_minirocket(tmp_path):
    out = tmp_path / "mr"
    assert tstrain_main(tiny(out, "--baseline", "minirocket", "--model", "patchtst_jumbo")) == 0
    report = json.loads((out / "results.json").read_text())
    assert "minirocket" in {r["model"] for r in report["summary"]}


def test_estimator_keeps_level_information_with_train_statistics():
    """Classes that differ only in level: train-split standardisation keeps it, per-instance drops it."""
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    rng = np.random.default_rng(0)
    y = np.repeat(np.array(["low", "high"]), 24)

    def draw():
        return rng.normal(size=(48, 1, 16)) + np.where(y == "high", 4.0, 0.0)[:, None, None]

    X, X_new = draw(), draw()
    scores = {}
    for how in ("train", "instance"):
        clf = PatchTSTClassifier(model="patchtst", patches=4, epochs=30, lr=3e-3, batch_size=16,
                                 normalize=how, random_state=0).fit(X, y)
        scores[how] = float((clf.predict(X_new) == y).mean())
    assert scores["train"] == 1.0 and scores["instance"] < 0.75, scores
    with pytest.raises(ValueError, match="normalize"):
        PatchTSTClassifier(normalize="global", epochs=1).fit(X, y)


def test_branched_run_collapses_to_the_plain_depth(tmp_path, monkeypatch):
    from jumbokit.encoders import Encoder
    from jumbokit.timeseries import run as ts_run
    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.protocol import SweepConfig

    data = load_dataset("ItalyPowerDemand", data_dir=tmp_path)
    branched = ts_run.build_series_model("patchtst_jumbo", data, 8, branches=2)
    assert len(branched.blocks) == 3 and branched.branches == 2 and branched.layers == 6  # 3 blocks of 2
    scored = []
    original = ts_run.predict_proba
    monkeypatch.setattr(ts_run, "predict_proba",
                        lambda model, *a, **k: scored.append(model) or original(model, *a, **k))
    run = ts_run.train_run(data, "patchtst_jumbo", 1e-3, 0.0, SweepConfig(epochs=2, branches=2), cpu=True)
    assert run.steps == 2 and scored
    assert all(type(m) is Encoder and len(m.blocks) == 3 for m in scored)  # the collapsed plain model is scored
    assert run.test_top1 == 100 * ts_run.evaluate(scored[-1], data.test)[0]  # and its test accuracy is the run's
    with pytest.raises(ValueError, match="branches must be >= 1"):
        ts_run.build_series_model("patchtst", data, 8, branches=0)


@pytest.mark.parametrize("how", ["train", "instance", "auto", "none"])
def test_fitted_estimator_pickles_with_its_normalizer(how):
    import pickle

    from jumbokit.timeseries.estimator import PatchTSTClassifier

    X = np.random.default_rng(0).normal(size=(12, 2, 16))
    y = np.array(["a", "b"] * 6)
    clf = PatchTSTClassifier(model="patchtst", patches=4, epochs=1, batch_size=8, normalize=how,
                             random_state=0).fit(X, y)
    np.testing.assert_allclose(pickle.loads(pickle.dumps(clf)).predict_proba(X), clf.predict_proba(X))


def test_tstrain_trunk_front_end(tmp_path, capsys):
    """--trunk/--diff/--token-stats reach the runs' models, sweep.json and the report; --diff alone is refused."""
    out = tmp_path / "trunk"
    front = ["--model", "patchtst_jumbo", "--trunk", "inception", "--trunk-width", "2", "--trunk-depth", "1",
             "--diff", "--token-stats", "--trunk-mix", "--level-scale", "--trunk-head"]
    assert tstrain_main(tiny(out, *front)) == 0
    sweep = json.loads((out / "sweep.json").read_text())
    model = sweep["model"]  # the series-model options
    assert model["trunk"] == "inception" and model["trunk_width"] == 2 and model["trunk_diff"] is True
    assert model["trunk_mix"] is True and model["level_scale"] is True and sweep["normalize"] == "train"
    assert model["trunk_head"] is True
    report = (out / "report.md").read_text()
    assert "inception trunk (1 x width 2, with the first difference, all channels together)" in report
    assert "with a second head on its mean token" in report
    capsys.readouterr()
    assert tstrain_main(tiny(tmp_path / "bad", "--diff")) == 2
    err = capsys.readouterr().err
    assert "--diff feeds the first difference" in err and not (tmp_path / "bad").exists()
    assert tstrain_main(tiny(tmp_path / "bad", "--trunk-mix")) == 2
    assert "--trunk-mix sets how the channels are read by a convolutional trunk" in capsys.readouterr().err
    assert tstrain_main(tiny(tmp_path / "bad", "--trunk-head")) == 2
    assert "--trunk-head adds a second head on a convolutional trunk" in capsys.readouterr().err
    assert tstrain_main(tiny(tmp_path / "bad", "--trunk-width", "auto")) == 2
    assert "--trunk-width sets the filters of a convolutional trunk; add --trunk" in capsys.readouterr().err
    assert tstrain_main(tiny(tmp_path / "bad", "--level-scale", "--normalize", "instance")) == 2
    assert "--level-scale reads each series' level and scale" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        tstrain_main(tiny(tmp_path / "bad", "--trunk", "resnet", "--trunk-width", "wide"))
    assert exc.value.code == 2
    assert "expected a positive integer or 'auto', got 'wide'" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_tstrain_mixup_alpha_adds_mixup(tmp_path, capsys):
    """--mixup ALPHA is the supervised recipe's flag: it adds mixup to the augmentation set with that alpha."""
    out = tmp_path / "mix"
    assert tstrain_main(tiny(out, "--model", "patchtst", "--augment", "jitter", "--mixup", "0.4")) == 0
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["augment"] == "jitter,mixup" and sweep["mixup_alpha"] == 0.4
    capsys.readouterr()
    with pytest.raises(SystemExit):
        tstrain_main(tiny(tmp_path / "bad", "--mixup", "-1"))
    assert "expected a mixup alpha >= 0" in capsys.readouterr().err
