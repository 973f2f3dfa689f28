"""Search spaces of multi-stage ViT-Res encoders (the ViT-ResNAS paper, Table 5): genes, sampling, validation, FLOPs.

An architecture is a plain JSON-able dict::

    {"global_tokens": "cls",                 # a gene of a global-token kind, from the space's options:
                                             # "cls" | "reg<R>" | "jumbo<J>" | "none" (the core's kinds)
     "dims": [176, 352, 704],               # token width of each stage
     "heads": [[3, 0, 4, ...], ...],        # per block position; 0 = this (skippable) block is removed
     "mlp_hidden": [[704, 0, 576, ...], ...]}

Every choice list is ordered from the largest value down; the width warm-up opens the choices from the
front (the largest sub-network first), as the paper's reference code does.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from ..encoders.global_kinds import default_global_tokens, global_token_kinds

__all__ = ["ARCH_KEYS", "SearchSpace", "search_space", "SPACES", "token_gene_config", "default_gene", "arch_key"]

ARCH_KEYS = ("global_tokens", "dims", "heads", "mlp_hidden")  # the genes of an architecture dict


def token_gene_config(gene: str) -> dict[str, Any]:
    """Encoder options of a global-token gene, as the registered kinds read genes (``GlobalTokenKind.parse_gene``):
    the core's "cls", "none", "reg<R>" (CLS + R registers), "jumbo<J>"."""
    kinds = global_token_kinds()
    for name, kind in kinds.items():
        options = kind.parse_gene(gene) if isinstance(gene, str) else None
        if options is not None:
            return {"global_tokens": name, **options}
    forms = [kind.gene_help for kind in kinds.values() if kind.gene_help]
    raise ValueError(f"unknown global-token gene {gene!r}; expected {', '.join(forms[:-1])} or {forms[-1]} "
                     "(counts >= 1)")


def default_gene() -> str:
    """The gene of the default global-token kind (a space's genes when it names none)."""
    return default_global_tokens()


def arch_key(arch: dict[str, Any]) -> str:
    """A canonical string of an architecture (for duplicate checks and caches)."""
    import json

    return json.dumps({k: arch[k] for k in ARCH_KEYS}, sort_keys=True)


@dataclass
class SearchSpace:
    """Per-stage candidate widths, per-block candidate heads / FFN sizes, skippable blocks, global tokens.

    grid: side of the first stage's patch grid (16 in the paper: 224 px with a stride-14 stem); the patch
    size for an image is ``img_size // grid``. skip_prob: probability that a skippable block is removed once
    the warm-up has opened every choice (the paper: 1/4 for Tiny, 1/2 for Small / Medium).
    """

    name: str
    dims: list[list[int]]
    head_dims: list[int]
    heads: list[list[int]]
    mlp_hidden: list[list[int]]
    skippable: list[list[bool]]
    global_tokens: list[str] = field(default_factory=lambda: [default_gene()])
    skip_prob: float = 0.25
    grid: int = 16
    stem: str = "conv"
    stem_chans: int = 24
    img_size: int = 224
    jumbo_mlp_ratio: float = 4.0

    def __post_init__(self) -> None:
        stages = len(self.dims)
        for key in ("head_dims", "heads", "mlp_hidden", "skippable"):
            if len(getattr(self, key)) != stages:
                raise ValueError(f"search space {self.name!r}: {key} needs one entry per stage ({stages})")
        for key in ("dims", "heads", "mlp_hidden"):
            for choices in getattr(self, key):
                if list(choices) != sorted(choices, reverse=True) or not choices:
                    raise ValueError(f"search space {self.name!r}: {key} choices must be non-empty and descending, "
                                     f"got {choices}")
        for s in range(1, stages):
            if min(self.dims[s]) < max(self.dims[s - 1]):
                raise ValueError(f"search space {self.name!r}: stage {s} widths {self.dims[s]} must all be >= stage "
                                 f"{s - 1} widths {self.dims[s - 1]} (residual spatial reduction cannot narrow)")
        for gene in self.global_tokens:
            token_gene_config(gene)
        if not 0.0 <= self.skip_prob < 1.0:
            raise ValueError(f"skip_prob must be in [0, 1), got {self.skip_prob}")

    # ----------------------------------------------------------------- shape
    @property
    def num_stages(self) -> int:
        return len(self.dims)

    @property
    def depths(self) -> list[int]:
        """Block positions per stage (the largest depth)."""
        return [len(s) for s in self.skippable]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SearchSpace":
        return cls(**data)

    def patch_size(self, img_size: int | None = None) -> int:
        img_size = img_size or self.img_size
        if img_size % self.grid:
            raise ValueError(f"space {self.name!r} starts from a {self.grid}x{self.grid} grid; img_size must be a "
                             f"multiple of {self.grid}, got {img_size}")
        return img_size // self.grid

    # -------------------------------------------------------------- archs
    def largest(self, global_tokens: str | None = None) -> dict[str, Any]:
        """The largest architecture (every block kept, every width at its maximum)."""
        return {"global_tokens": global_tokens or self.global_tokens[0],
                "dims": [c[0] for c in self.dims],
                "heads": [[self.heads[s][0]] * d for s, d in enumerate(self.depths)],
                "mlp_hidden": [[self.mlp_hidden[s][0]] * d for s, d in enumerate(self.depths)]}

    def smallest(self, global_tokens: str | None = None) -> dict[str, Any]:
        """The smallest architecture (skippable blocks removed, every width at its minimum)."""
        arch = {"global_tokens": global_tokens or self.global_tokens[0], "dims": [c[-1] for c in self.dims],
                "heads": [], "mlp_hidden": []}
        for s, flags in enumerate(self.skippable):
            arch["heads"].append([0 if skip else self.heads[s][-1] for skip in flags])
            arch["mlp_hidden"].append([0 if skip else self.mlp_hidden[s][-1] for skip in flags])
        return arch

    def sample(self, rng: random.Random, progress: float = 1.0) -> dict[str, Any]:
        """A random architecture. ``progress`` in [0, 1] is the width warm-up: 0 = only the largest choices,
        1 = every choice (the k-th choice of a list of n opens at progress (k - 1) / (n - 1)); skippable
        blocks can be removed once the warm-up is complete, each with probability ``skip_prob``."""
        progress = min(max(progress, 0.0), 1.0)

        def pick(choices: list) -> Any:
            open_count = min(len(choices), 1 + math.floor(progress * (len(choices) - 1) + 1e-9))
            return choices[rng.randrange(open_count)]

        arch: dict[str, Any] = {"global_tokens": rng.choice(self.global_tokens),
                                "dims": [pick(c) for c in self.dims], "heads": [], "mlp_hidden": []}
        for s, flags in enumerate(self.skippable):
            heads, hidden = [], []
            for skip in flags:
                if skip and progress >= 1.0 and rng.random() < self.skip_prob:
                    heads.append(0)
                    hidden.append(0)
                else:
                    heads.append(pick(self.heads[s]))
                    hidden.append(pick(self.mlp_hidden[s]))
            arch["heads"].append(heads)
            arch["mlp_hidden"].append(hidden)
        return arch

    def validate(self, arch: Any) -> dict[str, Any]:
        """Raise ValueError naming the first bad gene; return ``arch`` when it belongs to this space."""
        if not isinstance(arch, dict):
            raise ValueError(f"an architecture is a dict, got {type(arch).__name__}")
        unknown = [key for key in arch if key not in ARCH_KEYS]
        if unknown:
            raise ValueError(f"unknown architecture key {', '.join(map(repr, unknown))}; allowed keys are "
                             f"{', '.join(ARCH_KEYS)}")
        missing = [key for key in ARCH_KEYS if key not in arch]
        if missing:
            raise ValueError(f"architecture misses {missing}")
        if arch["global_tokens"] not in self.global_tokens:
            raise ValueError(f"global_tokens {arch['global_tokens']!r} is not in this space's {self.global_tokens}")
        if len(arch["dims"]) != self.num_stages:
            raise ValueError(f"dims needs {self.num_stages} stages, got {arch['dims']}")
        for s in range(self.num_stages):
            if arch["dims"][s] not in self.dims[s]:
                raise ValueError(f"dims[{s}]={arch['dims'][s]} is not one of {self.dims[s]}")
            for key, choices in (("heads", self.heads[s]), ("mlp_hidden", self.mlp_hidden[s])):
                values = arch[key][s] if s < len(arch[key]) else None
                if not isinstance(values, list) or len(values) != self.depths[s]:
                    raise ValueError(f"{key}[{s}] needs {self.depths[s]} block entries, got {values}")
                for i, value in enumerate(values):
                    if value == 0 and self.skippable[s][i]:
                        continue
                    if value not in choices:
                        hint = " (block not skippable)" if value == 0 else ""
                        raise ValueError(f"{key}[{s}][{i}]={value} is not one of {choices}{hint}")
            if [h == 0 for h in arch["heads"][s]] != [f == 0 for f in arch["mlp_hidden"][s]]:
                raise ValueError(f"stage {s}: a removed block needs heads 0 and mlp_hidden 0 together, got "
                                 f"{arch['heads'][s]} / {arch['mlp_hidden'][s]}")
        return arch

    def config(self, arch: dict[str, Any], img_size: int | None = None, in_chans: int = 3,
               num_classes: int = 0) -> dict[str, Any]:
        """The MultiStageEncoder config of ``arch`` (removed blocks dropped)."""
        self.validate(arch)
        img_size = img_size or self.img_size
        return {
            "encoder": "multistage", "img_size": img_size, "patch_size": self.patch_size(img_size),
            "in_chans": in_chans, "num_classes": num_classes, "stem": self.stem, "stem_chans": self.stem_chans,
            "dims": list(arch["dims"]), "head_dims": list(self.head_dims),
            "heads": [[h for h in hs if h] for hs in arch["heads"]],
            "mlp_hidden": [[f for f in fs if f] for fs in arch["mlp_hidden"]],
            "jumbo_mlp_ratio": self.jumbo_mlp_ratio, **token_gene_config(arch["global_tokens"]),
        }

    def flops(self, arch: dict[str, Any], img_size: int | None = None, in_chans: int = 3,
              num_classes: int = 0) -> int:
        """Analytic forward FLOPs of ``arch`` per image (== FlopCounterMode on the extracted model)."""
        from ..encoders.flops import multistage_flops

        return multistage_flops(self.config(arch, img_size, in_chans, num_classes))


def _pairs(depth: int) -> list[bool]:
    """Block pairs (kept, skippable) as in the paper: [False, True, False, True, ...]."""
    return [i % 2 == 1 for i in range(depth)]


def _steps(high: int, low: int, step: int) -> list[int]:
    return list(range(high, low - 1, -step))


SPACES: dict[str, SearchSpace] = {
    # the paper's Table 5, left: 3 stages of 3 (kept, skippable) block pairs; head widths 32 / 48 / 64
    "vit_resnas_tiny": SearchSpace(
        "vit_resnas_tiny",
        dims=[[256, 224, 192, 176, 160], [512, 448, 384, 352, 320], [1024, 896, 768, 704, 640]],
        head_dims=[32, 48, 64], heads=[[6, 5, 4, 3], [12, 10, 8, 6], [12, 10, 8, 6]],
        mlp_hidden=[_steps(768, 384, 64), _steps(1536, 768, 128), _steps(3072, 1536, 256)],
        skippable=[_pairs(6)] * 3, global_tokens=["cls"], skip_prob=0.25),
    # the paper's Table 5, right: one more (kept) block per stage, wider choices; shared by Small and Medium
    "vit_resnas_small": SearchSpace(
        "vit_resnas_small",
        dims=[[320, 280, 240, 220, 200], [640, 560, 480, 440, 400], [1280, 1120, 960, 880, 800]],
        head_dims=[32, 48, 64], heads=[[8, 7, 6, 5], [16, 14, 12, 10], [16, 14, 12, 10]],
        mlp_hidden=[_steps(960, 480, 80), _steps(1920, 960, 160), _steps(3840, 1920, 320)],
        skippable=[_pairs(7)] * 3, global_tokens=["cls"], skip_prob=0.5),
    # small enough for a 2-core CPU: 32 px digits, an 8x8 -> 4x4 -> 2x2 grid, 2-4 blocks per stage, and the
    # global-token plug-in as a gene (CLS, CLS + 4 registers, Jumbo J=2)
    "digits": SearchSpace(
        "digits",
        dims=[[64, 56, 48, 40, 32], [128, 112, 96, 80, 64], [256, 224, 192, 160, 128]],
        head_dims=[16, 32, 64], heads=[[4, 3, 2], [4, 3, 2], [4, 3, 2]],
        mlp_hidden=[[256, 192, 128, 96], [512, 384, 256, 192], [1024, 768, 512, 384]],
        skippable=[_pairs(4)] * 3, global_tokens=["cls", "reg4", "jumbo2"], skip_prob=0.5,
        grid=8, stem_chans=12, img_size=32),
}
SPACES["vit_resnas_medium"] = SPACES["vit_resnas_small"]


def search_space(name: str, **changes: Any) -> SearchSpace:
    """A named search space ("vit_resnas_tiny", "vit_resnas_small", "digits"), optionally with fields changed
    (e.g. ``global_tokens=["cls", "jumbo2"]``)."""
    if name not in SPACES:
        raise ValueError(f"unknown search space {name!r}; expected one of {sorted(SPACES)}")
    data = SPACES[name].to_dict()
    unknown = set(changes) - set(data)
    if unknown:
        raise ValueError(f"unknown search-space field(s) {sorted(unknown)}; fields are {sorted(data)}")
    return SearchSpace(**{**data, **changes})
