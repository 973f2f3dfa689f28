"""Evaluate a saved classifier on a dataset split: top-1 / top-5 / loss and a confusion matrix.

    jumbokit validate --checkpoint runs/supervised_vit_pico_jumbo_digits          # the run's dataset, test split
    jumbokit validate --checkpoint RUN --dataset folder:/data/digits28 --split val --out eval/
    accelerate launch -m jumbokit validate --checkpoint RUN --dataset folder:/data/imagenet --split val
    jumbokit validate --checkpoint sweep/models/GunPoint/patchtst_jumbo --split test     # a series model

The images get the model's own evaluation transform (its data config: size, channels, normalisation, crop) and
the dataset's classes must be the model's. On N processes each process scores its shard and the per-image results
are gathered once, so the numbers equal a one-process run's. Writes into --out (default: RUN/validate_<dataset>_
<split>): results.csv (model, dataset, split, top1 and top5 in percent, loss, n), confusion.csv (rows: true class,
columns: predicted class) and confusion.png; prints one summary line.

A series model (a tstrain sweep's kept model or ensemble, a saved PatchTSTClassifier) is scored on a UCR/UEA set
(default: the set it was trained on) prepared with its stored normalisation and length handling: "train", or
"val" / "test" as its sweep split them (the paper's protocol: the two stratified halves of the official test
split, so "test" gives the sweep's reported accuracy; the official protocol: the whole test split).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    from jumbokit.data import SPLITS

    p = argparse.ArgumentParser(prog="jumbokit validate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--checkpoint", required=True, metavar="RUN",
                   help="the saved classifier: a run directory, a .safetensors file, hf-hub:ORG/NAME, or a "
                        "tstrain sweep's kept model (models/DATASET/MODEL, or the sweep folder when it kept one)")
    p.add_argument("--dataset", default=None, metavar="SPEC",
                   help="digits | fashion-mnist[:DIR] | folder:PATH | hf:NAME[:split]; series: a UCR/UEA set name "
                        "(default: the run's dataset, from its config.json or the model's data config)")
    p.add_argument("--val-split", type=float, default=None, metavar="F",
                   help="folder: datasets without val/ or test/ folders: the fraction held out as val when the model "
                        "was trained (default: the run's own --val-split when --dataset is the run's)")
    p.add_argument("--test-split", type=float, default=None, metavar="F",
                   help="the same for the held-out test fraction (default: the run's)")
    p.add_argument("--ensemble", action="store_true",
                   help="series: the mean probabilities of the sweep's top-k ensemble (default: off)")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="series: where UCR/UEA sets are found or downloaded (default: the folder the kept model was "
                        "trained from, else tstrain's)")
    p.add_argument("--split", default="test", choices=SPLITS, help="the split to evaluate (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=256, help="per-process batch (default: %(default)s)")
    p.add_argument("--num-workers", type=int, default=None, metavar="N",
                   help="DataLoader workers (default: 0 for digits, min(8, cpus) for files)")
    p.add_argument("--skip-corrupt", action="store_true",
                   help="decode every image first and leave out unreadable files (default: off, they stop the run)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="folder for results.csv and the confusion matrix (default: RUN/validate_<dataset>_<split>)")
    p.add_argument("--cpu", action="store_true", help="evaluate on CPU even when a GPU is present (default: off)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar (default: shown)")
    p.add_argument("--debug", action="store_true", help="print the full traceback of errors (default: off)")
    return p


def run_dataset(checkpoint: str, dataset: str | None, record: dict[str, Any]) -> str:
    """``dataset``, else the dataset the run at ``checkpoint`` was trained on (``record``: its data record)."""
    if dataset:
        return dataset
    if not record.get("dataset"):
        raise ValueError(f"{checkpoint} has no run record naming its dataset; pass --dataset")
    return str(record["dataset"])


def run_data_record(checkpoint: str) -> dict[str, Any]:
    """The ``data`` record of the run at ``checkpoint`` (``{}`` for a model without one, e.g. from the Hub)."""
    from jumbokit.pretrained import local_path
    from jumbokit.training.rundir import read_data_record

    try:
        return read_data_record(local_path(checkpoint))
    except (OSError, ValueError):
        return {}


def same_dataset(recorded: str | None, dataset: str) -> bool:
    """Whether dataset string ``recorded`` names ``dataset`` (a folder however its path is written)."""
    from jumbokit.data import parse_dataset_spec

    if not recorded:
        return False
    a, b = parse_dataset_spec(str(recorded)), parse_dataset_spec(dataset)
    if a.kind != b.kind or a.kind != "folder":
        return a == b
    return Path(a.path).expanduser().resolve() == Path(b.path).expanduser().resolve()


def run_holdout(record: dict[str, Any], dataset: str, args: argparse.Namespace):
    """The ``Holdout`` that carved the run's val / test images from its training folder (``--val-split`` /
    ``--test-split`` given here win), when ``dataset`` is the run's (``record``: its data record); else None."""
    from jumbokit.data.settings import HOLDOUT_SEED
    from jumbokit.data.sources import Holdout

    recorded = (record.get("holdout") or {}) if same_dataset(record.get("dataset"), dataset) else {}
    val = args.val_split if args.val_split is not None else recorded.get("val", 0.0)
    test = args.test_split if args.test_split is not None else recorded.get("test", 0.0)
    if not val and not test:
        return None
    return Holdout(val=val, test=test, seed=int(recorded.get("seed", HOLDOUT_SEED)))


def is_plain_class_folder(dataset: str) -> bool:
    """Whether ``dataset`` is ``folder:PATH`` with class folders only (no train/val/test folders)."""
    from jumbokit.data import parse_dataset_spec
    from jumbokit.data.sources import SPLITS, has_split_dir

    spec = parse_dataset_spec(dataset)
    return spec.kind == "folder" and not any(has_split_dir(spec.path, s) for s in SPLITS)


def default_out(checkpoint: str, dataset: str, split: str) -> Path:
    """``RUN/validate_<dataset kind>[-<folder name>]_<split>`` (the folder of a weights file for RUN; for an
    ``hf-hub:`` model ``validate_<repository name>_...`` in the current folder, not in the Hub cache)."""
    from jumbokit.hub import HUB_PREFIX, parse_hub_name
    from jumbokit.pretrained import local_path

    kind, _, rest = dataset.partition(":")
    slug = (kind + (f"-{Path(rest).name}" if rest else "")).replace("/", "-")
    if str(checkpoint).startswith(HUB_PREFIX):
        return Path(f"validate_{parse_hub_name(checkpoint)[0].split('/')[1]}_{slug}_{split}")
    path = local_path(checkpoint)
    return (path if path.is_dir() else path.parent) / f"validate_{slug}_{split}"


def validate_series(args: argparse.Namespace, device: str) -> dict[str, Any]:
    """``jumbokit validate`` of a series model or ensemble (one process computes, the main process writes)."""
    import torch

    from jumbokit.inference import class_names, confusion_matrix, confusion_rows, plot_confusion
    from jumbokit.pretrained import local_path
    from jumbokit.inference.series import load_series_predictor, split_of_dataset, split_scores
    from jumbokit.training import RunDir
    from jumbokit.training.report import RESULT_COLUMNS

    predictor = load_series_predictor(local_path(args.checkpoint), ensemble=args.ensemble or None, device=device)
    cfg, models = predictor.cfg, predictor.models
    dataset = args.dataset or cfg.get("dataset")
    if not dataset:
        raise ValueError(f"{args.checkpoint} does not name the set it was trained on; pass --dataset")
    data_dir = args.data_dir or (cfg.get("data_dir") if dataset == cfg.get("dataset") else None)
    x, codes, *raw = split_of_dataset(dataset, args.split, cfg, data_dir, raw=predictor.fused)
    proba = predictor.proba(x, raw[0] if raw else None, batch_size=args.batch_size, progress=not args.no_progress)
    metrics = split_scores(proba, codes)
    names = class_names(cfg, proba.shape[-1])
    matrix = confusion_matrix(torch.as_tensor(codes), torch.as_tensor(proba.argmax(-1)), proba.shape[-1])
    out = Path(args.out) if args.out else default_out(args.checkpoint, dataset, args.split)
    parts = [f"ensemble of {len(models)}"] if len(models) > 1 else []
    if predictor.fused:
        parts.append(f"fused with {predictor.fusion['baseline']}, weight {predictor.weight:g}")
    row = {"model": str(args.checkpoint) + "".join(f" ({p})" for p in parts), "dataset": dataset,
           "split": args.split, **metrics}
    run = RunDir(out)
    run.write_results_csv([row], RESULT_COLUMNS)
    run.write_results_csv(confusion_rows(matrix, names), name="confusion.csv")
    plot_confusion(matrix, names, out / "confusion.png", f"{Path(str(args.checkpoint)).name}: {dataset} {args.split}")
    protocol = "the paper's half" if cfg.get("protocol") == "seed" and args.split != "train" else "the whole split"
    top5 = f"  top-5 {metrics['top5']:.2f}%" if "top5" in metrics else ""
    print(f"{args.checkpoint} on {dataset} {args.split} ({metrics['n']} series, {protocol}"
          f"{''.join(', ' + p for p in parts)}): top-1 {metrics['top1']:.2f}%{top5}  loss {metrics['loss']:.4f}  "
          f"-> {out}")
    return {**row, "confusion": matrix.tolist(), "out": str(out)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from jumbokit.data import make_loader
    from jumbokit.inference import class_names, confusion_matrix, confusion_rows, is_series_checkpoint, plot_confusion
    from jumbokit.inference.images import eval_dataset, load_classifier
    from jumbokit.logs import configure_logging
    from jumbokit.training import RunDir, TrainConfig, evaluate_classifier
    from jumbokit.training.accelerator import make_accelerator
    from jumbokit.training.report import RESULT_COLUMNS

    configure_logging()
    args = build_parser().parse_args(argv)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    acc = make_accelerator(TrainConfig(cpu=args.cpu, mixed_precision="no"))
    if is_series_checkpoint(args.checkpoint):
        return validate_series(args, str(acc.device)) if acc.is_main_process else {}
    if args.ensemble:
        raise ValueError(f"--ensemble takes a tstrain sweep's kept series model; {args.checkpoint} is not one")
    model, cfg = load_classifier(args.checkpoint, device=acc.device)
    record = run_data_record(args.checkpoint)
    dataset = run_dataset(args.checkpoint, args.dataset, record)
    progress = not args.no_progress and acc.is_main_process
    num_classes = int(model.num_classes)
    holdout = run_holdout(record, dataset, args)
    split = args.split
    if holdout is None and is_plain_class_folder(dataset) and not same_dataset(record.get("dataset"), dataset):
        split = "train"  # a plain class folder the model never saw: every image of it is scored
    ds = eval_dataset(dataset, split, cfg, num_classes, skip_corrupt=args.skip_corrupt, progress=progress,
                      holdout=holdout)
    loader = acc.prepare_data_loader(make_loader(ds, args.batch_size, num_workers=args.num_workers))
    metrics = evaluate_classifier(model, loader, accelerator=acc, return_predictions=True, progress=progress,
                                  desc=f"validate {args.split}")
    if not acc.is_main_process:
        return {}
    names = class_names(cfg, num_classes)
    matrix = confusion_matrix(metrics.pop("targets"), metrics.pop("predictions"), num_classes)
    out = Path(args.out) if args.out else default_out(args.checkpoint, dataset, args.split)
    row = {"model": str(args.checkpoint), "dataset": dataset, "split": args.split, **metrics}
    run = RunDir(out)
    run.write_results_csv([row], RESULT_COLUMNS)
    run.write_results_csv(confusion_rows(matrix, names), name="confusion.csv")
    plot_confusion(matrix, names, out / "confusion.png", f"{Path(str(args.checkpoint)).name}: {dataset} {args.split}")
    top5 = f"  top-5 {metrics['top5']:.2f}%" if "top5" in metrics else ""
    print(f"{args.checkpoint} on {dataset} {args.split} ({metrics['n']} images, {acc.num_processes} process(es)): "
          f"top-1 {metrics['top1']:.2f}%{top5}  loss {metrics['loss']:.4f}  -> {out}")
    return {**row, "confusion": matrix.tolist(), "out": str(out)}
