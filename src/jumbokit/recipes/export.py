"""Export a saved model to ONNX and check it with ONNX Runtime (needs `pip install 'jumbokit[deploy]'`).

    jumbokit export runs/supervised_vit_tiny_jumbo_digits                # -> <run dir>/model.onnx
    jumbokit export runs/tstrain/model.safetensors --out patchtst.onnx
    jumbokit export RUN --reparameterize --img-size 224 --out vit6.onnx  # a progressive-join run, collapsed
    jumbokit-export RUN --static-batch --batch 1                         # the same command as a script

The model is rebuilt with ``jumbokit.load`` (a run directory holding model.safetensors + model_config.json, or a
.safetensors file). The example input comes from the model's config: images (B, in_chans, H, W) at its img_size
(or --img-size), series (B, in_chans, seq_len) with missing (NaN) steps. The graph's batch axis is dynamic
(unless --static-batch), and so is the image size when the model resamples its position table; the
classification head is included. ONNX Runtime is compared with PyTorch on the example and on other shapes;
prints the graph's input and output names and shapes and the largest difference.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    from jumbokit.export import DEFAULT_ATOL

    p = argparse.ArgumentParser(prog="jumbokit export", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("source", nargs="?", metavar="RUN_DIR|MODEL.safetensors",
                   help="the saved model: a run directory or a .safetensors file (or pass --checkpoint)")
    p.add_argument("--checkpoint", default=None, help="the same as the positional argument")
    p.add_argument("--out", default=None,
                   help="the .onnx file to write (default: model.onnx in the run directory, or MODEL.onnx beside "
                        "MODEL.safetensors)")
    p.add_argument("--img-size", type=int, nargs="+", default=None, metavar="PX",
                   help="image size of the example, one side or H W (default: the model's img_size)")
    p.add_argument("--batch", type=int, default=2,
                   help="batch of the example; the exported batch axis stays dynamic (default: %(default)s)")
    p.add_argument("--static-batch", action="store_true",
                   help="fix the batch axis to --batch instead of a dynamic one (default: off)")
    p.add_argument("--dynamic-size", action=argparse.BooleanOptionalAction, default=None,
                   help="dynamic image height and width (default: on when the model resamples its position "
                        "table, off for series)")
    p.add_argument("--reparameterize", action="store_true",
                   help="collapse a progressive-join (branched) model into its plain encoder before export "
                        "(jumbokit.reparameterize; its join must have reached lambda = 1) (default: off)")
    p.add_argument("--opset", type=int, default=None, help="ONNX opset (default: the exporter's)")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="compare ONNX Runtime with PyTorch before the file is written (default: on)")
    p.add_argument("--atol", type=float, default=DEFAULT_ATOL,
                   help="largest accepted difference, times max(1, largest output) (default: %(default)s)")
    p.add_argument("--debug", action="store_true", help="print the full traceback of errors (default: off)")
    return p


def _source(args: argparse.Namespace) -> Path:
    if args.source and args.checkpoint and Path(args.source) != Path(args.checkpoint):
        raise ValueError(f"got two models, {args.source} and --checkpoint {args.checkpoint}; pass one")
    source = args.source or args.checkpoint
    if not source:
        raise ValueError("expected the saved model: jumbokit export RUN_DIR|MODEL.safetensors [--out model.onnx]")
    return Path(source)


def _out_path(args: argparse.Namespace, source: Path) -> Path:
    if args.out is None:
        return source / "model.onnx" if source.is_dir() else source.with_suffix(".onnx")
    out = Path(args.out)
    if out.suffix != ".onnx":
        raise ValueError(f"--out must name a .onnx file, got {args.out}")
    if out.is_dir():
        raise ValueError(f"--out {args.out} is a directory; name the .onnx file to write")
    return out


def _check_flags(args: argparse.Namespace) -> None:
    if args.batch < 1:
        raise ValueError(f"--batch must be an integer >= 1, got {args.batch}")
    if args.img_size is not None and (len(args.img_size) > 2 or min(args.img_size) < 1):
        raise ValueError(f"--img-size takes one side or H W in pixels (>= 1), got {' '.join(map(str, args.img_size))}")
    if args.atol <= 0:
        raise ValueError(f"--atol must be > 0, got {args.atol}")


def load_for_export(source: Path, reparameterize: bool):
    """The saved model in its deploy form; a supernet, a branched model without ``reparameterize`` and a fused
    series model (its ROCKET half has no ONNX graph here) are refused."""
    import jumbokit
    from jumbokit.encoders import load_config
    from jumbokit.timeseries.fusion import FUSION_FILE

    if source.is_dir() and (source / FUSION_FILE).is_file():
        raise ValueError(f"{source} is a fused series model (a transformer and a ROCKET classifier, {FUSION_FILE}); "
                         "ONNX export would hold the transformer alone, which scores otherwise: export the "
                         "transformer's own kept folder (models/<set>/<model>) if that is what you want")
    config = load_config(source)
    if config.get("encoder") == "supernet":
        raise ValueError(f"{source} holds a NAS supernet: extract an architecture first (jumbokit nas-search, then "
                         "Supernet.extract(arch) and jumbokit.save) and export that model")
    if config.get("branched") and not reparameterize:
        raise ValueError(f"{source} holds a progressive-join (branched) model: pass --reparameterize to export its "
                         "collapsed plain encoder (or call jumbokit.reparameterize(model) first)")
    model = jumbokit.load(source)
    return jumbokit.reparameterize(model) if reparameterize else model


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from jumbokit.logs import configure_logging

    args = build_parser().parse_args(argv)
    configure_logging()
    logging.getLogger("jumbokit.export").setLevel(logging.WARNING)  # its check line is in the summary below
    from jumbokit.export import example_input, export_onnx, onnx_io, require_deploy

    try:
        require_deploy()
    except ImportError as err:  # a missing extra is a setup error: one line and exit status 2, as bad input
        raise RuntimeError(str(err)) from None
    _check_flags(args)
    source = _source(args)
    out = _out_path(args, source)
    model = load_for_export(source, args.reparameterize)
    size = None if args.img_size is None else (args.img_size * 2)[:2]
    example = example_input(model, batch=args.batch, img_size=size)
    result = export_onnx(model, out, example, dynamic_batch=not args.static_batch, dynamic_size=args.dynamic_size,
                         opset=args.opset, check=args.check, atol=args.atol)  # OnnxParityError: a RuntimeError
    graph = onnx_io(out)
    summary: dict[str, Any] = {"source": str(source), "out": str(out), **graph,
                               "max_abs_diff": None if result.check is None else result.check.max_abs_diff}
    print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB)")
    for role in ("inputs", "outputs"):
        for name, shape in graph[role]:
            print(f"  {role[:-1]:<7} {name:<9} ({', '.join(map(str, shape))})")
    if result.check is not None:
        shapes = ", ".join("x".join(map(str, s)) for s in result.check.shapes)
        print(f"  ONNX Runtime vs PyTorch: max abs difference {result.check.max_abs_diff:.3g} "
              f"(outputs up to {result.check.scale:.3g}) on inputs {shapes}")
    return summary
