"""The linear-probe pipeline of a frozen encoder: the head on cached features or on images through the shared
loop, the results rows (``top1``/``top5`` in percent, ``loss``, ``n``), the saved head and the report
(``jumbokit linear-probe`` wires them together)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import torch

from jumbokit.training.optim import param_groups

from .linear_probe import LinearProbe, evaluate_head, extract_features, train_head_on_features

logger = logging.getLogger(__name__)

__all__ = ["load_image_encoder", "probe_on_features", "probe_on_images", "fit_batch_size", "results_rows", "results_text",
           "save_probe_head", "probe_report"]


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


def fit_batch_size(batch_size: int, num_samples: int, given: bool) -> int:
    """The probe batch for ``num_samples`` training samples: a default batch shrinks to fit (logged); a batch the
    user gave that does not fit raises ``ValueError``."""
    if batch_size <= num_samples:
        return batch_size
    if given:
        raise ValueError(f"--batch-size {batch_size} is larger than the {num_samples} training samples; "
                         f"pass --batch-size <= {num_samples}")
    logger.info(f"batch size {num_samples} (the default {batch_size} is larger than the {num_samples} training "
                "samples)")
    return num_samples


def _with_n(metrics: dict[str, float], count: int) -> dict[str, float]:
    return {"top1": metrics["top1"], "top5": metrics["top5"], "loss": metrics["loss"], "n": count}


def probe_on_features(
    probe: LinearProbe, train, eval_sets: dict[str, Any], optimizer: torch.optim.Optimizer, *, epochs: int,
    batch_size: int, warmup_epochs: float, seed: int, num_workers: int | None, device: torch.device,
    progress: bool, train_split: str = "train", on_epoch: Callable[[dict], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Extract the frozen features of ``train`` and every eval set once, train the head on them and evaluate it:
    ``{split: {top1, top5, loss, n}}`` (the training split as ``"<split> (fit)"``)."""
    from jumbokit.data import make_loader

    torch.manual_seed(seed)

    def features(dataset, desc: str):
        loader = make_loader(dataset, 256, train=False, num_workers=num_workers)
        return extract_features(probe.encoder, loader, probe.feature, device, progress=progress, desc=desc)

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
    """Train the head through the shared loop (``fit``) on augmented images, the encoder frozen; evaluate on every
    eval set. Returns the trained probe and ``{split: {top1, top5, loss, n}}``."""
    from jumbokit.data import make_loader
    from jumbokit.training import classification_loss, evaluate_classifier, fit, make_accelerator

    accelerator = make_accelerator(cfg, out)
    train_loader = make_loader(train, batch_size, seed=cfg.seed, num_workers=num_workers, world_size=world_size)
    loaders = {split: make_loader(ds, batch_size, train=False, num_workers=num_workers)
               for split, ds in eval_sets.items()}
    first = next(iter(loaders), None)

    def eval_fn(net) -> dict[str, float]:
        if first is None:
            return {}
        metrics = _percent(evaluate_classifier(net, loaders[first]))
        return {f"{first}_{k}": v for k, v in metrics.items() if k != "n"}

    result = fit(probe, train_loader, classification_loss(), cfg, out_dir=out, eval_fn=eval_fn,
                 accelerator=accelerator, params=param_groups(probe.head, cfg.weight_decay), run_config=run_config)
    trained = result.model
    return trained, {split: _percent(evaluate_classifier(trained, loader)) for split, loader in loaders.items()}


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
