"""The linear-probe pipeline of a frozen encoder: the head on cached features or on images through the shared
loop, the results rows (``top1``/``top5`` in percent, ``loss``, ``n``), the saved head and the report
(``jumbokit linear-probe`` wires them together)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from jumbokit.data import steps_per_epoch
from jumbokit.data.loader import fit_batch_size
from jumbokit.training.optim import epochs_for_min_steps, param_groups

from .features import extract_split_features
from .linear_probe import LinearProbe, evaluate_head, train_head_on_features

logger = logging.getLogger(__name__)

__all__ = ["load_image_encoder", "ProbePlan", "probe_plan", "fit_batch_size", "probe_on_features", "probe_on_images",
           "results_rows", "results_text", "save_probe_head", "probe_report", "write_probe_outputs"]


def load_image_encoder(checkpoint: Path):
    """The image encoder of ``checkpoint`` (run directory or .safetensors) for probing; one-line errors for a
    missing path or a series encoder."""
    from jumbokit.encoders import load

    if not checkpoint.exists():
        raise FileNotFoundError(f"--checkpoint {checkpoint} does not exist (expected a run directory of "
                                "mae-pretrain or a .safetensors file)")
    encoder = load(checkpoint)
    if encoder.config.get("tokenizer") != "image":
        raise ValueError(f"{checkpoint} holds a {encoder.config.get('tokenizer')} encoder; the linear probe "
                         "needs an image encoder")
    return encoder


DEFAULT_BLR = {"lars": 0.1, "adamw": 3e-2}  # MAE's LARS base lr; AdamW's moves a small head enough


@dataclass(frozen=True)
class ProbePlan:
    """The head's optimisation on a launch: per-process batch, global batch (one optimizer step), peak lr, epochs."""

    batch_size: int
    effective_batch: int
    lr: float
    epochs: int


def probe_plan(batch_size: int, num_samples: int, num_processes: int = 1, *, optimizer: str = "adamw",
               blr: float | None = None, lr: float | None = None, epochs: int = 90, min_steps: int = 0,
               batch_given: bool = False) -> ProbePlan:
    """The probe's batch, lr and epochs for ``num_samples`` training samples on ``num_processes`` processes.

    The global batch is ``batch_size * num_processes`` (``batch_size`` shrunk to fit unless ``batch_given``, see
    ``fit_batch_size``); the lr follows it as in MAE, ``lr = blr * global batch / 256`` (``lr`` given wins), and the
    epochs are raised to reach ``min_steps`` optimizer steps of the global batch, so one plan holds for any process
    count that gives the same global batch."""
    if optimizer not in DEFAULT_BLR:
        raise ValueError(f"unknown probe optimizer {optimizer!r}; expected one of {sorted(DEFAULT_BLR)}")
    batch = fit_batch_size(batch_size, num_samples, batch_given, num_processes)
    global_batch = batch * num_processes
    peak = lr if lr is not None else (blr if blr is not None else DEFAULT_BLR[optimizer]) * global_batch / 256
    total = epochs_for_min_steps(epochs, min_steps, steps_per_epoch(num_samples, global_batch))
    return ProbePlan(batch, global_batch, float(peak), total)


def _with_n(metrics: dict[str, float], count: int) -> dict[str, float]:
    return {"top1": metrics["top1"], "top5": metrics["top5"], "loss": metrics["loss"], "n": count}


def probe_on_features(
    probe: LinearProbe, train, eval_sets: dict[str, Any], optimizer: torch.optim.Optimizer, *, accelerator,
    epochs: int, batch_size: int, warmup_epochs: float, seed: int, num_workers: int | None, progress: bool,
    train_split: str = "train", on_epoch: Callable[[dict], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Extract the frozen features of ``train`` and every eval set once, sharded over the processes of
    ``accelerator`` and gathered in dataset order; train the head on them and evaluate it:
    ``{split: {top1, top5, loss, n}}`` (the training split as ``"<split> (fit)"``).

    ``batch_size`` is the global batch. Every process trains the same head on all the gathered features with it
    (same seed, same order), so the head, its lr schedule and the results do not depend on the process count, and
    each sample is evaluated once (``n`` = the split's size)."""

    def features(dataset, desc: str):
        return extract_split_features(probe.encoder, dataset, accelerator, probe.feature, num_workers=num_workers,
                                      progress=progress, desc=desc, layer=probe.layer)

    train_feats, train_labels = features(train, f"features {train_split}")
    cached = {split: features(ds, f"features {split}") for split, ds in eval_sets.items()}
    train_head_on_features(probe.head, train_feats, train_labels, optimizer, epochs=epochs, batch_size=batch_size,
                           warmup_epochs=warmup_epochs, seed=seed, eval_sets=cached,
                           eval_every=max(1, epochs // 10), progress=progress, on_epoch=on_epoch)
    results = {split: _with_n(evaluate_head(probe.head, f, y), len(y)) for split, (f, y) in cached.items()}
    results[f"{train_split} (fit)"] = _with_n(evaluate_head(probe.head, train_feats, train_labels), len(train_labels))
    return results


def _percent(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """``top1``/``top5`` in percent, ``loss``, ``n`` from ``evaluate_classifier`` (percent ``top1`` or fraction
    ``acc1``)."""
    out = {}
    for k in (1, 5):
        if f"{prefix}top{k}" in metrics:
            out[f"top{k}"] = float(metrics[f"{prefix}top{k}"])
        elif f"{prefix}acc{k}" in metrics:
            out[f"top{k}"] = 100.0 * float(metrics[f"{prefix}acc{k}"])
        else:  # fewer classes than k: every class counts
            out[f"top{k}"] = 100.0
    out["loss"], out["n"] = float(metrics[f"{prefix}loss"]), int(metrics[f"{prefix}n"])
    return out


def probe_on_images(
    probe: LinearProbe, train, eval_sets: dict[str, Any], cfg, out: Path, *, batch_size: int,
    num_workers: int | None, world_size: int, run_config: dict[str, Any],
) -> tuple[LinearProbe, dict[str, dict[str, float]]]:
    """Train the head through the shared loop (``fit``) on augmented images, the encoder frozen, with every eval set
    evaluated after each epoch on every process (each on its shard, each sample once). Returns the trained probe and
    the last epoch's ``{split: {top1, top5, loss, n}}``."""
    from jumbokit.data import make_loader
    from jumbokit.training import classification_loss, fit, make_accelerator

    accelerator = make_accelerator(cfg, out)
    train_loader = make_loader(train, batch_size, seed=cfg.seed, num_workers=num_workers, world_size=world_size)
    loaders = {split: make_loader(ds, batch_size, train=False, num_workers=num_workers)
               for split, ds in eval_sets.items()}
    result = fit(probe, train_loader, classification_loss(), cfg, out_dir=out, accelerator=accelerator,
                 params=param_groups(probe.head, cfg.weight_decay), eval_loaders=loaders, run_config=run_config)
    return result.model, {split: _percent(result.final, f"{split}_") for split in loaders}


def results_rows(results: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One ``results.csv`` row per split: split, top1, top5 (percent), loss, n."""
    return [{"split": split, **{k: m[k] for k in ("top1", "top5", "loss", "n")}} for split, m in results.items()]


def results_text(rows: list[dict[str, Any]]) -> str:
    """The results rows as a terminal table: split, top1, top5 (percent, 2 decimals), loss, n."""
    lines = [f"{'split':<14}{'top1':>8}{'top5':>8}{'loss':>9}{'n':>7}"]
    lines += [f"{r['split']:<14}{r['top1']:>8.2f}{r['top5']:>8.2f}{r['loss']:>9.4f}{r['n']:>7}" for r in rows]
    return "\n".join(lines)


def save_probe_head(head: torch.nn.Module, path: str | Path, metadata: dict[str, str]) -> Path:
    """Write the head's weights to ``path`` (safetensors, atomically)."""
    from safetensors.torch import save_file

    from jumbokit.encoders import atomic_write

    tensors = {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}
    return atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=metadata))


def probe_report(checkpoint: Path, dataset: str, description: str, rows: list[dict[str, Any]]) -> str:
    """The markdown of ``report.md``: what was probed and the accuracy table (percent)."""
    from jumbokit.training import markdown_table

    return "\n".join([f"# Linear probe of `{checkpoint}` on {dataset}", "", description, "",
                      "## Accuracy (top1 / top5 in %)", "", markdown_table(rows, digits=4), ""])


def write_probe_outputs(out: Path, head: torch.nn.Module, results: dict[str, dict[str, float]],
                        summary: dict[str, Any], description: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Write a probe run's files into ``out``: probe_head.safetensors, summary.json (``summary`` plus each
    evaluated split's ``{split}_top1``), results.csv and report.md. Returns the results rows and the summary."""
    from jumbokit.training import RunDir, atomic_write_json

    rows = results_rows(results)
    checkpoint, dataset = summary["checkpoint"], summary["dataset"]
    save_probe_head(head, out / "probe_head.safetensors", {"feature": summary["feature"], "checkpoint": checkpoint})
    summary = {**summary, **{f"{split}_top1": m["top1"] for split, m in results.items() if " " not in split}}
    atomic_write_json(out / "summary.json", summary)
    run = RunDir(out)
    run.write_results_csv(rows)
    run.write_report(probe_report(Path(checkpoint), dataset, description, rows))
    return rows, summary
