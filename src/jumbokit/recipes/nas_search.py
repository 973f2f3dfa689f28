"""Evolutionary search of a trained supernet under a FLOPs budget (the ViT-ResNAS paper, Sec. 2.3).

    jumbokit nas-search --checkpoint runs/nas_supernet_digits_digits --flops-of vit_pico_cls
    jumbokit nas-search --checkpoint RUN --flops 46.7M --population 500 --iterations 20

Fitness is the validation top-1 (%) of each candidate, extracted from the supernet with its inherited weights,
on a fixed seeded subset (--max-eval-samples) of the dataset's validation split (held out from the training
split the supernet learned from), streamed in batches on the accelerator. Every candidate has FLOPs in
[--window * C, C]. Under `torchrun` / `accelerate launch` each generation's candidates are split across the
processes and their scores gathered before the parents are chosen: N processes find what one finds.
Writes into --out (main process): history.jsonl (every candidate; the search resumes from it),
best_arch.json (retrain it with ``jumbokit supervised --arch best_arch.json``), pareto.png (FLOPs vs top-1
of every candidate), results.csv and report.md.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    from jumbokit.cli.training import add_threads_arg
    from jumbokit.training import PRECISIONS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--checkpoint", required=True,
                   help="run directory (or .safetensors) of `jumbokit nas-supernet`, the supernet to search")
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--flops", help="FLOPs budget C per image, with a unit (e.g. 46.7M or 1.2G)")
    budget.add_argument("--flops-of", metavar="MODEL",
                        help="use the FLOPs of this zoo model at the supernet's input size, with the patch "
                             "size `jumbokit supervised` gives it")
    p.add_argument("--dataset", default=None,
                   help="dataset whose val split scores candidates (default: the supernet's training dataset)")
    p.add_argument("--max-eval-samples", type=int, default=10000,
                   help="seeded subset of the val split that scores every candidate, all of it when smaller "
                        "(default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=256, help="images per scoring batch (default: %(default)s)")
    p.add_argument("--num-workers", type=int, default=None,
                   help="DataLoader workers (default: 0 for digits, min(8, cpus) for files)")
    p.add_argument("--mixed-precision", default="no", choices=PRECISIONS,
                   help="autocast precision of the scoring passes, e.g. bf16 on a GPU (default: %(default)s)")
    p.add_argument("--cpu", action="store_true", help="score on CPU even when a GPU is present (default: off)")
    p.add_argument("--window", type=float, default=0.975,
                   help="lower end of the FLOPs window as a fraction of C (default: %(default)s)")
    p.add_argument("--population", type=int, default=500,
                   help="initial random population P0 (default: %(default)s, as in the paper)")
    p.add_argument("--iterations", type=int, default=20, help="evolution iterations (default: %(default)s, as in the paper)")
    p.add_argument("--parents", type=int, default=75,
                   help="best candidates that breed each iteration (default: %(default)s, as in the paper)")
    p.add_argument("--mutations", type=int, default=75,
                   help="children by mutation per iteration (default: %(default)s, as in the paper)")
    p.add_argument("--crossovers", type=int, default=75,
                   help="children by crossover per iteration (default: %(default)s, as in the paper)")
    p.add_argument("--p-mutate", type=float, default=0.3,
                   help="per-gene mutation probability (default: %(default)s, as in the paper)")
    p.add_argument("--seed", type=int, default=0, help="seed of the draws (default: %(default)s)")
    p.add_argument("--out", default=None, help="output directory (default: <checkpoint>/search_<budget>MFLOPs)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars (default: off)")
    add_threads_arg(p)
    p.add_argument("--debug", action="store_true", help="print the full traceback of errors (default: off)")
    return p


def check_args(args: argparse.Namespace) -> float | None:
    """Refuse bad flags before any work; returns the --flops budget (None with --flops-of)."""
    from jumbokit import nas

    budget = nas.parse_flops(args.flops) if args.flops is not None else None
    if not 0.0 < args.window <= 1.0:
        raise ValueError(f"--window must be in (0, 1], got {args.window}")
    for flag in ("max_eval_samples", "batch_size"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    return budget


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    from accelerate.utils import broadcast_object_list

    from jumbokit import nas
    from jumbokit.data import build_dataset, make_loader
    from jumbokit.logs import configure_logging
    from jumbokit.nas.report import best_arch_payload, write_search_report
    from jumbokit.nas.scoring import CandidateScorer, split_across_processes
    from jumbokit.cli.training import setup_threads
    from jumbokit.training import TrainConfig, make_accelerator
    from jumbokit.training.rundir import read_data_record

    flops_budget = check_args(args)
    configure_logging()
    setup_threads(args)
    acc = make_accelerator(TrainConfig(mixed_precision=args.mixed_precision, cpu=args.cpu, seed=args.seed))
    main_process = acc.is_main_process
    supernet = nas.load_supernet(args.checkpoint).to(acc.device).eval()
    space = supernet.space
    img, chans, classes = supernet.img_size, supernet.in_chans, supernet.num_classes
    budget = flops_budget if flops_budget is not None else nas.zoo_flops(args.flops_of, img, chans, classes)
    record = read_data_record(args.checkpoint)  # the supernet's normalisation and evaluation crop
    dataset = args.dataset or record.get("dataset") or "digits"
    with acc.main_process_first():  # hf: downloads and caches once
        val = build_dataset(dataset, "val", "eval", img_size=img, in_chans=chans, mean=record.get("mean"),
                            std=record.get("std"), crop_pct=record.get("crop_pct"),
                            interpolation=record.get("interpolation"), max_samples=args.max_eval_samples,
                            seed=args.seed, progress=main_process and not args.no_progress)
    if val.num_classes != classes:
        raise ValueError(f"the supernet predicts {classes} classes but {dataset} has {val.num_classes}")
    loader = make_loader(val, args.batch_size, train=False, num_workers=args.num_workers)
    out = Path(args.out) if args.out else Path(args.checkpoint) / f"search_{budget / 1e6:.1f}MFLOPs"
    if main_process:
        out.mkdir(parents=True, exist_ok=True)
    cached = broadcast_object_list([list(nas.load_history(out / "history.jsonl").values()) if main_process
                                    else None])[0] if acc.num_processes > 1 else None
    logger.info("searching space %r at %.2f MFLOPs (window %s) on %s val (%d images, %s, %d processes) -> %s",
                space.name, budget / 1e6, args.window, dataset, len(val), acc.device, acc.num_processes, out)
    score = split_across_processes(CandidateScorer(supernet, loader, acc.device, acc.autocast), acc.num_processes)
    result = nas.evolutionary_search(
        space, None, budget, seed=args.seed, population=args.population, iterations=args.iterations,
        parents=args.parents, mutations=args.mutations, crossovers=args.crossovers, p_mutate=args.p_mutate,
        window=args.window, flops=lambda arch: space.flops(arch, img, chans, classes),
        history_path=out / "history.jsonl", progress=main_process and not args.no_progress, score=score,
        cached=cached, write_history=main_process)
    best = result.best
    summary = {"best": best, "out": str(out), "evaluated": len(result.history)}
    if not main_process:
        return summary
    payload = best_arch_payload(space, best, img, chans, classes, budget)
    settings = (f"P0 {args.population}, {args.iterations} iterations, {args.parents} parents, {args.mutations} "
                f"mutations + {args.crossovers} crossovers, p {args.p_mutate}, seed {args.seed}, "
                f"{len(val)} val images")
    write_search_report(out, space, result, payload, settings, dataset)
    print(f"best: val_top1 {best['fitness']:.2f}% at {best['flops'] / 1e6:.2f} MFLOPs "
          f"({best['arch']['global_tokens']}, dims {best['arch']['dims']}) -> {out / 'best_arch.json'}")
    return summary
