"""The PatchTST family on the shared encoder, registered in the zoo: ``patchtst``, ``patchtst_registers``,
``patchtst_jumbo``.

All three are channel-independent PatchTST classifiers (D=128, 3 layers, 16 heads, FFN hidden 256,
GELU): every channel is patched and encoded separately by the same transformer, its pooled feature
(width D) is taken, and the C features are concatenated before one linear head.

- ``patchtst``: a CLS token per channel.
- ``patchtst_registers``: CLS + R registers, R from the Jumbo paper's Proposition 1 so that a layer
  costs what a Jumbo (J=4) layer costs for the same number of patches (``jumbo_multiplier=J`` matches
  another J).
- ``patchtst_jumbo``: a Jumbo token (J=4, its own FFN of hidden 2*J*D shared by all layers) instead
  of CLS; the J segments are averaged to width D per channel, so the head is as small as PatchTST's.

``series_cnn`` is the transformer-off reference: the same tokens from a convolutional trunk (``trunk=``
"resnet" by default, or "inception") and no transformer layer; each channel's mean token (LayerNorm) goes to
the head, as a ResNet/InceptionTime classifier's global average pooling does. Beside a transformer run on the
same trunk it says what the transformer adds.

Patching (seed, App. A.3.2): N equally sized patches (8 or 42) of the largest possible length, stride
half the patch length, end padding. ``create_model("patchtst_jumbo", num_classes=5, in_chans=3,
seq_len=140, patches=8)`` derives ``patch_len``/``stride`` (and R) from ``seq_len`` and ``patches``.
``seq_len`` is required: it sets the patching and the position table (pass the dataset's longest series
length; inputs of other lengths still run, with resampled position embeddings).

This module only imports the encoder core (no aeon), so importing ``jumbokit`` stays cheap.
The hybrid ``patchtst_jumbo_rocket`` is registered by :mod:`jumbokit.timeseries.models.rocket`.
"""

from __future__ import annotations

import warnings
from typing import Any

from ...encoders import flops, model_config, register_model
from ...encoders.checks import whole_number
from ...encoders.global_kinds import kind_of
from ...encoders.encoder import encoder_options, unknown_options
from .tokenizer import series_patch_count

__all__ = ["PATCHTST_MODELS", "REFERENCE_MODELS", "HYBRID_MODELS", "SERIES_MODELS", "JUMBO_MODELS",
           "JUMBO_MULTIPLIER_MODELS", "PATCHTST_BASE", "JUMBO_MULTIPLIER", "HEAD_FEATURES", "check_reference_model",
           "width_options", "patch_geometry", "capped_patch_geometry", "max_patches"]

JUMBO_MULTIPLIER = 4
PATCHTST_BASE: dict[str, Any] = dict(
    tokenizer="series", seq_len=None, pad_end=True, in_chans=1, dim=128, depth=3, num_heads=16,
    mlp_hidden=256, pos_embed="learn",
)
HEAD_FEATURES = PATCHTST_BASE["dim"] // PATCHTST_BASE["num_heads"]  # 8: what a narrower or wider model keeps
PATCHTST_MODELS = ("patchtst", "patchtst_registers", "patchtst_jumbo")
REFERENCE_MODELS = ("series_cnn",)  # the trunk alone, no transformer layer
# hybrids (``jumbokit.timeseries.models.rocket``): name -> the transformer they extend
HYBRID_MODELS = {"patchtst_jumbo_rocket": "patchtst_jumbo"}
SERIES_MODELS = PATCHTST_MODELS + REFERENCE_MODELS + tuple(HYBRID_MODELS)  # what tstrain and the sweep accept


def max_patches(seq_len: int) -> int:
    """The most patches a series of ``seq_len`` steps can give (patch length 1, stride 1, end padding)."""
    return series_patch_count(seq_len, 1, 1, True)


def patch_geometry(seq_len: int, patches: int, strict: bool = False) -> tuple[int, int]:
    """(patch_len, stride) giving exactly ``patches`` equal patches of ``seq_len`` steps with end padding.

    End padding is PatchTST's (the tokenizer appends ``stride`` steps), so the count is
    ``(seq_len + stride - patch_len) // stride + 1``. Preferred: the longest patch whose stride is half
    its length (rounded down or up). When no half stride gives the count exactly, the stride closest to
    half the patch length (relatively) is used, longest patch first; this is always possible for
    ``patches <= seq_len + 1``. Longer asks: ``strict`` raises ValueError, otherwise the finest patching
    (patch 1, stride 1: ``seq_len + 1`` patches) is returned with a warning.
    """
    if not whole_number(seq_len, 1):
        raise ValueError(f"expected seq_len to be a positive integer, got {seq_len!r}")
    if not whole_number(patches, 1):
        raise ValueError(f"expected patches to be a positive integer, got {patches!r}")
    seq_len, patches = int(seq_len), int(patches)
    most = max_patches(seq_len)
    if patches > most:
        msg = (f"{patches} patches need series of at least {patches - 1} steps, got {seq_len} "
               f"(at most {most} patches fit)")
        if strict:
            raise ValueError(msg + f"; pass patches <= {most}")
        warnings.warn(msg + f"; using patch length 1, stride 1 ({most} patches)", stacklevel=2)
        return 1, 1
    # For stride s the count equals `patches` exactly for patch lengths in [lo(s), hi(s)].
    candidates: list[tuple[int, int]] = []
    for longest in (seq_len, None):  # patches no longer than the series first; longer only if needed
        for stride in range(1, seq_len + 1):
            lo = max(1, seq_len - (patches - 1) * stride + 1, stride)
            hi = seq_len - (patches - 2) * stride
            if longest is not None:
                hi = min(hi, longest)
            if lo <= hi:
                candidates.append((stride, lo, hi))
        if candidates:
            break
    half = [(p, s) for s, lo, hi in candidates for p in (2 * s + 1, 2 * s, 2 * s - 1) if lo <= p <= hi]
    if half:
        return max(half)[0], max(half)[1]

    def nearest(stride: int, lo: int, hi: int) -> int:
        return min(max(2 * stride, lo), hi)

    best = min(((abs(s / nearest(s, lo, hi) - 0.5), -nearest(s, lo, hi), s) for s, lo, hi in candidates))
    return -best[1], best[2]


def capped_patch_geometry(seq_len: int, patches: int, max_patch_len: int | None = None,
                          strict: bool = False) -> tuple[int, int]:
    """:func:`patch_geometry`, except that patches never exceed ``max_patch_len`` steps: a longer series then
    gets patches of ``max_patch_len`` steps every ``max_patch_len // 2`` (PatchTST's own patching), so more
    than ``patches`` of them. ``None`` = no cap."""
    if max_patch_len is not None and not whole_number(max_patch_len, 2):
        raise ValueError(f"expected max_patch_len to be an integer >= 2 (or None), got {max_patch_len!r}")
    patch_len, stride = patch_geometry(seq_len, patches, strict=strict)
    if max_patch_len is None or patch_len <= max_patch_len:
        return patch_len, stride
    return int(max_patch_len), int(max_patch_len) // 2


def width_options(dim: int) -> dict[str, int]:
    """Encoder options of token width ``dim`` (a multiple of :data:`HEAD_FEATURES`) at PatchTST's proportions:
    heads of ``HEAD_FEATURES`` features and an FFN hidden of ``mlp_hidden / dim`` times the width (2D)."""
    ratio = PATCHTST_BASE["mlp_hidden"] // PATCHTST_BASE["dim"]
    return {"dim": int(dim), "num_heads": int(dim) // HEAD_FEATURES, "mlp_hidden": ratio * int(dim)}


def check_reference_model(name: str, trunk: str | None = "resnet", layers: int | None = None,
                          branches: int = 1) -> None:
    """ValueError for a transformer-off reference (``REFERENCE_MODELS``) without a trunk, or asked for transformer
    layers or progressive-join branches, which it does not have."""
    if trunk is None:
        raise ValueError(f"{name} is a convolutional trunk without transformer layers, so it needs a trunk: "
                         "trunk='resnet' or 'inception' (tstrain: --recipe small-data-trunk or --trunk resnet), "
                         "got trunk=None")
    if layers is not None or branches > 1:
        raise ValueError(f"{name} has no transformer layers to set or train as branches (asked: layers={layers}, "
                         f"branches={branches}); run it without --layers and --branches")


def _builder(kind: str):
    def build(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
        overrides = dict(overrides)
        patches = overrides.pop("patches", 8)
        max_patch_len = overrides.pop("max_patch_len", None)
        strict = bool(overrides.pop("strict_patches", False))
        options = encoder_options("series")
        unknown = set(overrides) - set(options)
        if unknown:
            known = [*options, "patches", "max_patch_len"]
            raise ValueError(f"unknown option(s) {unknown_options(unknown, known)} for model {kind!r} "
                             "(encoder options, patches=N or max_patch_len=P)")
        cfg = {**config, **overrides}
        if cfg.get("seq_len") is None:
            raise ValueError(f"{kind} needs seq_len, the longest series length (it sets the patching and the "
                             f"position table): create_model({kind!r}, num_classes=..., in_chans=..., seq_len=...)")
        explicit = [k for k in ("patch_len", "stride") if overrides.get(k) is not None]
        if len(explicit) == 1:
            raise ValueError(f"pass both patch_len and stride, or neither (and patches=N), got only {explicit[0]}")
        if not explicit:
            cfg["patch_len"], cfg["stride"] = capped_patch_geometry(cfg["seq_len"], patches, max_patch_len, strict)
        if kind in REFERENCE_MODELS:
            check_reference_model(kind, trunk=cfg.get("trunk"))
        num_patches = series_patch_count(cfg["seq_len"], cfg["patch_len"], cfg["stride"], cfg.get("pad_end", True))
        if kind == "patchtst_registers":
            _match_registers(cfg, overrides, num_patches)
        cfg.pop("_match_jumbo_multiplier", None)
        return cfg

    return build


def _match_registers(cfg: dict[str, Any], overrides: dict[str, Any], num_patches: int) -> None:
    """Set ``cfg["num_registers"]`` (unless given) to the R whose layer costs what a Jumbo layer of multiplier J
    costs (Proposition 1): J is ``jumbo_multiplier`` when given (the registers model has no Jumbo token of its own,
    so the option names the Jumbo model it is matched to), else :data:`JUMBO_MULTIPLIER`."""
    mult = cfg.pop("_match_jumbo_multiplier", JUMBO_MULTIPLIER)
    if overrides.get("jumbo_multiplier") is not None:
        mult = overrides["jumbo_multiplier"]
        if not whole_number(mult, 1):
            raise ValueError(f"jumbo_multiplier (the J the registers are matched to) must be an integer >= 1, "
                             f"got {mult!r}")
    cfg["jumbo_multiplier"] = 0
    if overrides.get("num_registers") is None:
        cfg["num_registers"] = max(1, round(flops.matching_registers(cfg["dim"], num_patches, int(mult))))


register_model(
    "patchtst", builder=_builder("patchtst"),
    description="PatchTST classifier (D=128, 3 layers, 16 heads, FFN 256), a CLS token per channel",
    global_tokens="cls", **PATCHTST_BASE,
)
register_model(
    "patchtst_registers", builder=_builder("patchtst_registers"),
    description="PatchTST + CLS + R registers, R matching PatchTST+Jumbo's per-layer FLOPs (Prop. 1)",
    global_tokens="registers", class_token=True, _match_jumbo_multiplier=JUMBO_MULTIPLIER, **PATCHTST_BASE,
)
register_model(
    "patchtst_jumbo", builder=_builder("patchtst_jumbo"),
    description="PatchTST + Jumbo (J=4, shared Jumbo FFN of hidden 2*J*D), segments averaged per channel",
    global_tokens="jumbo", jumbo_multiplier=JUMBO_MULTIPLIER, jumbo_mlp_ratio=2.0, jumbo_pool="segments",
    **PATCHTST_BASE,
)
register_model(
    "series_cnn", builder=_builder("series_cnn"),
    description="The convolutional trunk alone (ResNet blocks by default): no transformer layer, the mean token "
                "per channel into the head (the transformer-off reference)",
    global_tokens="none", depth=0, global_pool="avg", trunk="resnet", conv_stem=0,
    **{k: v for k, v in PATCHTST_BASE.items() if k != "depth"},
)

# the models whose feature ``jumbo_pool`` sets (a Jumbo token, or a hybrid of a Jumbo transformer): those whose
# global-token kind owns that option
JUMBO_MODELS = tuple(m for m in SERIES_MODELS
                     if "jumbo_pool" in kind_of(model_config(HYBRID_MODELS.get(m, m), seq_len=8)).options)
# the models ``jumbo_multiplier`` sets: the Jumbo token's J, and the J the registers model is FLOP-matched to
JUMBO_MULTIPLIER_MODELS = (*JUMBO_MODELS, "patchtst_registers")
