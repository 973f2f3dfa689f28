"""A frozen encoder with a ridge head: the pretrained encoder used as a fixed feature extractor.

``tstrain --init ENCODER --frozen`` (and the aeon estimator's ``frozen=True``) trains nothing by gradient. Every
training series goes once through the frozen encoder (eval mode, no augmentation) to the feature its linear head
reads (:func:`encoder_features`: the pooled feature, concatenated over channels); the features are scaled to unit
variance and a ridge regression onto the -1 / +1 class codes is fitted with the penalty chosen by leave-one-out
error, the classifier of MiniRocket and its family
(:class:`~jumbokit.timeseries.rocket_classifiers.FeatureRidgeClassifierCV`). :func:`fit_ridge_head` then writes the
regression into the model's own ``head`` (the scaling folded into its weights, the scores multiplied by the late
fusion's :data:`~jumbokit.timeseries.fusion.RIDGE_TEMPERATURE`), so the model's logits are the ridge scores and its
softmax is the probability :func:`~jumbokit.timeseries.fusion.ridge_proba` gives them. What is kept is an ordinary
series model: ``jumbokit predict``, ``validate``, the Hub and ONNX export take it unchanged.

The fit is one pass over the training series plus a ridge regression: no learning rate, dropout or seed enters it,
so a sweep of ``--frozen`` runs has one grid point and one seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["encoder_features", "fit_ridge_head", "check_frozen_model"]


def check_frozen_model(model: nn.Module, name: str = "the model") -> None:
    """ValueError unless ``model`` is an encoder whose one linear ``head`` reads its pooled feature (a second head,
    such as the trunk's ``trunk_head``, would keep its random weights)."""
    head = getattr(model, "head", None)
    if not (hasattr(model, "forward_features") and hasattr(model, "forward_head") and isinstance(head, nn.Linear)):
        raise ValueError(f"a frozen encoder with a ridge head needs an encoder with a linear head; {name} is a "
                         f"{type(model).__name__}")
    if getattr(model, "aux_head", None) is not None:
        raise ValueError(f"a frozen encoder with a ridge head fits one head; {name} has a second (trunk_head): "
                         "build it without --trunk-head")


@torch.no_grad()
def encoder_features(model: nn.Module, x: np.ndarray | torch.Tensor, batch_size: int = 256) -> np.ndarray:
    """The features (n, F) float32 that ``model``'s linear head reads, of series x (n, C, L) in eval mode (the
    batching of ``run.predict_proba``, which this module cannot import: ``run`` imports it)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    x = torch.as_tensor(x, dtype=torch.float32)
    out = [model.forward_head(model.forward_features(x[s:s + batch_size].to(device)), pre_logits=True).float().cpu()
           for s in range(0, x.shape[0], batch_size)]
    model.train(was_training)
    return torch.cat(out).numpy()


def fit_ridge_head(model: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 256) -> dict[str, Any]:
    """Fit ``model.head`` (in place) as a ridge classifier on the frozen encoder's features of training series x
    (n, C, L) with class codes y (n,) in 0..K-1 (K = the head's outputs); every other weight is left as it is.

    A class without a training series gets the score of a -1 code everywhere. Returns what the fit chose and gave:
    ``{"alpha", "features" (their width), "train_logits" (n, K): the head's logits of x}``."""
    from .fusion import RIDGE_TEMPERATURE
    from .rocket_classifiers import FeatureRidgeClassifierCV

    check_frozen_model(model)
    y = np.asarray(y, dtype=np.int64)
    num_classes = model.head.out_features
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(f"expected one class code per series ({len(x)}), got shape {y.shape}")
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"expected class codes in 0..{num_classes - 1} (the head's classes), got {y.min()}..{y.max()}")
    if len(np.unique(y)) < 2:
        raise ValueError(f"a ridge head needs training series of two classes or more, got {len(np.unique(y))}")
    features = encoder_features(model, x, batch_size)
    bad = ~np.isfinite(features).all(axis=1)
    if bad.any():
        raise ValueError(f"the frozen encoder gives non-finite features for {int(bad.sum())} of {len(x)} training "
                         f"series (first: {np.flatnonzero(bad)[:5].tolist()}); drop or fill series without observed "
                         "values")
    scale = features.astype(np.float64).std(axis=0)
    scale[scale < 1e-12] = 1.0  # a constant feature: its weight stays 0 after the ridge's centring
    ridge = FeatureRidgeClassifierCV().fit((features / scale).astype(np.float32), y)
    coef = np.atleast_2d(ridge.coef_).astype(np.float64)
    intercept = ridge.intercept_.astype(np.float64)
    if len(ridge.classes_) == 2:  # one score column, positive for the second class
        coef, intercept = np.vstack([-coef, coef]), np.concatenate([-intercept, intercept])
    weight = np.zeros((num_classes, features.shape[1]))
    bias = np.full(num_classes, -1.0)  # a class never seen in training: the score of a -1 code
    weight[ridge.classes_] = coef / scale
    bias[ridge.classes_] = intercept
    with torch.no_grad():
        model.head.weight.copy_(torch.from_numpy(RIDGE_TEMPERATURE * weight))
        model.head.bias.copy_(torch.from_numpy(RIDGE_TEMPERATURE * bias))
    train_logits = features.astype(np.float64) @ (RIDGE_TEMPERATURE * weight).T + RIDGE_TEMPERATURE * bias
    return {"alpha": ridge.alpha_, "features": int(features.shape[1]), "train_logits": train_logits}
