"""A trained model in use: the data config saved with the weights (timm's ``pretrained_cfg``), ``jumbokit
validate`` and ``jumbokit predict`` on a supervised digits run, and their one-line refusals."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import jumbokit
from jumbokit.data import build_transform
from jumbokit.data.data_config import data_config_from_record, eval_transform, read_run_data_config
from jumbokit.encoders.zoo import load_config, load_data_config

torch.set_num_threads(1)

RECORD = dict(img_size=16, in_chans=1, mean=[0.3], std=[0.35], crop_pct=1.0, interpolation="bicubic",
              classes=[str(i) for i in range(10)])


def tiny_model(in_chans: int = 1, img_size: int = 16) -> torch.nn.Module:
    return jumbokit.create_model("vit_pico_cls", img_size=img_size, patch_size=4, in_chans=in_chans, num_classes=10)


def noise_image(mode: str, size: tuple[int, int] = (24, 20), seed: int = 0) -> Image.Image:
    shape = (size[1], size[0]) + ((3,) if mode == "RGB" else ())
    return Image.fromarray(np.random.RandomState(seed).randint(0, 256, shape, dtype=np.uint8), mode)


# ------------------------------------------------------------------------------------------------ data config
def test_data_config_round_trip_and_timm_transform(tmp_path):
    import timm.data

    model = tiny_model()
    model.pretrained_cfg = data_config_from_record(RECORD)
    jumbokit.save(model, tmp_path / "run")
    assert "pretrained_cfg" not in load_config(tmp_path / "run")  # the model options alone rebuild the model
    assert load_data_config(tmp_path / "run")["label_names"] == RECORD["classes"]
    loaded = jumbokit.load(tmp_path / "run")
    cfg = loaded.pretrained_cfg
    assert cfg["input_size"] == (1, 16, 16) and cfg["mean"] == (0.3,) and cfg["num_classes"] == 10
    timm_transform = timm.data.create_transform(**timm.data.resolve_model_data_config(loaded))
    ours = build_transform("eval", 16, RECORD["mean"], RECORD["std"], crop_pct=1.0)
    img = noise_image("L")
    assert torch.equal(timm_transform(img), ours(img))
    lone = jumbokit.load(tmp_path / "run" / "model.safetensors")  # the metadata carries the block too
    assert lone.pretrained_cfg == cfg
    for key, value in loaded.state_dict().items():
        assert torch.equal(value, model.state_dict()[key])


@pytest.mark.parametrize("img_size,crop_pct", [(32, 0.9), (32, 0.875), (224, 0.875), (28, 1.0)])
def test_timm_reproduces_the_eval_crop_exactly(tmp_path, img_size, crop_pct):
    """timm resizes to floor(size / crop_pct), jumbokit to round(...): the stored crop_pct gives both the same."""
    import timm.data

    record = dict(RECORD, img_size=img_size, in_chans=3, mean=[0.5, 0.4, 0.3], std=[0.2, 0.25, 0.3],
                  crop_pct=crop_pct)
    model = tiny_model(in_chans=3, img_size=img_size)
    jumbokit.save(model, tmp_path, data_config=data_config_from_record(record))
    loaded = jumbokit.load(tmp_path)
    timm_transform = timm.data.create_transform(**timm.data.resolve_model_data_config(loaded))
    ours = build_transform("eval", img_size, record["mean"], record["std"], crop_pct=crop_pct)
    img = noise_image("RGB", size=(img_size + 13, img_size + 7))
    expected = ours(img)
    assert torch.equal(timm_transform(img), expected)
    assert torch.equal(eval_transform(loaded.pretrained_cfg)(img), expected)


def test_run_saved_before_data_configs_still_loads(tmp_path):
    """No block in the model config: derived from the run's config.json; no run record either: none."""
    run = tmp_path / "old"
    jumbokit.save(tiny_model(), run)
    assert load_data_config(run) is None
    assert not hasattr(jumbokit.load(run), "pretrained_cfg")
    (run / "config.json").write_text(json.dumps({"recipe": "supervised", "data": {**RECORD, "dataset": "digits"}}))
    model = jumbokit.load(run)
    assert model.pretrained_cfg == read_run_data_config(run) == data_config_from_record(RECORD)
    assert model.pretrained_cfg["label_names"] == RECORD["classes"]


def test_bad_data_config_is_named():
    with pytest.raises(ValueError, match="1 values for 3 channel"):
        data_config_from_record(dict(RECORD, in_chans=3))
    assert data_config_from_record({"img_size": 16}) is None


# ------------------------------------------------------------------------------------- validate and predict
# mean pooling and a high learning rate: after 8 steps the predictions already differ between images
TINY = ["--model", "vit_pico_gap", "--img-size", "16", "--max-train-samples", "128", "--batch-size", "16",
        "--epochs", "1", "--lr", "3e-3", "--warmup-epochs", "0", "--no-progress", "--eval-batch-size", "512"]


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    """A one-epoch supervised digits run and its test split written as PNG files, ``<class>/<index>.png``."""
    from jumbokit.data.sources import DigitsSource
    from jumbokit.recipes import supervised

    root = tmp_path_factory.mktemp("in_use")
    result = supervised.main([*TINY, "--out", str(root / "run")])
    source = DigitsSource("test", 16)
    for i, (img, label) in enumerate(zip(source.images, source.targets)):
        (root / "png" / str(label)).mkdir(parents=True, exist_ok=True)
        img.save(root / "png" / str(label) / f"{i:03d}.png")
    test_row = next(r for r in result["rows"] if r["split"] == "test")
    return root, test_row


def test_run_saves_its_data_config(digits_run):
    root, _ = digits_run
    cfg = load_data_config(root / "run")
    assert cfg["input_size"] == [1, 16, 16] and cfg["crop_pct"] == 1.0 and cfg["label_names"] == list("0123456789")


def test_validate_predict_and_the_run_report_agree_to_the_last_image(digits_run, tmp_path, capsys):
    from jumbokit.inference import confusion_matrix
    from jumbokit.recipes import predict, validate

    root, test_row = digits_run
    checked = validate.main(["--checkpoint", str(root / "run"), "--split", "test", "--no-progress",
                             "--out", str(tmp_path / "val")])
    assert (checked["n"], checked["top1"], checked["top5"]) == (test_row["n"], test_row["top1"], test_row["top5"])
    assert checked["loss"] == pytest.approx(test_row["loss"], rel=1e-5)
    for name in ("results.csv", "confusion.csv", "confusion.png"):
        assert (tmp_path / "val" / name).is_file()
    confusion = torch.tensor(checked["confusion"])
    assert int(confusion.sum()) == 360 and int(confusion.trace()) == round(test_row["top1"] * 360 / 100)
    header = (tmp_path / "val" / "confusion.csv").read_text().splitlines()[0]
    assert header == "true \\ predicted," + ",".join("0123456789")

    out = tmp_path / "pred.csv"
    predicted = predict.main(["--checkpoint", str(root / "run"), str(root / "png"), "--topk", "3", "--out", str(out),
                              "--no-progress", "--batch-size", "50"])
    rows = predicted["rows"]
    assert len(rows) == 360 and out.read_text().splitlines()[0] == (
        "file,label,top1_label,top1_prob,top2_label,top2_prob,top3_label,top3_prob")  # class folders: labelled
    assert all(r["label"] == Path(r["file"]).parent.name for r in rows)
    truth = torch.tensor([int(Path(r["file"]).parent.name) for r in rows])
    guess = torch.tensor([int(r["top1_label"]) for r in rows])
    assert torch.equal(confusion_matrix(truth, guess, 10), confusion)  # the same answer for every image
    assert len(set(guess.tolist())) >= 3  # a model that says one class for all would prove little
    assert 100.0 * int((truth == guess).sum()) / 360 == pytest.approx(test_row["top1"], abs=1e-9)
    assert all(r["top1_prob"] >= r["top2_prob"] >= r["top3_prob"] for r in rows)
    printed = capsys.readouterr().out
    assert "predicted 360 image(s)" in printed
    assert f"top-1 accuracy against the files' labels: {test_row['top1']:.2f}%" in printed
    written = [[int(v) for v in line.split(",")[1:]] for line in
               (tmp_path / "pred_confusion.csv").read_text().splitlines()[1:]]
    assert torch.equal(torch.tensor(written), confusion) and (tmp_path / "pred_confusion.png").is_file()


def test_predict_takes_files_and_globs_in_order(digits_run, tmp_path):
    from jumbokit.inference.images import find_images

    root, _ = digits_run
    first = sorted((root / "png" / "3").glob("*.png"))[0]
    found = find_images([first, str(root / "png" / "7" / "*.png"), root / "png" / "7"])
    assert found[0] == first and len(found) == 1 + len(list((root / "png" / "7").glob("*.png")))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_images([root / "nothing.png"])
    with pytest.raises(ValueError, match="no image files"):
        find_images([str(root / "png" / "*.jpg")])


def test_bad_inputs_get_one_line_and_no_file(digits_run, tmp_path, jumbokit_cli):
    root, _ = digits_run
    out = tmp_path / "pred.csv"
    colour = tmp_path / "colour.png"
    noise_image("RGB", size=(16, 16)).save(colour)
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(b"\x89PNG not really")
    good = sorted((root / "png" / "0").glob("*.png"))[0]
    cases = {
        "1-channel (gray) images, got a colour": [str(good), str(colour)],
        "cannot read image file": [str(good), str(corrupt)],
    }
    for message, inputs in cases.items():
        status, _, err = jumbokit_cli(["predict", "--checkpoint", str(root / "run"), *inputs, "--out", str(out),
                                       "--no-progress"])
        assert status != 0 and message in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists() and not list(tmp_path.glob(".pred.csv*"))
    status, _, err = jumbokit_cli(["predict", "--checkpoint", str(tmp_path / "no_run"), str(good), "--out",
                                   str(out)])
    assert status != 0 and "does not exist" in err and len(err.strip().splitlines()) == 1 and not out.exists()
    status, _, err = jumbokit_cli(["validate", "--checkpoint", str(tmp_path / "no_run"), "--out",
                                   str(tmp_path / "val")])
    assert status != 0 and "does not exist" in err and not (tmp_path / "val").exists()
    converted = jumbokit_cli(["predict", "--checkpoint", str(root / "run"), str(colour), "--convert", "--out",
                              str(out), "--no-progress"])
    assert converted[0] == 0 and out.is_file()


def test_validate_refuses_a_dataset_with_other_classes(digits_run, tmp_path):
    from jumbokit.recipes import validate

    root, _ = digits_run
    other = tmp_path / "three"
    for label in ("a", "b", "c"):
        (other / label).mkdir(parents=True)
        for i in range(2):
            noise_image("L", size=(16, 16), seed=i).save(other / label / f"{i}.png")
    with pytest.raises(ValueError, match="the model was trained on"):
        validate.main(["--checkpoint", str(root / "run"), "--dataset", f"folder:{other}", "--out",
                       str(tmp_path / "val"), "--no-progress"])
    assert not (tmp_path / "val").exists()


def test_series_and_headless_checkpoints_are_refused():
    from jumbokit.inference.images import check_image_classifier

    with pytest.raises(ValueError, match="time-series model"):
        check_image_classifier({"tokenizer": "series", "num_classes": 2}, "run")
    with pytest.raises(ValueError, match="time-series model"):  # a model wrapping a series encoder
        check_image_classifier({"encoder": "rocket_hybrid", "transformer": {"tokenizer": "series"}}, "run")
    with pytest.raises(ValueError, match="without a classifier head"):
        check_image_classifier({"tokenizer": "image", "num_classes": 0}, "run")


@pytest.mark.multiprocess
@pytest.mark.slow
def test_validate_on_two_processes_equals_one(digits_run, tmp_path):
    """Shards of 7-image batches (the last ones padded, the padding dropped when gathered): the same results.csv and
    confusion matrix as one process."""
    from launch import jumbokit_command, launch, torchrun_command

    root, _ = digits_run
    argv = ["validate", "--checkpoint", str(root / "run"), "--batch-size", "7", "--no-progress", "--cpu"]
    launch(jumbokit_command([*argv, "--out", str(tmp_path / "one")]), timeout=300)
    launch(torchrun_command([*argv, "--out", str(tmp_path / "two")], nproc=2), timeout=300)
    for name in ("results.csv", "confusion.csv"):
        assert (tmp_path / "one" / name).read_text() == (tmp_path / "two" / name).read_text()


def test_a_collapsed_progressive_join_model_keeps_the_data_config(tmp_path):
    from jumbokit.training.report import collapse_branches

    model = jumbokit.create_model("vit_pico_cls", img_size=16, patch_size=4, in_chans=1, num_classes=10, depth=2,
                                  branches=2, join_warmup_steps=1)
    model.update_join(10)
    model.pretrained_cfg = data_config_from_record(RECORD)
    batches = [(torch.randn(4, 1, 16, 16), torch.randint(0, 10, (4,)))]
    collapse_branches(model, "vit_pico_cls", "digits", {"test": batches}, tmp_path)
    assert jumbokit.load(tmp_path / "reparameterized").pretrained_cfg == model.pretrained_cfg
