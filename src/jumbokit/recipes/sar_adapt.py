"""Test-time adaptation (none / Tent / EATA / SAR) of a source classifier on corrupted test sets.

    accelerate launch recipes/sar_adapt.py --checkpoint runs/supervised_vit_tiny_jumbo_digits \\
        --dataset digits --methods none,tent,eata,sar --setting normal --severity 5 --out runs/tta
    jumbokit sar-adapt --imagenet-c /data/imagenet-c --checkpoint vit_base_patch16_224 \\
        --weights vit_base.safetensors --dataset folder:/data/imagenet --setting label_shift

The source is a jumbokit run directory, a ``.safetensors`` file, or a timm model name plus
``--weights``. Images are normalised with the source's own mean/std (its run's config.json, the timm
model's pretrained config, or --mean/--std). Corruptions are generated from ``--dataset`` (test split)
unless ``--imagenet-c ROOT`` points at an ImageNet-C style tree. Writes ``results.csv``, ``report.md``,
``accuracy.png`` and ``summary.json`` to ``--out``; prints the table (top1 % per corruption and
method, with the average) and the adaptation throughput.
"""
from __future__ import annotations

import argparse
import logging
from typing import Any

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    from jumbokit.adaptation.wild import SETTINGS
    from jumbokit.cli.data import add_data_args
    from jumbokit.cli.training import add_threads_arg

    p = argparse.ArgumentParser(description="Test-time adaptation (none/Tent/EATA/SAR) on corrupted test sets; "
                                            "writes results.csv, report.md, accuracy.png.")
    src = p.add_argument_group("source model")
    src.add_argument("--checkpoint", default=None,
                     help="jumbokit run directory, .safetensors file, or timm model name (with --weights) "
                          "(default: the newest supervised run under runs/ for --dataset, digits if not given)")
    src.add_argument("--weights", default=None,
                     help="weights file (.safetensors or .pth) for a timm model name (default: none)")
    src.add_argument("--mean", type=float, nargs="+", default=None, metavar="M",
                     help="normalisation mean, one value or one per channel (default: the source's)")
    src.add_argument("--std", type=float, nargs="+", default=None, metavar="S",
                     help="normalisation std, one value or one per channel (default: the source's)")
    add_data_args(p, augment=False)  # --dataset, --img-size, --in-chans, --num-workers, --skip-corrupt
    _set_help(p, "dataset", "clean dataset: digits | fashion-mnist[:DIR] | folder:PATH | hf:NAME[:split]; "
                            "corruptions are generated from its --split, EATA's Fisher uses its --fisher-split "
                            "(default: the source's dataset)")
    _set_help(p, "img_size", "evaluate at this input side in pixels (default: the source's)")
    _set_help(p, "num_workers", "DataLoader workers (default: 0 for generated corruptions, min(8, cpus) for an "
                                "ImageNet-C tree)")
    _set_help(p, "in_chans", "image channels; must be the source's (default: the source's)")
    _set_help(p, "max_train_samples", argparse.SUPPRESS)  # nothing is trained here: refused with a hint
    p.set_defaults(dataset=None)
    data = p.add_argument_group("corruptions")
    data.add_argument("--split", default="test", help="split of --dataset to corrupt (default: %(default)s)")
    data.add_argument("--imagenet-c", default=None,
                      help="ROOT of an ImageNet-C tree ROOT/<corruption>/<severity>/<class>/ (default: generate)")
    data.add_argument("--corruptions", default="common",
                      help="common (15) | extra (4 held-out) | all | comma-separated names (default: %(default)s)")
    data.add_argument("--severity", default="5", help="severity 1-5, or a comma list (default: %(default)s)")
    data.add_argument("--max-eval-samples", type=int, default=None,
                      help="seeded subset of the adaptation split (default: all of it)")
    data.add_argument("--upsample-small", action="store_true",
                      help="corrupt images smaller than 32 px through a 32 px upsampling, else they are an error "
                           "(default: off)")
    data.add_argument("--passes", type=int, default=1,
                      help="stream each generated corruption this many times over the clean split, with fresh "
                           "corruption noise every pass; small sets such as digits give only a few updates per "
                           "corruption in one pass (default: %(default)s)")
    run = p.add_argument_group("adaptation")
    run.add_argument("--methods", default="none,tent,eata,sar",
                     help="comma-separated subset of none,tent,eata,sar (default: %(default)s)")
    run.add_argument("--setting", default="normal", choices=SETTINGS, help="test stream (default: %(default)s)")
    run.add_argument("--batch-size", type=int, default=None, help="(default: 64, 1 for --setting bs1)")
    run.add_argument("--lr", type=float, default=None,
                     help="SGD lr (default: 0.001*batch/64, doubled for SAR at batch size 1, as in the SAR reference)")
    run.add_argument("--e0-factor", type=float, default=0.4,
                     help="entropy margin E0 = factor * ln(classes) (default: %(default)s)")
    run.add_argument("--sar-rho", type=float, default=0.05, help="SAM neighbourhood size (default: %(default)s)")
    run.add_argument("--sar-reset-constant", type=float, default=None,
                     help="SAR recovery threshold on the loss EMA (default: 0.2*ln(classes)/ln(1000), the "
                          "reference's 0.2 at 1000 classes)")
    run.add_argument("--sar-exclude-last-blocks", type=int, default=None,
                     help="blocks at the top left frozen by SAR (default: a quarter of the depth)")
    run.add_argument("--fisher-size", type=int, default=2000,
                     help="clean samples for EATA's Fisher (default: %(default)s)")
    run.add_argument("--fisher-split", default="val",
                     help="clean split of --dataset for EATA's Fisher, --split when absent (default: %(default)s)")
    run.add_argument("--fisher-alpha", type=float, default=2000.0, help="EATA regulariser weight (default: %(default)s)")
    run.add_argument("--d-margin", type=float, default=0.05, help="EATA redundancy threshold (default: %(default)s)")
    run.add_argument("--imbalance-ratio", type=float, default=500000.0,
                     help="label_shift imbalance ratio (default: %(default)s)")
    run.add_argument("--stream-length", type=int, default=None, help="label_shift stream length (default: set size)")
    run.add_argument("--episodic", action="store_true", help="reset to the source before every batch (default: off)")
    run.add_argument("--input-norm", choices=("source", "batch", "image"), default="source",
                     help="input statistics of the test stream: the source's mean/std (source); each test batch "
                          "re-standardised by its own per-channel mean/std after them (batch: undoes a shift or "
                          "rescaling of every pixel, per image at batch size 1); each image by its own (image); "
                          "applied before every method, none included (default: %(default)s)")
    run.add_argument("--seed", type=int, default=0, help="seed of subsets, noise and streams (default: %(default)s)")
    run.add_argument("--out", default=None, help="output folder (default: runs/tta_<setting>_<model>)")
    run.add_argument("--mixed-precision", default="no", choices=("no", "bf16"),
                     help="autocast precision of adaptation, bf16 on a GPU (default: %(default)s)")
    run.add_argument("--cpu", action="store_true", help="run on CPU even when a GPU is present (default: off)")
    run.add_argument("--no-progress", action="store_true", help="hide progress bars (default: off)")
    add_threads_arg(run)
    run.add_argument("--debug", action="store_true", help="print the full traceback of errors (default: off)")
    return p


def _set_help(parser: argparse.ArgumentParser, dest: str, text: str) -> None:
    """Replace the help line of a shared flag with what it means here."""
    next(a for a in parser._actions if a.dest == dest).help = text


def apply_data_flags(args: argparse.Namespace, info: dict[str, Any]) -> None:
    """Apply --img-size / --in-chans to the source's data ``info`` (in place), refusing a channel count the
    source cannot take."""
    if args.in_chans is not None and args.in_chans != int(info["in_chans"]):
        raise ValueError(f"the source takes {info['in_chans']}-channel images; drop --in-chans {args.in_chans}")
    if args.img_size is not None:
        info["img_size"] = args.img_size


def check_args(args: argparse.Namespace):
    """Parse and check the flags before any work; returns (methods, CorruptionSpec, batch size)."""
    from jumbokit.adaptation.corruptions import parse_severities, resolve_corruptions
    from jumbokit.adaptation.data import CorruptionSpec
    from jumbokit.adaptation.wild import DEFAULT_BATCH_SIZE, check_methods
    from jumbokit.cli.training import check_count_flags

    check_count_flags(args)
    if args.max_train_samples is not None:
        raise ValueError("sar-adapt trains no model: --max-train-samples does not apply; use --max-eval-samples "
                         "for the adaptation split (and --fisher-size for EATA's clean set)")
    methods = check_methods(args.methods)
    spec = CorruptionSpec(dataset=args.dataset, split=args.split, imagenet_c=args.imagenet_c,
                          corruptions=resolve_corruptions(args.corruptions), severities=parse_severities(args.severity),
                          max_eval_samples=args.max_eval_samples, passes=args.passes,
                          upsample_small=args.upsample_small, fisher_split=args.fisher_split,
                          fisher_size=args.fisher_size, skip_corrupt=args.skip_corrupt, seed=args.seed)
    if args.setting == "bs1" and args.batch_size not in (None, 1):
        raise ValueError(f"--setting bs1 adapts on single samples; drop --batch-size {args.batch_size}")
    spec.check()
    return methods, spec, args.batch_size or DEFAULT_BATCH_SIZE[args.setting]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    from pathlib import Path

    import torch

    from jumbokit.adaptation import data, jobs, report, source
    from jumbokit.adaptation.wild import MethodSettings
    from jumbokit.logs import configure_logging
    from jumbokit.cli.training import setup_threads
    from jumbokit.training import TrainConfig, make_accelerator

    methods, spec, batch_size = check_args(args)
    configure_logging()
    setup_threads(args)
    acc = make_accelerator(TrainConfig(mixed_precision=args.mixed_precision, cpu=args.cpu, seed=args.seed))
    checkpoint = args.checkpoint or source.find_source_run("runs", args.dataset or "digits")
    src = source.load_source(checkpoint, args.weights, args.mean, args.std)
    apply_data_flags(args, src.info)
    info, n_out = src.info, source.num_outputs(src.model, int(src.info["in_chans"]), int(src.info["img_size"]))
    data.check_class_count(n_out, info.get("classes"), f"its dataset {info.get('dataset')}")
    torch.manual_seed(args.seed)
    progress = acc.is_main_process and not args.no_progress
    with acc.main_process_first():  # hf: downloads and caches once
        clean = data.load_clean_sets(spec, info, with_fisher="eata" in methods, progress=progress)
    data.check_class_count(n_out, clean.classes, f"dataset {spec.dataset_name(info)}")
    todo = jobs.job_list(args.setting, spec.corruptions, spec.severities, methods)
    workers = data.file_workers(clean.test, args.num_workers)
    sets = jobs.SetsOnDemand(lambda needed: data.build_corrupted_sets(spec, info, clean, needed=needed,
                                                                      num_workers=workers), spec.corruptions)
    settings = MethodSettings(lr=args.lr, e0_factor=args.e0_factor, sar_rho=args.sar_rho,
                              sar_reset_constant=args.sar_reset_constant,
                              sar_exclude_last_blocks=args.sar_exclude_last_blocks,
                              eata_fisher_alpha=args.fisher_alpha, eata_d_margin=args.d_margin,
                              fisher_size=args.fisher_size, episodic=args.episodic)
    stream_workers = workers if spec.imagenet_c is not None else 0  # generated sets are in memory
    stream = jobs.StreamOptions(args.setting, batch_size, args.seed, args.imbalance_ratio, args.stream_length,
                                stream_workers, data.file_workers(clean.fisher, args.num_workers), args.input_norm)
    records = jobs.run_jobs(src.model.to(acc.device), todo, sets, len(clean.classes or []) or n_out, settings,
                            stream, clean.fisher, acc.device, progress, autocast=acc.autocast)
    if not acc.is_main_process:
        return {}
    rows, throughput = report.result_rows(jobs.merge_records(todo, records), spec.corruptions, src.name,
                                          args.setting)
    out = Path(args.out or f"runs/tta_{args.setting}_{src.name}")
    summary = {"model": src.name, "title": f"{src.name}: {args.setting}, batch {batch_size}",
               "setting": args.setting, "batch_size": batch_size, "severities": spec.severities,
               "methods": methods, "rows": rows, "throughput": throughput, "processes": acc.num_processes,
               "normalisation": {"mean": info["mean"], "std": info["std"]}, "input_norm": args.input_norm}
    shift = f", imbalance ratio {args.imbalance_ratio:g}" if args.setting == "label_shift" else ""
    report.write_report(out, summary, [
        f"source: `{checkpoint}`; normalisation mean {info['mean']} std {info['std']}"
        + (f", then each {'test batch' if args.input_norm == 'batch' else 'image'} re-standardised by its own "
           f"statistics (--input-norm {args.input_norm})" if args.input_norm != "source" else ""),
        f"data: {spec.describe(info)}",
        f"setting `{args.setting}`, batch size {batch_size}, seed {args.seed}{shift}, "
        f"{len(todo)} jobs on {acc.num_processes} process(es)"])
    print(report.terminal_summary(summary))
    print(f"wrote {out / 'results.csv'}, {out / 'report.md'}, {out / 'accuracy.png'}")
    return summary
