"""ONNX export of jumbokit models, checked against ONNX Runtime (the optional extra ``jumbokit[deploy]``).

    import jumbokit
    from jumbokit.export import example_input, to_onnx

    model = jumbokit.reparameterize(branched_model)      # a progressive-join model exports collapsed
    path = to_onnx(model, "model.onnx", example_input(model, batch=2))

    import onnxruntime as ort
    session = ort.InferenceSession(str(path))
    logits = session.run(None, {"images": images.numpy()})[0]

Every jumbokit encoder exports: plain encoders with any global-token plug-in, collapsed progressive-join
models, multi-stage ViT-Res / ViT-ResNAS encoders (after ``Supernet.extract``), and the PatchTST family; the
classification head is part of the graph. The graph has one input (``images`` (B, C, H, W) or ``series``
(B, C, L), NaN = a missing step) and one output (``logits`` (B, num_classes), or ``features`` without a head).
The batch axis is dynamic; image sizes are dynamic when the model resamples its position table
(``dynamic_img_size``), in multiples of the patch size (times 2^(S-1) for S stages). Series keep their length.

The exporter is ``torch.onnx.export(dynamo=True)`` (torch.export + onnxscript): it translates the antialiased
bicubic resampling of the position table that dynamic image sizes need (the TorchScript exporter has no
translation for it). An exported series graph always takes the encoder's missing-value path, so NaN-padded
series give what PyTorch gives.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["DEPLOY_HINT", "OnnxCheck", "require_deploy", "check_exportable", "example_input", "to_onnx",
           "check_onnx", "onnx_io", "size_multiple", "export_onnx", "OnnxExport",
           "OnnxParityError"]

logger = logging.getLogger(__name__)

DEPLOY_HINT = "pip install 'jumbokit[deploy]'"
DEFAULT_ATOL = 1e-4


class OnnxParityError(RuntimeError):
    """ONNX Runtime's outputs differ from PyTorch's by more than the tolerance."""


@dataclass
class OnnxCheck:
    """ONNX Runtime against PyTorch: ``max_abs_diff`` over all checked inputs, ``scale`` = max |PyTorch output|,
    and ``shapes`` = the input shapes that were run."""

    max_abs_diff: float
    scale: float
    shapes: list[tuple[int, ...]] = field(default_factory=list)


def require_deploy() -> None:
    """Raise ``ImportError`` (one line naming the extra) unless onnx, onnxruntime and onnxscript import."""
    missing = []
    for name in ("onnx", "onnxruntime", "onnxscript"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ImportError(f"ONNX export needs {', '.join(missing)}: {DEPLOY_HINT}")


def check_exportable(model: nn.Module) -> None:
    """Raise ``ValueError`` for models that are not in their deploy form (a branched progressive-join model, a
    NAS supernet), models that say they are not exportable (``not_exportable``: why), or models that carry no
    jumbokit config."""
    from .encoders.branches import BranchedBlock, BranchedEncoder
    from .nas.supernet import Supernet

    if isinstance(model, BranchedEncoder) or any(isinstance(m, BranchedBlock) for m in model.modules()):
        raise ValueError("a progressive-join model exports in its collapsed form: call jumbokit.reparameterize(model) "
                         "first (after the join has reached lambda = 1) and export the plain encoder it returns")
    if getattr(model, "not_exportable", None):  # a model that runs code outside PyTorch says why it cannot export
        raise ValueError(model.not_exportable)
    if isinstance(model, Supernet):
        raise ValueError("a NAS supernet runs a different architecture per call: call supernet.extract(arch) first "
                         "(e.g. with the architecture jumbokit nas-search found) and export the encoder it returns")
    if not isinstance(getattr(model, "config", None), dict) or "tokenizer" not in model.config:
        raise ValueError(f"expected a jumbokit encoder (Encoder or MultiStageEncoder, with a .config), "
                         f"got {type(model).__name__}")


def _device(model: nn.Module) -> torch.device:
    param = next(model.parameters(), None)
    return torch.device("cpu") if param is None else param.device


def _is_series(model: nn.Module) -> bool:
    return model.config["tokenizer"] == "series"


def size_multiple(model: nn.Module) -> tuple[int, int]:
    """The step of the image sizes an image model takes: the patch size, times 2^(S-1) for S stages."""
    ph, pw = model.patch_embed.patch_size
    factor = 2 ** (len(model.config["dims"]) - 1) if model.config.get("encoder") == "multistage" else 1
    return ph * factor, pw * factor


def example_input(model: nn.Module, batch: int = 2, img_size: int | tuple[int, int] | None = None,
                  seed: int = 0) -> torch.Tensor:
    """A random input of the model's config: images (B, in_chans, H, W) at ``img_size`` (default: the config's),
    or series (B, in_chans, seq_len) whose last channel of the first sample ends in NaN (missing steps)."""
    if batch < 1:
        raise ValueError(f"expected a batch size >= 1, got {batch}")
    check_exportable(model)
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    chans = int(cfg["in_chans"])
    if _is_series(model):
        if img_size is not None:
            raise ValueError(f"img_size applies to image models; this series model takes series of "
                             f"{cfg['seq_len']} steps")
        length = int(cfg["seq_len"])
        x = torch.randn(batch, chans, length, generator=gen)
        x[0, -1, length - max(1, length // 4):] = float("nan")
        return x
    size = cfg["img_size"] if img_size is None else img_size
    height, width = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    return torch.randn(batch, chans, height, width, generator=gen)


def _dynamic_size_allowed(model: nn.Module) -> str | None:
    """None when the image size can be a dynamic axis, else the reason it cannot."""
    if _is_series(model):
        return f"series models export with a fixed length ({model.config['seq_len']} steps: it sets the patch count)"
    if not model.config.get("dynamic_img_size", True):
        return (f"the model was built with dynamic_img_size=False, so its position table fits only "
                f"{model.config['img_size']} px; export with dynamic_size=False or rebuild it with "
                "dynamic_img_size=True")
    return None


def _dynamic_shapes(model: nn.Module, example: torch.Tensor, dynamic_batch: bool, dynamic_size: bool) -> tuple:
    from torch.export import Dim

    axes: dict[int, Any] = {}
    if dynamic_batch:
        axes[0] = Dim("batch", min=1)
    if dynamic_size:
        (mh, mw), (height, width) = size_multiple(model), example.shape[-2:]
        if height % mh or width % mw:
            raise ValueError(f"a dynamic image size takes multiples of {mh}x{mw} px; the example is {height}x{width}")
        axes[2], axes[3] = mh * Dim("height_steps", min=1), mw * Dim("width_steps", min=1)
    return (axes or None,)


@dataclass
class OnnxExport:
    """What :func:`export_onnx` wrote: the path, and the ONNX Runtime check (None when not checked)."""

    path: Path
    check: OnnxCheck | None = None


def to_onnx(model: nn.Module, path: str | os.PathLike, example: torch.Tensor, *, dynamic_batch: bool = True,
            dynamic_size: bool | None = None, opset: int | None = None, check: bool = True,
            atol: float = DEFAULT_ATOL) -> Path:
    """Export ``model`` (in eval mode, head included) to ``path`` as ONNX and return the path.

    example: one input batch, images (B, C, H, W) or series (B, C, L) (see :func:`example_input`).
    dynamic_batch: the batch axis is dynamic (else fixed to the example's).
    dynamic_size: image height and width are dynamic; None = whenever the model allows it (image models built
        with ``dynamic_img_size``); True on a model that does not allow it raises ValueError.
    opset: ONNX opset (None = the exporter's default).
    check: run the graph in ONNX Runtime on the example and on inputs of other shapes, log the max abs difference
        to PyTorch and raise :class:`OnnxParityError` when it exceeds ``atol * max(1, max |output|)`` (then nothing
        is written).
    The file is written atomically; a model that is not in its deploy form raises ValueError first.
    """
    return export_onnx(model, path, example, dynamic_batch=dynamic_batch, dynamic_size=dynamic_size, opset=opset,
                       check=check, atol=atol).path


def export_onnx(model: nn.Module, path: str | os.PathLike, example: torch.Tensor, *, dynamic_batch: bool = True,
                dynamic_size: bool | None = None, opset: int | None = None, check: bool = True,
                atol: float = DEFAULT_ATOL) -> OnnxExport:
    """:func:`to_onnx` that also returns the ONNX Runtime check."""
    require_deploy()
    check_exportable(model)
    if not isinstance(example, torch.Tensor) or not example.is_floating_point():
        raise ValueError(f"expected a floating-point example tensor, got {type(example).__name__}"
                         f"{'' if not isinstance(example, torch.Tensor) else f' of dtype {example.dtype}'}")
    reason = _dynamic_size_allowed(model)
    if dynamic_size and reason:
        raise ValueError(f"cannot export a dynamic input size: {reason}")
    dynamic_size = reason is None if dynamic_size is None else bool(dynamic_size)
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"expected a file path for the ONNX graph, got the directory {path}")
    example = example.to(_device(model))
    was_training = model.training
    model.eval()
    result: list[OnnxCheck] = []
    try:
        with torch.no_grad():
            model(example)  # the model's own one-line errors on a bad example, before anything is exported
        # a dynamic axis cannot be traced at size 1 (torch.export specialises it): trace a batch of two
        traced = example.expand(2, *example.shape[1:]) if dynamic_batch and example.shape[0] == 1 else example
        program = _export(model, traced, dynamic_batch, dynamic_size, opset)
        from .encoders.io import atomic_write

        def write(tmp: str) -> None:
            program.save(tmp, external_data=False)
            if check:
                result.append(check_onnx(tmp, model, _check_inputs(model, example, dynamic_batch, dynamic_size)))
                _judge(result[0], atol)

        atomic_write(path, write)
    finally:
        model.train(was_training)
    logger.debug("wrote %s (%s, %s)", path, _describe(model), "dynamic batch" if dynamic_batch else "fixed batch")
    return OnnxExport(path, result[0] if result else None)


def _export(model: nn.Module, example: torch.Tensor, dynamic_batch: bool, dynamic_size: bool, opset: int | None):
    import warnings

    kind = "series" if _is_series(model) else "images"
    output = "logits" if getattr(model, "num_classes", 0) else "features"
    # traced with autograd on: the blocks then take their out-of-place path (concatenations instead of the
    # in-place slice writes of inference mode, which would become ScatterND nodes)
    with warnings.catch_warnings(), torch.enable_grad():
        warnings.simplefilter("ignore")  # the exporter's deprecation and tracing chatter
        program = torch.onnx.export(
            model, (example,), None, dynamo=True, input_names=[kind], output_names=[output], opset_version=opset,
            dynamic_shapes=_dynamic_shapes(model, example, dynamic_batch, dynamic_size), verbose=False,
            external_data=False, optimize=True,
        )
    import onnx

    meta = program.model_proto.metadata_props
    for key, value in (("jumbokit_model", _describe(model)), ("jumbokit_input", _input_rule(model, dynamic_size))):
        meta.append(onnx.StringStringEntryProto(key=key, value=value))
    return program


def _describe(model: nn.Module) -> str:
    cfg = model.config
    layers = getattr(model, "depth", len(getattr(model, "blocks", [])))
    return (f"{cfg.get('encoder', 'plain')} {cfg['tokenizer']} encoder, {cfg['global_tokens']} global tokens, "
            f"{layers} layers")


def _input_rule(model: nn.Module, dynamic_size: bool) -> str:
    cfg = model.config
    if _is_series(model):
        return f"series (batch, {cfg['in_chans']}, {cfg['seq_len']}) float32, NaN = missing step"
    if dynamic_size:
        mh, mw = size_multiple(model)
        return f"images (batch, {cfg['in_chans']}, H, W) float32, H a multiple of {mh}, W a multiple of {mw}"
    return f"images (batch, {cfg['in_chans']}, H, W) float32 at the exported size"


def _check_inputs(model: nn.Module, example: torch.Tensor, dynamic_batch: bool, dynamic_size: bool) -> list:
    """The example, plus a batch of another size (series: with NaN steps inside and at the end) and, for a
    dynamic image size, another size."""
    inputs = [example]
    batch = example.shape[0] + 1 if dynamic_batch else example.shape[0]
    gen = torch.Generator().manual_seed(1)
    other = torch.randn((batch, *example.shape[1:]), generator=gen).to(example)
    if _is_series(model):
        length = other.shape[-1]
        other[0, 0, length // 3: length // 3 + max(1, length // 8)] = float("nan")
        other[-1, -1, length // 2:] = float("nan")
    inputs.append(other)
    if dynamic_size:
        mh, mw = size_multiple(model)
        inputs.append(torch.randn(batch, example.shape[1], example.shape[2] + mh, example.shape[3] + 2 * mw,
                                  generator=gen).to(example))
    return inputs


def check_onnx(path: str | os.PathLike, model: nn.Module, inputs: list[torch.Tensor]) -> OnnxCheck:
    """Run the ONNX graph at ``path`` in ONNX Runtime (CPU) on each input and compare with ``model`` (eval mode)."""
    require_deploy()
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    worst, scale, device = 0.0, 0.0, _device(model)
    with torch.no_grad():
        for x in inputs:
            ref = model(x.to(device)).float().cpu()
            out = torch.from_numpy(session.run(None, {name: x.detach().cpu().numpy()})[0])
            if out.shape != ref.shape:
                raise RuntimeError(f"ONNX Runtime gave shape {tuple(out.shape)} for input {tuple(x.shape)}, "
                                   f"PyTorch {tuple(ref.shape)}")
            diff = (out - ref).abs().nan_to_num(nan=float("inf")).max().item()
            worst, scale = max(worst, diff), max(scale, ref.abs().max().item())
    return OnnxCheck(worst, scale, [tuple(x.shape) for x in inputs])


def _judge(result: OnnxCheck, atol: float) -> None:
    shapes = ", ".join("x".join(map(str, s)) for s in result.shapes)
    logger.info("ONNX Runtime vs PyTorch: max abs difference %.3g (outputs up to %.3g) on inputs %s",
                result.max_abs_diff, result.scale, shapes)
    if not result.max_abs_diff <= atol * max(1.0, result.scale):
        raise OnnxParityError(f"ONNX Runtime differs from PyTorch by {result.max_abs_diff:.3g} (outputs up to "
                           f"{result.scale:.3g}, tolerance {atol:g}); the file was not written")


def onnx_io(path: str | os.PathLike) -> dict[str, list[tuple[str, list[int | str]]]]:
    """Names and shapes (ints, or names of dynamic axes) of a graph's inputs and outputs."""
    require_deploy()
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph

    def shape(value) -> list[int | str]:
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

    return {"inputs": [(v.name, shape(v)) for v in graph.input],
            "outputs": [(v.name, shape(v)) for v in graph.output]}
