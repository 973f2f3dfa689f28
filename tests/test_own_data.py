"""A user's own image folder: no silent wrong result (held-out splits are held out, classes agree, two classes at
least), nothing half-written by bad data, and the default batch fits a small subset."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from jumbokit.data import DataError, build_dataset
from jumbokit.data.sources import Holdout


def write_pngs(root, classes: dict[str, int], size: int = 8, seed: int = 0) -> None:
    """``classes[name]`` small gray PNGs in ``root/name/``, each class its own brightness (learnable)."""
    rng = np.random.default_rng(seed)
    for c, (name, count) in enumerate(classes.items()):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            pixels = np.clip(40 + 60 * c + rng.normal(0, 10, (size, size)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels, mode="L").save(root / name / f"{i:03d}.png")


def supervised(argv):
    from jumbokit.recipes import supervised as recipe

    return recipe.main(["--model", "vit_pico_cls", "--epochs", "1", "--no-progress", "--num-workers", "0",
                        "--checkpoint-every", "0", *argv])


def test_holdout_partition_is_stratified_disjoint_seeded_and_keeps_a_training_image_per_class():
    targets = [0] * 20 + [1] * 7 + [2] * 1
    parts = Holdout(val=0.2, test=0.1, seed=3).partition(targets)
    every = parts["train"] + parts["val"] + parts["test"]
    assert sorted(every) == list(range(len(targets)))  # a partition: disjoint and complete
    count = {s: np.bincount([targets[i] for i in idx], minlength=3).tolist() for s, idx in parts.items()}
    assert count == {"train": [14, 5, 1], "val": [4, 1, 0], "test": [2, 1, 0]}
    assert parts == Holdout(val=0.2, test=0.1, seed=3).partition(targets)
    assert parts != Holdout(val=0.2, test=0.1, seed=4).partition(targets)
    with pytest.raises(DataError, match="leave no training images"):
        Holdout(val=0.6, test=0.4)


def test_plain_folder_without_val_split_is_refused_before_any_file(tmp_path):
    write_pngs(tmp_path / "data", {"a": 6, "b": 6})
    out = tmp_path / "run"
    with pytest.raises(DataError, match="no validation or test split.*--val-split 0.1"):
        supervised(["--dataset", f"folder:{tmp_path / 'data'}", "--out", str(out)])
    assert not out.exists()


def test_val_split_holds_out_images_that_training_never_sees(tmp_path):
    write_pngs(tmp_path / "data", {"a": 10, "b": 10})
    out = tmp_path / "run"
    result = supervised(["--dataset", f"folder:{tmp_path / 'data'}", "--val-split", "0.2", "--batch-size", "8",
                         "--out", str(out)])
    record = json.loads((out / "config.json").read_text())["data"]
    assert record["holdout"] == {"val": 0.2, "test": 0.0, "seed": 0}
    rows = {r["split"]: r for r in result["rows"]}
    assert set(rows) == {"val"} and rows["val"]["n"] == 4  # 2 of each class; no test split is invented
    spec = f"folder:{tmp_path / 'data'}"
    train = build_dataset(spec, "train", "eval", holdout=Holdout(val=0.2))
    val = build_dataset(spec, "val", "eval", holdout=Holdout(val=0.2))
    train_files, val_files = ({ds.source.describe(i) for i in ds.indices} for ds in (train, val))
    assert len(train_files) == 16 and not train_files & val_files
    # validate on the run scores the same held-out images (the split comes from the run's record)
    from jumbokit.recipes import validate

    scored = validate.main(["--checkpoint", str(out), "--split", "val", "--no-progress", "--out", str(tmp_path / "v")])
    assert scored["n"] == 4 and scored["top1"] == pytest.approx(rows["val"]["top1"])


def test_val_split_clashing_with_a_val_folder_is_refused(tmp_path):
    write_pngs(tmp_path / "data" / "train", {"a": 4, "b": 4})
    write_pngs(tmp_path / "data" / "val", {"a": 2, "b": 2})
    with pytest.raises(DataError, match="has its own 'val' folder; drop --val-split"):
        build_dataset(f"folder:{tmp_path / 'data'}", "val", "eval", holdout=Holdout(val=0.2))
    # a test split carved beside a val folder is fine: val stays the folder, test comes from train
    test = build_dataset(f"folder:{tmp_path / 'data'}", "test", "eval", holdout=Holdout(test=0.25))
    assert len(test) == 2 and all("/train/" in test.source.describe(i) for i in test.indices)


def test_val_folder_with_other_classes_is_refused(tmp_path):
    write_pngs(tmp_path / "data" / "train", {"a": 4, "b": 4})
    write_pngs(tmp_path / "data" / "val", {"a": 2, "c": 2})
    out = tmp_path / "run"
    with pytest.raises(DataError, match=r"'val' split .* classes \[a, c\].*not in training: \[c\]"):
        supervised(["--dataset", f"folder:{tmp_path / 'data'}", "--batch-size", "4", "--out", str(out)])
    assert not out.exists()


def test_one_class_folder_is_refused(tmp_path):
    write_pngs(tmp_path / "data" / "train", {"only": 6})
    write_pngs(tmp_path / "data" / "val", {"only": 2})
    with pytest.raises(DataError, match="1 class .*at least 2 class folders"):
        supervised(["--dataset", f"folder:{tmp_path / 'data'}", "--out", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


def test_corrupt_image_mid_training_leaves_nothing_and_skip_corrupt_reruns(tmp_path):
    data = tmp_path / "data"
    write_pngs(data / "train", {"a": 6, "b": 6})
    write_pngs(data / "val", {"a": 2, "b": 2})
    (data / "train" / "b" / "999.png").write_bytes(b"not an image")
    out = tmp_path / "run"
    argv = ["--dataset", f"folder:{data}", "--batch-size", "13", "--out", str(out)]
    with pytest.raises(DataError, match="cannot read image file .*999.png.*--skip-corrupt"):
        supervised(argv)
    assert not out.exists()  # no config.json, args.yaml or metrics.jsonl to refuse a rerun
    with pytest.warns(UserWarning, match="skipped 1 unreadable"):
        result = supervised([*argv[:-4], "--batch-size", "12", "--out", str(out), "--skip-corrupt"])
    assert (out / "model.safetensors").exists() and result["rows"]


def test_default_batch_shrinks_to_a_small_subset_and_a_given_one_is_refused(tmp_path):
    data = tmp_path / "data"
    write_pngs(data / "train", {"a": 10, "b": 10})
    write_pngs(data / "val", {"a": 2, "b": 2})
    out = tmp_path / "run"
    supervised(["--dataset", f"folder:{data}", "--max-train-samples", "10", "--out", str(out)])
    assert json.loads((out / "config.json").read_text())["args"]["batch_size"] == 10
    with pytest.raises(DataError, match="--batch-size 32 is larger than the 10 training samples"):
        supervised(["--dataset", f"folder:{data}", "--max-train-samples", "10", "--batch-size", "32",
                    "--out", str(tmp_path / "run2")])
    assert not (tmp_path / "run2").exists()


def test_subcommand_usage_names_the_subcommand(jumbokit_cli):
    status, _, err = jumbokit_cli(["supervised", "--bogus"])
    assert status == 2 and err.startswith("usage: jumbokit supervised ")
    assert "jumbokit supervised: error: unrecognized arguments: --bogus" in err


def test_command_line_warnings_are_one_line():
    """The front doors' logging setup formats Python warnings as one line, without Python's source line."""
    import warnings

    from jumbokit.logs import configure_logging

    before = warnings.formatwarning
    try:
        configure_logging()
        text = warnings.formatwarning("skipped 1 unreadable\n   image", UserWarning, __file__, 1)
    finally:
        warnings.formatwarning = before
    assert text == "warning: skipped 1 unreadable image\n"
