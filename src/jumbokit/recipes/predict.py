"""Predict the classes of images or series with a saved classifier: a CSV of the top-k labels and probabilities.

    jumbokit predict --checkpoint runs/supervised_vit_pico_jumbo_digits photos/     # every image under photos/
    jumbokit predict --checkpoint RUN a.png b.jpg "scans/**/*.png" --topk 3 --out labels.csv
    jumbokit predict --checkpoint sweep/models/GunPoint/patchtst_jumbo GunPoint_TEST.ts new.npy
    jumbokit predict --checkpoint sweep --ensemble series.csv        # a sweep that kept one model: its ensemble

Inputs are image files, folders (searched recursively) and glob patterns. Each image gets the model's own
evaluation transform (its data config: size, normalisation, crop) and must have the model's channels (gray for a
1-channel model, colour for a 3-channel one) unless --convert converts it as training does. The CSV has one row
per image, in input order: file, label (when every image sits in a folder named after one of the model's classes,
DIR/<class>/<image>: then the accuracy is printed and a confusion matrix written beside the CSV), then top1_label, top1_prob, ..., topK_label, topK_prob (softmax probabilities,
class names from the model's data config). It is written only when every image was read (a temp file renamed at
the end); an unreadable image, an image of the wrong channels or a missing checkpoint stops with one line.

A series model (a tstrain sweep's kept model, models/DATASET/MODEL, or the sweep folder when it kept one; a saved
PatchTSTClassifier) takes .ts, .tsv (UCR 2018: label, then values), .npy ((n, L) or (n, C, L)) and .csv files (one
series per row; for C channels, C consecutive rows per series), prepared as its training data was (its stored
normalisation and length handling). Rows: file, series (position in the file), label (where the file has labels),
then the top-k labels and probabilities; --ensemble averages the probabilities of the sweep's top-k ensemble, as
the sweep's "ens" column does. A series of the wrong channel count or an unreadable file stops with one line.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jumbokit predict", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="image files, folders or glob patterns (series models: .ts, .tsv, .csv, .npy files)")
    p.add_argument("--checkpoint", required=True, metavar="RUN",
                   help="the saved classifier: a run directory, a .safetensors file, hf-hub:ORG/NAME, or a "
                        "tstrain sweep's kept model (models/DATASET/MODEL, or the sweep folder when it kept one)")
    p.add_argument("--ensemble", action="store_true",
                   help="series: the mean probabilities of the sweep's top-k ensemble (tstrain --ensemble K) "
                        "instead of its chosen run (default: off)")
    p.add_argument("--topk", type=int, default=5, help="labels per image or series, best first (default: %(default)s)")
    p.add_argument("--out", default="predictions.csv", metavar="CSV", help="the CSV to write (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=64, help="images or series per forward pass (default: %(default)s)")
    p.add_argument("--num-workers", type=int, default=0, metavar="N",
                   help="DataLoader workers reading images (default: %(default)s)")
    p.add_argument("--convert", action="store_true",
                   help="convert images of other channels to the model's (luminance, or gray replicated) instead "
                        "of stopping (default: off)")
    p.add_argument("--cpu", action="store_true", help="predict on CPU even when a GPU is present (default: off)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar (default: shown)")
    p.add_argument("--debug", action="store_true", help="print the full traceback of errors (default: off)")
    return p


def check_flags(args: argparse.Namespace) -> None:
    """One-line errors for out-of-range flags, before any work."""
    for flag, value, low in (("--topk", args.topk, 1), ("--batch-size", args.batch_size, 1),
                             ("--num-workers", args.num_workers, 0)):
        if value < low:
            raise ValueError(f"{flag} must be >= {low}, got {value}")
    out = Path(args.out)
    if out.suffix.lower() != ".csv":
        raise ValueError(f"--out must name a .csv file, got {args.out}")
    if out.is_dir():
        raise ValueError(f"--out {args.out} is a folder; name the .csv file to write")


def summary(rows: list[dict[str, Any]], checkpoint: str, out: Path, shown: int = 10, unit: str = "image(s)") -> str:
    """The lines printed after a prediction: counts, the most frequent labels, the mean top-1 probability, and
    the accuracy against the inputs' own labels where every row has one."""
    from jumbokit.inference import label_counts

    counts = label_counts(rows)
    mean_prob = sum(r["top1_prob"] for r in rows) / len(rows)
    top = ", ".join(f"{label} {n}" for label, n in list(counts.items())[:shown])
    more = f", ... ({len(counts)} labels)" if len(counts) > shown else ""
    text = (f"predicted {len(rows)} {unit} with {checkpoint} -> {out}\n"
            f"top-1 labels: {top}{more}\nmean top-1 probability: {mean_prob:.3f}")
    if all("label" in r for r in rows):
        right = sum(r["label"] == r["top1_label"] for r in rows)
        text += f"\ntop-1 accuracy against the files' labels: {100.0 * right / len(rows):.2f}% ({right}/{len(rows)})"
    return text


def predict_series(args: argparse.Namespace, device: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(the rows of a series model's (or ensemble's) predictions for every input file, all files read first; its
    class names)."""
    from jumbokit.inference import find_files
    from jumbokit.pretrained import local_path
    from jumbokit.inference.series import (SERIES_SUFFIXES, load_series_predictor, read_series_file, stack_raw,
                                           topk_rows)

    predictor = load_series_predictor(local_path(args.checkpoint), ensemble=args.ensemble or None, device=device)
    cfg = predictor.cfg
    files = [read_series_file(path, cfg) for path in find_files(args.inputs, SERIES_SUFFIXES, "series")]
    for f in files:
        predictor.check_raw(f.raw, str(f.path))
    names = [str(n) for n in cfg["label_names"]]
    x = np.concatenate([f.x for f in files])
    raw = stack_raw(files) if predictor.fused else None
    proba = predictor.proba(x, raw, batch_size=args.batch_size, progress=not args.no_progress)
    rows, start = [], 0
    for f in files:
        rows += topk_rows(f, proba[start:start + len(f.x)], names, args.topk)
        start += len(f.x)
    return rows, names


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import torch

    from jumbokit.inference import class_names, is_series_checkpoint
    from jumbokit.inference.images import ImageFiles, find_images, load_classifier, predict_topk
    from jumbokit.logs import configure_logging
    from jumbokit.training.rundir import atomic_write_text, csv_text

    configure_logging()
    args = build_parser().parse_args(argv)
    check_flags(args)
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    series = is_series_checkpoint(args.checkpoint)
    if series:
        rows, names = predict_series(args, device)
    else:
        if args.ensemble:
            raise ValueError("--ensemble takes a tstrain sweep's kept series model; "
                             f"{args.checkpoint} is not a series model")
        model, cfg = load_classifier(args.checkpoint, device=device)
        files = ImageFiles(find_images(args.inputs), cfg, convert=args.convert)
        rows = predict_topk(model, files, cfg, topk=args.topk, batch_size=args.batch_size,
                            num_workers=args.num_workers, progress=not args.no_progress)
        names = class_names(cfg, int(model.num_classes))
        rows = with_folder_labels(rows, names)
    out = Path(args.out)
    atomic_write_text(out, csv_text(rows))
    text = summary(rows, str(args.checkpoint), out, unit="series" if series else "image(s)")
    if rows and all("label" in r for r in rows):
        text += "\n" + write_confusion(rows, names, out, str(args.checkpoint))
    print(text)
    return {"rows": rows, "out": str(out)}


def with_folder_labels(rows: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """Rows with a ``label`` column (after ``file``) when every image sits in a folder named after one of the
    model's classes (``DIR/<class>/<image>``: a labelled set); else the rows as they are."""
    labels = [Path(r["file"]).parent.name for r in rows]
    if not rows or not all(label in names for label in labels):
        return rows
    return [{"file": r["file"], "label": label, **{k: v for k, v in r.items() if k != "file"}}
            for r, label in zip(rows, labels)]


def write_confusion(rows: list[dict[str, Any]], names: list[str], out: Path, checkpoint: str) -> str:
    """``<out>_confusion.csv`` and ``.png`` of labelled rows (true class by predicted class); returns the line
    that names them."""
    import torch

    from jumbokit.inference import confusion_matrix, confusion_rows, plot_confusion
    from jumbokit.training.rundir import atomic_write_text, csv_text

    index = {name: i for i, name in enumerate(names)}
    known = [r for r in rows if r["label"] in index]
    matrix = confusion_matrix(torch.tensor([index[r["label"]] for r in known]),
                              torch.tensor([index[r["top1_label"]] for r in known]), len(names))
    table = out.with_name(out.stem + "_confusion.csv")
    atomic_write_text(table, csv_text(confusion_rows(matrix, names)))
    picture = plot_confusion(matrix, names, out.with_name(out.stem + "_confusion.png"),
                             f"{Path(checkpoint).name}: {out.stem}")
    return f"confusion matrix (rows: true class, columns: predicted): {table}, {picture}"
