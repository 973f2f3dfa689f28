"""Image datasets selected by one string (``digits``, ``folder:PATH``, ``hf:NAME[:split]``) and their transforms.

```python
from jumbokit.data import build_dataset, make_loader
train = build_dataset("digits", "train", task="supervised", img_size=32, in_chans=1)
loader = make_loader(train, batch_size=64)          # EpochSampler: order depends on (seed, epoch) only
train.num_classes, train.classes, train.mean, train.std, train.info()
```
"""
from .dataset import (
    DEFAULTS,
    DIGITS_MEAN,
    DIGITS_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    DatasetDefaults,
    DatasetSpec,
    EpochSampler,
    ImageDataset,
    build_dataset,
    make_loader,
    dataset_defaults,
    normalization,
    parse_dataset_spec,
    read_data_info,
    steps_per_epoch,
)
from .errors import CorruptImageError, DataError, SplitNotFoundError
from .sources import DIGITS_SPLIT_SIZES, IMG_EXTENSIONS, SPLITS, digits_split_indices
from .transforms import TASKS, build_transform, denormalize, make_mixup

__all__ = [
    "DEFAULTS", "DIGITS_MEAN", "DIGITS_STD", "IMAGENET_MEAN", "IMAGENET_STD", "DatasetDefaults", "DatasetSpec",
    "EpochSampler", "ImageDataset", "build_dataset", "dataset_defaults", "make_loader", "normalization",
    "parse_dataset_spec",
    "read_data_info", "steps_per_epoch", "CorruptImageError", "DataError", "SplitNotFoundError",
    "DIGITS_SPLIT_SIZES", "IMG_EXTENSIONS", "SPLITS", "digits_split_indices", "TASKS", "build_transform",
    "denormalize", "make_mixup",
]
