"""Fashion-MNIST (Xiao, Rasul & Vollgraf, 2017): 70,000 28x28 grayscale photos of clothing in 10 classes, read
from the four original IDX files (MIT licence).

```python
from jumbokit.data import build_dataset
train = build_dataset("fashion-mnist", "train")        # 55,000 images, 1 x 32 x 32, classes FASHION_MNIST_CLASSES
test = build_dataset("fashion-mnist:~/data/fmnist", "test")   # the IDX files of a folder of your own
```

Where the files are read from, in this order: the folder of ``fashion-mnist:DIR`` (then only there), Debian's
package ``dataset-fashion-mnist`` (``DEBIAN_DIR``), the download cache, and last (online) torchvision's
``FashionMNIST(download=True)`` into the cache. Each of the four files may be gzipped (``NAME.gz``) or not.

Splits: the official 60,000 training / 10,000 test images; a fixed, stratified validation cut of
``FASHION_MNIST_VAL_SIZE`` images (500 per class, seed 0) comes out of the official training images, so
"train" holds 55,000 and "val" 5,000.

Images are padded with black borders from 28 to 32 px (2 px a side), the size of the digits and of the digits'
search space, which is also the smallest size the generated corruptions accept; padding keeps every pixel as it
is, where resizing would blur them. ``img_size`` 28-32 pads to that size, a smaller one keeps 28 px and a larger
one pads to 32 px; the transforms then resize to ``img_size``.
"""
from __future__ import annotations

import functools
import gzip
import os
from pathlib import Path

import numpy as np
from PIL import Image

from .errors import DataError, SplitNotFoundError

__all__ = [
    "DEBIAN_DIR", "FASHION_MNIST_CLASSES", "FASHION_MNIST_FILES", "FASHION_MNIST_SPLIT_SIZES",
    "FASHION_MNIST_VAL_SIZE", "FashionMNISTSource", "IdxFormatError", "default_cache_dir", "find_fashion_mnist",
    "load_fashion_mnist", "read_idx",
]

FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                         "Ankle boot")
# official part -> (images file, labels file), as the dataset's authors name them
FASHION_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
FASHION_MNIST_VAL_SIZE = 5000
FASHION_MNIST_SPLIT_SIZES = {"train": 55000, "val": FASHION_MNIST_VAL_SIZE, "test": 10000}
FASHION_MNIST_SEED = 0
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")  # apt-get install dataset-fashion-mnist
NATIVE_SIZE = 28
CANVAS_SIZE = 32  # padded size: the digits' size and the corruptions' minimum
INSTALL_HINT = ("install Debian's package (apt-get install dataset-fashion-mnist), pass --dataset fashion-mnist:DIR "
                "with a folder holding the four IDX files, or run once online to download them")

# IDX type byte -> numpy dtype (big-endian, as the format stores them)
_IDX_DTYPES = {0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
               0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


class IdxFormatError(DataError):
    """A file is not a well-formed IDX file (wrong magic number, unknown type, truncated or too long)."""


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array of an IDX file (LeCun's MNIST format; ``.gz`` files are decompressed).

    Layout: two zero bytes, a type byte (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
    0x0E float64), a byte with the number of dimensions, one big-endian uint32 per dimension, then the values
    in C order. Raises ``IdxFormatError`` saying what was expected and what the file holds.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError) as err:  # gzip raises these for damaged or cut archives
        raise IdxFormatError(f"cannot read IDX file {path} ({type(err).__name__}: {err})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise IdxFormatError(f"{path} is not an IDX file: expected a magic number 0x0000TTDD (two zero bytes, "
                             f"type, dimensions), got {raw[:4].hex() or 'an empty file'}")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise IdxFormatError(f"{path}: unknown IDX type byte 0x{code:02x}, expected one of "
                             f"{', '.join(f'0x{c:02x}' for c in _IDX_DTYPES)}")
    if ndim == 0:
        raise IdxFormatError(f"{path}: expected at least 1 dimension in the magic number, got 0")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise IdxFormatError(f"{path} is truncated: expected {ndim} dimension sizes ({header} header bytes), the "
                             f"file is {len(raw)} bytes")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(shape)) * dtype.itemsize
    given = len(raw) - header
    if given != expected:
        state = "truncated" if given < expected else "longer than its header says"
        raise IdxFormatError(f"{path} is {state}: shape {shape} of {dtype.name} needs {expected} bytes of data, "
                             f"the file holds {given}")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def default_cache_dir() -> Path:
    """Download cache: ``$XDG_CACHE_HOME/jumbokit/fashion-mnist`` (``~/.cache/...``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "jumbokit" / "fashion-mnist"


def _file_in(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _complete(folder: Path) -> bool:
    return all(_file_in(folder, name) for files in FASHION_MNIST_FILES.values() for name in files)


def _torchvision_raw(cache: Path) -> Path:
    return cache / "FashionMNIST" / "raw"  # where torchvision's FashionMNIST(root=cache) puts the files


def find_fashion_mnist(data_dir: str | os.PathLike | None = None, download: bool = True,
                       cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder holding the four IDX files: ``data_dir`` when given (an error when they are not all there),
    else ``DEBIAN_DIR``, else the cache, else a torchvision download into the cache (``download``)."""
    if data_dir is not None:
        folder = Path(data_dir).expanduser()
        if not _complete(folder):
            missing = [n for files in FASHION_MNIST_FILES.values() for n in files if not _file_in(folder, n)]
            raise DataError(f"{folder} lacks the Fashion-MNIST IDX file(s) {', '.join(missing)} (expected the four "
                            f"files {', '.join(n for f in FASHION_MNIST_FILES.values() for n in f)}, each "
                            "optionally .gz)")
        return folder
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    for folder in (DEBIAN_DIR, _torchvision_raw(cache)):
        if _complete(folder):
            return folder
    if not download:
        raise DataError(f"Fashion-MNIST not found (looked in {DEBIAN_DIR} and {_torchvision_raw(cache)}); "
                        f"{INSTALL_HINT}")
    try:
        from torchvision.datasets import FashionMNIST

        for train in (True, False):
            FashionMNIST(str(cache), train=train, download=True)
    except Exception as err:  # offline, server down, partial download
        raise DataError(f"Fashion-MNIST not found (looked in {DEBIAN_DIR} and {_torchvision_raw(cache)}) and "
                        f"downloading it failed ({type(err).__name__}: {str(err).splitlines()[0][:160]}); "
                        f"{INSTALL_HINT}") from None
    return _torchvision_raw(cache)


@functools.lru_cache(maxsize=4)
def load_fashion_mnist(folder: str | os.PathLike, part: str) -> tuple[np.ndarray, np.ndarray]:
    """The official ``part`` ("train" | "test") of the IDX files in ``folder``: uint8 images (N, 28, 28) and
    int64 labels (N,) in 0..9; read once per process. Raises ``IdxFormatError`` for files of another shape."""
    if part not in FASHION_MNIST_FILES:
        raise ValueError(f"part must be one of {', '.join(FASHION_MNIST_FILES)}, got {part!r}")
    folder = Path(folder)
    image_name, label_name = FASHION_MNIST_FILES[part]
    images_file, labels_file = _file_in(folder, image_name), _file_in(folder, label_name)
    if images_file is None or labels_file is None:
        raise DataError(f"{folder} lacks {image_name if images_file is None else label_name}[.gz]")
    images, labels = read_idx(images_file), read_idx(labels_file)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (NATIVE_SIZE, NATIVE_SIZE):
        raise IdxFormatError(f"{images_file}: expected uint8 images of shape (N, 28, 28), got {images.dtype.name} "
                             f"of shape {images.shape}")
    if labels.dtype != np.uint8 or labels.ndim != 1 or len(labels) != len(images):
        raise IdxFormatError(f"{labels_file}: expected {len(images)} uint8 labels (one per image of "
                             f"{images_file.name}), got {labels.dtype.name} of shape {labels.shape}")
    if len(labels) and labels.max() >= len(FASHION_MNIST_CLASSES):
        raise IdxFormatError(f"{labels_file}: expected labels 0-9, got {int(labels.max())}")
    return images, labels.astype(np.int64)


def split_indices(labels: np.ndarray, split: str) -> np.ndarray:
    """Sorted positions of ``split`` ("train" | "val") in the official training part: a stratified cut of
    ``FASHION_MNIST_VAL_SIZE`` images (seed 0) is the validation split, the rest the training split."""
    from sklearn.model_selection import train_test_split

    positions = np.arange(len(labels))
    train, val = train_test_split(positions, test_size=FASHION_MNIST_VAL_SIZE, stratify=labels,
                                  random_state=FASHION_MNIST_SEED)
    return np.sort(train if split == "train" else val)


def canvas_size(img_size: int) -> int:
    """The side the 28 px images are padded to for ``img_size``: itself for 28-32, 28 below, 32 above."""
    return min(max(int(img_size), NATIVE_SIZE), CANVAS_SIZE)


class FashionMNISTSource:
    """One split of Fashion-MNIST ("train" 55,000 | "val" 5,000 | "test" 10,000), kept in memory as uint8 and
    padded with black borders to ``canvas_size(img_size)`` px. ``data_dir``: a folder with the IDX files
    (default: searched, see :func:`find_fashion_mnist`)."""

    in_memory = True
    native_chans = 1

    def __init__(self, split: str, img_size: int = CANVAS_SIZE, data_dir: str | os.PathLike | None = None,
                 download: bool = True):
        if split not in FASHION_MNIST_SPLIT_SIZES:
            raise SplitNotFoundError(f"Fashion-MNIST has splits {', '.join(FASHION_MNIST_SPLIT_SIZES)}, not "
                                     f"{split!r}")
        self.folder = find_fashion_mnist(data_dir, download)
        part = "test" if split == "test" else "train"
        images, labels = load_fashion_mnist(self.folder, part)
        positions = np.arange(len(labels)) if split == "test" else split_indices(labels, split)
        pad = canvas_size(img_size) - NATIVE_SIZE
        before, after = pad // 2, pad - pad // 2
        self.split = split
        self.part = part
        self.positions = positions
        self.images = np.pad(images[positions], ((0, 0), (before, after), (before, after)))  # black borders
        self.classes = list(FASHION_MNIST_CLASSES)
        self.targets = [int(t) for t in labels[positions]]

    def __len__(self) -> int:
        return len(self.targets)

    def load(self, i: int) -> Image.Image:
        return Image.fromarray(self.images[i])

    def describe(self, i: int) -> str:
        return f"fashion-mnist {self.part}[{int(self.positions[i])}] ({self.folder})"
