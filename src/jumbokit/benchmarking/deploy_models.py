"""The models the deployment benchmarks time and how ONNX Runtime runs them (``benchmarks/deploy.py`` measures
speed, ``benchmarks/deploy_profile.py`` profiles its operators; both build the same models here).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from torch import nn

import jumbokit

__all__ = ["BASELINE", "COLLAPSE_BRANCHES", "JUMBO", "REGISTERS", "SIX", "build_models", "ort_session", "perturb"]

COLLAPSE_BRANCHES = (2, 3, 4)
BASELINE, SIX, REGISTERS, JUMBO = "ViT-Tiny 12 layers", "collapsed 6 layers (n=2)", "ViT-Tiny R=16", "ViT-Tiny J=6"


def perturb(model: nn.Module, gen: torch.Generator) -> nn.Module:
    """Norm scales ~ 1 + N(0, 0.1), biases / LayerScales ~ N(0, 0.05), tokens and positions + N(0, 0.02)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if param.ndim == 1 and name.endswith("weight"):
                param.copy_(1.0 + 0.1 * noise)
            elif name.endswith(("bias", "gamma")):
                param.add_(0.05 * noise)
            elif "token" in name or "pos_embed" in name:
                param.add_(0.02 * noise)
    return model.eval()


def build_models(img_size: int, seed: int = 0) -> dict[str, nn.Module]:
    """The six models at ``img_size`` px: ViT-Tiny 12 layers, its collapsed 6/4/3-layer forms, registers R=16 and
    Jumbo J=6, perturbed (:func:`perturb`) from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    common = dict(img_size=img_size, num_classes=1000)
    models = {BASELINE: perturb(jumbokit.create_model("vit_tiny_cls", **common), gen)}
    for n in COLLAPSE_BRANCHES:
        branched = perturb(jumbokit.create_model("vit_tiny_cls", branches=n, init_values=0.1, **common), gen)
        branched.set_join(1.0)
        models[f"collapsed {12 // n} layers (n={n})"] = jumbokit.reparameterize(branched).eval()
    models[REGISTERS] = perturb(jumbokit.create_model("vit_tiny_reg16", **common), gen)
    models[JUMBO] = perturb(jumbokit.create_model("vit_tiny_jumbo", jumbo_multiplier=6, **common), gen)
    return models


def ort_session(path: Path, threads: int, profile: bool = False):
    """An ONNX Runtime CPU session of ``path`` on ``threads`` intra-op threads, sequential, every graph optimisation
    on; with ``profile``, ORT's profiler writes beside the temp folder."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.enable_profiling = profile
    if profile:
        options.profile_file_prefix = str(Path(tempfile.gettempdir()) / "jumbokit_ort_profile")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
