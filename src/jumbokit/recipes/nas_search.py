"""Evolutionary search of a trained supernet under a FLOPs budget (the ViT-ResNAS paper, Sec. 2.3).

    jumbokit nas-search --checkpoint runs/nas_supernet_digits_digits --flops-of vit_pico_cls
    jumbokit nas-search --checkpoint RUN --flops 46.7M --population 500 --iterations 20

Fitness is the validation top-1 (%) of each candidate, extracted from the supernet with its inherited weights,
on the dataset's validation split (held out from the training split the supernet learned from). Every
candidate has FLOPs in [--window * C, C]. Writes into --out: history.jsonl (every candidate; the search
resumes from it), best_arch.json (retrain it with ``jumbokit supervised --arch best_arch.json``),
pareto.png (FLOPs vs top-1 of every candidate), results.csv and report.md.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    from jumbokit.training import add_threads_arg

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


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    from jumbokit import nas
    from jumbokit.data import build_dataset, make_loader
    from jumbokit.logs import configure_logging
    from jumbokit.nas.report import best_arch_payload, inherited_fitness, write_search_report
    from jumbokit.training import setup_threads
    from jumbokit.training.rundir import read_data_record

    flops_budget = nas.parse_flops(args.flops) if args.flops is not None else None
    if not 0.0 < args.window <= 1.0:
        raise ValueError(f"--window must be in (0, 1], got {args.window}")
    configure_logging()
    setup_threads(args)
    supernet = nas.load_supernet(args.checkpoint).eval()
    space = supernet.space
    img, chans, classes = supernet.img_size, supernet.in_chans, supernet.num_classes
    budget = flops_budget if flops_budget is not None else nas.zoo_flops(args.flops_of, img, chans, classes)
    record = read_data_record(args.checkpoint)  # the supernet's normalisation and evaluation crop
    dataset = args.dataset or record.get("dataset") or "digits"
    val = build_dataset(dataset, "val", "eval", img_size=img, in_chans=chans, mean=record.get("mean"),
                        std=record.get("std"), crop_pct=record.get("crop_pct"),
                        interpolation=record.get("interpolation"), progress=not args.no_progress)
    if val.num_classes != classes:
        raise ValueError(f"the supernet predicts {classes} classes but {dataset} has {val.num_classes}")
    batches = list(make_loader(val, 512))  # the val split is scored thousands of times: decode it once
    out = Path(args.out) if args.out else Path(args.checkpoint) / f"search_{budget / 1e6:.1f}MFLOPs"
    out.mkdir(parents=True, exist_ok=True)
    logger.info("searching space %r at %.2f MFLOPs (window %s) on %s val (%d images) -> %s", space.name,
                budget / 1e6, args.window, dataset, len(val), out)
    result = nas.evolutionary_search(
        space, inherited_fitness(supernet, batches), budget, seed=args.seed,
        population=args.population, iterations=args.iterations, parents=args.parents, mutations=args.mutations,
        crossovers=args.crossovers, p_mutate=args.p_mutate, window=args.window,
        flops=lambda arch: space.flops(arch, img, chans, classes), history_path=out / "history.jsonl",
        progress=not args.no_progress)
    best = result.best
    payload = best_arch_payload(space, best, img, chans, classes, budget)
    settings = (f"P0 {args.population}, {args.iterations} iterations, {args.parents} parents, {args.mutations} "
                f"mutations + {args.crossovers} crossovers, p {args.p_mutate}, seed {args.seed}")
    write_search_report(out, space, result, payload, settings, dataset)
    print(f"best: val_top1 {best['fitness']:.2f}% at {best['flops'] / 1e6:.2f} MFLOPs "
          f"({best['arch']['global_tokens']}, dims {best['arch']['dims']}) -> {out / 'best_arch.json'}")
    return {"best": best, "out": str(out), "evaluated": len(result.history)}
