"""Evolutionary search of a trained supernet under a FLOPs budget (seed 002, Sec. 2.3).

    python recipes/nas_search.py --supernet runs/nas_supernet_digits_digits --flops-of vit_pico_cls
    python recipes/nas_search.py --supernet RUN --flops 46.7M --population 500 --iterations 20

Fitness is the validation accuracy of each candidate, extracted from the supernet with its inherited weights,
on the dataset's validation split (held out from the training split the supernet learned from). Every
candidate has FLOPs in [--window * C, C]. Writes into --out: history.jsonl (every candidate; the search
resumes from it), best_arch.json (retrain it with ``recipes/supervised.py --arch best_arch.json``),
pareto.png (FLOPs vs accuracy of every candidate), results.csv and report.md.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch

import jumbokit
from jumbokit import nas
from jumbokit.data import build_dataset, make_loader
from jumbokit.encoders import atomic_write
from jumbokit.encoders.zoo import small_image_patch_size
from jumbokit.training import (
    RunDir,
    add_threads_arg,
    atomic_save_figure,
    evaluate_classifier,
    markdown_table,
    run_cli,
    setup_threads,
)

_UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}


def parse_flops(text: str) -> float:
    """'46.7M', '1.8G' or '46700000' -> FLOPs."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kMG]?)\s*", text)
    if not match:
        raise ValueError(f"--flops expects a number with an optional k/M/G suffix (e.g. 46.7M), got {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--supernet", required=True, help="run directory (or .safetensors) of recipes/nas_supernet.py")
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--flops", type=parse_flops, help="FLOPs budget C per image (e.g. 46.7M)")
    budget.add_argument("--flops-of", metavar="MODEL",
                        help="use the FLOPs of this zoo model at the supernet's input size, with the patch "
                             "size recipes/supervised.py gives it")
    p.add_argument("--dataset", default="digits", help="dataset whose val split scores candidates (default: digits)")
    p.add_argument("--window", type=float, default=0.975, help="lower end of the window as a fraction of C")
    p.add_argument("--population", type=int, default=500, help="initial random population P0 (seed: 500)")
    p.add_argument("--iterations", type=int, default=20, help="evolution iterations (seed: 20)")
    p.add_argument("--parents", type=int, default=75, help="(seed: 75)")
    p.add_argument("--mutations", type=int, default=75, help="children by mutation per iteration (seed: 75)")
    p.add_argument("--crossovers", type=int, default=75, help="children by crossover per iteration (seed: 75)")
    p.add_argument("--p-mutate", type=float, default=0.3, help="per-gene mutation probability (seed: 0.3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="output directory (default: <supernet>/search_<budget>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_threads_arg(p)
    return p


def zoo_flops(name: str, img_size: int, in_chans: int, num_classes: int) -> int:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    overrides = dict(img_size=img_size, in_chans=in_chans, num_classes=num_classes)
    patch = small_image_patch_size(name, img_size)  # the patch supervised.py trains it with
    if patch is not None:
        overrides["patch_size"] = patch
    model = jumbokit.create_model(name, **overrides).eval()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, in_chans, img_size, img_size))
    return counter.get_total_flops()


def plot_pareto(history: list[dict], best: dict, budget: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for origin, colour in (("random", "tab:gray"), ("mutation", "tab:blue"), ("crossover", "tab:orange")):
        rows = [r for r in history if r["origin"] == origin]
        ax.scatter([r["flops"] / 1e6 for r in rows], [100 * r["fitness"] for r in rows], s=8, alpha=0.6,
                   color=colour, label=f"{origin} ({len(rows)})")
    ax.scatter([best["flops"] / 1e6], [100 * best["fitness"]], marker="*", s=160, color="tab:red", label="best")
    ax.axvline(budget / 1e6, color="k", lw=0.8, ls="--")
    ax.set(xlabel="MFLOPs per image", ylabel="val top-1 with inherited weights (%)",
           title="evolutionary search: every candidate")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    atomic_save_figure(path, fig, dpi=120)


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    setup_threads(args)
    if not 0.0 < args.window <= 1.0:
        raise ValueError(f"--window must be in (0, 1], got {args.window}")
    supernet = nas.load_supernet(args.supernet).eval()
    space = supernet.space
    img, chans, classes = supernet.img_size, supernet.in_chans, supernet.num_classes
    budget = args.flops if args.flops is not None else zoo_flops(args.flops_of, img, chans, classes)
    val = build_dataset(args.dataset, "val", "eval", img_size=img, in_chans=chans)
    if val.num_classes != classes:
        raise ValueError(f"the supernet predicts {classes} classes but {args.dataset} has {val.num_classes}")
    loader = make_loader(val, 512)
    batches = [(x, y) for x, y in loader]  # the val split is scored thousands of times: decode it once
    out = Path(args.out) if args.out else Path(args.supernet) / f"search_{budget / 1e6:.1f}MFLOPs"
    out.mkdir(parents=True, exist_ok=True)

    @torch.no_grad()
    def fitness(arch: dict) -> float:
        model = supernet.extract(arch).eval()
        return evaluate_classifier(model, batches, topk=(1,))["acc1"]

    def flops(arch: dict) -> int:
        return space.flops(arch, img, chans, classes)

    print(f"searching space {space.name!r} at {budget / 1e6:.2f} MFLOPs (window {args.window}) on {args.dataset} "
          f"val ({len(val)} images) -> {out}")
    result = nas.evolutionary_search(
        space, fitness, budget, seed=args.seed, population=args.population, iterations=args.iterations,
        parents=args.parents, mutations=args.mutations, crossovers=args.crossovers, p_mutate=args.p_mutate,
        window=args.window, flops=flops, history_path=out / "history.jsonl", progress=not args.no_progress)
    best = result.best
    config = space.config(best["arch"], img, chans, classes)
    payload = {"arch": best["arch"], "space": space.to_dict(), "config": config, "flops": best["flops"],
               "val_acc1": best["fitness"], "budget": budget}
    atomic_write(out / "best_arch.json", lambda tmp: Path(tmp).write_text(json.dumps(payload, indent=2) + "\n"))
    plot_pareto(result.history, best, budget, out / "pareto.png")
    top = sorted(result.history, key=lambda r: r["fitness"], reverse=True)[:10]
    rows = [{"rank": i + 1, "MFLOPs": round(r["flops"] / 1e6, 2), "val_acc1": round(100 * r["fitness"], 2),
             "origin": r["origin"], "iteration": r["iteration"], "tokens": r["arch"]["global_tokens"],
             "dims": "/".join(map(str, r["arch"]["dims"])),
             "depths": "/".join(str(sum(1 for h in hs if h)) for hs in r["arch"]["heads"])} for i, r in enumerate(top)]
    run = RunDir(out)
    run.write_results_csv(rows, fieldnames=list(rows[0]))
    run.write_report(
        f"# Evolutionary search: space {space.name}, budget {budget / 1e6:.2f} MFLOPs\n\n"
        f"- {len(result.history)} candidates in [{args.window} C, C]; P0 {args.population}, {args.iterations} "
        f"iterations, {args.parents} parents, {args.mutations} mutations + {args.crossovers} crossovers, "
        f"p {args.p_mutate}, seed {args.seed}\n- fitness: {args.dataset} val top-1 with inherited weights\n\n"
        f"## Top 10\n\n{markdown_table(rows, list(rows[0]))}\n![pareto](pareto.png)\n\n"
        f"Retrain the best: `python recipes/supervised.py --arch {out / 'best_arch.json'}`\n")
    print(f"best: {100 * best['fitness']:.2f}% val at {best['flops'] / 1e6:.2f} MFLOPs "
          f"({best['arch']['global_tokens']}, dims {best['arch']['dims']}) -> {out / 'best_arch.json'}")
    return {"best": best, "out": str(out), "evaluated": len(result.history)}
