"""Why entropy-based test-time adaptation gains nothing on small corrupted images: a diagnostic.

    python benchmarks/tta_input_stats.py --checkpoints RUN[,RUN...] --max-samples 1000 --severity 5

For each source model and each generated corruption (the corruptions of ``jumbokit sar-adapt``, on the source's
own dataset and test split, the same seeded subset and noise), test top-1 of the unadapted model under three input
normalisations, none of which takes a gradient step:

- ``source``: the source's stored mean/std (what ``sar-adapt`` feeds every method);
- ``stream``: the corrupted stream standardised by its own mean and std (one per channel, over the whole stream):
  what re-estimating normalisation statistics on the test stream does for a BatchNorm network at its input;
- ``batch``: the same per batch of 64 as it arrives (an online version: no look at future images; what
  ``jumbokit sar-adapt --input-norm batch`` feeds every method).

It also reports what the entropy filters of EATA and SAR see: the share of test images whose prediction entropy
is below E0 = 0.4 ln(classes) (the samples SAR and EATA adapt on), and the accuracy on that share, which says
whether the confident samples the methods learn from are right.

A ViT normalises each token over its channels (LayerNorm) and has no batch statistics to re-estimate, so a
corruption that shifts or scales every pixel (brightness, fog, contrast, frost, snow) reaches every token; Tent
and SAR adapt only the LayerNorm affines, by entropy minimisation on the samples the model is already sure of.
Writes JSON and markdown (``benchmarks/results/tta_input_stats_<dataset>.json`` / ``.md``, or --json).
"""
from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

import torch

from jumbokit.adaptation.corruptions import COMMON_CORRUPTIONS, resolve_corruptions
from jumbokit.adaptation.data import CorruptionSpec, build_corrupted_sets, load_clean_sets
from jumbokit.adaptation.source import load_source
from jumbokit.adaptation.wild import input_normalizer
from jumbokit.benchmarking import dataset_slug, machine_record, results_folder, write_result
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

BATCH = 64


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--checkpoints", required=True, help="comma-separated source run directories")
    p.add_argument("--severity", type=int, default=5, help="corruption severity, 1-5")
    p.add_argument("--corruptions", default="common", help="common (15) or comma-separated names")
    p.add_argument("--max-samples", type=int, default=1000, help="seeded subset of the test split")
    p.add_argument("--seed", type=int, default=0, help="seed of the subset and the corruption noise")
    p.add_argument("--json", type=Path, default=None,
                   help="result file (default: benchmarks/results/tta_input_stats_<dataset>.json)")
    args = p.parse_args(argv)
    if not 1 <= args.severity <= 5:
        p.error(f"--severity: expected 1-5, got {args.severity}")
    try:
        args.corruptions = (COMMON_CORRUPTIONS if args.corruptions == "common"
                            else resolve_corruptions(args.corruptions.split(",")))
    except ValueError as error:
        p.error(f"--corruptions: {error}")
    args.checkpoints = [c for c in args.checkpoints.split(",") if c]
    for checkpoint in args.checkpoints:
        if not (Path(checkpoint) / "config.json").is_file():
            p.error(f"--checkpoints: {checkpoint} is not a jumbokit run directory (no config.json)")
    return args


@torch.no_grad()
def score(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, classes: int) -> dict[str, float]:
    """Top-1 under the three normalisations, and the share / accuracy of the low-entropy samples (source inputs)."""
    standardize = input_normalizer("batch")  # what `sar-adapt --input-norm batch` applies to each batch
    stream = standardize(images)
    batches = [standardize(b) for b in images.split(BATCH)]
    out, filters = {}, {}
    for name, inputs in (("source", images), ("stream", stream), ("batch", torch.cat(batches))):
        logits = torch.cat([model(chunk) for chunk in inputs.split(256)])
        out[name] = 100.0 * (logits.argmax(1) == labels).float().mean().item()
        if name == "source":
            probs = logits.softmax(1)
            entropy = -(probs * probs.clamp_min(1e-12).log()).sum(1)
            confident = entropy < 0.4 * math.log(classes)
            filters["confident_share"] = 100.0 * confident.float().mean().item()
            right = (logits.argmax(1) == labels)[confident]
            filters["confident_top1"] = 100.0 * right.float().mean().item() if len(right) else float("nan")
    return {**out, **filters}


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    rows, dataset = [], None
    for checkpoint in args.checkpoints:
        source = load_source(checkpoint)
        spec = CorruptionSpec(corruptions=tuple(args.corruptions), severities=[args.severity],
                              max_eval_samples=args.max_samples, seed=args.seed)
        dataset = spec.dataset_name(source.info)
        clean = load_clean_sets(spec, source.info, with_fisher=False)
        domains = {"clean": clean.test, **build_corrupted_sets(spec, source.info, clean, progress=True)[args.severity]}
        classes = len(clean.classes)
        for corruption, data in domains.items():
            images = torch.stack([data[i][0] for i in range(len(data))])
            labels = torch.tensor([int(data[i][1]) for i in range(len(data))])
            result = score(source.model, images, labels, classes)
            rows.append({"model": source.name, "corruption": corruption, "n": len(labels),
                         **{k: round(v, 2) for k, v in result.items()}})
            print(rows[-1], flush=True)
    means = []
    for model in dict.fromkeys(r["model"] for r in rows):
        corrupted = [r for r in rows if r["model"] == model and r["corruption"] != "clean"]
        mean = {"model": model, "corruption": f"mean of {len(corrupted)}", "n": corrupted[0]["n"]}
        for key in ("source", "stream", "batch", "confident_share", "confident_top1"):
            values = [r[key] for r in corrupted if not math.isnan(r[key])]  # no confident sample: no accuracy
            mean[key] = round(sum(values) / len(values), 2) if values else float("nan")
        means.append(mean)
    command = "python benchmarks/tta_input_stats.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    markdown = (f"# Input statistics vs corruption, {dataset}, severity {args.severity}\n\n`{command}`\n\n"
                "Test top-1 (%) of the unadapted source with the source's normalisation, the stream's own "
                "statistics, and per-batch (64) statistics; the share of samples below SAR/EATA's entropy margin "
                "(0.4 ln classes) and their accuracy (the mean over the corruptions that have such samples).\n\n" + markdown_table(means) + "\n## Per corruption\n\n"
                + markdown_table(rows))
    out = args.json or RESULTS / f"tta_input_stats_{dataset_slug(dataset)}.json"
    write_result(out, {"benchmark": "tta_input_stats", "command": command, "machine": machine_record(),
                       "severity": args.severity, "rows": rows, "means": means}, markdown)
    print(markdown)
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
