"""jumbokit supervised: a tiny end-to-end run writing the whole run directory, resume, --checkpoint, token-drop
schedule, branch flags, bad input, and the small-image defaults on a folder of 28 px gray digits."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import jumbokit
from jumbokit.data import read_data_info
from jumbokit.training.token_drop import TokenDropLoss

torch.set_num_threads(1)



def load_recipe():
    import jumbokit.recipes.supervised as module

    return module


@pytest.fixture(scope="module")
def recipe():
    return load_recipe()


TINY = ["--model", "vit_pico_jumbo", "--img-size", "16", "--max-train-samples", "64", "--batch-size", "16",
        "--epochs", "1", "--no-progress", "--eval-batch-size", "512"]


@pytest.fixture(scope="module")
def finished_run(recipe, tmp_path_factory):
    out = tmp_path_factory.mktemp("sup") / "run"
    result = recipe.main([*TINY, "--out", str(out)])
    return out, result


def test_one_epoch_run_writes_every_file(finished_run):
    out, result = finished_run
    for name in ("config.json", "metrics.jsonl", "model.safetensors", "model_config.json", "report.md",
                 "results.csv", "curves.png"):
        assert (out / name).is_file(), name
    assert any((out / "checkpoints").iterdir())
    assert {r["split"] for r in result["rows"]} == {"val", "test"}
    for r in result["rows"]:  # percent of whole numbers of correct samples, top-5 at least top-1
        correct = r["top1"] * r["n"] / 100
        assert r["n"] > 0 and abs(correct - round(correct)) < 1e-6 and r["top5"] >= r["top1"]
    csv = (out / "results.csv").read_text().splitlines()
    assert csv[0].startswith("model,dataset,split,top1") and len(csv) == 3
    assert "## Final metrics" in (out / "report.md").read_text()


def test_run_records_normalisation_and_classes(finished_run):
    out, _ = finished_run
    info = read_data_info(out)
    assert info["classes"] == [str(i) for i in range(10)] and info["in_chans"] == 1 and info["img_size"] == 16
    assert len(info["mean"]) == 1 and len(info["std"]) == 1
    config = json.loads((out / "config.json").read_text())
    assert config["recipe"] == "supervised" and config["model_config"]["patch_size"] == 4
    model = jumbokit.load(out)
    assert model(torch.randn(2, 1, 16, 16)).shape == (2, 10)


def test_rerun_needs_resume_or_overwrite_and_resume_continues(recipe, finished_run):
    out, _ = finished_run
    with pytest.raises(ValueError, match="already holds a run"):
        recipe.main([*TINY, "--out", str(out)])
    recipe.main([*TINY, "--epochs", "2", "--out", str(out), "--resume"])
    epochs = [r["epoch"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
              if r["kind"] == "epoch"]
    assert epochs == [1, 2]


def test_checkpoint_from_headless_encoder_replaces_head(recipe, tmp_path):
    encoder = jumbokit.create_model("vit_pico_cls", img_size=16, patch_size=4, in_chans=1, num_classes=0)
    jumbokit.save(encoder, tmp_path / "pretrained")
    out = tmp_path / "finetune"
    args = ["--checkpoint", str(tmp_path / "pretrained"), "--img-size", "16", "--max-train-samples", "32",
            "--batch-size", "16", "--epochs", "1", "--no-progress", "--checkpoint-every", "0", "--out", str(out)]
    recipe.main(args)
    tuned = jumbokit.load(out)
    assert tuned.num_classes == 10
    start = encoder.state_dict()["blocks.0.attn.qkv.weight"]
    assert not torch.equal(tuned.state_dict()["blocks.0.attn.qkv.weight"], start)  # it trained
    with pytest.raises(ValueError, match="expects 1-channel images, got --in-chans 3"):
        recipe.main([*args, "--in-chans", "3", "--overwrite"])
    with pytest.raises(ValueError, match="pass one of --model"):
        recipe.main([*args, "--model", "vit_pico_cls", "--overwrite"])


def test_token_drop_schedule_falls_linearly(recipe):
    class Probe(torch.nn.Module):
        num_patches = 64

        def __init__(self):
            super().__init__()
            self.kept: list[int] = []

        def forward(self, x, keep=None):
            self.kept.append(64 if keep is None else keep.shape[1])
            return torch.zeros(x.shape[0], 10, requires_grad=True)

    loss = TokenDropLoss(torch.nn.CrossEntropyLoss(), None, (0.9, 0.1))
    probe = Probe()
    batch = (torch.zeros(4, 1, 8, 8), torch.zeros(4, dtype=torch.long))
    rates = []
    for step in (0, 50, 100):
        loss.on_step(step, 100)
        rates.append(loss.drop_rate())
        _, logs = loss(probe, batch)
        assert logs["token_drop"] == pytest.approx(rates[-1])
    assert rates == pytest.approx([0.9, 0.5, 0.1])
    assert probe.kept == [6, 32, 58]  # round(64 * (1 - rate))
    no_drop = TokenDropLoss(torch.nn.CrossEntropyLoss(), None, None)
    no_drop(probe, batch)
    assert probe.kept[-1] == 64


def test_branch_flags_reach_create_model_only_when_branching(recipe, monkeypatch):
    seen = {}

    def fake_create_model(name, **kwargs):
        seen.update(kwargs, name=name)
        return torch.nn.Linear(1, 1)

    monkeypatch.setattr(recipe.jumbokit, "create_model", fake_create_model)
    args = recipe.build_parser().parse_args(["--branches", "2", "--join-schedule", "cosine",
                                             "--join-warmup-steps", "7"])
    recipe.build_model(args, num_classes=10, img_size=32, in_chans=1)
    assert seen["branches"] == 2 and seen["join_schedule"] == "cosine" and seen["join_warmup_steps"] == 7
    assert seen["patch_size"] == 8 and seen["name"] == "vit_tiny_jumbo"  # 32 px -> a 4x4 grid
    seen.clear()
    recipe.build_model(recipe.build_parser().parse_args([]), num_classes=10, img_size=224, in_chans=3)
    assert "branches" not in seen and "patch_size" not in seen


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--mixup", "0.8", "--batch-size", "15"], "even --batch-size"),
        (["--token-drop", "0.9", "1.0"], "--token-drop rates"),
        (["--branches", "0"], "--branches must be >= 1"),
    ],
)
def test_bad_flags_rejected_before_training(recipe, tmp_path, argv, message):
    with pytest.raises(ValueError, match=message):
        recipe.main([*argv, "--out", str(tmp_path / "x")])


@pytest.mark.multiprocess
def test_cli_prints_one_line_and_exits_nonzero(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "jumbokit", "supervised", "--dataset", "cifar10", "--out", str(tmp_path / "x"),
         "--no-progress"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: unknown dataset 'cifar10'")
    assert "Traceback" not in proc.stderr


def test_branched_run_joins_by_default_and_writes_an_equal_collapsed_model(recipe, tmp_path):
    out = tmp_path / "join"
    tiny = [a if a != "vit_pico_jumbo" else "vit_pico_cls" for a in TINY]
    result = recipe.main([*tiny, "--epochs", "2", "--branches", "2", "--diversity-weight", "0.05",
                          "--out", str(out)])
    rows = {(r["model"], r["split"]): r["top1"] for r in result["rows"]}
    assert rows[("vit_pico_cls (reparameterized)", "test")] == rows[("vit_pico_cls", "test")]
    plain = jumbokit.load(out / "reparameterized")
    assert plain.config["depth"] == 6


# ------------------------------------------------------------------------------------------------ small images


@pytest.fixture(scope="module")
def gray_digits(tmp_path_factory):
    """28x28 gray PNGs of scikit-learn's digits 0-3: train/ (12 per class) and val/ (4 per class)."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("digits28")
    bunch = load_digits(n_class=4)
    counts: dict[int, int] = {}
    for pixels, label in zip(bunch.images, bunch.target):
        k = counts[label] = counts.get(label, -1) + 1
        if k >= 16:
            continue
        path = root / ("train" if k < 12 else "val") / str(label) / f"{k}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        img = Image.fromarray(np.round(pixels * 255 / 16).astype(np.uint8), mode="L")
        img.resize((28, 28), Image.Resampling.BICUBIC).save(path)
    return root


def small_train(recipe, root, *flags):
    from jumbokit.cli.data import data_settings_from_args

    args = recipe.build_parser().parse_args(["--dataset", f"folder:{root}", *flags])
    return data_settings_from_args(args).build("train", "supervised")


def transform_ops(ds) -> list[str]:
    return [type(t).__name__ for t in ds.transform.transforms]


def test_small_gray_images_get_small_image_defaults(recipe, gray_digits):
    import numpy as np
    from PIL import Image

    train = small_train(recipe, gray_digits)
    c = train.choices
    assert (c.rule, train.in_chans, train.img_size, c.train_crop, c.scale, c.hflip, train.crop_pct) == (
        "small", 1, 28, "rrc", (0.7, 1.0), 0.0, 1.0)  # gray files: the digits' crops, no flip
    assert "RandomResizedCrop" in transform_ops(train) and "RandomHorizontalFlip" not in transform_ops(train)
    assert train[0][0].shape == (1, 28, 28)
    # the statistics of the training images (all 48 of them: fewer than the sample size)
    pixels = np.stack([np.asarray(Image.open(p), dtype=np.float64) / 255 for p in gray_digits.glob("train/*/*.png")])
    assert c.stats == "data"
    assert train.mean[0] == pytest.approx(pixels.mean(), abs=1e-4)
    assert train.std[0] == pytest.approx(pixels.std(), abs=1e-4)


@pytest.mark.parametrize(
    "flags, check",
    [
        (["--in-chans", "3"], lambda ds: ds.in_chans == 3 and ds[0][0].shape == (3, 28, 28) and len(ds.mean) == 3),
        (["--img-size", "32"], lambda ds: ds.img_size == 32 and ds[0][0].shape == (1, 32, 32)),
        (["--scale", "0.5", "1"], lambda ds: ds.choices.scale == (0.5, 1.0) and "RandomResizedCrop" in transform_ops(ds)),
        (["--ratio", "0.9", "1.1"], lambda ds: ds.choices.ratio == (0.9, 1.1) and ds.choices.train_crop == "rrc"),
        (["--hflip", "0.5"], lambda ds: "RandomHorizontalFlip" in transform_ops(ds)),
        (["--no-aug"], lambda ds: ds.choices.train_crop == "none" and "RandomCrop" not in transform_ops(ds)),
        (["--mean", "0.5", "--std", "0.25"], lambda ds: (ds.mean, ds.std, ds.choices.stats) == ((0.5,), (0.25,),
                                                                                                 "given")),
        (["--crop-pct", "0.875"], lambda ds: ds.crop_pct == 0.875),
        (["--interpolation", "bilinear"], lambda ds: ds.interpolation == "bilinear"),
        (["--randaugment", "rand-m9-mstd0.5"], lambda ds: "RandAugment" in transform_ops(ds)),
    ],
)
def test_each_data_flag_overrides_its_own_choice(recipe, gray_digits, flags, check):
    ds = small_train(recipe, gray_digits, *flags)
    assert check(ds)
    default = small_train(recipe, gray_digits).choices
    changed = {k for k, v in vars(ds.choices).items() if v != vars(default)[k]}
    assert changed <= {"in_chans", "mean", "std", "img_size", "padding", "train_crop", "scale", "ratio", "hflip",
                       "stats", "crop_pct", "interpolation", "randaugment"}
    if "--in-chans" not in flags:
        assert ds.in_chans == 1 and ds.choices.hflip == (0.5 if "--hflip" in flags else 0.0)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--scale", "0", "1"], "--scale expects"),
        (["--hflip", "2"], "--hflip expects"),
        (["--no-aug", "--hflip", "0.5"], "--no-aug turns training augmentation off; drop --hflip"),
        (["--mean", "0.1", "0.2"], "--mean expects 1 value or 3"),
        (["--crop-pct", "1.5"], "--crop-pct expects"),
    ],
)
def test_bad_data_flags_are_one_line_errors(recipe, gray_digits, flags, message):
    with pytest.raises(ValueError, match=message):
        small_train(recipe, gray_digits, *flags)


def test_supervised_run_on_small_gray_folder_records_its_choices(recipe, gray_digits, tmp_path):
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="has no 'test' folder; using 'val' as the test split"):
        result = recipe.main(["--dataset", f"folder:{gray_digits}", "--model", "vit_pico_cls", "--epochs", "1",
                              "--batch-size", "16", "--no-progress", "--checkpoint-every", "0", "--out", str(out)])
    info = read_data_info(out)
    assert (info["in_chans"], info["img_size"], info["crop_pct"], info["defaults"], info["stats"]) == (
        1, 28, 1.0, "small", "data")
    assert info["augmentation"]["train_crop"] == "rrc" and info["augmentation"]["scale"] == [0.7, 1.0]
    assert info["augmentation"]["hflip"] == 0.0
    assert info["classes"] == ["0", "1", "2", "3"] and 0.1 < info["mean"][0] < 0.5
    assert jumbokit.load(out).config["patch_size"] == 7  # a 4x4 grid at 28 px
    assert {r["split"] for r in result["rows"]} == {"val", "test"}
