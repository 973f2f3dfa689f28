"""The ROCKET hybrid: MiniRocket features of the whole series projected into one global token.

``patchtst_jumbo_rocket`` is ``patchtst_jumbo`` whose first Jumbo segment starts, for every channel, from the
learned token plus a linear projection of the series' MiniRocket features (Dempster et al. 2021): 84 fixed
kernels of 9 taps (weights -1 and 2) at several dilations, and the proportion of positive values (PPV) of each
convolution output above biases drawn from the training split. aeon's ``MiniRocket`` transform is fitted on
the training split only (dilations, channel combinations, biases) and evaluated by :class:`MiniRocketFeatures`
inside every step. Training feeds it the clean series while the transformer sees the augmented ones: the
default augmentations move every PPV feature by about 2 of its standard deviations on ACSF1, and a linear probe on
the augmented features falls from 88% to 76% test accuracy. The features of series seen before come from a cache,
so each training series is transformed once. The projection starts at zero, so the hybrid starts as the pure
transformer.

``jumbokit.create_model("patchtst_jumbo_rocket", num_classes=..., in_chans=..., seq_len=...)`` builds the hybrid
with MiniRocket's structure for that shape (dilations, channel combinations) and no data seen yet (biases 0,
features unscaled); :meth:`RocketHybrid.fit_features` fits it on training series, the explicit second step.
:func:`build_rocket_hybrid` wraps a given encoder and fits in one call. The fitted transform and the feature
statistics are buffers, so a saved hybrid reloads with ``jumbokit.load`` alone. aeon is imported when a hybrid is
built, never by ``import jumbokit``.
"""

from __future__ import annotations

import hashlib
import warnings
from collections import OrderedDict
from typing import Any

import numpy as np
import torch
from torch import nn

from ...encoders import build_model, model_config, register_architecture, register_model
from ...encoders.encoder import Encoder
from .patchtst import HYBRID_MODELS

__all__ = ["HYBRID_MODELS", "MiniRocketFeatures", "RocketHybrid", "build_rocket_hybrid"]

MIN_LENGTH = 9  # MiniRocket's kernels span 9 steps
CACHE_BYTES = 512 * 2**20  # at most this much of cached features per transform (least recently used go first)
NUM_FEATURES = 10_000  # MiniRocket's default (rounded down to a multiple of its 84 kernels)
# aeon's fitted MiniRocket.parameters, in order, as buffers of MiniRocketFeatures
PARAMETER_NAMES = ("channels_per_combination", "channel_indices", "dilations", "features_per_dilation", "biases")


class MiniRocketFeatures(nn.Module):
    """aeon's MiniRocket transform, fitted on training series: (B, C, L) -> PPV features (B, F) in [0, 1].

    The transform runs in aeon's compiled (numba) code on the CPU, one thread, without gradient; the features
    come back on the input's device. NaN steps (missing values, end padding) count as 0, aeon's padding fill.
    The fitted parameters (:data:`PARAMETER_NAMES`) are buffers, so they travel in the state dict; loading one
    updates the transform. Features of series seen before come from a bounded cache keyed by each series' bytes
    (not pickled).
    """

    def __init__(self, transform: Any, num_features: int, series_shape: tuple[int, int]) -> None:
        super().__init__()
        self.transform = transform
        self.num_features = int(num_features)
        self.series_shape = tuple(int(n) for n in series_shape)  # (C, L) of the series it was fitted on
        for name, value in zip(PARAMETER_NAMES, transform.parameters):
            self.register_buffer(name, torch.from_numpy(np.array(value)))
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self.max_cached = max(1, CACHE_BYTES // (4 * self.num_features))

    @classmethod
    def unfitted(cls, in_chans: int, seq_len: int, num_features: int = NUM_FEATURES,
                 seed: int = 0) -> "MiniRocketFeatures":
        """MiniRocket's structure for series (C, L) (dilations and channel combinations as ``fit`` draws them with
        ``seed``), with biases 0: the state a fitted transform's buffers are loaded into."""
        return cls.fit(np.zeros((1, in_chans, seq_len), dtype=np.float32), num_features=num_features, seed=seed)

    def refit(self, x: np.ndarray | torch.Tensor, seed: int = 0) -> None:
        """Fit again on training series x (n, C, L) with ``seed``, in place (buffers, transform, cache)."""
        fitted = type(self).fit(x, num_features=int(self.transform.n_kernels), seed=seed)
        if fitted.num_features != self.num_features:
            raise ValueError(f"the features were built for {self.num_features} features, the fit gave "
                             f"{fitted.num_features}; build the hybrid for series of this length")
        for name in PARAMETER_NAMES:
            setattr(self, name, getattr(fitted, name).to(getattr(self, name).device))
        self.transform = fitted.transform
        self._cache.clear()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        if not any(prefix + name in state_dict for name in PARAMETER_NAMES):
            return  # a training checkpoint written before the fit was kept in the state dict: keep the fitted one
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self.transform.parameters = tuple(getattr(self, name).cpu().numpy() for name in PARAMETER_NAMES)
        self._cache.clear()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        return {**state, "_cache": OrderedDict()}

    @classmethod
    def fit(cls, x: np.ndarray | torch.Tensor, num_features: int = 10_000, seed: int = 0) -> "MiniRocketFeatures":
        """Fit aeon's MiniRocket (dilations, channel combinations, biases) on training series x (n, C, L)."""
        from aeon.transformations.collection.convolution_based import MiniRocket

        from ..baselines import use_numba_workqueue

        x = _numpy_series(x)
        if x.ndim != 3 or x.shape[-1] < MIN_LENGTH:
            raise ValueError(f"MiniRocket needs series (n, C, L) with L >= {MIN_LENGTH}, got shape {x.shape}")
        use_numba_workqueue()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            transform = MiniRocket(n_kernels=num_features, n_jobs=1, random_state=seed).fit(x)
        return cls(transform, int(transform.parameters[-1].size), x.shape[1:])  # one feature per fitted bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        series = _numpy_series(x)
        keys = [hashlib.blake2b(one.tobytes(), digest_size=16).digest() for one in series]
        missing = [i for i, key in enumerate(keys) if key not in self._cache]
        if missing:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fresh = np.asarray(self.transform.transform(series[missing]), dtype=np.float32)
            for i, row in zip(missing, fresh):
                self._cache[keys[i]] = row
        feats = np.stack([self._cache[key] for key in keys])
        for key in keys:
            self._cache.move_to_end(key)
        while len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)
        return torch.from_numpy(feats).to(x.device)


def _numpy_series(x: np.ndarray | torch.Tensor) -> np.ndarray:
    """(n, C, L) float32 numpy with NaN -> 0."""
    if isinstance(x, torch.Tensor):
        x = x.detach().float().cpu().numpy()
    return np.nan_to_num(np.asarray(x, dtype=np.float32), nan=0.0)


class RocketHybrid(nn.Module):
    """A series :class:`~jumbokit.encoders.Encoder` whose first global token (a CLS token or the first Jumbo
    segment) gets, per series, ``proj(dropout(standardised MiniRocket features))`` (B, D) added.

    forward: (B, C, L) -> logits (B, num_classes); ``rocket_input`` (B, C, L), when given, is the series the
    features come from (training passes the un-augmented batch there, see ``takes_clean_input``). ``config``,
    ``num_patches``, ``num_global_tokens`` and ``embed_dim`` are the encoder's, so sweep code reads the hybrid as it
    reads the plain model; :meth:`saved_config` is what ``jumbokit.save`` stores."""

    takes_clean_input = True  # training calls model(augmented, rocket_input=clean)
    not_exportable = ("the ROCKET hybrid (patchtst_jumbo_rocket) computes its MiniRocket features in aeon's compiled "
                      "code, outside any graph, so it cannot be exported to ONNX; export a plain series model "
                      "(patchtst, patchtst_registers, patchtst_jumbo) instead")

    def __init__(self, encoder: Encoder, features: MiniRocketFeatures, feature_mean: torch.Tensor,
                 feature_std: torch.Tensor, feature_dropout: float = 0.0) -> None:
        super().__init__()
        if encoder.num_global_tokens < 1:
            raise ValueError("the ROCKET hybrid adds its features to a global token; the encoder has none")
        self.encoder = encoder
        self.rocket = features
        self.register_buffer("feature_mean", feature_mean.float())
        self.register_buffer("feature_std", feature_std.float())
        self.feature_drop = nn.Dropout(feature_dropout)
        self.rocket_proj = nn.Linear(features.num_features, encoder.embed_dim)
        nn.init.zeros_(self.rocket_proj.weight)
        nn.init.zeros_(self.rocket_proj.bias)

    config = property(lambda self: self.encoder.config)
    num_patches = property(lambda self: self.encoder.num_patches)
    num_global_tokens = property(lambda self: self.encoder.num_global_tokens)
    embed_dim = property(lambda self: self.encoder.embed_dim)

    def no_weight_decay(self) -> set[str]:
        return {"encoder." + name for name in self.encoder.no_weight_decay()}

    def saved_config(self) -> dict[str, Any]:
        """The JSON config ``jumbokit.load`` rebuilds this hybrid from (its fitted state is in the state dict)."""
        transform = self.rocket.transform
        chans, length = self.rocket.series_shape
        return {"encoder": HYBRID_ARCHITECTURE, "transformer": self.encoder.plain_config(),
                "rocket_features": int(transform.n_kernels), "rocket_seed": int(transform.random_state),
                "rocket_in_chans": chans, "rocket_seq_len": length, "feature_dropout": float(self.feature_drop.p)}

    def fit_features(self, x_train: np.ndarray | torch.Tensor, seed: int | None = None) -> "RocketHybrid":
        """Fit MiniRocket (``seed``: the one the hybrid was built with by default) and the feature statistics on
        the training series x_train (n, C, L) only; returns the hybrid."""
        seed = int(self.rocket.transform.random_state) if seed is None else seed
        self.rocket.refit(x_train, seed=seed)
        mean, std = feature_statistics(self.rocket, torch.as_tensor(np.asarray(x_train, dtype=np.float32)))
        self.feature_mean.copy_(mean)
        self.feature_std.copy_(std)
        return self

    def global_offset(self, x: torch.Tensor, rocket_input: torch.Tensor | None = None) -> torch.Tensor:
        """(B, C, L) -> (B*C, G, D): the projected features (of ``rocket_input``, default x) on the first global
        token, for every channel."""
        source = x if rocket_input is None else rocket_input
        if source.shape != x.shape:
            raise ValueError(f"rocket_input must have the shape of x {tuple(x.shape)}, got {tuple(source.shape)}")
        feats = (self.rocket(source) - self.feature_mean) / self.feature_std
        first = self.rocket_proj(self.feature_drop(feats))  # (B, D)
        offset = first.new_zeros(x.shape[0], self.num_global_tokens, self.embed_dim)
        offset[:, 0] = first
        return offset.repeat_interleave(x.shape[1], dim=0)

    def forward(self, x: torch.Tensor, rocket_input: torch.Tensor | None = None) -> torch.Tensor:
        out = self.encoder.forward_features(x, global_offset=self.global_offset(x, rocket_input))
        return self.encoder.classify(out)

    def take_aux_logits(self) -> torch.Tensor | None:
        """The encoder's trunk-head logits of the last training forward (``trunk_head``), once, for the loss."""
        return self.encoder.take_aux_logits()


def feature_statistics(features: MiniRocketFeatures, x: torch.Tensor, batch_size: int = 64,
                       min_std: float = 0.01) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation (clamped below at ``min_std``) of the features over series x (n, C, L)."""
    with torch.no_grad():
        feats = torch.cat([features(x[i:i + batch_size]) for i in range(0, len(x), batch_size)])
    return feats.mean(0), feats.std(0, unbiased=False).clamp_min(min_std)


def build_rocket_hybrid(encoder: Encoder, x_train: np.ndarray | torch.Tensor, seed: int = 0,
                        num_features: int = 10_000, feature_dropout: float = 0.0) -> RocketHybrid:
    """Fit MiniRocket and the feature statistics on the training series x_train (n, C, L) only, and wrap
    ``encoder`` (see :class:`RocketHybrid`)."""
    features = MiniRocketFeatures.fit(x_train, num_features=num_features, seed=seed)
    mean, std = feature_statistics(features, torch.as_tensor(np.asarray(x_train, dtype=np.float32)))
    return RocketHybrid(encoder, features, mean, std, feature_dropout=feature_dropout)


HYBRID_ARCHITECTURE = "rocket_hybrid"  # the ``encoder`` key of a saved hybrid's config


def hybrid_from_config(config: dict[str, Any]) -> RocketHybrid:
    """An unfitted hybrid (:meth:`MiniRocketFeatures.unfitted`) from the config :meth:`RocketHybrid.saved_config`
    writes; loading a saved state dict into it restores the fitted one."""
    encoder = build_model(config["transformer"])
    features = MiniRocketFeatures.unfitted(config["rocket_in_chans"], config["rocket_seq_len"],
                                           config["rocket_features"], config["rocket_seed"])
    return RocketHybrid(encoder, features, torch.zeros(features.num_features), torch.ones(features.num_features),
                        feature_dropout=config["feature_dropout"])


def _hybrid_builder(name: str):
    def build(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
        overrides = dict(overrides)
        options = {key: overrides.pop(key, default) for key, default in
                   (("rocket_features", NUM_FEATURES), ("rocket_seed", 0), ("feature_dropout", 0.0))}
        transformer = model_config(HYBRID_MODELS[name], **overrides)
        if transformer["seq_len"] < MIN_LENGTH:
            raise ValueError(f"MiniRocket needs series of at least {MIN_LENGTH} steps, got seq_len="
                             f"{transformer['seq_len']}")
        return {"encoder": HYBRID_ARCHITECTURE, "transformer": transformer, **options,
                "rocket_in_chans": int(transformer.get("in_chans", 1)), "rocket_seq_len": int(transformer["seq_len"])}

    return build


register_architecture(HYBRID_ARCHITECTURE, hybrid_from_config)
for _name, _base in HYBRID_MODELS.items():
    register_model(_name, builder=_hybrid_builder(_name),
                   description=f"{_base} whose first global token adds projected MiniRocket features of the series "
                               "(fit them with RocketHybrid.fit_features)")
