"""``SeriesModelConfig``: the options of a series model, the one place they are defined.

The fields are what the series tokenizer and its plug-ins read (patching, the convolutional front ends, the
per-channel features, the extras around attention and the heads), plus the patch count that
``create_model`` turns into ``patch_len``/``stride``. Each field carries its help text in
``field.metadata["help"]``, so command lines and documentation are generated from the fields.

    cfg = SeriesModelConfig(seq_len=150, trunk="resnet", trunk_head=True)
    model = jumbokit.create_model("patchtst_jumbo", num_classes=3, in_chans=1, **cfg.create_options())

A saved model's config holds :meth:`SeriesModelConfig.encoder_options` (patch length and stride resolved, the
patch count itself not kept), flat beside the encoder's shared options.

The rules between options are checked here, once: a trunk option needs a trunk (:func:`check_trunk_options`, which
``SeriesModelConfig`` applies to itself and ``tstrain`` to the flags it was given).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Iterable

__all__ = ["SeriesModelConfig", "ENCODER_KEYS", "GEOMETRY_KEYS", "TRUNK_OPTIONS", "check_trunk_options"]

# the options of the convolutional trunk, each with what it does to the trunk (the words of the error when it is set
# without one); the first three are switches, off without a trunk
TRUNK_OPTIONS: dict[str, str] = {
    "trunk_diff": "feeds the first difference to",
    "trunk_mix": "sets how the channels are read by",
    "trunk_head": "adds a second head on",
    "trunk_width": "sets the filters of",
    "trunk_depth": "sets the blocks of",
}
TRUNK_SWITCHES = ("trunk_diff", "trunk_mix", "trunk_head")


def check_trunk_options(trunk: str | None, chosen: Iterable[str], name: Callable[[str], str] = str,
                        fix: str = "pass trunk='inception' or 'resnet' with it") -> None:
    """A trunk option needs a trunk: raise ``ValueError`` for the first of :data:`TRUNK_OPTIONS` in ``chosen`` (the
    options the caller set) when ``trunk`` names none (None or "none"). ``name`` spells an option as the caller's
    user knows it (a field, a flag) and ``fix`` says how to add a trunk."""
    if trunk not in (None, "none"):
        return
    chosen = set(chosen)
    for option, what in TRUNK_OPTIONS.items():
        if option in chosen:
            raise ValueError(f"{name(option)} {what} a convolutional trunk; {fix}")


def _help(text: str, default: Any) -> Any:
    return field(default=default, metadata={"help": text})


@dataclass
class SeriesModelConfig:
    """The options of a series model (PatchTST family, the trunk-alone reference, the ROCKET hybrid)."""

    seq_len: int | None = _help(
        "the longest series length: it sets the patching and the position table (shorter and longer inputs still "
        "run, with resampled position embeddings)", None)
    patches: int = _help(
        "patches per series: equal patches of the largest length, stride half the patch (used when patch_len and "
        "stride are not given)", 8)
    max_patch_len: int | None = _help(
        "the longest patch: longer series get more patches of this length, stride half of it (None = exactly "
        "`patches`)", None)
    patch_len: int | None = _help("steps per patch (None = derived from seq_len and patches)", None)
    stride: int | None = _help("steps between patch starts (None = derived from seq_len and patches)", None)
    pad_end: bool = _help(
        "extend each series by one stride of its last observed value so the tail gets a patch (PatchTST)", True)
    conv_stem: int = _help(
        "width of convolutional patch features added to each token: the max and mean of two convolutions "
        "per patch window (0 = linear patches only)", 0)
    trunk: str | None = _help(
        "a full-resolution convolutional trunk whose per-window features join each token: 'inception' or "
        "'resnet' (None = none)", None)
    trunk_width: int = _help("the trunk's filters per branch (inception, 4 branches) or per layer (resnet)", 16)
    trunk_depth: int = _help("the trunk's inception modules or residual blocks", 3)
    trunk_diff: bool = _help("each channel's first difference as a second trunk input", False)
    trunk_mix: bool = _help("one trunk over all channels of a series, added to every channel's tokens", False)
    trunk_head: bool = _help(
        "a second head on the trunk's mean token, trained beside the main one; evaluation scores the two heads' "
        "mean probabilities", False)
    token_stats: bool = _help("each patch window's observed mean and std, projected and added to its token", False)
    level_scale: bool = _help(
        "normalise each channel inside the model; its mean and std, projected, join every token of the channel",
        False)
    rel_pos_bias: bool = _help("a learned per-head attention bias by patch offset in every layer (eRPE-like)", False)
    length_embed: bool = _help(
        "each series' length (relative to seq_len) added to the global tokens (NaN-padded unequal lengths)", False)

    def __post_init__(self) -> None:
        check_trunk_options(self.trunk, [name for name in TRUNK_SWITCHES if getattr(self, name)])

    def encoder_options(self) -> dict[str, Any]:
        """The options a series encoder's config stores (:data:`ENCODER_KEYS`)."""
        return {k: v for k, v in asdict(self).items() if k in ENCODER_KEYS}

    def create_options(self) -> dict[str, Any]:
        """Keyword arguments of ``jumbokit.create_model`` for a series model: every field except an unset
        ``patch_len``/``stride`` (then ``patches`` and ``max_patch_len`` set them)."""
        options = asdict(self)
        if self.patch_len is None and self.stride is None:
            del options["patch_len"], options["stride"]
        else:
            del options["patches"], options["max_patch_len"]
        return options

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "SeriesModelConfig":
        """The config of the series keys in ``options`` (other keys, e.g. encoder options, are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in options.items() if k in names})

    @staticmethod
    def help(name: str) -> str:
        """The help text of field ``name``."""
        for f in fields(SeriesModelConfig):
            if f.name == name:
                return f.metadata["help"]
        raise KeyError(f"SeriesModelConfig has no field {name!r}")


GEOMETRY_KEYS = ("patches", "max_patch_len")  # turned into patch_len and stride when the model is built
ENCODER_KEYS = tuple(f.name for f in fields(SeriesModelConfig) if f.name not in GEOMETRY_KEYS)
