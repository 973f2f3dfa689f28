"""Corrupted test sets: the ImageNet-C folder layout, or corruptions generated from any image set.

Layout: ``ROOT/<corruption>/<severity 1-5>/<class>/<image>`` (Hendrycks & Dietterich, 2019).
Generation uses the ``imagecorruptions`` functions (package ``imagecorruptions-imaug``): the 15
benchmark corruptions, the 4 held-out ones on request, severities 1-5, deterministic per
``(seed, corruption, severity, sample index)``. Images are corrupted after the evaluation resize and
centre crop (as ImageNet-C was made from 224-px crops) and normalised afterwards with the source
model's own mean and std.

Write a generated set to disk (so runs can reuse it)::

    python -m jumbokit.adaptation.corruptions --dataset digits --out data/digits-c --severity 3,5
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

__all__ = [
    "ALL_CORRUPTIONS",
    "COMMON_CORRUPTIONS",
    "EXTRA_CORRUPTIONS",
    "MIN_CORRUPTION_SIZE",
    "SEVERITIES",
    "CorruptedDataset",
    "ImageNetCFolder",
    "check_imagenet_c",
    "class_folder",
    "clean_image_transforms",
    "corrupt_image",
    "load_imagenet_c",
    "parse_severities",
    "resolve_corruptions",
    "write_imagenet_c",
]

COMMON_CORRUPTIONS = (
    "gaussian_noise", "shot_noise", "impulse_noise",
    "defocus_blur", "glass_blur", "motion_blur", "zoom_blur",
    "snow", "frost", "fog",
    "brightness", "contrast", "elastic_transform", "pixelate", "jpeg_compression",
)
EXTRA_CORRUPTIONS = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
ALL_CORRUPTIONS = COMMON_CORRUPTIONS + EXTRA_CORRUPTIONS
SEVERITIES = (1, 2, 3, 4, 5)
MIN_CORRUPTION_SIZE = 32  # the corruption functions reject images below 32 x 32 pixels
_SEEDED_KWARG = ("glass_blur", "impulse_noise")  # these draw from their own generator unless seeded
_IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def resolve_corruptions(names: str | Sequence[str] | None) -> tuple[str, ...]:
    """``None``/"common" -> the 15 benchmark corruptions, "extra" -> the 4 held-out ones, "all" -> 19;
    otherwise a comma-separated string or sequence of names (checked)."""
    if names is None or names == "common":
        return COMMON_CORRUPTIONS
    if names == "extra":
        return EXTRA_CORRUPTIONS
    if names == "all":
        return ALL_CORRUPTIONS
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in names if n not in ALL_CORRUPTIONS]
    if unknown or not names:
        raise ValueError(
            f"unknown corruption(s) {unknown or names!r}; expected 'common', 'extra', 'all' or names from "
            f"{', '.join(ALL_CORRUPTIONS)}"
        )
    return tuple(dict.fromkeys(names))


def _check_severity(severity: int) -> int:
    if int(severity) not in SEVERITIES:
        raise ValueError(f"severity must be an integer in 1-5, got {severity!r}")
    return int(severity)


def parse_severities(text: str | int) -> list[int]:
    """``--severity``: one value or a comma list of integers in 1-5 ("5", "3,5") -> [3, 5] in the given order."""
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(v not in SEVERITIES for v in values):
        raise ValueError(f"--severity expects one value or a comma list of integers in 1-5, got {str(text)!r}")
    return list(dict.fromkeys(values))


def class_folder(name: str) -> str:
    """The folder name of class ``name`` in the layout: a "/" (Fashion-MNIST's "T-shirt/top") becomes "_"."""
    return str(name).replace("/", "_")


def _sample_seed(seed: int, corruption: str, severity: int, index: int) -> int:
    entropy = [int(seed) & 0xFFFFFFFF, ALL_CORRUPTIONS.index(corruption), severity, int(index)]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def _to_uint8(image: Image.Image | np.ndarray | torch.Tensor) -> np.ndarray:
    """PIL / uint8 array (H, W[, C]) / float tensor in [0, 1] (C, H, W) -> uint8 array (H, W[, C])."""
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("L" if image.mode in ("L", "1", "I", "F") else "RGB"))
    if isinstance(image, torch.Tensor):
        if image.dtype == torch.uint8:
            array = image.numpy()
        else:
            array = (image.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).numpy()
        if array.ndim == 3:
            array = array.transpose(1, 2, 0)
    else:
        array = np.asarray(image)
        if array.dtype != np.uint8:
            raise TypeError(f"expected a uint8 image array, got dtype {array.dtype}")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] != 3):
        raise ValueError(f"expected an image of shape (H, W), (H, W, 1) or (H, W, 3), got {array.shape}")
    return array


def corrupt_image(
    image: Image.Image | np.ndarray | torch.Tensor,
    corruption: str,
    severity: int,
    seed: int = 0,
    small_images: str = "error",
) -> np.ndarray:
    """Apply one corruption; deterministic for ``seed``; the global NumPy random state is left as it was.

    Args:
        image: PIL image, uint8 array (H, W) / (H, W, 3), or float tensor (C, H, W) in [0, 1].
        corruption: a name from ``ALL_CORRUPTIONS``. severity: 1-5.
        small_images: images below 32 px on a side are rejected by the corruption functions:
            "error" raises ``ValueError``; "upsample" corrupts a bicubic upsampling to 32 px and
            resizes the result back to the original size.
    Returns:
        uint8 array with the input's height, width and channel count (grayscale stays grayscale,
        converted by luminance).
    """
    from imagecorruptions import corrupt

    if corruption not in ALL_CORRUPTIONS:
        resolve_corruptions([corruption])
    severity = _check_severity(severity)
    array = _to_uint8(image)
    height, width = array.shape[:2]
    if min(height, width) < MIN_CORRUPTION_SIZE:
        if small_images != "upsample":
            raise ValueError(
                f"images are {height}x{width} px but the corruption functions need at least "
                f"{MIN_CORRUPTION_SIZE}x{MIN_CORRUPTION_SIZE}; use a larger image size or upsample "
                "(small_images='upsample', --upsample-small)"
            )
        scale = MIN_CORRUPTION_SIZE / min(height, width)
        size = (max(MIN_CORRUPTION_SIZE, round(width * scale)), max(MIN_CORRUPTION_SIZE, round(height * scale)))
        big = np.asarray(Image.fromarray(array).resize(size, Image.Resampling.BICUBIC))
        out = corrupt_image(big, corruption, severity, seed)
        return np.asarray(Image.fromarray(out).resize((width, height), Image.Resampling.BICUBIC))
    state = np.random.get_state()
    try:
        np.random.seed(seed % 2**32)
        kwargs = {"seed": seed % 2**32} if corruption in _SEEDED_KWARG else {}
        out = corrupt(array, severity=severity, corruption_name=corruption, **kwargs)
    finally:
        np.random.set_state(state)
    out = np.asarray(out, dtype=np.uint8)
    if array.ndim == 2:  # the functions work on RGB; return to one channel by luminance
        out = np.asarray(Image.fromarray(out).convert("L"))
    return out


def clean_image_transforms(
    img_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    crop_pct: float = 1.0,
    interpolation: str = "bicubic",
) -> tuple[Callable, Callable]:
    """(geometry, to_tensor): the evaluation resize + centre crop, then ToTensor + Normalize(mean, std).

    Corruptions go between the two, as ImageNet-C corrupts already cropped images.
    """
    modes = {"bicubic": T.InterpolationMode.BICUBIC, "bilinear": T.InterpolationMode.BILINEAR,
             "nearest": T.InterpolationMode.NEAREST}
    if interpolation not in modes:
        raise ValueError(f"interpolation must be one of {sorted(modes)}, got {interpolation!r}")
    geometry = T.Compose([T.Resize(int(round(img_size / crop_pct)), interpolation=modes[interpolation]),
                          T.CenterCrop(img_size)])
    to_tensor = T.Compose([T.ToTensor(), T.Normalize(mean=list(mean), std=list(std))])
    return geometry, to_tensor


class CorruptedDataset(Dataset):
    """Corrupted view of a clean dataset: ``ds[i] -> (image (C, H, W) float, label int)``.

    Args:
        clean: a dataset with ``load_image(i) -> PIL`` (``jumbokit.data.ImageDataset``) and ``targets``,
            or any dataset yielding ``(PIL image | uint8 array | float tensor in [0, 1], label)``.
        corruption, severity: what to apply (``corruption=None`` gives the clean images).
        geometry: PIL -> PIL resize/crop applied before corrupting (None: as loaded).
        to_tensor: PIL -> normalised tensor (the source model's normalisation).
        seed: base seed; sample ``i`` always gets the same corruption noise.
        cache: keep corrupted uint8 images in memory (several methods read the same set).
        passes: length of the set in passes over ``clean``; every pass draws fresh corruption noise, so a
            small clean set still gives a stream long enough for many adaptation steps.
    """

    def __init__(
        self,
        clean: Dataset,
        corruption: str | None,
        severity: int,
        to_tensor: Callable,
        geometry: Callable | None = None,
        seed: int = 0,
        small_images: str = "error",
        cache: bool = True,
        passes: int = 1,
    ) -> None:
        if corruption is not None:
            resolve_corruptions([corruption])
        if passes < 1:
            raise ValueError(f"passes must be >= 1, got {passes}")
        self.clean = clean
        self.corruption = corruption
        self.severity = _check_severity(severity)
        self.to_tensor = to_tensor
        self.geometry = geometry
        self.seed = seed
        self.small_images = small_images
        self._cache: dict[int, np.ndarray] | None = {} if cache else None
        targets = getattr(clean, "targets", None)
        targets = list(targets) if targets is not None else [int(clean[i][1]) for i in range(len(clean))]
        self.num_clean = len(targets)
        self.passes = int(passes)
        self.targets = targets * self.passes
        self.classes = list(getattr(clean, "classes", []))

    def __len__(self) -> int:
        return len(self.targets)

    def _clean_image(self, i: int) -> Image.Image:
        i %= self.num_clean
        image = self.clean.load_image(i) if hasattr(self.clean, "load_image") else self.clean[i][0]
        if not isinstance(image, Image.Image):
            image = Image.fromarray(_to_uint8(image))
        return self.geometry(image) if self.geometry is not None else image

    def corrupted_array(self, i: int) -> np.ndarray:
        """The corrupted uint8 image (H, W[, 3]) of sample ``i``."""
        if self._cache is not None and i in self._cache:
            return self._cache[i]
        image = self._clean_image(i)
        if self.corruption is None:
            array = _to_uint8(image)
        else:
            array = corrupt_image(image, self.corruption, self.severity,
                                  _sample_seed(self.seed, self.corruption, self.severity, i), self.small_images)
        if self._cache is not None:
            self._cache[i] = array
        return array

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.to_tensor(Image.fromarray(self.corrupted_array(i))), self.targets[i]

    def precompute(self, progress: bool = False, num_workers: int = 0) -> "CorruptedDataset":
        """Corrupt every sample now (fills the cache), in ``num_workers`` DataLoader workers when > 0 (the
        same images: each sample's noise is seeded by its index); returns self."""
        from tqdm.auto import tqdm

        name = self.corruption or "clean"
        if num_workers > 0 and self._cache is not None:
            loader = DataLoader(_ArrayView(self), batch_size=None, num_workers=num_workers)
            for i, array in tqdm(loader, total=len(self), desc=f"{name}-{self.severity}", disable=not progress,
                                 leave=False):
                self._cache[int(i)] = np.asarray(array)
            return self
        for i in tqdm(range(len(self)), desc=f"{name}-{self.severity}", disable=not progress, leave=False):
            self.corrupted_array(i)
        return self


class _ArrayView(Dataset):
    """``(i, corrupted uint8 array)`` of a CorruptedDataset, for filling its cache from DataLoader workers."""

    def __init__(self, data: CorruptedDataset) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[int, np.ndarray]:
        return i, self.data.corrupted_array(i)


def write_imagenet_c(
    clean: Dataset,
    root: str | os.PathLike,
    corruptions: Sequence[str] = COMMON_CORRUPTIONS,
    severities: Sequence[int] = SEVERITIES,
    geometry: Callable | None = None,
    seed: int = 0,
    class_names: Sequence[str] | None = None,
    small_images: str = "error",
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """Write ``ROOT/<corruption>/<severity>/<class>/<index>.png`` for every corruption and severity.

    Each ``<corruption>/<severity>`` folder is written to a temporary folder and renamed into place, so
    an interrupted run leaves no half-written set; existing folders are kept unless ``overwrite``.
    Returns the root.
    """
    from tqdm.auto import tqdm

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    names = list(class_names) if class_names is not None else list(getattr(clean, "classes", []))
    corruptions = resolve_corruptions(list(corruptions))
    severities = [_check_severity(s) for s in severities]
    jobs = [(c, s) for c in corruptions for s in severities]
    bar = tqdm(jobs, desc="writing corruptions", disable=not progress)
    for corruption, severity in bar:
        final = root / corruption / str(severity)
        if final.exists() and not overwrite:
            continue
        bar.set_postfix_str(f"{corruption}-{severity}")
        data = CorruptedDataset(clean, corruption, severity, to_tensor=lambda x: x, geometry=geometry,
                                seed=seed, small_images=small_images, cache=False)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{severity}-", dir=final.parent))
        try:
            for i in range(len(data)):
                label = data.targets[i]
                folder = tmp / (class_folder(names[label]) if names else str(label))
                folder.mkdir(exist_ok=True)
                Image.fromarray(data.corrupted_array(i)).save(folder / f"{i:06d}.png")
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return root


def check_imagenet_c(
    root: str | os.PathLike,
    corruptions: Sequence[str] = COMMON_CORRUPTIONS,
    severities: Sequence[int] = (5,),
) -> None:
    """Raise ``FileNotFoundError`` naming every missing ``<corruption>/<severity>`` folder of the layout."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"ImageNet-C root {root} does not exist (expected ROOT/<corruption>/<severity>/<class>/)")
    missing, present = [], []
    for corruption in corruptions:
        if not (root / corruption).is_dir():
            missing.append(f"{corruption} (all severities)")
            continue
        absent = [str(s) for s in severities if not (root / corruption / str(s)).is_dir()]
        if absent:
            missing.append(f"{corruption} severity {','.join(absent)}")
        else:
            present.append(corruption)
    if missing:
        hint = (f"; pass --corruptions {','.join(present)} to use the ones present" if present else
                "; none of the requested corruptions has every requested severity there (see --corruptions, "
                "--severity)")
        raise FileNotFoundError(f"ImageNet-C root {root} is missing: {'; '.join(missing)}{hint}")


class ImageNetCFolder(ImageFolder):
    """torchvision ImageFolder whose class order is the clean dataset's, so labels line up.

    Class folders must be a subset of ``class_names`` (a corrupted set may lack some classes), named by
    ``class_folder`` (a "/" in a class name is "_" in its folder's).
    ``mode`` converts images to "L" or "RGB" before ``transform``.
    """

    def __init__(self, root: str | os.PathLike, class_names: Sequence[str], transform: Callable | None = None,
                 mode: str = "RGB") -> None:
        self._class_names = [str(c) for c in class_names]
        self._mode = mode
        super().__init__(str(root), transform=transform, allow_empty=True, loader=self._load)

    def _load(self, path: str) -> Image.Image:
        with open(path, "rb") as handle:
            return Image.open(handle).convert(self._mode)

    def find_classes(self, directory: str | os.PathLike) -> tuple[list[str], dict[str, int]]:
        folders = [class_folder(c) for c in self._class_names]
        present = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
        unknown = [c for c in present if c not in folders]
        if unknown:
            raise ValueError(
                f"{directory} has class folders the source model does not know: {unknown[:5]} "
                f"(expected names from the clean dataset's {len(self._class_names)} classes, "
                f"e.g. {folders[:3]})"
            )
        return list(self._class_names), {folder: i for i, folder in enumerate(folders)}


def load_imagenet_c(
    root: str | os.PathLike,
    class_names: Sequence[str],
    corruptions: Sequence[str] = COMMON_CORRUPTIONS,
    severities: Sequence[int] = (5,),
    img_size: int | None = None,
    mean: Sequence[float] = (0.5,),
    std: Sequence[float] = (0.5,),
    in_chans: int = 3,
) -> dict[tuple[str, int], ImageNetCFolder]:
    """Datasets ``{(corruption, severity): ImageNetCFolder}`` of an ImageNet-C style root.

    Images are converted to ``in_chans`` channels, centre-cropped to ``img_size`` when given (resized
    first if smaller) and normalised with the source model's ``mean``/``std``.
    """
    corruptions = resolve_corruptions(list(corruptions))
    severities = [_check_severity(s) for s in severities]
    check_imagenet_c(root, corruptions, severities)
    ops: list = []
    if img_size is not None:
        ops += [T.Resize(img_size, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(img_size)]
    transform = T.Compose([*ops, T.ToTensor(), T.Normalize(list(mean), list(std))])
    mode = "L" if in_chans == 1 else "RGB"
    sets = {}
    for corruption in corruptions:
        for severity in severities:
            folder = Path(root) / corruption / str(severity)
            data = ImageNetCFolder(folder, class_names, transform=transform, mode=mode)
            if len(data) == 0:
                raise FileNotFoundError(f"{folder} holds no images (expected <class>/<image> files)")
            sets[(corruption, severity)] = data
    return sets


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jumbokit.adaptation.corruptions``: write a corrupted copy of a dataset split to disk."""
    parser = argparse.ArgumentParser(
        prog="python -m jumbokit.adaptation.corruptions",
        description="Write corruptions of an image dataset split in the ImageNet-C folder layout "
                    "(ROOT/<corruption>/<severity>/<class>/<image>.png).",
    )
    parser.add_argument("--dataset", default="digits",
                        help="digits | fashion-mnist[:DIR] | folder:PATH | hf:NAME[:split] (default: %(default)s)")
    parser.add_argument("--split", default="test", help="split to corrupt (default: %(default)s)")
    parser.add_argument("--out", required=True, help="root folder to write")
    parser.add_argument("--img-size", type=int, default=None, help="evaluation image size (default: the dataset's)")
    parser.add_argument("--in-chans", type=int, default=None, help="1 or 3 channels (default: the dataset's)")
    parser.add_argument("--corruptions", default="common",
                        help="common | extra | all | comma-separated names (default: %(default)s)")
    parser.add_argument("--severity", default="1,2,3,4,5",
                        help="severity 1-5, or a comma list (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the subset and the noise (default: %(default)s)")
    parser.add_argument("--max-eval-samples", type=int, default=None,
                        help="seeded subset of the split (default: all of it)")
    parser.add_argument("--upsample-small", action="store_true",
                        help="upsample images below 32 px for corrupting, else they are an error (default: off)")
    parser.add_argument("--overwrite", action="store_true", help="rewrite existing corruption/severity folders (default: off)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars (default: off)")
    parser.add_argument("--debug", action="store_true", help="print the full traceback of errors (default: off)")
    args = parser.parse_args(argv)
    try:
        from jumbokit.data import build_dataset
        from jumbokit.logs import configure_logging

        configure_logging()

        severities = parse_severities(args.severity)
        corruptions = resolve_corruptions(args.corruptions)
        clean = build_dataset(args.dataset, args.split, task="eval", img_size=args.img_size, in_chans=args.in_chans,
                              max_samples=args.max_eval_samples, seed=args.seed, progress=not args.no_progress)
        geometry, _ = clean_image_transforms(clean.img_size, clean.mean, clean.std, clean.crop_pct, clean.interpolation)
        root = write_imagenet_c(
            clean, args.out, corruptions, severities, geometry=geometry,
            seed=args.seed, class_names=clean.classes,
            small_images="upsample" if args.upsample_small else "error", overwrite=args.overwrite,
            progress=not args.no_progress,
        )
    except (ValueError, FileNotFoundError, OSError) as err:
        if args.debug:
            import traceback

            traceback.print_exc()
        print(f"error: {err}", file=sys.stderr)
        return 2
    n = len(corruptions) * len(severities)
    print(f"wrote {n} corruption/severity folders of {len(clean)} images each under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
