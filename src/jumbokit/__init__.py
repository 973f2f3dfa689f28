"""jumbokit: fast plain transformers for images and time series.

    import jumbokit
    model = jumbokit.create_model("vit_tiny_jumbo", num_classes=10, img_size=32, patch_size=4)
    out = model.forward_features(images)        # EncoderOutput
    jumbokit.save(model, "run/"); model = jumbokit.load("run/")
"""

from .encoders import EncoderOutput, create_model, list_models, save
from .encoders.branches import reparameterize
from .hub import push_to_hub  # a run or model to the Hugging Face Hub (jumbokit.load reads hf-hub: names)
from .pretrained import load  # a saved model with its data config (model.pretrained_cfg)
from .timeseries import models as _series_models  # noqa: F401  (the series tokenizer and models join the zoo)
from . import timm_models as _timm_models  # noqa: F401  (timm.create_model builds the zoo's image models)

__version__ = "0.1.0"

__all__ = ["create_model", "list_models", "load", "save", "push_to_hub", "reparameterize", "EncoderOutput",
           "__version__"]
