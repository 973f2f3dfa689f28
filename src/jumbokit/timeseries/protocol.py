"""What defines a sweep: :class:`SweepConfig`, the named recipes and their automatic rules.

The paper's protocol (recipe ``paper``): per dataset and model, lr {3e-3, 1e-3, 3e-4, 1e-4} x dropout
{0, 0.1, 0.2}; AdamW (weight decay 0.02), batch 256, cross-entropy, linear warm-up over the first 10% of
steps then cosine decay to 1e-8, 100 epochs (20 for the paper's largest sets). Recipe ``small-data`` trains
for a number of optimizer steps that suits the series length (``steps="auto"``, :func:`auto_steps`) at a
batch that suits the set (``batch_size="auto"``, :func:`auto_batch_size`), with convolutional patch features,
series augmentation, a smaller grid, several seeds and an ensemble of the best runs. Recipe
``small-data-trunk`` is small-data with the front end that measured best on the local UCR/UEA sets (3 seeds): the
ResNet trunk at full resolution with the first difference (``trunk_width="auto"``), a second head on the trunk's
mean token (``trunk_head``), and level and scale read by the model on sets whose series differ widely in amplitude
(``level_scale="auto"``, :meth:`SweepConfig.for_dataset`). Recipe ``fast`` is small-data at a fifth of its optimizer
steps (``step_scale=0.2``: 200, 600 for series longer than 400 steps) and one run per set (one seed, no ensemble):
chosen on the validation halves of six bundled sets outside the UCR archive benchmark (benchmarks/README.md).
Recipe ``fine-tune`` is the recipe for a start from a pretrained series encoder (``init``): fast with a budget of
``step_scale=1.5`` (1500 steps, 4500 for series longer than 400 steps) in three learning-rate cycles
(``lr_cycles=3``), each warmed up and decayed as a run of its length, the validation half scored at the end of each
cycle (``eval_every="cycle"``) and the run stopped at the first cycle that does not lower its validation loss
(``early_stop=1``), the best cycle's weights kept. Its first cycle is the earlier 500-step recipe's run, step for
step. The 500 fixed steps were chosen over fast, and over an encoder pretrained twice as long, on the validation
halves of six corpus sets outside the UCR archive benchmark; the cycles beat them on those sets' test halves (the
runs read the validation halves) and then over the archive (+1.59 points over 59 sets, one seed, at 2.4x the
steps: benchmarks/README.md).

A sweep's series-model options are one :class:`~jumbokit.timeseries.models.config.SeriesModelConfig`
(``SweepConfig.model``); ``sweep.json`` stores every setting with the record's schema (:data:`SWEEP_SCHEMA`), and
:meth:`SweepConfig.from_record` reads every schema written so far.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from jumbokit.encoders.checks import is_integer
from jumbokit.encoders.global_kinds import option_choices
from jumbokit.timeseries.models.trunk import TRUNKS
from jumbokit.training.optim import epochs_for_min_steps

from .data import UNEQUAL_LENGTHS
from .models import HEAD_FEATURES, JUMBO_MULTIPLIER
from .models.config import SeriesModelConfig
from .normalize import AUTO_SCALE_SPREAD, scale_spread

__all__ = [
    "SWEEP_LRS",
    "SWEEP_DROPOUTS",
    "LARGE_DATASETS",
    "RECIPES",
    "AMPLITUDE_AUGMENTATIONS",
    "LONG_SERIES",
    "SMALL_DATA_STEPS",
    "LONG_SERIES_STEPS",
    "NARROW_TRUNK",
    "JUMBO_POOLS",
    "WIDE_TRUNK",
    "auto_batch_size",
    "auto_trunk_width",
    "auto_steps",
    "steps_text",
    "SWEEP_SCHEMA",
    "SweepConfig",
    "SweepMismatchError",
]

SWEEP_LRS: tuple[float, ...] = (3e-3, 1e-3, 3e-4, 1e-4)
SWEEP_DROPOUTS: tuple[float, ...] = (0.0, 0.1, 0.2)
LARGE_DATASETS = frozenset({"Sleep", "Tiselac", "FaceDetection"})  # trained for 20 epochs in the paper

# sweep.json's layout: 1 (no "schema" key) = one flat record that left out every setting added with the recipes
# while at its default; 2 = every setting, the series model's nested under "model"
SWEEP_SCHEMA = 2
_MODEL_FIELDS = tuple(f.name for f in fields(SeriesModelConfig))
# set per dataset (the series length, and the patch geometry from `patches`), never by a sweep
_PER_DATASET = ("seq_len", "patch_len", "stride")


# the series front end of the paper and small-data recipes: patches only (no trunk, no level and scale)
_PATCHES_ONLY: dict[str, Any] = dict(trunk=None, trunk_width=16, trunk_depth=3, trunk_diff=False, trunk_head=False,
                                     level_scale=False)

# one learning-rate schedule over the run, no early stopping
_NO_STOPPING: dict[str, Any] = dict(lr_cycles=1, early_stop=0, eval_every=50, early_stop_from=0)

# Named recipes: the SweepConfig and series-model fields and the sweep grid they set (flags given explicitly win).
RECIPES: dict[str, dict[str, Any]] = {
    "paper": dict(patches=8, max_patch_len=None, conv_stem=0, normalize="train", batch_size=256, steps=None,
                  step_scale=1.0, augment="none", **_NO_STOPPING,
                  seeds=1, pretrain_epochs=0, lrs=SWEEP_LRS, dropouts=SWEEP_DROPOUTS, ensemble=1, **_PATCHES_ONLY),
    "small-data": dict(patches=16, max_patch_len=None, conv_stem=32, normalize="auto", batch_size="auto", steps="auto",
                       step_scale=1.0, **_NO_STOPPING,
                       augment="default", seeds=3, pretrain_epochs=0, lrs=(1e-3,), dropouts=(0.1,), ensemble=3,
                       **_PATCHES_ONLY),
}
RECIPES["fast"] = dict(RECIPES["small-data"], step_scale=0.2, seeds=1, ensemble=1)
RECIPES["fine-tune"] = dict(RECIPES["fast"], step_scale=1.5, lr_cycles=3, early_stop=1, eval_every="cycle",
                            early_stop_from=0)
RECIPES["small-data-trunk"] = dict(RECIPES["small-data"], conv_stem=0, trunk="resnet", trunk_width="auto",
                                   trunk_depth=3, trunk_diff=True, trunk_head=True, level_scale="auto")

# augmentations that move a series' level or scale, the very values level_scale reads: left out where
# level_scale="auto" turns it on
AMPLITUDE_AUGMENTATIONS = ("scaling", "magnitude_warp")

LONG_SERIES = 400  # steps: series longer than this get LONG_SERIES_STEPS optimizer steps under steps="auto"
SMALL_DATA_STEPS, LONG_SERIES_STEPS = 1000, 3000


LEVEL_SCALE_NORMALIZATIONS = ("train", "none")  # those that keep each series' level and scale for level_scale


def level_scale_fits(normalize: str) -> bool:
    """Whether ``level_scale`` (the model reads each series' level and scale) can go with ``normalize``: per-series
    normalisation ("instance", or "auto", which may pick it) would remove what it reads."""
    return normalize in LEVEL_SCALE_NORMALIZATIONS


def auto_batch_size(n_train: int, channels: int = 1) -> int:
    """The small-data batch: 32 series (at most the training set), fewer for many channels so that a step sees
    at most 128 channel-series (each channel is a sequence for the encoder: 21 series of 6 channels, 10 of 12),
    never fewer than 8."""
    return max(1, min(int(n_train), max(8, min(32, 128 // max(1, int(channels))))))


def auto_steps(seq_len: int, scale: float = 1.0) -> int:
    """The small-data training length: 1000 optimizer steps, 3000 for series longer than 400 steps, times ``scale``
    (rounded, at least 1)."""
    steps = LONG_SERIES_STEPS if int(seq_len) > LONG_SERIES else SMALL_DATA_STEPS
    return max(1, round(steps * float(scale)))


JUMBO_POOLS = option_choices("jumbo_pool")  # the Jumbo kind's features: J*D vector, + mean patch, mean segment
POS_EMBEDS = ("learn", "sincos", "none")  # the encoder's absolute position embeddings of the tokens
NARROW_TRUNK, WIDE_TRUNK = 32, 64  # trunk_width="auto": filters for series up to / longer than LONG_SERIES steps


def auto_trunk_width(seq_len: int) -> int:
    """The trunk width of ``trunk_width="auto"``: 64 filters for series longer than 400 steps, 32 for shorter
    (the wider trunk lifted the long sets and not the short ones; docs/results/timeseries.md)."""
    return WIDE_TRUNK if int(seq_len) > LONG_SERIES else NARROW_TRUNK


def trunk_width_text(width: int | str) -> str:
    """A trunk width (filters or "auto") in words."""
    if width == "auto":
        return f"width {WIDE_TRUNK} for series longer than {LONG_SERIES} steps, else {NARROW_TRUNK}"
    return f"width {width}"


def steps_text(steps: int | str, scale: float = 1.0) -> str:
    """A fixed training length (a step count or "auto", whose counts ``scale`` multiplies) in words."""
    if steps == "auto":
        return (f"{auto_steps(1, scale)} optimizer steps per run ({auto_steps(LONG_SERIES + 1, scale)} for series "
                f"longer than {LONG_SERIES} steps)")
    return f"{steps} optimizer steps per run"


class SweepMismatchError(ValueError):
    """The output directory holds results of a sweep defined differently."""


@dataclass
class SweepConfig:
    """What defines a sweep's runs (stored in ``sweep.json``; a resumed sweep must match it).

    ``model`` holds the series-model options; two of them may name a rule instead of a value, decided for each
    dataset: ``trunk_width="auto"`` (:func:`auto_trunk_width`) and ``level_scale="auto"`` (:meth:`for_dataset`).
    Its ``seq_len``, ``patch_len`` and ``stride`` stay None: they follow from each dataset and ``model.patches``.
    """

    model: SeriesModelConfig = field(default_factory=SeriesModelConfig)
    epochs: int | None = None  # None: 100, or 20 for LARGE_DATASETS
    batch_size: int | str = 256  # "auto": auto_batch_size(training series, channels)
    weight_decay: float = 0.02
    warmup_fraction: float = 0.1
    min_lr: float = 1e-8
    seed: int = 0
    protocol: str = "seed"  # "seed": the paper's validation/test split (load_dataset); "official"
    split_seed: int = 0
    mixed_precision: str = "no"
    normalize: str = "train"  # see jumbokit.timeseries.data.load_dataset
    branches: int = 1  # > 1: train progressive-join branches, collapse before scoring
    min_steps: int = 0  # raise the epochs of small sets so every run takes at least this many optimizer steps
    recipe: str = "paper"  # the named recipe the settings came from (RECIPES)
    steps: int | str | None = None  # optimizer steps per run (instead of epochs / min_steps); "auto": auto_steps
    step_scale: float = 1.0  # steps="auto": auto_steps' counts times this (the fast recipe's fifth)
    augment: str = "none"  # series augmentation: "none" or names of jumbokit.timeseries.augment.AUGMENTATIONS
    mixup_alpha: float = 0.2
    pretrain_epochs: int = 0  # masked-patch pretraining on the training split before fine-tuning (0 = off)
    pretrain_mask_ratio: float = 0.4
    pretrain_lr: float = 1e-3
    pretrain_on: str | None = None  # comma-separated sets whose TRAINING splits pretrain each target (itself left out)
    init: str | None = None  # a pretrained series encoder (jumbokit series-pretrain) every run starts from
    frozen: bool = False  # with init: the encoder frozen, its head a ridge classifier of its features (ridge_head)
    seeds: int = 1  # runs per grid point, with seeds seed, seed+1, ...
    ema_decay: float = 0.0  # > 0: score the exponential moving average of the weights (TrainConfig.ema_decay)
    grad_clip: float | None = None  # clip each step's gradient to this global L2 norm (None = off)
    # > 0: score the validation half every eval_every steps from step early_stop_from on, stop after this many
    # scorings without a better early_stop_metric (a lower loss, or a higher top-1 accuracy), keep the best
    # scoring's weights; the run's steps are its budget (0 = off). eval_every="cycle": at the end of each
    # learning-rate cycle (lr_cycles), the first scoring at the first cycle's end or early_stop_from if later
    early_stop: int = 0
    eval_every: int | str = 50
    early_stop_from: int = 0
    early_stop_metric: str = "loss"
    # > 1: the learning-rate schedule restarts that many times over the run's steps (TrainConfig.lr_cycles): each
    # cycle scheduled as a run of its length, so the first cycle's weights are the shorter run's (1 = one schedule)
    lr_cycles: int = 1
    # layer-wise learning-rate decay of a fine-tuning (TrainConfig.layer_decay; BEiT / MAE): block i of L trains at
    # lr x layer_decay^(L - i), the stem lower still, the head at lr (None = off: one rate for every weight)
    layer_decay: float | None = None
    label_smoothing: float = 0.0  # cross-entropy targets: 1 - eps on the class, eps spread over all classes
    jumbo_pool: str = "segments"  # the Jumbo models' feature: "segments" | "jumbo" | "jumbo+mean" (JUMBO_POOLS)
    jumbo_multiplier: int = JUMBO_MULTIPLIER  # J of the Jumbo models; registers are matched to it (Proposition 1)
    layer_scale: float = 0.0  # > 0: LayerScale on every block's residual branches, starting at this value (0 = off)
    pos_embed: str = "learn"  # the tokens' absolute position embedding: "learn" | "sincos" | "none" (POS_EMBEDS)
    layers: int | None = None  # transformer layers (None = the model's own: 3)
    drop_path: float = 0.0  # stochastic depth: the last block's drop rate, rising linearly from 0 (0 = off)
    dim: int | None = None  # token width D (None = the models' 128); D/8 heads and an FFN of 2D keep their ratios
    unequal_length: str = "pad"  # shorter series: "pad" (NaN, masked) | "resample" | "zero" (data.UNEQUAL_LENGTHS)

    def __post_init__(self) -> None:
        from .augment import parse_augment

        if not isinstance(self.model, SeriesModelConfig):
            raise TypeError(f"model must be a SeriesModelConfig, got {type(self.model).__name__}")
        self.augment = ",".join(parse_augment(self.augment)) or "none"
        m = self.model
        for name, value in (("batch_size", self.batch_size), ("steps", self.steps), ("trunk_width", m.trunk_width)):
            if isinstance(value, str) and value != "auto":
                raise ValueError(f"{name} must be a positive integer or 'auto', got {value!r}")
        checks = [
            ("recipe", self.recipe, self.recipe in RECIPES, f"one of {', '.join(RECIPES)}"),
            ("batch_size", self.batch_size, self.batch_size == "auto" or int(self.batch_size) >= 1,
             "a positive integer or 'auto'"),
            ("steps", self.steps, self.steps in (None, "auto") or int(self.steps) >= 1, "None, 'auto' or >= 1"),
            ("step_scale", self.step_scale, 0 < self.step_scale <= 100, "in (0, 100] (a factor of steps='auto')"),
            ("patches", m.patches, is_integer(m.patches) and m.patches >= 1, "an integer >= 1"),
            ("max_patch_len", m.max_patch_len, m.max_patch_len is None or int(m.max_patch_len) >= 2, "None or >= 2"),
            ("conv_stem", m.conv_stem, m.conv_stem == 0 or int(m.conv_stem) >= 2, "0 (none) or a width >= 2"),
            ("trunk", m.trunk, m.trunk in (None, *TRUNKS), f"None or one of {', '.join(TRUNKS)}"),
            ("trunk_width", m.trunk_width, m.trunk_width == "auto" or int(m.trunk_width) >= 1, "'auto' or >= 1"),
            ("trunk_depth", m.trunk_depth, int(m.trunk_depth) >= 1, ">= 1"),
            ("level_scale", m.level_scale, m.level_scale in (False, True, "auto"), "False, True or 'auto'"),
            ("level_scale", m.level_scale, not m.level_scale or level_scale_fits(self.normalize),
             f"False with normalize={self.normalize!r} (per-series normalisation would remove the level and scale "
             "it reads; use normalize='train')"),
            *((name, getattr(m, name), getattr(m, name) is None, "None (set for each dataset)")
              for name in _PER_DATASET),
            ("pretrain_epochs", self.pretrain_epochs, self.pretrain_epochs >= 0, ">= 0 (0 = no pretraining)"),
            ("pretrain_mask_ratio", self.pretrain_mask_ratio, 0 < self.pretrain_mask_ratio < 1, "in (0, 1)"),
            ("pretrain_lr", self.pretrain_lr, self.pretrain_lr > 0, "> 0"),
            ("init", self.init, not self.init or not self.pretrain_epochs,
             "None with pretrain_epochs (start from the pretrained encoder or pretrain on the set, not both)"),
            ("frozen", self.frozen, self.frozen in (False, True), "True or False"),
            ("frozen", self.frozen, not self.frozen or bool(self.init),
             "False without init (a ridge head reads the features of a pretrained encoder)"),
            ("frozen", self.frozen, not self.frozen or (self.branches == 1 and not self.model.trunk_head),
             f"False with branches={self.branches}, trunk_head={self.model.trunk_head} (one head is fitted, on the "
             "plain encoder)"),
            ("pretrain_on", self.pretrain_on, not self.pretrain_on or self.pretrain_epochs > 0,
             "None without pretrain_epochs (pretraining is off)"),
            ("mixup_alpha", self.mixup_alpha, self.mixup_alpha > 0, "> 0"),
            ("seeds", self.seeds, self.seeds >= 1, ">= 1"),
            ("ema_decay", self.ema_decay, 0 <= self.ema_decay < 1, "in [0, 1) (0 = off)"),
            ("grad_clip", self.grad_clip, self.grad_clip is None or self.grad_clip > 0, "None (off) or a norm > 0"),
            ("early_stop", self.early_stop, is_integer(self.early_stop) and self.early_stop >= 0,
             "an integer >= 0 (scorings; 0 = off)"),
            ("eval_every", self.eval_every,
             self.eval_every == "cycle" or (is_integer(self.eval_every) and self.eval_every >= 1),
             "an integer >= 1 or 'cycle' (the end of each learning-rate cycle)"),
            ("early_stop_metric", self.early_stop_metric, self.early_stop_metric in ("loss", "top1"),
             "'loss' or 'top1'"),
            ("lr_cycles", self.lr_cycles, is_integer(self.lr_cycles) and self.lr_cycles >= 1,
             "an integer >= 1 (1 = one schedule)"),
            ("layer_decay", self.layer_decay, self.layer_decay is None or 0 < self.layer_decay <= 1,
             "None (off) or a rate in (0, 1], e.g. 0.75"),
            ("layer_decay", self.layer_decay, self.layer_decay is None or not self.frozen,
             "None with frozen (a ridge head has no layers to decay)"),
            ("early_stop_from", self.early_stop_from, is_integer(self.early_stop_from) and self.early_stop_from >= 0,
             "an integer >= 0 (a step)"),
            ("early_stop", self.early_stop, not self.early_stop or self.protocol == "seed",
             f"0 with protocol={self.protocol!r} (its validation split is the test split: stopping on it would "
             "choose on the test set)"),
            ("early_stop", self.early_stop, not self.early_stop or not self.frozen,
             "0 with frozen (a ridge head takes no gradient step to stop)"),
            ("early_stop", self.early_stop, not self.early_stop or self.branches == 1,
             f"0 with branches={self.branches} (the branches must have joined before the model is scored)"),
            ("label_smoothing", self.label_smoothing, 0 <= self.label_smoothing < 1, "in [0, 1) (0 = off)"),
            ("jumbo_pool", self.jumbo_pool, self.jumbo_pool in JUMBO_POOLS, f"one of {', '.join(JUMBO_POOLS)}"),
            ("jumbo_multiplier", self.jumbo_multiplier,
             is_integer(self.jumbo_multiplier) and self.jumbo_multiplier >= 1, "an integer >= 1"),
            ("layer_scale", self.layer_scale, 0 <= self.layer_scale, ">= 0 (0 = off)"),
            ("pos_embed", self.pos_embed, self.pos_embed in POS_EMBEDS, f"one of {', '.join(POS_EMBEDS)}"),
            ("layers", self.layers, self.layers is None or (is_integer(self.layers) and self.layers >= 1),
             "None or an integer >= 1"),
            ("drop_path", self.drop_path, 0 <= self.drop_path < 1, "in [0, 1) (0 = off)"),
            ("dim", self.dim, self.dim is None or (is_integer(self.dim) and self.dim >= HEAD_FEATURES
                                                   and self.dim % HEAD_FEATURES == 0),
             f"None or a multiple of {HEAD_FEATURES}"),
            ("weight_decay", self.weight_decay, 0 <= self.weight_decay < float("inf"), ">= 0"),
            ("unequal_length", self.unequal_length, self.unequal_length in UNEQUAL_LENGTHS,
             f"one of {', '.join(UNEQUAL_LENGTHS)}"),
            ("length_embed", m.length_embed, not m.length_embed or self.unequal_length == "pad",
             f"False with unequal_length={self.unequal_length!r} (it reads where the NaN padding starts; resampled "
             "or zero-filled series all span every step)"),
        ]
        for name, value, ok, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {value!r}")

    def tokenizer_options(self, seq_len: int | None = None) -> dict[str, Any]:
        """The series tokenizer's encoder options (conv stem, trunk, token statistics) of this sweep, for series
        of ``seq_len`` steps (needed only by ``trunk_width="auto"``); ``level_scale="auto"`` must have been decided
        for the set first (:meth:`for_dataset`)."""
        self.check_decided()
        m = self.model
        return dict(conv_stem=int(m.conv_stem), trunk=m.trunk, trunk_width=self.trunk_width_for(seq_len),
                    trunk_depth=int(m.trunk_depth), trunk_diff=bool(m.trunk_diff), trunk_mix=bool(m.trunk_mix),
                    token_stats=bool(m.token_stats), level_scale=bool(m.level_scale),
                    rel_pos_bias=bool(m.rel_pos_bias))

    def level_scale_for(self, train_x: np.ndarray) -> bool:
        """Whether the model reads level and scale on a set with training series ``train_x`` (n, C, L): under
        "auto", where their scales differ more than ``AUTO_SCALE_SPREAD``-fold (the spread is the same before and
        after standardising with training-split statistics)."""
        if self.model.level_scale != "auto":
            return bool(self.model.level_scale)
        return scale_spread(train_x) > AUTO_SCALE_SPREAD

    def for_dataset(self, train_x: np.ndarray) -> "SweepConfig":
        """These settings for one set (training series ``train_x`` (n, C, L)): ``level_scale="auto"`` decided by
        :meth:`level_scale_for`, and where it turns on, the amplitude augmentations left out; otherwise self."""
        if self.model.level_scale != "auto":
            return self
        if not self.level_scale_for(train_x):
            return replace(self, model=replace(self.model, level_scale=False))
        from .augment import parse_augment

        kept = [name for name in parse_augment(self.augment) if name not in AMPLITUDE_AUGMENTATIONS]
        return replace(self, model=replace(self.model, level_scale=True), augment=",".join(kept) or "none")

    def check_decided(self) -> None:
        """ValueError while ``level_scale`` is "auto": it is decided per dataset (:meth:`for_dataset`)."""
        if self.model.level_scale == "auto":
            raise ValueError("level_scale='auto' is decided per dataset: use cfg.for_dataset(data.train.x) first")

    def trunk_width_for(self, seq_len: int | None) -> int:
        """The trunk's filters for series of ``seq_len`` steps (``auto_trunk_width`` under "auto")."""
        if self.model.trunk_width != "auto":
            return int(self.model.trunk_width)
        if seq_len is None:
            raise ValueError("trunk_width='auto' needs the series length (tokenizer_options(seq_len=...))")
        return auto_trunk_width(seq_len)

    def epochs_for(self, dataset: str, steps_per_epoch: int = 1) -> int:
        """The protocol's epochs (100; 20 for the largest sets), raised to reach ``min_steps`` steps."""
        epochs = int(self.epochs) if self.epochs is not None else (20 if dataset in LARGE_DATASETS else 100)
        return epochs_for_min_steps(epochs, self.min_steps, steps_per_epoch)

    def batch_for(self, n_train: int, channels: int = 1) -> int:
        """Series per optimizer step for a training set of ``n_train`` series of ``channels`` channels."""
        return auto_batch_size(n_train, channels) if self.batch_size == "auto" else int(self.batch_size)

    def steps_for(self, seq_len: int) -> int | None:
        """Optimizer steps per run for series of ``seq_len`` steps (None: epochs decide)."""
        if self.steps == "auto":
            return auto_steps(seq_len, self.step_scale)
        return None if self.steps is None else int(self.steps)

    def scoring(self, steps: int) -> tuple[int, int]:
        """(steps between scorings of the validation half, the first step scored) of an early-stopped run of
        ``steps`` optimizer steps: ``eval_every`` and ``early_stop_from``, or with ``eval_every="cycle"`` the steps
        of a learning-rate cycle (as the schedule counts them) from the first cycle's end."""
        from ..training.optim import cycle_length

        if self.eval_every != "cycle":
            return int(self.eval_every), int(self.early_stop_from)
        cycle = cycle_length(steps, int(self.lr_cycles))
        return cycle, max(cycle, int(self.early_stop_from))

    def run_seeds(self) -> list[int]:
        """The seeds of the runs at one grid point: ``seed``, ``seed + 1``, ... (``seeds`` of them)."""
        return [self.seed + i for i in range(self.seeds)]

    def identity(self) -> dict[str, Any]:
        """The record that defines the runs (``sweep.json``, and ``results.json``'s ``"sweep"``): ``"schema"``
        (:data:`SWEEP_SCHEMA`), then every setting, the series model's nested under ``"model"``."""
        return {"schema": SWEEP_SCHEMA, **asdict(self)}

    @classmethod
    def from_record(cls, record: dict[str, Any], source: str = "the sweep record") -> "SweepConfig":
        """The settings of a stored record (:meth:`identity`) of any schema so far: schema 2, or the flat record
        of schema 1 (no ``"schema"`` key; a setting left out holds its default). ValueError, naming ``source``,
        for a newer schema or a setting this version does not know."""
        record = dict(record)
        schema = record.pop("schema", 1)
        if schema == 1:
            model = {k: record.pop(k) for k in _MODEL_FIELDS if k in record}
        elif schema == SWEEP_SCHEMA:
            model = dict(record.pop("model", {}))
        else:
            raise ValueError(f"{source} has schema {schema!r}; this version of jumbokit reads schemas 1 (no "
                             f"\"schema\" key) to {SWEEP_SCHEMA}")
        unknown = sorted(set(record) - {f.name for f in fields(cls)}) + sorted(set(model) - set(_MODEL_FIELDS))
        if unknown:
            raise ValueError(f"{source} (schema {schema}) holds settings this version of jumbokit does not know: "
                             f"{', '.join(unknown)}")
        return cls(model=SeriesModelConfig(**model), **record)

    def differences(self, other: "SweepConfig") -> dict[str, tuple[Any, Any]]:
        """The settings where ``other`` differs, as {name: (this value, other's)}; a series-model option is named
        ``model.NAME``."""
        mine, theirs = asdict(self), asdict(other)
        mine.update({f"model.{k}": v for k, v in mine.pop("model").items()})
        theirs.update({f"model.{k}": v for k, v in theirs.pop("model").items()})
        return {k: (v, theirs[k]) for k, v in mine.items() if v != theirs[k]}
