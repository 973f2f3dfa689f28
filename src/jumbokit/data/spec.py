"""``--dataset`` strings: ``digits``, ``fashion-mnist[:DIR]``, ``folder:PATH``, ``hf:NAME[:split]``."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import DataError


@dataclass(frozen=True)
class DatasetSpec:
    """Parsed ``--dataset`` string: ``kind`` in {"digits", "fashion-mnist", "folder", "hf"}, ``path`` (folder dir
    / HF name / the folder of the Fashion-MNIST IDX files, None: searched), ``hf_split`` (pinned HF split or None)."""

    kind: str
    path: str | None = None
    hf_split: str | None = None

    def __str__(self) -> str:
        if self.kind == "digits":
            return "digits"
        if self.kind == "fashion-mnist":
            return "fashion-mnist" + (f":{self.path}" if self.path else "")
        if self.kind == "folder":
            return f"folder:{self.path}"
        return f"hf:{self.path}" + (f":{self.hf_split}" if self.hf_split else "")


_SPEC_HELP = "expected 'digits', 'folder:PATH', 'hf:NAME[:split]' or 'fashion-mnist[:DIR]'"


def parse_dataset_spec(spec: str | DatasetSpec) -> DatasetSpec:
    """Parse a ``--dataset`` string; raises ``DataError`` for unknown kinds."""
    if isinstance(spec, DatasetSpec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise DataError(f"unknown dataset {spec!r}: {_SPEC_HELP}")
    spec = spec.strip()
    kind, _, rest = spec.partition(":")
    if kind == "digits" and not rest:
        return DatasetSpec("digits")
    if kind == "fashion-mnist":
        return DatasetSpec("fashion-mnist", rest or None)
    if kind == "folder":
        if not rest:
            raise DataError(f"dataset 'folder:' needs a path, e.g. folder:/data/imagenet ({_SPEC_HELP})")
        return DatasetSpec("folder", rest)
    if kind == "hf":
        if not rest:
            raise DataError(f"dataset 'hf:' needs a name or local folder, e.g. hf:./my_images ({_SPEC_HELP})")
        if Path(rest).expanduser().is_dir() or ":" not in rest:
            return DatasetSpec("hf", rest)
        name, _, split = rest.rpartition(":")
        return DatasetSpec("hf", name, split or None)
    raise DataError(f"unknown dataset {spec!r}: {_SPEC_HELP}")
