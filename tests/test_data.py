"""Image data: dataset specs, digits split, transforms, ImageFolder / HF imagefolder, corrupt files, bad input."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from jumbokit.data import (
    DIGITS_SPLIT_SIZES,
    CorruptImageError,
    DataError,
    EpochSampler,
    SplitNotFoundError,
    build_dataset,
    build_transform,
    digits_split_indices,
    make_loader,
    make_mixup,
    normalization,
    parse_dataset_spec,
    read_data_info,
)
from jumbokit.data.folder import FolderSource
from jumbokit.cli.errors import one_line

torch.set_num_threads(1)


def write_image(path, size=(12, 10), mode="RGB", seed=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8), mode=mode).save(path)


@pytest.fixture
def image_tree(tmp_path):
    """ImageNet-style tree: train/ (2 classes x 3 images, one grayscale) and val/ (2 x 1), 80x72 px (above the
    small-image limit, so ImageNet's defaults apply)."""
    root = tmp_path / "imgs"
    for split, n in (("train", 3), ("val", 1)):
        for c, name in enumerate(("cat", "dog")):
            for i in range(n):
                mode = "L" if (c, i) == (1, 2) else "RGB"
                write_image(root / split / name / f"{i}.png", size=(80, 72), mode=mode, seed=10 * c + i)
    return root


# ------------------------------------------------------------------------------------------------ specs


def test_parse_dataset_spec():
    assert parse_dataset_spec("digits").kind == "digits"
    spec = parse_dataset_spec("folder:/data/imagenet")
    assert (spec.kind, spec.path) == ("folder", "/data/imagenet")
    spec = parse_dataset_spec("hf:user/beans:validation")
    assert (spec.kind, spec.path, spec.hf_split) == ("hf", "user/beans", "validation")
    assert str(spec) == "hf:user/beans:validation"
    for bad in ("cifar10", "folder:", "hf:", "", "digits:3"):
        with pytest.raises(DataError, match="expected 'digits', 'folder:PATH'|needs a"):
            parse_dataset_spec(bad)


def test_normalization_constants_per_dataset():
    mean, std = normalization("digits")
    assert len(mean) == 1 and 0.2 < mean[0] < 0.4
    assert normalization("digits", 3)[0] == mean * 3
    assert normalization("folder:/x")[0] == (0.485, 0.456, 0.406)
    assert len(normalization("hf:x", 1)[1]) == 1


# ------------------------------------------------------------------------------------------------ digits


def test_digits_split_is_fixed_stratified_and_disjoint():
    idx = digits_split_indices()
    assert {k: len(v) for k, v in idx.items()} == DIGITS_SPLIT_SIZES
    assert sum(len(v) for v in idx.values()) == 1797
    assert not set(idx["train"]) & set(idx["test"]) and not set(idx["val"]) & set(idx["test"])
    again = digits_split_indices()
    assert all((again[k] == idx[k]).all() for k in idx)
    test = build_dataset("digits", "test", "eval")
    counts = np.bincount(test.targets, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # stratified: 36 per class


def test_digits_images_sizes_channels_and_info():
    ds = build_dataset("digits", "train", "eval", img_size=24, in_chans=3)
    x, y = ds[0]
    assert x.shape == (3, 24, 24) and x.dtype == torch.float32 and 0 <= y < 10
    assert torch.equal(x[0], x[1])  # replicated gray
    assert ds.num_classes == 10 and ds.classes == [str(i) for i in range(10)]
    info = ds.info()
    assert info["in_chans"] == 3 and len(info["mean"]) == 3 and info["img_size"] == 24
    json.dumps(info)
    x1 = build_dataset("digits", "train", "eval")[0][0]
    assert x1.shape == (1, 32, 32)
    # normalised with the digits statistics: roughly zero mean, unit std over the split
    batch = torch.stack([build_dataset("digits", "val", "eval")[i][0] for i in range(100)])
    assert abs(batch.mean().item()) < 0.2 and 0.7 < batch.std().item() < 1.3


def test_max_samples_subset_is_seeded():
    a = build_dataset("digits", "train", max_samples=50, seed=3)
    b = build_dataset("digits", "train", max_samples=50, seed=3)
    assert len(a) == 50 and a.indices == b.indices
    with pytest.raises(DataError, match="max_samples"):
        build_dataset("digits", "train", max_samples=0)


# ------------------------------------------------------------------------------------------------ transforms


def test_eval_transform_is_deterministic_and_train_transforms_random():
    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 48, 3), dtype=np.uint8))
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    ev = build_transform("eval", 32, mean, std)
    assert torch.equal(ev(img), ev(img)) and ev(img).shape == (3, 32, 32)
    for task in ("mae", "supervised"):
        tr = build_transform(task, 32, mean, std, randaugment="rand-m9-mstd0.5" if task == "supervised" else None)
        outs = [tr(img) for _ in range(4)]
        assert all(o.shape == (3, 32, 32) for o in outs)
        assert any(not torch.equal(outs[0], o) for o in outs[1:])
    with pytest.raises(ValueError, match="task must be one of"):
        build_transform("pretrain", 32, mean, std)
    with pytest.raises(ValueError, match="RandAugment"):
        build_transform("supervised", 32, mean, std, randaugment="bogus-x")(img)


def test_randaugment_on_grayscale_digits():
    ds = build_dataset("digits", "train", "supervised", randaugment="rand-m9-mstd0.5-inc1")
    assert all(ds[i][0].shape == (1, 32, 32) for i in range(8))


def test_randaugment_increasing_posterize_at_top_magnitude_keeps_a_bit():
    """These seeded draws reach PosterizeIncreasing at magnitude 10, where timm asks Pillow for 0 bits."""
    ds = build_dataset("digits", "train", "supervised", randaugment="rand-m9-mstd0.5-inc1", max_samples=50)
    assert all(ds[(i, 7 + i)][0].shape == (1, 32, 32) for i in range(20))


def test_seeded_samples_reproduce_augmentation_without_touching_global_rng():
    ds = build_dataset("digits", "train", "supervised", max_samples=10)
    state = torch.get_rng_state()
    a, b = ds[(3, 1234)][0], ds[(3, 1234)][0]
    assert torch.equal(a, b) and not torch.equal(a, ds[(3, 99)][0])
    assert torch.equal(torch.get_rng_state(), state)


def test_seeded_sample_draws_the_stream_of_torch_manual_seed():
    """The per-sample seed fixes the augmentation exactly as ``torch.manual_seed(seed)`` would (runs written before
    the seeding became CPU-only resume and reproduce unchanged)."""
    ds = build_dataset("digits", "train", "mae", crop_scale=(0.2, 1.0), hflip=0.5, max_samples=8)
    for i, seed in [(0, 7), (3, 123456)]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            expected = ds.transform(ds.load_image(i))
        assert torch.equal(ds[(i, seed)][0], expected)


def test_epoch_sampler_depends_on_seed_and_epoch_only():
    s = EpochSampler(20, seed=1)
    first = list(s)
    assert sorted(first) == list(range(20)) and list(s) == first
    s.set_epoch(1)
    assert list(s) != first
    s.set_epoch(0)
    assert list(s) == first
    assert list(EpochSampler(5, shuffle=False)) == [0, 1, 2, 3, 4]
    pairs = list(EpochSampler(6, seed=1, sample_seeds=True))
    assert [i for i, _ in pairs] == list(EpochSampler(6, seed=1))


def test_mixup_factory():
    assert make_mixup(10) is None
    mix = make_mixup(10, mixup=0.8, cutmix=1.0, label_smoothing=0.1)
    x, y = mix(torch.randn(4, 1, 8, 8), torch.arange(4))
    assert x.shape == (4, 1, 8, 8) and y.shape == (4, 10)
    torch.testing.assert_close(y.sum(-1), torch.ones(4))
    with pytest.raises(ValueError, match="alphas"):
        make_mixup(10, mixup=-1)


# ------------------------------------------------------------------------------------------------ folders


def test_image_folder_splits_classes_and_channel_conversion(image_tree):
    train = build_dataset(f"folder:{image_tree}", "train", "supervised", img_size=16)
    assert train.classes == ["cat", "dog"] and len(train) == 6 and train.targets == [0, 0, 0, 1, 1, 1]
    assert all(train[i][0].shape == (3, 16, 16) for i in range(6))  # grayscale file converted to RGB
    gray = build_dataset(f"folder:{image_tree}", "val", "eval", img_size=16, in_chans=1)
    assert len(gray) == 2 and gray[0][0].shape == (1, 16, 16) and gray.mean == (0.449,)
    with pytest.warns(UserWarning, match="no 'test' folder"):
        test = build_dataset(f"folder:{image_tree}", "test", "eval", img_size=16)
    assert len(test) == 2
    loader = make_loader(train, 4, num_workers=0)
    x, y = next(iter(loader))
    assert x.shape == (4, 3, 16, 16) and y.dtype == torch.int64


def test_plain_class_folder_is_a_training_split_only(image_tree):
    """Its images are never served as a held-out split (that scored training images as "val" / "test")."""
    root = image_tree / "train"
    assert len(build_dataset(f"folder:{root}", "train", img_size=8)) == 6
    for split in ("val", "test"):
        with pytest.raises(SplitNotFoundError, match=f"class folders only.*--{split}-split 0.1"):
            build_dataset(f"folder:{root}", split, "eval", img_size=8)


def test_image_extensions_are_torchvisions_and_a_series_process_imports_neither_torchvision_nor_timm():
    """The data package spells out ImageFolder's extensions (so importing it does not import torchvision): they stay
    torchvision's. A tstrain process (imports, data, a 2-step run) leaves torchvision and timm unimported."""
    from torchvision.datasets.folder import IMG_EXTENSIONS as torchvision_extensions

    from jumbokit.data import IMG_EXTENSIONS

    assert IMG_EXTENSIONS == torchvision_extensions
    code = ("import sys, tempfile; from jumbokit.cli import tstrain_main; "
            "tstrain_main(['--dataset', 'ItalyPowerDemand', '--model', 'patchtst', '--recipe', 'fast', '--steps', '2', "
            "'--dim', '16', '--cpu', '--threads', '1', '--no-progress', '--baseline', '', '--out', tempfile.mkdtemp()]); "
            "print(sorted(m for m in ('torchvision', 'timm') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_folder_order_classes_sorted_files_by_path_hidden_and_empty_left_out(tmp_path):
    """torchvision's ImageFolder reads the tree in the order of the earlier reader: classes that hold an image,
    sorted; within a class every file (nested folders too) sorted by its path; hidden files and folders left out."""
    files = ["cat/b.png", "cat/a.JPG", "cat/sub/x.png", "cat/sub-2/y.png", "cat/z.png", "cat/._a.jpg",
             "cat-1/q.png", "cat-1/.hidden/r.png", ".git/s.png", "dog/0.png", "dog/sub/deep/2.png"]
    for name in files:
        write_image(tmp_path / name)
    (tmp_path / "empty").mkdir()
    (tmp_path / "dog" / "notes.txt").write_text("x")
    with pytest.warns(UserWarning, match=r"ignoring 1 class folder\(s\) without images .*\['empty'\]"):
        source = FolderSource(tmp_path, "train")
    expected = ["cat/a.JPG", "cat/b.png", "cat/sub-2/y.png", "cat/sub/x.png", "cat/z.png", "cat-1/.hidden/r.png",
                "cat-1/q.png", "dog/0.png", "dog/sub/deep/2.png"]
    assert source.classes == ["cat", "cat-1", "dog"] and source.targets == [0] * 5 + [1] * 2 + [2] * 2
    assert source.paths == [str(tmp_path / name) for name in expected]
    assert source.describe(1) == str(tmp_path / "cat/b.png") and source.load(0).mode == "RGB"


def test_missing_split_folder_is_an_error(tmp_path):
    write_image(tmp_path / "train" / "a" / "0.png")
    with pytest.raises(SplitNotFoundError, match="none for split 'val'"):
        build_dataset(f"folder:{tmp_path}", "val", "eval")


def test_corrupt_file_named_in_error_and_skippable(image_tree):
    bad = image_tree / "train" / "cat" / "zz_broken.png"
    bad.write_bytes(b"this is not a png")
    ds = build_dataset(f"folder:{image_tree}", "train", "eval", img_size=8)
    idx = ds.source.paths.index(str(bad))
    with pytest.raises(CorruptImageError, match="zz_broken.png.*--skip-corrupt"):
        ds[idx]
    # through a worker process the message still names the file
    loader = torch.utils.data.DataLoader(torch.utils.data.Subset(ds, [idx]), batch_size=1, num_workers=1)
    with pytest.raises(CorruptImageError) as info:
        next(iter(loader))
    assert "zz_broken.png" in one_line(info.value)

    with pytest.warns(UserWarning, match=r"skipped 1 unreadable image file\(s\) of 7.*zz_broken"):
        skipping = build_dataset(f"folder:{image_tree}", "train", "eval", img_size=8, skip_corrupt=True)
    assert len(skipping) == 6 and skipping.skipped == [str(bad)] and skipping.info()["skipped_files"] == 1
    assert all(skipping[i][0].shape == (3, 8, 8) for i in range(6))


def test_truncated_file_found_late_is_replaced_when_skipping(image_tree):
    path = image_tree / "train" / "dog" / "0.png"
    ds = build_dataset(f"folder:{image_tree}", "train", "eval", img_size=8, skip_corrupt=True)
    path.write_bytes(path.read_bytes()[:40])  # broken after the upfront scan
    idx = ds.source.paths.index(str(path))
    with pytest.warns(UserWarning, match="skipping unreadable image"):
        x, y = ds[idx]
    assert x.shape == (3, 8, 8)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: None, "does not exist"),
        (lambda root: root.mkdir(), "no class subfolders"),
        (lambda root: (root / "a").mkdir(parents=True) or (root / "a" / "notes.txt").write_text("x"),
         "no image files"),
        (lambda root: root.parent.mkdir(exist_ok=True) or root.write_text("x"), "is not a folder"),
    ],
)
def test_bad_folders_raise_clear_errors(tmp_path, make, message):
    root = tmp_path / "data"
    make(root)
    with pytest.raises(DataError, match=message):
        build_dataset(f"folder:{root}", "train")


def test_bad_channels_batch_and_split(image_tree):
    with pytest.raises(DataError, match="1 \\(grayscale\\) or 3 \\(RGB\\) channels, got in_chans=4"):
        build_dataset("digits", "train", in_chans=4)
    with pytest.raises(ValueError, match="split must be one of"):
        build_dataset("digits", "holdout")
    ds = build_dataset(f"folder:{image_tree}", "train", img_size=8)
    with pytest.raises(DataError, match="batch size 16 is larger than the 6 training samples"):
        make_loader(ds, 16)
    with pytest.raises(DataError, match="batch size 4 x 2 processes"):
        make_loader(ds, 4, world_size=2)
    assert len(make_loader(build_dataset(f"folder:{image_tree}", "val", "eval", img_size=8), 64)) == 1


# ------------------------------------------------------------------------------------------------ HF datasets


def test_hf_local_imagefolder(image_tree, tmp_path):
    cache = str(tmp_path / "hf_cache")
    train = build_dataset(f"hf:{image_tree}", "train", "supervised", img_size=16, hf_cache_dir=cache)
    assert train.classes == ["cat", "dog"] and len(train) == 6 and train.num_classes == 2
    assert train[0][0].shape == (3, 16, 16)
    val = build_dataset(f"hf:{image_tree}", "val", "eval", img_size=16, in_chans=1, hf_cache_dir=cache)
    assert len(val) == 2 and val[1][0].shape == (1, 16, 16) and val.source.hf_split == "validation"
    pinned = build_dataset(f"hf:{image_tree}:train", "test", "eval", img_size=16, hf_cache_dir=cache)
    assert len(pinned) == 6
    with pytest.raises(SplitNotFoundError, match="not 'holdout'"):
        build_dataset(f"hf:{image_tree}:holdout", "test", "eval", hf_cache_dir=cache)


def test_hf_missing_hub_dataset_is_a_clear_error(tmp_path, monkeypatch):
    import datasets
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataError, match="could not load Hugging Face hub dataset"):
        build_dataset("hf:no-such-user/no-such-dataset-xyz", "train", hf_cache_dir=str(tmp_path))


# ------------------------------------------------------------------------------------------------ run records


def test_read_data_info(tmp_path):
    with pytest.raises(DataError, match="no config.json"):
        read_data_info(tmp_path)
    info = build_dataset("digits", "train").info()
    (tmp_path / "config.json").write_text(json.dumps({"data": info}))
    assert read_data_info(tmp_path)["mean"] == info["mean"]
    assert read_data_info(tmp_path / "model.safetensors")["classes"] == info["classes"]


# ------------------------------------------------------------------------------------------------ small images


def test_small_colour_images_flip_and_large_images_keep_imagenet_defaults(tmp_path, image_tree):
    from jumbokit.data import IMAGENET_MEAN

    for c in range(2):
        for i in range(3):
            write_image(tmp_path / "small" / f"c{c}" / f"{i}.png", size=(32, 24), seed=10 * c + i)
    small = build_dataset(f"folder:{tmp_path / 'small'}", "train")
    c = small.choices
    assert (c.rule, small.in_chans, small.img_size, c.train_crop, c.hflip, small.crop_pct) == (
        "small", 3, 32, "pad", 0.5, 1.0)
    assert len(small.mean) == 3 and c.stats == "data"
    assert small.info()["augmentation"] == {"train_crop": "pad", "scale": None, "ratio": None, "padding": 4,
                                            "hflip": 0.5, "randaugment": None}
    from jumbokit.data.sources import Holdout

    val = build_dataset(f"folder:{tmp_path / 'small'}", "val", "eval", holdout=Holdout(val=0.34))
    assert "augmentation" not in val.info() and val.info()["holdout"] == {"val": 0.34, "test": 0.0, "seed": 0}
    assert len(val) == 2  # one image of each class held out
    large = build_dataset(f"folder:{image_tree}", "train")
    c = large.choices
    assert (c.rule, large.img_size, large.mean, c.scale, c.hflip, large.crop_pct) == (
        "imagenet", 224, IMAGENET_MEAN, (0.08, 1.0), 0.5, 0.875)
