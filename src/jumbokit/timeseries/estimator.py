"""An aeon classifier around the PatchTST family, for aeon pipelines and benchmarking.

    from jumbokit.timeseries.estimator import PatchTSTClassifier
    clf = PatchTSTClassifier(model="patchtst_jumbo", epochs=50).fit(X_train, y_train)   # X: (n, C, L) or list
    clf.predict(X_test); clf.predict_proba(X_test)
    clf.save("clf/"); PatchTSTClassifier.load("clf/")     # safetensors + JSON, no pickle
    PatchTSTClassifier(steps="auto", batch_size="auto", augment="default", conv_stem=32, patches=16)   # small sets

Unequal-length collections (lists of (C, L_i) arrays) and missing values (NaN) are padded/masked,
never truncated; channels are standardised with the training data's statistics (``normalize="train"``,
kept in ``normalizer_``) or each series by its own (``normalize="instance"``).
"""

from __future__ import annotations

import json
import os
import warnings
from contextlib import nullcontext
from dataclasses import fields
from pathlib import Path
from typing import Any, get_args, get_type_hints

import numpy as np
from aeon.classification.base import BaseClassifier

from .data import check_unequal_length, lengths_of, pad_series, resample_to_length, zero_tails
from .normalize import check_series, fit_normalizer
from .models import JUMBO_MULTIPLIER, PATCHTST_MODELS, REFERENCE_MODELS

__all__ = ["PatchTSTClassifier"]

ESTIMATOR_FILE = "estimator.json"


def _plain(value: Any) -> Any:
    """NumPy scalars in a saved record as Python numbers."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in {ESTIMATOR_FILE}")


def _as_field_types(cls: type, options: dict[str, Any]) -> dict[str, Any]:
    """The ``options`` named like fields of dataclass ``cls``, numbers and switches as the field's bool, float or int
    (a parameter grid may give 0 for a float or a NumPy scalar); None, strings ("auto") and fractions for an integer
    stay as given, for the settings' own checks."""
    hints = get_type_hints(cls)
    typed = {}
    for name in sorted({f.name for f in fields(cls)} & set(options)):
        value = options[name]
        kinds = get_args(hints[name]) or (hints[name],)
        kind = next((k for k in (bool, float, int) if k in kinds), None)
        as_given = value is None or isinstance(value, str) or kind is None
        as_given = as_given or (kind is int and not float(value).is_integer())  # refused by the check, as given
        typed[name] = value if as_given else kind(value)
    return typed


class PatchTSTClassifier(BaseClassifier):
    """PatchTST / PatchTST+registers / PatchTST+Jumbo classifier trained with the Jumbo paper's recipe.

    Each channel is cut into patches and encoded on its own by a transformer (D=128, 3 layers); the per-channel
    features are concatenated before a linear head. Training: AdamW, cross-entropy, linear warm-up over the
    first 10% of the steps, then cosine decay to 1e-8. Unequal lengths and missing values (NaN) are padded and
    masked, never truncated or imputed.

    Parameters
    ----------
    model : str, default="patchtst_jumbo"
        One of ``"patchtst"``, ``"patchtst_registers"``, ``"patchtst_jumbo"``, or ``"series_cnn"``, the
        transformer-off reference (the ``trunk`` alone, its mean token into the head; it needs a ``trunk``).
    patches : int, default=8
        Patches per series (of the longest training series); shorter series are padded and masked.
        Series too short for this many patches use patch length 1 (with a warning).
    epochs : int, default=100
        Passes over the training series (ignored when ``steps`` is given).
    lr : float, default=1e-3
        Peak learning rate.
    dropout : float, default=0.1
        Dropout rate of the encoder.
    batch_size : int or "auto", default=256
        Series per optimizer step; ``"auto"``: min(n, 32, max(8, 128 // channels)) series, the small-data
        recipe's batch.
    weight_decay : float, default=0.02
        AdamW's weight decay (not applied to norms, biases, tokens and position embeddings).
    normalize : str, default="train"
        ``"train"``: per-channel mean/std of the training data, applied at prediction too; ``"instance"``:
        each series and channel by its own statistics (RevIN-style; drops level and amplitude); ``"auto"``:
        ``"instance"`` when the training series' scales differ more than 100-fold, else ``"train"``; ``"none"``.
    random_state : int or None, default=None
        Seed of initialisation, data order and augmentation; None draws one.
    verbose : bool, default=False
        Show the training progress bar and the training loop's log lines.
    steps : int, "auto" or None, default=None
        A fixed number of optimizer steps instead of ``epochs``; ``"auto"``: the small-data recipe's 1000,
        or 3000 for series longer than 400 steps.
    augment : str, default="none"
        Series augmentation: ``"default"``, ``"none"`` or comma-separated names among jitter, scaling,
        magnitude_warp, time_warp, window_slice, mixup (see ``jumbokit.timeseries.augment``).
    pretrain_epochs : int, default=0
        Masked-patch pretraining on the training series for this many epochs before fine-tuning.
    conv_stem : int, default=0
        Width of convolutional patch features added to each token (two 1-D convolutions over the series,
        max and mean within each patch); 0 = linear patches only, as PatchTST.
    trunk : {"inception", "resnet"} or None, default=None
        A full-resolution convolutional trunk over each channel (InceptionTime modules or ResNet blocks,
        stride 1); its features, max and mean per patch window, are added to each token.
    trunk_width : int or "auto", default=16
        Trunk filters per branch (inception, 4 branches) or per layer (resnet); "auto" = 64 for series longer
        than 400 steps, 32 for shorter.
    trunk_depth : int, default=3
        Inception modules (a shortcut around every 3) or residual blocks.
    trunk_diff : bool, default=False
        Feed each channel's first difference to the trunk as a second input.
    trunk_mix : bool, default=False
        One trunk over all channels of a series together, its features added to every channel's tokens
        (default: a trunk pass per channel).
    trunk_head : bool, default=False
        A second classifier on the trunk's mean token per channel, trained with its own cross-entropy beside
        the main head; predictions are the two heads' mean probabilities (needs a trunk).
    token_stats : bool, default=False
        Add each patch window's mean and standard deviation, projected, to its token.
    level_scale : bool or "auto", default=False
        Normalise each channel of each series inside the model and add its mean and log standard deviation,
        projected, to all its tokens (needs ``normalize="train"`` or ``"none"``); "auto": only where the
        training series' scales differ more than 100-fold, then without the amplitude augmentations.
    rel_pos_bias : bool, default=False
        A learned relative-position bias in attention (one value per head and patch offset).
    length_embed : bool, default=False
        Add each series' length (relative to the longest training series), projected from zero, to the global
        tokens (needs ``unequal_length="pad"``; series of the full length are unaffected; ``series_cnn`` has no
        global token and ignores it).
    ema_decay : float, default=0.0
        > 0: predict with the exponential moving average of the weights (updated after every step with this
        decay, e.g. 0.998) instead of the last weights.
    early_stop : int, default=0
        > 0: hold out ``validation_fraction`` of the training series (stratified by class; never trained on),
        score them every ``eval_every`` optimizer steps from step ``early_stop_from`` on, stop after this many
        scorings in a row without a lower validation loss, and keep the weights of the best scoring. The steps the
        run would take (``steps`` or ``epochs``) become its budget and the learning-rate schedule spans it, as
        ``tstrain --early-stop`` does on its validation half (e.g. ``early_stop=1, eval_every="cycle",
        lr_cycles=3`` on a budget of ``steps=1500`` from a pretrained 384-step encoder, as tstrain's fine-tune
        recipe). 0 = off.
    eval_every : int or "cycle", default=50
        With ``early_stop``: optimizer steps between scorings of the held-out series; ``"cycle"``: at the end of
        each learning-rate cycle (``lr_cycles``), as ``tstrain --recipe fine-tune`` scores.
    early_stop_from : int, default=0
        With ``early_stop``: the first step scored (none before it).
    validation_fraction : float, default=0.25
        With ``early_stop``: the share of the training series held out (at least one series of each class).
    early_stop_metric : {"loss", "top1"}, default="loss"
        With ``early_stop``: what a scoring must beat, the held-out loss (lower) or top-1 accuracy (higher).
    lr_cycles : int, default=1
        Restart the learning-rate schedule this many times over the steps (``tstrain --lr-cycles``): each cycle is
        warmed up and decayed as a run of its length, so the first cycle's weights are the shorter run's.
    layer_decay : float or None, default=None
        Layer-wise learning-rate decay when fine-tuning from ``init`` (``tstrain --layer-decay``): the head at
        ``lr``, each block below at ``layer_decay`` times the rate of the one above, the patch stem lowest
        (e.g. 0.75). None = one rate for every weight.
    label_smoothing : float, default=0.0
        Train on targets of 1 - eps for the class and eps spread over all classes (0 = plain cross-entropy).
    grad_clip : float or None, default=None
        Clip each step's gradient to this global L2 norm (None = off).
    jumbo_pool : {"segments", "jumbo", "jumbo+mean"}, default="segments"
        What ``patchtst_jumbo`` classifies from, per channel: the mean of the J segments of the Jumbo token
        (width D), the J*D vector, or that vector and the mean patch token; ignored by the other models.
    jumbo_multiplier : int, default=4
        J of ``patchtst_jumbo`` (its global token is J*D wide, with a shared FFN of hidden 2*J*D); for
        ``patchtst_registers`` the J its registers are FLOP-matched to (Proposition 1); ignored by ``patchtst``.
    layer_scale : float, default=0.0
        > 0: LayerScale on every transformer block (and the Jumbo FFN), its learned factors starting at this value
        (e.g. 1e-4), so each block starts near the identity; 0 = off.
    pos_embed : {"learn", "sincos", "none"}, default="learn"
        The tokens' absolute position embedding: a learned table (PatchTST's), fixed sine-cosine, or none (the
        transformer reads the tokens as a set).
    layers : int or None, default=None
        Transformer layers (None = the model's own 3; not for ``series_cnn``, which has none).
    drop_path : float, default=0.0
        Stochastic depth: in training, each block's residual branches are dropped for each channel of each
        series with a rate rising linearly from 0 at the first block to this value at the last (0 = off).
    dim : int or None, default=None
        Token width D, a multiple of 8 (None = the model's 128): the transformer keeps D/8 heads and an FFN of 2D.
    unequal_length : {"pad", "resample", "zero"}, default="pad"
        Series shorter than the longest training series: NaN-padded at the end and masked (their length stays
        visible to the model), each stretched linearly to that length, or zero-padded and read as data (aeon's
        fill), in ``fit`` and at prediction alike.
    save_last_model : bool, default=False
        After ``fit``, save the fitted estimator (:meth:`save`) to ``file_path``/``last_file_name`` (aeon's deep
        classifiers' convention; the model kept is always the last one: training has no per-epoch selection).
    file_path : str, default="./"
        The folder that ``save_last_model`` writes into.
    last_file_name : str, default="last_model"
        The name of the folder ``save_last_model`` writes (``model.safetensors`` + ``estimator.json``).
    init : str or None, default=None
        Fine-tune from a pretrained series encoder (the folder ``jumbokit series-pretrain`` wrote), as
        ``tstrain --init``: every series (in ``fit`` and at prediction) resampled to the encoder's length, the
        network starting from its weights with a head of its own; ``model``, ``patches``, ``conv_stem`` and
        ``dim`` must be the encoder's (e.g. ``patches=16, conv_stem=32``).
    frozen : bool, default=False
        With ``init``: keep the pretrained encoder frozen and fit only its head, as ``tstrain --frozen``: a ridge
        classifier of the encoder's features of the training series (penalty by leave-one-out error), no gradient
        step (``lr``, ``dropout``, ``epochs``, ``steps`` and ``augment`` are not used).
    fuse : str or None, default=None
        Late fusion with a ROCKET-family classifier fitted on the same raw training series, as ``tstrain --fuse``:
        one of ``"minirocket"``, ``"multirocket"``, ``"hydra"``, ``"multirocket_hydra"`` (aeon's transformers with
        a ridge classifier, bounded memory); ``predict_proba`` mixes ``w`` x the network's probabilities with
        ``1 - w`` x the ridge scores' softmax. Needs series without missing values before their end.
    fuse_weight : float or "auto", default="auto"
        ``w``, the network's share in the fused probabilities (0..1). ``"auto"``: chosen as ``tstrain`` chooses it
        on its validation half (``jumbokit.timeseries.fusion.late_fusion``), here on a stratified quarter of the
        training series that both models are first fitted without; then both are fitted again on all of them
        (about twice the training cost).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The class labels seen in ``fit``.
    n_classes_ : int
        Number of classes.
    network_ : torch.nn.Module
        The trained encoder with its head, in eval mode (input (n, C, L) float32, NaN = missing).
    history_ : list of dict
        One record per epoch of the training loop (``train_loss``, ``lr``, ``step``, ...).
    normalizer_ : callable
        The normalisation fitted on the training series, applied to every series passed to ``predict``.
    seq_len_ : int
        Length of the longest training series (longer series at prediction get more patches, with a warning),
        or the pretrained encoder's (``init``).
    rocket_ : RocketClassifier or None
        The fitted ROCKET-family classifier of ``fuse``.
    fuse_weight_ : float
        The network's share in the fused probabilities (1.0 without ``fuse``).
    n_steps_ : int
        Optimizer steps the network took (fewer than its budget when ``early_stop`` stopped it).
    best_step_ : int or None
        With ``early_stop``: the step whose weights were kept; None without.

    See Also
    --------
    jumbokit.timeseries.sweep.run_sweep : the paper's protocol (a sweep with model selection on validation).
    PatchTSTClassifier.load : a saved estimator, fitted, without pickle.

    Examples
    --------
    >>> from aeon.datasets import load_basic_motions
    >>> from jumbokit.timeseries.estimator import PatchTSTClassifier
    >>> X_train, y_train = load_basic_motions(split="train")
    >>> X_test, y_test = load_basic_motions(split="test")
    >>> clf = PatchTSTClassifier(model="patchtst_jumbo", epochs=5, random_state=0)
    >>> clf = clf.fit(X_train, y_train)
    >>> clf.predict(X_test).shape
    (40,)
    >>> clf.predict_proba(X_test).shape
    (40, 4)
    """

    _tags = {
        "capability:multivariate": True,
        "capability:unequal_length": True,
        "capability:missing_values": True,
        "X_inner_type": ["np-list", "numpy3D"],
        "algorithm_type": "deeplearning",
        "non_deterministic": True,
        "python_dependencies": "torch",
    }

    def __init__(self, model: str = "patchtst_jumbo", patches: int = 8, epochs: int = 100, lr: float = 1e-3,
                 dropout: float = 0.1, batch_size: int | str = 256, weight_decay: float = 0.02, normalize: str = "train",
                 random_state: int | None = None, verbose: bool = False, steps: int | str | None = None,
                 augment: str = "none", pretrain_epochs: int = 0, conv_stem: int = 0, ema_decay: float = 0.0,
                 trunk: str | None = None, trunk_width: int | str = 16, trunk_depth: int = 3, trunk_diff: bool = False,
                 token_stats: bool = False, rel_pos_bias: bool = False, length_embed: bool = False,
                 trunk_mix: bool = False,
                 trunk_head: bool = False,
                 level_scale: bool | str = False, label_smoothing: float = 0.0, grad_clip: float | None = None,
                 jumbo_pool: str = "segments", jumbo_multiplier: int = JUMBO_MULTIPLIER, layer_scale: float = 0.0,
                 pos_embed: str = "learn",
                 layers: int | None = None, drop_path: float = 0.0, dim: int | None = None,
                 unequal_length: str = "pad", save_last_model: bool = False, file_path: str = "./",
                 last_file_name: str = "last_model", init: str | None = None, frozen: bool = False,
                 fuse: str | None = None, fuse_weight: float | str = "auto", early_stop: int = 0,
                 eval_every: int | str = 50, early_stop_from: int = 0, validation_fraction: float = 0.25,
                 early_stop_metric: str = "loss", lr_cycles: int = 1, layer_decay: float | None = None) -> None:
        self.model = model
        self.patches = patches
        self.epochs = epochs
        self.lr = lr
        self.dropout = dropout
        self.batch_size = batch_size
        self.weight_decay = weight_decay
        self.steps = steps
        self.augment = augment
        self.pretrain_epochs = pretrain_epochs
        self.conv_stem = conv_stem
        self.ema_decay = ema_decay
        self.trunk = trunk
        self.trunk_width = trunk_width
        self.trunk_depth = trunk_depth
        self.trunk_diff = trunk_diff
        self.trunk_mix = trunk_mix
        self.trunk_head = trunk_head
        self.token_stats = token_stats
        self.level_scale = level_scale
        self.rel_pos_bias = rel_pos_bias
        self.length_embed = length_embed
        self.label_smoothing = label_smoothing
        self.grad_clip = grad_clip
        self.jumbo_pool = jumbo_pool
        self.jumbo_multiplier = jumbo_multiplier
        self.layer_scale = layer_scale
        self.pos_embed = pos_embed
        self.layers = layers
        self.drop_path = drop_path
        self.dim = dim
        self.unequal_length = unequal_length
        self.save_last_model = save_last_model
        self.file_path = file_path
        self.last_file_name = last_file_name
        self.init = init
        self.frozen = frozen
        self.fuse = fuse
        self.fuse_weight = fuse_weight
        self.early_stop = early_stop
        self.eval_every = eval_every
        self.early_stop_from = early_stop_from
        self.validation_fraction = validation_fraction
        self.early_stop_metric = early_stop_metric
        self.lr_cycles = lr_cycles
        self.layer_decay = layer_decay
        self.normalize = normalize
        self.random_state = random_state
        self.verbose = verbose
        super().__init__()

    # ------------------------------------------------------------------ aeon hooks
    def _fit(self, X, y):
        if self.model not in PATCHTST_MODELS + REFERENCE_MODELS:
            raise ValueError(f"expected model to be one of {PATCHTST_MODELS + REFERENCE_MODELS}, got {self.model!r}")
        weight = self._checked_fusion()
        if not 0.0 < float(self.validation_fraction) < 1.0:
            raise ValueError(f"expected validation_fraction to be a number between 0 and 1 (exclusive), got "
                             f"{self.validation_fraction!r}")
        x = self._equal_length(X, self._encoder_length())
        check_series(x, "X")
        self.normalizer_ = fit_normalizer(x, self.normalize)
        x = self.normalizer_(x)
        codes = np.array([self._class_dictionary[v] for v in y], dtype=np.int64)
        seed = self.random_state if self.random_state is not None else int(np.random.SeedSequence().entropy % 2**31)
        self.seq_len_ = int(x.shape[2])
        self.rocket_, self.fuse_weight_ = None, 1.0
        if self.fuse:
            raw = self._rocket_series(X)
            if weight is None:
                weight = self._choose_fuse_weight(x, raw, codes, seed)
            self.rocket_ = self._fit_rocket(raw, codes, seed)
            self.fuse_weight_ = float(weight)
        fitted = self._fit_network(x, codes, seed)
        self.network_, self.history_, self.n_steps_ = fitted.model.eval(), fitted.history, fitted.steps
        self.best_step_ = fitted.history[-1]["early_stop"]["best_step"] if self.early_stop else None
        if self.save_last_model:
            self._save(Path(self.file_path) / self.last_file_name)
        return self

    def _fit_network(self, x: np.ndarray, codes: np.ndarray, seed: int) -> Any:
        """The network trained on prepared series x with class codes (a ``FittedModel``); with ``early_stop``,
        trained on all but a held-out ``validation_fraction`` of them, which it is stopped on."""
        from .data import ClassificationData, SeriesSplit
        from .models.config import SeriesModelConfig
        from .protocol import SweepConfig
        from .run import fit_series_model, new_run_model, pretrain_model, quiet_training

        # each parameter named like a series-model option goes to the model, each named like a sweep setting to the
        # training settings ("model" names the architecture here, not SweepConfig.model)
        params = self.get_params(deep=False)
        settings = _as_field_types(SweepConfig, {k: v for k, v in params.items() if k != "model"})
        cfg = SweepConfig(model=SeriesModelConfig(**_as_field_types(SeriesModelConfig, params)), **settings,
                          seed=seed).for_dataset(x)

        def split(index: np.ndarray) -> SeriesSplit:
            return SeriesSplit(x[index], codes[index], np.full(len(index), x.shape[2]))

        train = val = split(np.arange(len(codes)))
        if cfg.early_stop:
            fit_idx, val_idx = self._held_out(codes, float(self.validation_fraction), seed, "early_stop",
                                              "fit with early_stop=0")
            train, val = split(fit_idx), split(val_idx)
        data = ClassificationData(name="X", train=train, val=val, test=val, classes=self.classes_,
                                  protocol="official")
        with warnings.catch_warnings():
            warnings.simplefilter("always" if self.verbose else "ignore")
            net = new_run_model(data, self.model, cfg, float(self.dropout), seed, strict=False)
        if self.init:
            from .encoder_pretrain import encoder_state, load_into

            load_into(net, encoder_state(self.init), source=f"the encoder {self.init}")
        with nullcontext() if self.verbose else quiet_training():
            if cfg.pretrain_epochs:
                pretrain_model(net, data, cfg, seed, progress=bool(self.verbose))
            return fit_series_model(net, data, float(self.lr), cfg, seed, progress=bool(self.verbose))

    def _held_out(self, codes: np.ndarray, fraction: float, seed: int, use: str,
                  way_out: str) -> tuple[np.ndarray, np.ndarray]:
        """(fitted on, held out): positions of the training series, ``fraction`` of every class held out (at least
        one series of each); ValueError naming ``use`` and ``way_out`` when a class has fewer than two series."""
        from sklearn.model_selection import train_test_split

        fewest = int(np.bincount(codes).min())
        if fewest < 2:
            raise ValueError(f"{use} holds out {fraction:g} of every class's training series and needs two or more "
                             f"series of each class, got a class with {fewest}; {way_out}")
        held = max(fraction, len(self.classes_) / len(codes))
        return train_test_split(np.arange(len(codes)), test_size=held, stratify=codes, random_state=seed)

    # ------------------------------------------------------------------ a pretrained encoder and late fusion
    def _encoder_length(self) -> int | None:
        """The length every series is resampled to when the network starts from a pretrained encoder."""
        from .encoder_pretrain import encoder_length

        return encoder_length(self.init) if self.init else None

    def _checked_fusion(self) -> float | None:
        """``fuse_weight`` as a float, None for "auto"; ValueError for an unknown ``fuse`` or a weight outside 0..1."""
        from .baselines import BASELINES

        if self.fuse is not None and self.fuse not in BASELINES:
            raise ValueError(f"expected fuse to be None or one of {', '.join(BASELINES)}, got {self.fuse!r}")
        if isinstance(self.fuse_weight, str):
            if self.fuse_weight != "auto":
                raise ValueError(f"expected fuse_weight to be 'auto' or a number in 0..1, got {self.fuse_weight!r}")
            return None
        weight = float(self.fuse_weight)
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"expected fuse_weight to be 'auto' or a number in 0..1, got {self.fuse_weight!r}")
        return weight

    @staticmethod
    def _rocket_series(X) -> np.ndarray:
        """X as the ROCKET classifier reads it (NaN-padded at the end; ValueError for missing values inside)."""
        from .baselines import missing_inside

        raw = pad_series(X)
        if missing_inside(raw).any():
            raise ValueError("fuse: the ROCKET classifiers cannot read series with missing values before their end; "
                             "fit without fuse")
        return raw

    def _fit_rocket(self, raw: np.ndarray, codes: np.ndarray, seed: int) -> Any:
        """The ROCKET-family classifier ``fuse`` fitted on raw series (zero-padded), classes as the codes' names."""
        from .baselines import fit_rocket, rocket_series

        return fit_rocket(self.fuse, rocket_series(raw), np.asarray([str(c) for c in self.classes_])[codes], seed)

    def _rocket_proba(self, rocket: Any, raw: np.ndarray) -> np.ndarray:
        from .fusion import rocket_proba

        return rocket_proba(rocket, raw, [str(c) for c in self.classes_])

    def _choose_fuse_weight(self, x: np.ndarray, raw: np.ndarray, codes: np.ndarray, seed: int) -> float:
        """The network's share chosen as tstrain chooses it on its validation half (``choose_weight``), here on a
        stratified quarter of the training series, both models fitted on the other three quarters."""
        from .fusion import choose_weight
        from .run import predict_proba

        fit_idx, val_idx = self._held_out(codes, 0.25, seed, "fuse_weight='auto'", "pass a number for fuse_weight")
        net = self._fit_network(x[fit_idx], codes[fit_idx], seed).model.eval()
        rocket = self._fit_rocket(raw[fit_idx], codes[fit_idx], seed)
        proba = predict_proba(net, x[val_idx], batch_size=256)
        ridge = self._rocket_proba(rocket, raw[val_idx])
        return choose_weight(proba, ridge, codes[val_idx])[0]

    def _predict_proba(self, X) -> np.ndarray:
        from .fusion import fuse_proba
        from .run import predict_proba

        x = self._equal_length(X, self.seq_len_)
        check_series(x, "X")
        x = self.normalizer_(x)
        proba = predict_proba(self.network_, x, batch_size=256 if self.batch_size == "auto" else int(self.batch_size))
        if getattr(self, "rocket_", None) is None:
            return proba
        return fuse_proba(proba, self._rocket_proba(self.rocket_, pad_series(X)), self.fuse_weight_)

    def _equal_length(self, X, length: int | None = None) -> np.ndarray:
        """X as one (n, C, L) array: NaN-padded to ``length`` (default: its longest series; a longer one is kept,
        with a warning) or, with ``unequal_length="resample"`` (or a pretrained encoder, ``init``), every series
        resampled to ``length`` steps; ``"zero"`` pads with zeros instead of NaN."""
        lengths = lengths_of(X)
        if check_unequal_length(self.unequal_length) == "resample" or self.init:
            return resample_to_length(pad_series(X), lengths, length)
        longest = int(lengths.max())
        if length is not None and longest > length:
            warnings.warn(f"series of {longest} steps are longer than the longest training series "
                          f"({length}); the model sees more patches than in training", stacklevel=3)
        padded = pad_series(X, max(longest, length or 0))
        return zero_tails(padded, lengths) if self.unequal_length == "zero" else padded

    # ------------------------------------------------------------------ saving without pickle
    def save(self, path: str | os.PathLike) -> Path:
        """Write the fitted estimator into folder ``path``: the network's weights with its model config and
        series data config (``model.safetensors``, loadable with ``jumbokit.load`` and ``jumbokit predict``) and
        ``estimator.json`` (parameters, classes, what ``fit`` saw); with ``fuse``, also the ROCKET classifier
        (``rocket.safetensors``) and ``fusion.json``, so that ``jumbokit predict`` scores the fused model as
        ``tstrain``'s kept fused models. Restore it with :meth:`load`."""
        self._check_is_fitted()
        return self._save(Path(path))

    def _save(self, path: Path) -> Path:
        from jumbokit.encoders import save as save_model
        from jumbokit.training.rundir import atomic_write_text

        from .data_config import SERIES_MODALITY, check_series_data_config, normalizer_config

        data_config = check_series_data_config({
            "modality": SERIES_MODALITY, "in_chans": int(self.network_.config["in_chans"]), "seq_len": self.seq_len_,
            "unequal_length": "resample" if self.init else self.unequal_length, **normalizer_config(self.normalizer_),
            "num_classes": int(self.n_classes_), "label_names": [str(c) for c in self.classes_]})
        save_model(self.network_, path, data_config=data_config)
        record = {"estimator": type(self).__name__, "params": self.get_params(deep=False),
                  "classes": self.classes_.tolist(), "classes_dtype": self.classes_.dtype.str,
                  "metadata": self.metadata_, "seq_len": self.seq_len_, "history": self.history_,
                  "n_steps": self.n_steps_, "best_step": self.best_step_}
        if getattr(self, "rocket_", None) is not None:
            from .fusion import FUSION_FILE, ROCKET_FILE, fusion_record
            from .rocket_classifiers import save_rocket

            save_rocket(self.rocket_, path / ROCKET_FILE)
            record["fuse_weight"] = self.fuse_weight_
            fusion = fusion_record(self.model, self.fuse, self.fuse_weight_)
            atomic_write_text(path / FUSION_FILE, json.dumps(fusion, indent=1) + "\n")  # jumbokit predict reads it
        atomic_write_text(path / ESTIMATOR_FILE, json.dumps(record, indent=1, default=_plain) + "\n")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, map_location: str = "cpu") -> "PatchTSTClassifier":
        """The fitted estimator :meth:`save` wrote into folder ``path`` (no pickle: safetensors and JSON)."""
        from jumbokit.encoders import load as load_model

        from .data_config import normalizer_from_config

        path = Path(path)
        try:
            record = json.loads((path / ESTIMATOR_FILE).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"no {ESTIMATOR_FILE} in {path}; expected a folder written by "
                                    "PatchTSTClassifier.save") from None
        if record.get("estimator") != cls.__name__:
            raise ValueError(f"{path} holds a {record.get('estimator')!r}, expected a {cls.__name__}")
        clf = cls(**record["params"])
        clf.network_ = load_model(path, map_location=map_location).eval()
        clf.normalizer_ = normalizer_from_config(clf.network_.pretrained_cfg)
        clf.classes_ = np.asarray(record["classes"], dtype=np.dtype(record["classes_dtype"]))
        clf.n_classes_ = len(clf.classes_)
        clf._class_dictionary = {c: i for i, c in enumerate(clf.classes_)}
        clf.metadata_ = record["metadata"]
        clf.seq_len_ = int(record["seq_len"])
        clf.history_ = record["history"]
        clf.n_steps_, clf.best_step_ = record.get("n_steps"), record.get("best_step")  # absent in older folders
        clf.rocket_, clf.fuse_weight_ = None, 1.0
        if "fuse_weight" in record:
            from .fusion import ROCKET_FILE
            from .rocket_classifiers import load_rocket

            clf.rocket_, clf.fuse_weight_ = load_rocket(path / ROCKET_FILE), float(record["fuse_weight"])
        clf.is_fitted = True
        return clf

    def _predict(self, X) -> np.ndarray:
        proba = self._predict_proba(X)
        return self.classes_[proba.argmax(axis=1)]

    @classmethod
    def _get_test_params(cls, parameter_set: str = "default") -> dict | list[dict]:
        """Tiny settings for aeon's estimator checks: the plain patch tokenizer with the length embedding, and the
        convolutional trunk with the first difference, token statistics, level and scale, all channels together, a
        trunk head, relative positions, label smoothing, gradient clipping, LayerScale, no absolute positions, two
        layers of width 16 with stochastic depth, the widest Jumbo head and unequal lengths resampled."""
        base = {"model": "patchtst_jumbo", "patches": 4, "epochs": 2, "batch_size": 8, "random_state": 0}
        plain = dict(base, length_embed=True)
        trunk = dict(base, trunk="inception", trunk_width=2, trunk_depth=1, trunk_diff=True, token_stats=True,
                     rel_pos_bias=True, trunk_mix=True, trunk_head=True, level_scale=True, label_smoothing=0.1,
                     grad_clip=1.0, jumbo_pool="jumbo+mean", layer_scale=1e-4, pos_embed="none",
                     layers=2, drop_path=0.1, dim=16, unequal_length="resample")
        return [plain, trunk]
