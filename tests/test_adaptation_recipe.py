"""recipes/sar_adapt.py end to end on tiny models, and its answers to bad input."""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest
import torch

import jumbokit

pytest.importorskip("imagecorruptions")
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def recipe():
    import jumbokit.recipes.sar_adapt as module

    return module


def make_run(path: Path, num_classes: int = 10, img_size: int = 32, kind: str = "reg16") -> Path:
    """A run directory like recipes/supervised.py writes (untrained tiny model, digits data record)."""
    torch.manual_seed(0)
    model = jumbokit.create_model(f"vit_pico_{kind}", img_size=img_size, patch_size=8, in_chans=1,
                                  num_classes=num_classes, dim=16, num_heads=2, depth=2)
    jumbokit.save(model, path)
    data = {"dataset": "digits", "split": "train", "img_size": img_size, "in_chans": 1, "mean": [0.309],
            "std": [0.349], "crop_pct": 1.0, "interpolation": "bicubic", "num_classes": 10,
            "classes": [str(c) for c in range(10)]}
    (path / "config.json").write_text(json.dumps({"data": data}))
    return path


def run_cli(recipe, argv, capsys):
    from jumbokit.cli.errors import run_cli as wrapper

    try:
        code = wrapper(lambda: recipe.main(argv))
    except SystemExit as stop:  # argparse's own exit (a flag it refuses)
        code = stop.code
    err = capsys.readouterr().err.strip()  # log lines (the CPU thread count) may precede the error line
    return code, err[err.find("error:"):] if "error:" in err else err


def test_end_to_end_writes_table_csv_report_and_plot(recipe, tmp_path, capsys):
    run = make_run(tmp_path / "supervised_run", kind="jumbo")
    out = tmp_path / "tta"
    summary = recipe.main(["--checkpoint", str(run), "--corruptions", "fog,gaussian_noise", "--severity", "5",
                           "--max-eval-samples", "12", "--setting", "label_shift", "--fisher-size", "8",
                           "--out", str(out), "--no-progress", "--cpu"])
    printed = capsys.readouterr().out
    assert "No adapt" in printed and "SAR" in printed and "Avg" in printed and "images/s" in printed
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert {r["method"] for r in rows} == {"none", "tent", "eata", "sar"}
    assert {r["corruption"] for r in rows} == {"fog", "gaussian_noise", "avg"}
    for method in ("none", "tent", "eata", "sar"):  # each accuracy is a whole number of its samples
        mine = {r["corruption"]: r for r in summary["rows"] if r["method"] == method}
        for corruption in ("fog", "gaussian_noise"):
            hits = float(mine[corruption]["top1"]) * int(mine[corruption]["n"]) / 100
            assert int(mine[corruption]["n"]) > 0 and abs(hits - round(hits)) < 1e-9
        average = (float(mine["fog"]["top1"]) + float(mine["gaussian_noise"]["top1"])) / 2
        assert float(mine["avg"]["top1"]) == pytest.approx(average)
    assert (out / "accuracy.png").stat().st_size > 0 and "| Method |" in (out / "report.md").read_text()
    assert summary["normalisation"] == {"mean": [0.309], "std": [0.349]}


def test_unknown_method_is_one_line_and_exit_2(recipe, tmp_path, capsys):
    code, err = run_cli(recipe, ["--checkpoint", str(make_run(tmp_path / "r")), "--methods", "tent,memo"], capsys)
    assert code == 2 and "unknown method" in err and "memo" in err and "\n" not in err


def test_weights_that_are_not_a_tensor_state_dict_are_one_line(recipe, tmp_path, capsys):
    import argparse

    pytest.importorskip("timm")
    weights = tmp_path / "checkpoint.pth"
    torch.save({"state_dict": {"w": torch.zeros(1)}, "args": argparse.Namespace(lr=0.1)}, weights)
    code, err = run_cli(recipe, ["--checkpoint", "vit_tiny_patch16_224", "--weights", str(weights), "--methods",
                                 "none", "--no-progress", "--cpu"], capsys)
    assert code == 2 and "\n" not in err and f"--weights {weights}" in err and "state dict" in err
    assert "Traceback" not in err and len(err) < 400
    torch.save([torch.zeros(1)], weights)
    code, err = run_cli(recipe, ["--checkpoint", "vit_tiny_patch16_224", "--weights", str(weights)], capsys)
    assert code == 2 and "expected a dict of tensors" in err


def test_class_count_mismatch(recipe, tmp_path, capsys):
    run = make_run(tmp_path / "r", num_classes=5)
    code, err = run_cli(recipe, ["--checkpoint", str(run), "--corruptions", "fog", "--max-eval-samples", "4",
                                 "--no-progress", "--cpu"], capsys)
    assert code == 2 and "predicts 5 classes" in err and "10" in err


def test_missing_imagenet_c_parts_are_named(recipe, tmp_path, capsys):
    root = tmp_path / "imagenet-c"
    (root / "fog" / "5").mkdir(parents=True)
    code, err = run_cli(recipe, ["--checkpoint", str(make_run(tmp_path / "r")), "--imagenet-c", str(root),
                                 "--corruptions", "fog,snow", "--severity", "3,5", "--methods", "none",
                                 "--no-progress", "--cpu"], capsys)
    assert code == 2 and "fog severity 3" in err and "snow" in err


def test_small_images_are_explained_or_upsampled(recipe, tmp_path, capsys):
    run = make_run(tmp_path / "r", img_size=16)
    argv = ["--checkpoint", str(run), "--corruptions", "fog", "--max-eval-samples", "4", "--methods", "none",
            "--no-progress", "--cpu", "--out", str(tmp_path / "o")]
    code, err = run_cli(recipe, argv, capsys)
    assert code == 2 and "at least 32x32" in err and "--upsample-small" in err
    recipe.main(argv + ["--upsample-small"])
    assert (tmp_path / "o" / "results.csv").is_file()


def test_bare_run_without_runs_says_how_to_create_one(recipe, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(recipe, ["--methods", "none"], capsys)
    assert code == 2 and "recipes/supervised.py" in err


def test_bare_run_finds_the_newest_supervised_digits_run(tmp_path, monkeypatch):
    from jumbokit.adaptation.source import find_source_run
    from jumbokit.training.rundir import find_latest_run

    monkeypatch.chdir(tmp_path)
    make_run(tmp_path / "runs" / "supervised_vit_pico_reg16_digits")
    make_run(tmp_path / "runs" / "mae_pretrain_vit_pico_reg16_digits")
    expected = Path("runs") / "supervised_vit_pico_reg16_digits"
    assert find_latest_run("runs", "supervised", "digits") == expected == find_source_run("runs", "digits")
    assert find_latest_run("runs", "supervised", "folder:/x") is None


def test_mixed_setting_reports_each_corruption_of_the_single_stream(recipe, tmp_path, capsys):
    run = make_run(tmp_path / "r")
    summary = recipe.main(["--checkpoint", str(run), "--corruptions", "fog,snow,contrast", "--max-eval-samples", "8",
                           "--methods", "none,sar", "--setting", "mixed", "--batch-size", "6",
                           "--out", str(tmp_path / "o"), "--no-progress", "--cpu"])
    capsys.readouterr()
    per = {(r["method"], r["corruption"]): r["n"] for r in summary["rows"]}
    assert per[("sar", "fog")] == per[("sar", "snow")] == 8 and per[("sar", "avg")] == 24
    assert all(t["nan_batches"] == 0 for t in summary["throughput"])


def test_corruptions_written_to_disk_give_the_same_results_as_generated_ones(recipe, tmp_path, capsys):
    from jumbokit.adaptation.corruptions import main as write_main

    root = tmp_path / "digits-c"
    assert write_main(["--dataset", "digits", "--out", str(root), "--corruptions", "fog,impulse_noise",
                       "--severity", "5", "--max-eval-samples", "10"]) == 0
    assert {p.name for p in (root / "fog" / "5").iterdir()} <= {str(c) for c in range(10)}
    run = make_run(tmp_path / "r")
    common = ["--checkpoint", str(run), "--corruptions", "fog,impulse_noise", "--methods", "none", "--no-progress",
              "--cpu", "--max-eval-samples", "10"]
    disk = recipe.main(common + ["--imagenet-c", str(root), "--out", str(tmp_path / "a")])
    fly = recipe.main(common + ["--out", str(tmp_path / "b")])
    capsys.readouterr()
    assert [r["top1"] for r in disk["rows"]] == [r["top1"] for r in fly["rows"]]
    assert write_main(["--dataset", "digits", "--out", str(root), "--corruptions", "blur"]) == 2


def test_an_mae_encoder_is_named_before_any_corruption_is_generated(recipe, tmp_path, capsys, monkeypatch):
    import jumbokit.adaptation.data as data

    encoder = jumbokit.create_model("vit_pico_jumbo", img_size=32, patch_size=8, in_chans=1, num_classes=0, dim=16,
                                    num_heads=2, depth=2)
    run = tmp_path / "mae_pretrain_run"
    jumbokit.save(encoder, run)
    (run / "config.json").write_text(json.dumps({"recipe": "mae_pretrain", "data": {"dataset": "digits"}}))
    monkeypatch.setattr(data, "build_corrupted_sets", lambda *a, **k: pytest.fail("corruptions were generated"))
    code, err = run_cli(recipe, ["--checkpoint", str(run), "--out", str(tmp_path / "o"), "--no-progress"], capsys)
    assert code == 2 and err == (
        f"error: {run} holds an encoder without a classifier head (an MAE run?); train a head first with "
        "`jumbokit linear-probe` or fine-tune with `jumbokit supervised`")
    assert not (tmp_path / "o").exists()


def test_a_partial_imagenet_c_tree_suggests_the_corruptions_present(recipe, tmp_path, capsys):
    root = tmp_path / "imagenet-c"
    (root / "fog" / "5").mkdir(parents=True)
    code, err = run_cli(recipe, ["--checkpoint", str(make_run(tmp_path / "r")), "--imagenet-c", str(root),
                                 "--corruptions", "fog,snow", "--methods", "none", "--no-progress"], capsys)
    assert code == 2 and "snow (all severities)" in err and "pass --corruptions fog to use the ones present" in err


def test_help_shows_each_default_once(recipe):
    parser = recipe.build_parser()
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        text = formatter._expand_help(action)
        assert text.count("default") == 1, (action.option_strings, text)
        assert "seed 002" not in text and "(seed:" not in text


def test_severity_list_is_checked_in_one_line(recipe, tmp_path, capsys):
    code, err = run_cli(recipe, ["--checkpoint", str(make_run(tmp_path / "r")), "--severity", "3,7"], capsys)
    assert code == 2 and err == "error: --severity expects one value or a comma list of integers in 1-5, got '3,7'"


def test_shared_data_flags_that_do_not_apply_are_refused(recipe, tmp_path, capsys):
    run = str(make_run(tmp_path / "r"))
    code, err = run_cli(recipe, ["--checkpoint", run, "--max-train-samples", "5"], capsys)
    assert code == 2 and "--max-train-samples does not apply" in err and "--max-eval-samples" in err
    code, err = run_cli(recipe, ["--checkpoint", run, "--in-chans", "3", "--no-progress"], capsys)
    assert code == 2 and err == "error: the source takes 1-channel images; drop --in-chans 3"


def test_input_norm_batch_undoes_a_shift_of_every_pixel_and_is_recorded(recipe, tmp_path, capsys):
    from jumbokit.adaptation.wild import input_normalizer

    torch.manual_seed(0)
    x = torch.randn(6, 1, 8, 8)
    batch, image = input_normalizer("batch"), input_normalizer("image")
    assert input_normalizer("source") is None
    torch.testing.assert_close(batch(3.0 * x + 5.0), batch(x))  # a brightness / contrast change is gone
    torch.testing.assert_close(image(x).mean((2, 3)), torch.zeros(6, 1), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="expected one of source, batch, image, got 'bn'"):
        input_normalizer("bn")
    run = make_run(tmp_path / "r")
    common = ["--checkpoint", str(run), "--corruptions", "brightness", "--max-eval-samples", "12", "--methods",
              "none,sar", "--batch-size", "6", "--no-progress", "--cpu"]
    plain = recipe.main(common + ["--out", str(tmp_path / "a")])
    normed = recipe.main(common + ["--out", str(tmp_path / "b"), "--input-norm", "batch"])
    capsys.readouterr()
    assert plain["input_norm"] == "source" and normed["input_norm"] == "batch"
    assert "--input-norm batch" in (tmp_path / "b" / "report.md").read_text()
    assert all(t["nan_batches"] == 0 for t in normed["throughput"])
    code, err = run_cli(recipe, common + ["--input-norm", "bn", "--out", str(tmp_path / "c")], capsys)
    assert code == 2 and "--input-norm" in err and not (tmp_path / "c").exists()
