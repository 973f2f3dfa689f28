"""Image datasets selected by one string (``digits``, ``fashion-mnist[:DIR]``, ``folder:PATH``, ``hf:NAME[:split]``)
and their transforms.

```python
from jumbokit.data import build_dataset, make_loader
train = build_dataset("digits", "train", task="supervised", img_size=32, in_chans=1)
loader = make_loader(train, batch_size=64)          # EpochSampler: order depends on (seed, epoch) only
train.num_classes, train.classes, train.mean, train.std, train.info()
```

A run's data settings (``DataSettings``: dataset, size, held-out splits, augmentation) build each split with
``settings.build(split, task)``; the front doors' data flags that parse to them live in ``jumbokit.cli.data``.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The names below load with their submodule on first use (PEP 562), so that importing one light submodule (e.g.
# ``jumbokit.data.data_config``, which every saved series model's loader reads) does not import torchvision's
# transforms, datasets and models: seconds of CPU in every time-series process.
if TYPE_CHECKING:  # the eager imports, for type checkers and IDEs
    from .choices import DataChoices, FileProbe, image_statistics, probe_files, resolve_choices
    from .dataset import ImageDataset, build_dataset, read_data_info
    from .defaults import (
        DEFAULTS,
        DIGITS_MEAN,
        DIGITS_STD,
        FASHION_MNIST_MEAN,
        FASHION_MNIST_STD,
        IMAGENET_MEAN,
        IMAGENET_STD,
        SMALL_IMAGE_MAX_SIDE,
        DatasetDefaults,
        dataset_defaults,
        normalization,
    )
    from .errors import CorruptImageError, DataError, SplitNotFoundError
    from .fashion_mnist import (
        FASHION_MNIST_CLASSES,
        FASHION_MNIST_SPLIT_SIZES,
        IdxFormatError,
        find_fashion_mnist,
        read_idx,
    )
    from .settings import DataSettings, check_classification_data, check_same_classes
    from .loader import EpochSampler, make_loader, steps_per_epoch
    from .sources import DIGITS_SPLIT_SIZES, IMG_EXTENSIONS, SPLITS, digits_split_indices
    from .spec import DatasetSpec, parse_dataset_spec
    from .transforms import TASKS, TRAIN_CROPS, build_transform, denormalize, make_mixup

_EXPORTS = {  # name -> the submodule that defines it, imported on first use (see __getattr__)
    **dict.fromkeys(("DataChoices", "FileProbe", "image_statistics", "probe_files", "resolve_choices"), "choices"),
    **dict.fromkeys(("ImageDataset", "build_dataset", "read_data_info"), "dataset"),
    **dict.fromkeys(("DEFAULTS", "DIGITS_MEAN", "DIGITS_STD", "FASHION_MNIST_MEAN", "FASHION_MNIST_STD",
                     "IMAGENET_MEAN", "IMAGENET_STD", "SMALL_IMAGE_MAX_SIDE", "DatasetDefaults", "dataset_defaults",
                     "normalization"), "defaults"),
    **dict.fromkeys(("CorruptImageError", "DataError", "SplitNotFoundError"), "errors"),
    **dict.fromkeys(("FASHION_MNIST_CLASSES", "FASHION_MNIST_SPLIT_SIZES", "IdxFormatError", "find_fashion_mnist",
                     "read_idx"), "fashion_mnist"),
    **dict.fromkeys(("DataSettings", "check_classification_data", "check_same_classes"), "settings"),
    **dict.fromkeys(("EpochSampler", "make_loader", "steps_per_epoch"), "loader"),
    **dict.fromkeys(("DIGITS_SPLIT_SIZES", "IMG_EXTENSIONS", "SPLITS", "digits_split_indices"), "sources"),
    **dict.fromkeys(("DatasetSpec", "parse_dataset_spec"), "spec"),
    **dict.fromkeys(("TASKS", "TRAIN_CROPS", "build_transform", "denormalize", "make_mixup"), "transforms"),
}

__all__ = [
    "DEFAULTS", "DIGITS_MEAN", "DIGITS_STD", "IMAGENET_MEAN", "IMAGENET_STD", "SMALL_IMAGE_MAX_SIDE",
    "DatasetDefaults", "DatasetSpec", "EpochSampler", "ImageDataset", "build_dataset", "dataset_defaults",
    "make_loader", "normalization", "parse_dataset_spec", "read_data_info", "steps_per_epoch", "CorruptImageError",
    "DataError", "SplitNotFoundError", "DIGITS_SPLIT_SIZES", "IMG_EXTENSIONS", "SPLITS", "digits_split_indices",
    "TASKS", "TRAIN_CROPS", "build_transform", "denormalize", "make_mixup", "DataChoices", "FileProbe",
    "image_statistics", "probe_files", "resolve_choices", "DataSettings", "check_classification_data", "check_same_classes",
    "FASHION_MNIST_CLASSES", "FASHION_MNIST_MEAN", "FASHION_MNIST_SPLIT_SIZES",
    "FASHION_MNIST_STD", "IdxFormatError", "find_fashion_mnist", "read_idx",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
