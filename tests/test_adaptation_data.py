"""Corrupted sets (generation, ImageNet-C folders) and the test streams of the wild settings."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset

from jumbokit.adaptation.corruptions import (
    ALL_CORRUPTIONS, COMMON_CORRUPTIONS, CorruptedDataset, check_imagenet_c, clean_image_transforms, corrupt_image,
    load_imagenet_c, resolve_corruptions, write_imagenet_c,
)
from jumbokit.adaptation.wild import build_episodes, check_methods, label_shift_indices

pytest.importorskip("imagecorruptions")
torch.set_num_threads(1)


class ToyImages(Dataset):
    """``n`` random 32 px images (gray or RGB) with labels ``i % num_classes``."""

    def __init__(self, n: int = 6, num_classes: int = 3, rgb: bool = False, size: int = 32) -> None:
        rng = np.random.default_rng(0)
        shape = (size, size, 3) if rgb else (size, size)
        self.images = [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(n)]
        self.targets = [i % num_classes for i in range(n)]
        self.classes = [f"class_{c}" for c in range(num_classes)]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return Image.fromarray(self.images[i]), self.targets[i]


class Labelled(Dataset):
    def __init__(self, targets):
        self.targets = list(targets)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return torch.full((1, 2, 2), float(i)), self.targets[i]


# ------------------------------------------------------------------------------------------ generation

@pytest.mark.parametrize("corruption", ["gaussian_noise", "glass_blur", "impulse_noise", "frost", "fog", "saturate"])
def test_corruption_is_deterministic_per_seed_and_keeps_dtype_and_shape(corruption):
    gray = ToyImages().images[0]
    rgb = ToyImages(rgb=True).images[0]
    for image in (gray, rgb):
        a = corrupt_image(image, corruption, 5, seed=7)
        b = corrupt_image(image, corruption, 5, seed=7)
        assert a.dtype == np.uint8 and a.shape == image.shape
        assert np.array_equal(a, b)
    if corruption.endswith("noise"):
        assert not np.array_equal(corrupt_image(gray, corruption, 5, seed=7), corrupt_image(gray, corruption, 5, seed=8))


def test_corruption_leaves_global_numpy_state_alone_and_accepts_tensors():
    np.random.seed(3)
    expected = np.random.rand()
    np.random.seed(3)
    out = corrupt_image(torch.rand(3, 32, 32), "shot_noise", 2, seed=1)
    assert np.random.rand() == expected
    assert out.shape == (32, 32, 3) and out.dtype == np.uint8


def test_small_images_are_an_error_unless_upsampled():
    small = np.zeros((16, 16), dtype=np.uint8)
    with pytest.raises(ValueError, match="at least 32x32"):
        corrupt_image(small, "fog", 3)
    out = corrupt_image(small, "fog", 3, small_images="upsample")
    assert out.shape == (16, 16) and out.dtype == np.uint8


def test_bad_corruption_names_and_severities():
    assert resolve_corruptions("common") == COMMON_CORRUPTIONS and len(resolve_corruptions("all")) == 19
    assert resolve_corruptions("fog,snow") == ("fog", "snow")
    with pytest.raises(ValueError, match="unknown corruption"):
        resolve_corruptions("fog,blurry")
    with pytest.raises(ValueError, match="severity"):
        corrupt_image(np.zeros((32, 32), np.uint8), "fog", 6)


def test_corrupted_dataset_is_deterministic_and_normalised():
    geometry, to_tensor = clean_image_transforms(32, (0.5,), (0.25,))
    data = CorruptedDataset(ToyImages(), "gaussian_noise", 3, to_tensor, geometry, seed=1)
    again = CorruptedDataset(ToyImages(), "gaussian_noise", 3, to_tensor, geometry, seed=1, cache=False)
    x, y = data[2]
    assert x.shape == (1, 32, 32) and x.dtype == torch.float32 and y == 2
    assert torch.equal(x, again[2][0])
    assert x.min() >= (0 - 0.5) / 0.25 - 1e-6 and x.max() <= (1 - 0.5) / 0.25 + 1e-6
    clean = CorruptedDataset(ToyImages(), None, 1, to_tensor)
    assert torch.allclose(clean[0][0], (torch.from_numpy(ToyImages().images[0]).float() / 255 - 0.5) / 0.25)


# ------------------------------------------------------------------------------------------ ImageNet-C folders

def test_write_and_read_imagenet_c_tree_with_the_clean_class_order(tmp_path):
    toy = ToyImages(n=6, num_classes=3)
    write_imagenet_c(toy, tmp_path, ["fog", "gaussian_noise"], [1, 5], seed=0, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fog", "gaussian_noise"]
    assert not list(tmp_path.glob("*/.*"))  # no temporary folders left behind
    order = ["class_2", "class_0", "class_1"]  # not alphabetical: labels must follow this order
    sets = load_imagenet_c(tmp_path, order, ["fog", "gaussian_noise"], [5], img_size=32, mean=(0.5,), std=(0.5,),
                           in_chans=1)
    data = sets[("gaussian_noise", 5)]
    assert len(data) == 6 and data.classes == order
    on_the_fly = CorruptedDataset(toy, "gaussian_noise", 5, clean_image_transforms(32, (0.5,), (0.5,))[1], seed=0)
    for i, (path, label) in enumerate(data.samples):
        index = int(path.rsplit("/", 1)[1].split(".")[0])
        assert order[label] == toy.classes[toy.targets[index]]
        assert torch.equal(data[i][0], on_the_fly[index][0])  # PNG on disk == generated on the fly


def test_imagenet_c_root_with_missing_parts_names_them(tmp_path):
    write_imagenet_c(ToyImages(n=3), tmp_path, ["fog"], [5], progress=False)
    with pytest.raises(FileNotFoundError, match=r"fog severity 3.*snow \(all severities\)"):
        check_imagenet_c(tmp_path, ["fog", "snow"], [3, 5])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_imagenet_c(tmp_path / "nowhere", ["fog"], [5])
    with pytest.raises(ValueError, match="class folders the source model does not know"):
        load_imagenet_c(tmp_path, ["a", "b"], ["fog"], [5])


# ------------------------------------------------------------------------------------------ streams

def _batches(episode):
    return [(x, y, d) for x, y, d in episode.loader]


def test_normal_and_bs1_streams():
    domains = {"fog": Labelled(range(10)), "snow": Labelled(range(10))}
    normal = build_episodes("normal", domains, seed=0)
    assert [e.name for e in normal] == ["fog", "snow"] and all(e.reset for e in normal)
    batches = _batches(normal[0])
    assert len(batches) == 1 and batches[0][0].shape[0] == 10
    assert sorted(batches[0][1].tolist()) == list(range(10)) and batches[0][1].tolist() != list(range(10))
    bs1 = build_episodes("bs1", domains)
    assert all(x.shape[0] == 1 for x, _, _ in _batches(bs1[1])) and len(_batches(bs1[1])) == 10
    with pytest.raises(ValueError, match="single samples"):
        build_episodes("bs1", domains, batch_size=4)
    with pytest.raises(ValueError, match="unknown setting"):
        build_episodes("wild", domains)


def test_mixed_stream_shuffles_all_corruptions_into_one_episode():
    domains = {name: Labelled(range(20)) for name in ("fog", "snow", "frost")}
    (episode,) = build_episodes("mixed", domains, batch_size=8, seed=1)
    assert episode.name == "mixed" and episode.domains == ["fog", "snow", "frost"]
    ids = torch.cat([d for _, _, d in _batches(episode)])
    assert len(ids) == 60 and ids.bincount().tolist() == [20, 20, 20]
    assert len(set(ids[:8].tolist())) > 1  # corruptions are interleaved, not one after another


def test_label_shift_stream_is_ordered_by_class_blocks():
    targets = [i % 5 for i in range(100)]
    pure = label_shift_indices(targets, imbalance_ratio=1e9, seed=0)
    labels = np.asarray(targets)[pure]
    assert len(labels) == 100
    blocks = labels.reshape(5, 20)
    assert all(len(set(b)) == 1 for b in blocks) and sorted(blocks[:, 0]) == [0, 1, 2, 3, 4]
    uniform = np.asarray(targets)[label_shift_indices(targets, imbalance_ratio=1.0, seed=0)]
    assert len(set(uniform[:20])) > 2
    assert np.array_equal(pure, label_shift_indices(targets, imbalance_ratio=1e9, seed=0))
    (episode, *_) = build_episodes("label_shift", {"fog": Labelled(targets)}, batch_size=10, imbalance_ratio=1e9)
    ys = torch.cat([y for _, y, _ in _batches(episode)]).numpy()
    assert all(len(set(ys[i:i + 20])) == 1 for i in range(0, 100, 20))
    with pytest.raises(ValueError, match="imbalance_ratio"):
        label_shift_indices(targets, imbalance_ratio=0.5)


def test_method_names_are_checked():
    assert check_methods("none, TENT,sar") == ["none", "tent", "sar"]
    with pytest.raises(ValueError, match="unknown method.*memo"):
        check_methods("tent,memo")
    assert set(ALL_CORRUPTIONS) >= set(COMMON_CORRUPTIONS)


def test_passes_stream_the_set_again_with_fresh_noise():
    from jumbokit.adaptation.corruptions import CorruptedDataset

    rng = np.random.default_rng(0)
    clean = [(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8), i % 3) for i in range(4)]
    once = CorruptedDataset(clean, "gaussian_noise", 3, to_tensor=torch.from_numpy, seed=1)
    twice = CorruptedDataset(clean, "gaussian_noise", 3, to_tensor=torch.from_numpy, seed=1, passes=2)
    assert len(twice) == 8 and twice.targets == once.targets * 2
    np.testing.assert_array_equal(twice.corrupted_array(1), once.corrupted_array(1))  # first pass unchanged
    assert not np.array_equal(twice.corrupted_array(5), twice.corrupted_array(1))     # same image, new noise
    with pytest.raises(ValueError, match="passes must be >= 1"):
        CorruptedDataset(clean, "gaussian_noise", 3, to_tensor=torch.from_numpy, passes=0)
