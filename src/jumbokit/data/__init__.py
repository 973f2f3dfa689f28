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
