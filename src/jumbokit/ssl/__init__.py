"""Self-supervised pretraining and probing: MAE around any image encoder, linear probes on frozen features."""

from .linear_probe import (
    FEATURE_KINDS,
    LinearProbe,
    build_probe_optimizer,
    evaluate_head,
    extract_features,
    make_probe_head,
    probe_feature_dim,
    topk_accuracy,
    train_head_on_features,
)
from .mae import (
    MAEOutput,
    MaskedAutoencoder,
    masked_patch_loss,
    normalize_patches,
    num_visible,
    patchify,
    random_masking,
    unpatchify,
)

__all__ = [
    "MaskedAutoencoder",
    "MAEOutput",
    "num_visible",
    "random_masking",
    "patchify",
    "unpatchify",
    "normalize_patches",
    "masked_patch_loss",
    "LinearProbe",
    "FEATURE_KINDS",
    "make_probe_head",
    "probe_feature_dim",
    "extract_features",
    "build_probe_optimizer",
    "train_head_on_features",
    "evaluate_head",
    "topk_accuracy",
]
