"""ImageFolder trees as a source (torchvision's ``ImageFolder``): apart from :mod:`jumbokit.data.sources` so that
only a process that reads an image folder imports torchvision."""
from __future__ import annotations

import os
import warnings
from pathlib import Path

from PIL import Image
from torchvision.datasets import ImageFolder

from .errors import DataError
from .sources import IMG_EXTENSIONS, _class_dirs, _is_image_path, check_split, resolve_split_dir

__all__ = ["FolderSource"]


class FolderSource(ImageFolder):
    """torchvision's ``ImageFolder`` over ``root[/split]/<class>/<image>``, images read as stored (no conversion).

    Classes are the sorted class folders that hold an image (hidden files and folders left out; empty class
    folders are skipped with a warning); within a class, files are sorted by path.
    """

    in_memory = False
    native_chans = 3

    def __init__(self, root: str | os.PathLike, split: str):
        check_split(split)
        root = Path(root).expanduser()
        if not root.exists():
            raise DataError(f"dataset folder {root} does not exist")
        if not root.is_dir():
            raise DataError(f"dataset path {root} is not a folder (expected an ImageFolder tree <class>/<image>)")
        super().__init__(resolve_split_dir(root, split), loader=_open_image, is_valid_file=_is_image_path,
                         allow_empty=True)
        found = sorted({target for _, target in self.samples})
        if not found:
            raise DataError(
                f"no image files ({', '.join(IMG_EXTENSIONS)}) found under {self.root} "
                f"(class folders: {', '.join(self.classes[:5])}{'...' if len(self.classes) > 5 else ''})"
            )
        if len(found) < len(self.classes):
            empty = sorted(set(self.classes) - {self.classes[t] for t in found})
            warnings.warn(f"ignoring {len(empty)} class folder(s) without images under {self.root}: {empty[:5]}")
        renumber = {old: new for new, old in enumerate(found)}
        self.classes = [self.classes[t] for t in found]
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self.samples = sorted(((path, renumber[t]) for path, t in self.samples), key=lambda s: (s[1], s[0]))
        self.imgs = self.samples
        self.targets = [t for _, t in self.samples]

    def find_classes(self, directory: str | os.PathLike) -> tuple[list[str], dict[str, int]]:
        classes = _class_dirs(Path(directory))
        if not classes:
            raise DataError(f"folder {directory} has no class subfolders (expected <class>/<image> files, "
                            f"e.g. {directory}/cat/001.jpg)")
        return classes, {name: i for i, name in enumerate(classes)}

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.samples]

    def load(self, i: int) -> Image.Image:
        return self.loader(self.samples[i][0])

    def describe(self, i: int) -> str:
        return self.samples[i][0]


def _open_image(path: str) -> Image.Image:
    with open(path, "rb") as fh:
        img = Image.open(fh)
        img.load()
    return img
