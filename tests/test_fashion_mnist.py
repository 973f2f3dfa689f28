"""Fashion-MNIST: the IDX reader on generated files, the loader on a generated folder and on Debian's installed
files, the front doors with ``--dataset fashion-mnist:DIR``, and Fashion-MNIST-C. Nothing downloads."""
from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from jumbokit.data import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    DataError,
    IdxFormatError,
    build_dataset,
    find_fashion_mnist,
    parse_dataset_spec,
    read_idx,
)
from jumbokit.data import fashion_mnist

_CODES = {np.dtype("u1"): 0x08, np.dtype("i1"): 0x09, np.dtype(">i2"): 0x0B, np.dtype(">i4"): 0x0C,
          np.dtype(">f4"): 0x0D, np.dtype(">f8"): 0x0E}


def idx_bytes(array: np.ndarray) -> bytes:
    """``array`` in the IDX format (big-endian values)."""
    dtype = array.dtype.newbyteorder(">") if array.dtype.itemsize > 1 else array.dtype
    header = bytes([0, 0, _CODES[dtype], array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(dtype).tobytes()


def write_idx(path: Path, array: np.ndarray) -> Path:
    data = idx_bytes(array)
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


# 510 training images per class: the fixed 5,000-image validation cut leaves 100 for training
TRAIN_PER_CLASS, TEST_PER_CLASS = 510, 2


@pytest.fixture(scope="module")
def idx_dir(tmp_path_factory) -> Path:
    """A folder of the four Fashion-MNIST files (two gzipped, two not) with generated images whose brightness
    tells the class."""
    root = tmp_path_factory.mktemp("fmnist")
    rng = np.random.default_rng(0)
    for part, per_class, gz in (("train", TRAIN_PER_CLASS, True), ("test", TEST_PER_CLASS, False)):
        labels = np.repeat(np.arange(10, dtype=np.uint8), per_class)
        rng.shuffle(labels)
        images = rng.integers(0, 40, size=(len(labels), 28, 28), dtype=np.uint8)
        images[:, 6:22, 6:22] += (labels * 20)[:, None, None].astype(np.uint8)  # a class-coded square
        image_name, label_name = fashion_mnist.FASHION_MNIST_FILES[part]
        suffix = ".gz" if gz else ""
        write_idx(root / f"{image_name}{suffix}", images)
        write_idx(root / f"{label_name}{suffix}", labels)
    return root


# --------------------------------------------------------------------------------------------------- IDX reader


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("dtype", ["u1", "i1", ">i2", ">i4", ">f4", ">f8"])
def test_read_idx_round_trip(tmp_path, suffix, dtype):
    array = (np.arange(2 * 3 * 5) - 7).reshape(2, 3, 5).astype(dtype)
    back = read_idx(write_idx(tmp_path / f"x.idx{suffix}", array))
    assert back.shape == (2, 3, 5) and back.dtype.isnative
    np.testing.assert_array_equal(back, array)


def test_read_idx_rejects_corrupt_files(tmp_path):
    good = idx_bytes(np.zeros((4, 28, 28), dtype=np.uint8))
    cases = {
        "magic.idx": (b"\x08\x03" + good[2:], "not an IDX file: expected a magic number"),
        "empty.idx": (b"", "not an IDX file.*empty file"),
        "type.idx": (good[:2] + b"\x07" + good[3:], "unknown IDX type byte 0x07"),
        "nodim.idx": (b"\x00\x00\x08\x00", "at least 1 dimension"),
        "header.idx": (good[:9], r"truncated: expected 3 dimension sizes \(16 header bytes\)"),
        "short.idx": (good[:-5], r"truncated: shape \(4, 28, 28\) of uint8 needs 3136 bytes.*holds 3131"),
        "long.idx": (good + b"\x00", "longer than its header says"),
    }
    for name, (data, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(IdxFormatError, match=message):
            read_idx(path)
    cut = tmp_path / "cut.idx.gz"
    cut.write_bytes(gzip.compress(good)[:-20])
    with pytest.raises(IdxFormatError, match="cannot read IDX file"):
        read_idx(cut)


def test_loader_checks_shapes_and_labels(tmp_path, idx_dir):
    for name in ("t10k-images-idx3-ubyte", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        (tmp_path / name).symlink_to(idx_dir / name)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.zeros(3, dtype=np.uint8))  # 20 images, 3 labels
    with pytest.raises(IdxFormatError, match="expected 20 uint8 labels"):
        fashion_mnist.load_fashion_mnist(tmp_path, "test")
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.full(20, 10, dtype=np.uint8))
    with pytest.raises(IdxFormatError, match="expected labels 0-9, got 10"):
        fashion_mnist.load_fashion_mnist(tmp_path, "test")
    (tmp_path / "t10k-images-idx3-ubyte").unlink()
    write_idx(tmp_path / "t10k-images-idx3-ubyte", np.zeros((20, 32, 32), dtype=np.uint8))
    with pytest.raises(IdxFormatError, match=r"expected uint8 images of shape \(N, 28, 28\).*\(20, 32, 32\)"):
        fashion_mnist.load_fashion_mnist(tmp_path, "test")


# --------------------------------------------------------------------------------------------------- finding files


def test_find_fashion_mnist(tmp_path, idx_dir, monkeypatch):
    assert find_fashion_mnist(idx_dir) == idx_dir
    with pytest.raises(DataError, match="lacks the Fashion-MNIST IDX file.*t10k-images-idx3-ubyte"):
        find_fashion_mnist(tmp_path)
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "absent")
    with pytest.raises(DataError, match="apt-get install dataset-fashion-mnist"):
        find_fashion_mnist(download=False, cache_dir=tmp_path / "cache")
    raw = tmp_path / "cache" / "FashionMNIST" / "raw"  # where a torchvision download lands
    raw.mkdir(parents=True)
    for f in idx_dir.iterdir():
        (raw / f.name).symlink_to(f)
    assert find_fashion_mnist(download=False, cache_dir=tmp_path / "cache") == raw


def test_spec():
    assert parse_dataset_spec("fashion-mnist").kind == "fashion-mnist"
    spec = parse_dataset_spec("fashion-mnist:~/data/fmnist")
    assert (spec.kind, spec.path, str(spec)) == ("fashion-mnist", "~/data/fmnist", "fashion-mnist:~/data/fmnist")


# --------------------------------------------------------------------------------------------------- the dataset


def test_dataset_on_a_folder(idx_dir):
    spec = f"fashion-mnist:{idx_dir}"
    train = build_dataset(spec, "train", "supervised")
    val = build_dataset(spec, "val", "eval")
    test = build_dataset(spec, "test", "eval")
    assert (len(train), len(val), len(test)) == (10 * TRAIN_PER_CLASS - 5000, 5000, 10 * TEST_PER_CLASS)
    assert np.bincount(val.targets).tolist() == [500] * 10  # stratified cut
    assert np.bincount(train.targets).tolist() == [TRAIN_PER_CLASS - 500] * 10
    assert train.classes == list(FASHION_MNIST_CLASSES) and train.classes[0] == "T-shirt/top"
    assert (train.img_size, train.in_chans, train.mean, train.std) == (32, 1, FASHION_MNIST_MEAN, FASHION_MNIST_STD)
    assert train.choices.rule == "fashion-mnist" and train.choices.hflip == 0.0
    assert train.choices.scale == (0.7, 1.0)
    x, y = test[0]
    assert x.shape == (1, 32, 32) and 0 <= y < 10
    raw = np.asarray(test.load_image(0))
    assert raw.shape == (32, 32) and not raw[:2].any() and not raw[:, -2:].any()  # 2 px black borders
    assert np.asarray(build_dataset(spec, "test", "eval", img_size=28).load_image(0)).shape == (28, 28)
    assert build_dataset(spec, "test", "eval", img_size=64)[0][0].shape == (1, 64, 64)  # padded to 32, resized
    same = build_dataset(spec, "val", "eval")
    assert same.targets == val.targets  # the cut is fixed


DEBIAN = fashion_mnist.DEBIAN_DIR
needs_debian = pytest.mark.skipif(
    not fashion_mnist._complete(DEBIAN),
    reason=f"Debian's Fashion-MNIST files are not installed in {DEBIAN} (apt-get install -y dataset-fashion-mnist)")


@needs_debian
def test_installed_files():
    test = build_dataset("fashion-mnist", "test", "eval", max_samples=64)
    assert len(test) == 64 and len(test.source) == 10000
    assert np.bincount(test.source.targets).tolist() == [1000] * 10
    assert test[0][0].shape == (1, 32, 32)
    val = build_dataset("fashion-mnist", "val", "eval", max_samples=64)
    assert len(val.source) == 5000 and np.bincount(val.source.targets).tolist() == [500] * 10
    train = fashion_mnist.FashionMNISTSource("train")
    assert len(train) == 55000
    pixels = train.images.astype(np.float64) / 255  # the stated statistics are those of these images
    assert abs(pixels.mean() - FASHION_MNIST_MEAN[0]) < 1e-4 and abs(pixels.std() - FASHION_MNIST_STD[0]) < 1e-4


# --------------------------------------------------------------------------------------------------- front doors


TINY = ["--epochs", "1", "--batch-size", "32", "--max-train-samples", "64", "--no-progress", "--cpu"]


def _main(command: str):
    import importlib

    from jumbokit.cli import COMMANDS

    return importlib.import_module(f"jumbokit.recipes.{COMMANDS[command]}").main


def test_front_doors(idx_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = f"fashion-mnist:{idx_dir}"
    sup = tmp_path / "sup"
    _main("supervised")(["--dataset", spec, "--model", "vit_pico_cls", *TINY, "--out", str(sup)])
    data = json.loads((sup / "config.json").read_text())["data"]
    assert (data["dataset"], data["img_size"], data["in_chans"]) == (spec, 32, 1)
    assert data["classes"] == list(FASHION_MNIST_CLASSES)
    tta = tmp_path / "tta"  # Fashion-MNIST-C from the source's own dataset record
    _main("sar-adapt")(["--checkpoint", str(sup), "--corruptions", "fog", "--severity", "5", "--max-eval-samples",
                        "16", "--methods", "none,sar", "--batch-size", "8", "--out", str(tta), "--no-progress",
                        "--cpu"])
    assert "fashion-mnist" in (tta / "report.md").read_text()
    mae = tmp_path / "mae"
    _main("mae-pretrain")(["--dataset", spec, "--model", "vit_pico_cls", "--depth", "1", "--decoder-depth", "1",
                           "--decoder-dim", "32", "--decoder-heads", "2", "--val-samples", "16", "--vis-images", "2",
                           *TINY, "--out", str(mae)])
    assert json.loads((mae / "model_config.json").read_text())["patch_size"] in (4, [4, 4])  # the digits' patch


# --------------------------------------------------------------------------------------------------- Fashion-MNIST-C


def test_fashion_mnist_c_all_corruptions(idx_dir):
    from jumbokit.adaptation.corruptions import COMMON_CORRUPTIONS, CorruptedDataset, clean_image_transforms

    clean = build_dataset(f"fashion-mnist:{idx_dir}", "test", "eval")
    geometry, to_tensor = clean_image_transforms(clean.img_size, clean.mean, clean.std)
    original = np.asarray(clean.load_image(0), dtype=np.int64)
    for corruption in COMMON_CORRUPTIONS:
        for severity in (1, 5):
            data = CorruptedDataset(clean, corruption, severity, to_tensor, geometry)
            array = data.corrupted_array(0)
            assert array.shape == (32, 32) and array.dtype == np.uint8, corruption
            assert np.abs(array - original).mean() > 0, f"{corruption}-{severity} changed nothing"
            assert data[0][0].shape == (1, 32, 32)


def test_fashion_mnist_c_on_disk(idx_dir, tmp_path):
    """Written and read back in the ImageNet-C layout: "T-shirt/top" is one folder and the labels line up."""
    from jumbokit.adaptation.corruptions import clean_image_transforms, load_imagenet_c, write_imagenet_c

    clean = build_dataset(f"fashion-mnist:{idx_dir}", "test", "eval")
    geometry, _ = clean_image_transforms(clean.img_size, clean.mean, clean.std)
    root = write_imagenet_c(clean, tmp_path / "fmnist-c", ["contrast"], [3], geometry=geometry, progress=False)
    assert (root / "contrast" / "3" / "T-shirt_top").is_dir()
    sets = load_imagenet_c(root, clean.classes, ["contrast"], [3], img_size=32, mean=clean.mean, std=clean.std,
                           in_chans=1)
    data = sets[("contrast", 3)]
    assert sorted(data.targets) == sorted(clean.targets) and data.classes == list(FASHION_MNIST_CLASSES)
    assert data[0][0].shape == (1, 32, 32)
