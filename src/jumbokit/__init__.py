"""jumbokit: fast plain transformers for images and time series.

    import jumbokit
    model = jumbokit.create_model("vit_tiny_jumbo", num_classes=10, img_size=32, patch_size=4)
    out = model.forward_features(images)        # EncoderOutput
    jumbokit.save(model, "run/"); model = jumbokit.load("run/")
"""

from importlib import import_module as _import_module

from .encoders import EncoderOutput, create_model, list_models, load, save

__version__ = "0.1.0"

# Named configs registered outside the core (kept light: no heavy imports at module level).
for _module in ("jumbokit.timeseries.models",):
    try:
        _import_module(_module)
    except ModuleNotFoundError as _err:  # the subpackage is optional while it is being built
        if _err.name != _module:
            raise


def reparameterize(model):
    """Collapse a progressive-join multi-branch encoder into a plain Encoder (see encoders.branches)."""
    from .encoders.branches import reparameterize as _reparameterize

    return _reparameterize(model)


__all__ = ["create_model", "list_models", "load", "save", "reparameterize", "EncoderOutput", "__version__"]
