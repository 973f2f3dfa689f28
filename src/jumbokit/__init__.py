"""jumbokit: fast plain transformers for images and time series.

    import jumbokit
    model = jumbokit.create_model("vit_tiny_jumbo", num_classes=10, img_size=32, patch_size=4)
    out = model.forward_features(images)        # EncoderOutput
    jumbokit.save(model, "run/"); model = jumbokit.load("run/")
"""

from wrapt import register_post_import_hook

from .encoders import EncoderOutput, list_models, save
from .encoders.branches import reparameterize
from .hub import push_to_hub  # a run or model to the Hugging Face Hub (jumbokit.load reads hf-hub: names)
from .pretrained import create_model, load  # pretrained=: weights of a saved run, file or hf-hub: name
from .timeseries import models as _series_models  # noqa: F401  (the series tokenizer and models join the zoo)

__version__ = "0.1.0"



def _register_with_timm(timm_module) -> None:
    """timm.create_model builds the zoo's image models: they join timm's registry as soon as timm is imported (at
    once if it already is), so ``import jumbokit`` alone does not pay timm's import time."""
    from . import timm_models  # noqa: F401  (registers on import)


# wrapt's post-import hook: a well-kept way to act when another package is imported, before or after this one
register_post_import_hook(_register_with_timm, "timm")

__all__ = ["create_model", "list_models", "load", "save", "push_to_hub", "reparameterize", "EncoderOutput",
           "__version__"]
