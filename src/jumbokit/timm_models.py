"""jumbokit's image models in timm's registry: after ``import jumbokit``, ``timm.create_model("vit_tiny_jumbo")``.

Every image model of :func:`jumbokit.list_models` (plain and multi-stage encoders; series models take series, not
timm's images) gets a timm entrypoint of the same name and a ``pretrained_cfg`` (ImageNet's normalisation, the
model's input size and classes), so timm's ``train.py``, ``validate.py``, ``benchmark.py`` and
``resolve_model_data_config`` work on them. A name timm already has is left to timm (:data:`SKIPPED`).

timm's model arguments mean what they mean for timm's ``VisionTransformer``: ``drop_rate`` is the head dropout
(jumbokit's ``head_drop_rate``), ``proj_drop_rate`` the attention-projection and MLP dropout (jumbokit's
``drop_rate``); ``attn_drop_rate``, ``drop_path_rate``, ``img_size``, ``in_chans``, ``num_classes``, ``global_pool``
and any jumbokit option (``patch_size``, ``jumbo_multiplier``, ...) pass through. ``pretrained=True`` needs a weight
source in ``pretrained_cfg`` / ``pretrained_cfg_overlay`` (``file=`` a ``jumbokit.save``'d safetensors file, or
``hf_hub_id=``): jumbokit publishes no weights under these names.
"""
from __future__ import annotations

import logging
import sys
from functools import partial
from typing import Any, Callable

from timm.models import build_model_with_cfg, generate_default_cfgs, is_model, model_entrypoint, register_model
from torch import nn

from .data.defaults import DEFAULTS, IMAGENET_MEAN, IMAGENET_STD
from .encoders import Encoder, create_model, list_models, load_config
from .encoders.zoo import registered_config

logger = logging.getLogger(__name__)

__all__ = ["REGISTERED", "SKIPPED", "image_model_names", "timm_model_kwargs"]

_SOURCE_KEYS = ("file", "url", "hf_hub_id", "state_dict")
# timm's arguments without a jumbokit counterpart: accepted at their "off" value only
_UNSUPPORTED = {"pos_drop_rate": 0.0, "patch_drop_rate": 0.0, "drop_block_rate": 0.0}


def image_model_names() -> list[str]:
    """The names of jumbokit's zoo whose models take images (plain image encoders and multi-stage ViT-Res)."""
    names = []
    for name in list_models():
        config = registered_config(name)
        if config.get("tokenizer") == "image" or config.get("encoder") == "multistage":
            names.append(name)
    return names


def timm_model_kwargs(**kwargs: Any) -> dict[str, Any]:
    """timm's ``create_model`` arguments -> jumbokit ``create_model`` options (see the module's docstring)."""
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    for key, off in _UNSUPPORTED.items():
        value = kwargs.pop(key, off)
        if value != off:
            raise ValueError(f"jumbokit models have no {key}; got {key}={value!r} (expected {off})")
    options = {}
    if "drop_rate" in kwargs:
        options["head_drop_rate"] = kwargs.pop("drop_rate")
    if "proj_drop_rate" in kwargs:
        options["drop_rate"] = kwargs.pop("proj_drop_rate")
    if kwargs.get("global_pool") == "":
        raise ValueError("jumbokit models always pool (global_pool 'token' or 'avg'), got global_pool=''")
    return {**options, **kwargs}


def _pretrained_cfg(name: str) -> dict[str, Any]:
    """timm's ``pretrained_cfg`` of a zoo image model: no weights, ImageNet's evaluation transform at its size."""
    config = registered_config(name)
    img_size = config.get("img_size", 224)
    height, width = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    conv_stem = config.get("encoder") == "multistage" and config.get("stem", "conv") == "conv"
    return dict(
        url="", num_classes=int(config.get("num_classes", 1000)),
        input_size=(int(config.get("in_chans", 3)), height, width), pool_size=None,
        crop_pct=DEFAULTS["folder"].crop_pct, crop_mode="center", interpolation="bicubic", fixed_input_size=False,
        mean=IMAGENET_MEAN, std=IMAGENET_STD, classifier="head",
        first_conv="patch_embed.conv1.conv" if conv_stem else "patch_embed.proj",
        license="apache-2.0",
    )


def _fit_to_model(pretrained_cfg: dict[str, Any], model: nn.Module) -> dict[str, Any]:
    """The data config of the model as built: its input size and channels (ImageNet's grey mean and std for one
    channel) and its classes, so ``resolve_model_data_config`` gives the transform it takes."""
    chans = int(model.config["in_chans"])
    cfg = {**pretrained_cfg, "input_size": (chans, *model.patch_embed.img_size), "num_classes": model.num_classes}
    if len(cfg["mean"]) != chans:
        cfg["mean"] = (sum(IMAGENET_MEAN) / 3,) * chans
        cfg["std"] = (sum(IMAGENET_STD) / 3,) * chans
    return cfg


def _build(name: str, **kwargs: Any) -> nn.Module:
    model = create_model(name, **timm_model_kwargs(**kwargs))
    if isinstance(model, Encoder):  # timm's features_only: each block's output, at the patch stride
        stride = max(model.patch_embed.patch_size)
        model.feature_info = [dict(module=f"blocks.{i}", num_chs=model.embed_dim, reduction=stride)
                              for i in range(model.depth)]
    return model


def _stored_num_classes(path: str) -> int | None:
    """The classes of a ``jumbokit.save``'d file (its head is kept when the model has as many); None for a file
    without a jumbokit config."""
    try:
        return int(load_config(path).get("num_classes", 0))
    except ValueError:
        return None


def _entrypoint(name: str) -> Callable[..., nn.Module]:
    def entrypoint(pretrained: bool = False, **kwargs: Any) -> nn.Module:
        if pretrained:
            given = kwargs.get("pretrained_cfg")
            overlay = dict(kwargs.get("pretrained_cfg_overlay") or {})
            sources = {**(given if isinstance(given, dict) else {}), **overlay}
            if not any(sources.get(key) for key in _SOURCE_KEYS):
                raise ValueError(
                    f"jumbokit publishes no weights for {name!r}; pass pretrained_cfg_overlay=dict(file=...) (a "
                    "jumbokit.save'd model.safetensors) or dict(hf_hub_id='ORG/NAME'), or load a saved model with "
                    "jumbokit.load(path)")
            stored = _stored_num_classes(sources["file"]) if sources.get("file") else None
            if stored is not None and "num_classes" not in sources:
                kwargs["pretrained_cfg_overlay"] = {**overlay, "num_classes": stored}
        features_only = bool(kwargs.get("features_only"))
        if features_only:  # as timm's ViTs: forward_intermediates through FeatureGetterNet
            multistage = registered_config(name).get("encoder") == "multistage"
            out_indices = kwargs.pop("out_indices", None if multistage else 3)  # every stage / the last 3 blocks
            if out_indices is None:
                out_indices = tuple(range(len(registered_config(name)["dims"])))
            kwargs["feature_cfg"] = {"feature_cls": "getter", "out_indices": out_indices,
                                     **(kwargs.get("feature_cfg") or {})}
        model = build_model_with_cfg(partial(_build, name), name, pretrained, **kwargs)
        if not features_only:  # a feature wrapper keeps timm's feature cfg
            model.pretrained_cfg = model.default_cfg = _fit_to_model(model.pretrained_cfg, model)
        return model

    entrypoint.__name__ = entrypoint.__qualname__ = name
    entrypoint.__module__ = __name__
    entrypoint.__doc__ = f"jumbokit's {name} (jumbokit.create_model({name!r}, ...)) through timm's create_model."
    return entrypoint


def _register() -> tuple[list[str], list[str]]:
    """Register every image model of the zoo with timm (once); returns (registered, skipped) names."""
    module = sys.modules[__name__]
    registered, skipped = [], []
    for name in image_model_names():
        if is_model(name):
            (registered if model_entrypoint(name).__module__ == __name__ else skipped).append(name)
            continue
        default_cfgs.update(generate_default_cfgs({name: _pretrained_cfg(name)}))
        entrypoint = register_model(_entrypoint(name))
        setattr(module, name, entrypoint)  # timm lists the name in this module's __all__
        registered.append(name)
    if skipped:
        logger.warning(f"timm already has {', '.join(skipped)}: timm.create_model builds timm's models under these "
                       "names; use jumbokit.create_model for jumbokit's")
    return registered, skipped


default_cfgs: dict[str, Any] = {}  # timm's register_model reads each name's pretrained cfg from here
REGISTERED, SKIPPED = _register()
