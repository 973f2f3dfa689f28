"""A sweep's reports: the summary table (terminal and markdown), results.csv, results.json, report.md and
accuracy.png, each written atomically."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import numpy as np

from jumbokit.encoders.global_kinds import option_texts
from jumbokit.training.rundir import atomic_save_figure, atomic_write_text, markdown_table

from .normalize import AUTO_SCALE_SPREAD
from .protocol import SweepConfig, steps_text, trunk_width_text
from .results import SummaryRow, SweepResult, baseline_columns, baseline_results

__all__ = ["format_summary", "training_text", "write_reports"]

JUMBO_POOL_TEXT = option_texts("jumbo_pool")  # the Jumbo pools in words, as the kind describes them
CSV_FIELDS = ["dataset", "model", "runs", "test_top1", "avg_test_top1", "std_test_top1", "val_top1",
              "max_test_top1", "best_lr", "best_dropout", "train_seconds", "step_ms", "params", "patch_len", "stride",
              "num_patches", "global_tokens", "full_test_top1"]


def _pct(value: float | None) -> str:
    """An accuracy in percent with 2 decimals ("-" for none)."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def _model_cell(values: list[float | None]) -> str:
    return " / ".join(_pct(v) for v in values)


def _dataset_lines(rows: Sequence[SummaryRow], models: Sequence[str], columns: list[str], ens: bool,
                   dataset_seconds: dict[str, float] | None) -> list[list[str]]:
    """One line per dataset: best / avg (/ ensemble) per model, the baselines' accuracy, the sweep's seconds."""
    by = {(r.dataset, r.model): r for r in rows}
    lines = []
    for d in sorted({r.dataset for r in rows}):
        cells = [d]
        for m in columns:
            r = by.get((d, m))
            if r is None:
                cells.append("-")
            elif m in models:
                cells.append(_model_cell([r.test_top1, r.avg_test_top1] + ([r.ens_test_top1] if ens else [])))
            else:
                cells.append(_pct(r.test_top1) + ("*" if r.padded else ""))
        if dataset_seconds:
            cells.append(f"{dataset_seconds.get(d, float('nan')):.0f}")
        lines.append(cells)
    return lines


def _mean_line(rows: Sequence[SummaryRow], models: Sequence[str], columns: list[str], ens: bool,
               dataset_seconds: dict[str, float] | None) -> list[str]:
    """Mean accuracies over the datasets (baselines: with the number of sets they ran on)."""
    means = ["mean acc"]
    for m in columns:
        vals = [r for r in rows if r.model == m]
        if not vals:
            means.append("-")
        elif m in models:
            keys = ["test_top1", "avg_test_top1"] + (["ens_test_top1"] if ens else [])
            means.append(_model_cell([float(np.mean([_or_nan(getattr(v, k)) for v in vals])) for k in keys]))
        else:
            means.append(_pct(np.mean([v.test_top1 for v in vals])) + f" ({len(vals)} sets)")
    if dataset_seconds:
        means.append(f"{sum(dataset_seconds.values()):.0f}")
    return means


def _or_nan(value: float | None) -> float:
    return np.nan if value is None else value


def _rank_lines(ranks: dict[str, dict], ranks_all: dict[str, dict] | None, columns: list[str],
                timed: bool) -> list[list[str]]:
    """Mean ranks among the models (best / avg), and among models and baselines where given."""
    pad = [""] if timed else []
    lines = [["mean rank"] + [f"{ranks[m]['best']:.2f} / {ranks[m]['avg']:.2f}" if m in ranks else "-"
                              for m in columns] + pad]
    if ranks_all:
        keys = [k for k in ("best", "ens") if k in next(iter(ranks_all.values()))]
        line = ["rank, all" + (" (best / ens)" if "ens" in keys else "")]
        line += [" / ".join(f"{ranks_all[m][k]:.2f}" for k in keys) if m in ranks_all else "-" for m in columns]
        lines.append(line + pad)
    return lines


def format_summary(rows: Sequence[SummaryRow], ranks: dict[str, dict], models: Sequence[str], markdown: bool = False,
                   dataset_seconds: dict[str, float] | None = None, ranks_all: dict[str, dict] | None = None,
                   ensemble: int = 1) -> str:
    """A table: one line per dataset, best/avg test top-1 accuracy (%, 2 decimals) per model (and the top-``ensemble``
    ensemble's when > 1), baselines, then mean accuracies and mean ranks (among the models; ``ranks_all``:
    models and baselines together, by best run and, with ensembles, by ensemble)."""
    columns = list(models) + baseline_columns(rows)
    ens = ensemble > 1
    suffix = f" best/avg/ens{ensemble}" if ens else " best/avg"
    header = ["dataset"] + [f"{m}{suffix}" if m in models else f"{m}" for m in columns]
    if dataset_seconds:
        header.append("sweep s")
    body = _dataset_lines(rows, models, columns, ens, dataset_seconds)
    footer = [_mean_line(rows, models, columns, ens, dataset_seconds)]
    footer += _rank_lines(ranks, ranks_all, columns, bool(dataset_seconds))
    if markdown:
        return markdown_table([dict(zip(header, line)) for line in body + footer], header).rstrip("\n")
    widths = [max(len(str(row[i])) for row in [header] + body + footer) for i in range(len(header))]
    fmt = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    return "\n".join([fmt(header), rule] + [fmt(r) for r in body] + [rule] + [fmt(r) for r in footer])


def _plot(path: Path, rows: Sequence[SummaryRow], models: Sequence[str]) -> None:
    """accuracy.png: bars of the best run per dataset and model (and baseline), dots for the sweep's mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = list(models) + baseline_columns(rows)
    datasets = sorted({r.dataset for r in rows})
    by = {(r.dataset, r.model): r for r in rows}
    width = 0.8 / max(1, len(columns))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(datasets) * max(1, len(columns)) / 2), 4.2))
    xs = np.arange(len(datasets))
    for i, m in enumerate(columns):
        best = [by[(d, m)].test_top1 if (d, m) in by else np.nan for d in datasets]
        avg = [by[(d, m)].avg_test_top1 if (d, m) in by else np.nan for d in datasets]
        pos = xs - 0.4 + width * (i + 0.5)
        ax.bar(pos, best, width, label=m)
        if m in models:
            ax.plot(pos, avg, "k.", markersize=6, label="sweep average" if i == 0 else None)
    ax.set_xticks(xs)
    ax.set_xticklabels(datasets, rotation=20, ha="right")
    ax.set_ylabel("test top-1 accuracy (%)")
    lows = [r.avg_test_top1 for r in rows if r.model in columns]
    ax.set_ylim(max(0.0, (min(lows) if lows else 0.0) - 10), 101)
    ax.set_title("Best run (validation-selected) per dataset; dots: mean over the sweep")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="y", alpha=0.3)
    atomic_save_figure(path, fig)


def training_text(cfg: SweepConfig) -> str:
    """How each run trains, in words (the paper's sentence when the paper's recipe is used)."""
    if cfg.steps is not None:
        length = steps_text(cfg.steps, cfg.step_scale)
    else:
        length = (f"{cfg.epochs} epochs" if cfg.epochs is not None
                  else "100 epochs (20 for Sleep, Tiselac, FaceDetection)")
        if cfg.min_steps:
            length += f", raised to reach at least {cfg.min_steps} optimizer steps"
    batch = ("batch min(n_train, 32, max(8, 128 // channels))" if cfg.batch_size == "auto"
             else f"batch {cfg.batch_size}")
    model = cfg.model
    patching = f"{model.patches} patches" + (f" (more where they would exceed {model.max_patch_len} steps)"
                                             if model.max_patch_len else "")
    if model.conv_stem:
        patching += f" + convolutional patch features of width {model.conv_stem}"
    if model.trunk:
        patching += (f" + a full-resolution {model.trunk} trunk ({model.trunk_depth} x "
                     f"{trunk_width_text(model.trunk_width)}"
                     + (", with the first difference" if model.trunk_diff else "")
                     + (", all channels together" if model.trunk_mix else "") + ") pooled per patch"
                     + (", with a second head on its mean token in the transformer models (scored: the mean of both heads' "
                        "probabilities)"
                        if model.trunk_head else ""))
    if model.token_stats:
        patching += " + per-patch mean/std"
    if model.level_scale == "auto":
        patching += (" + where the training series' scales differ more than "
                     f"{AUTO_SCALE_SPREAD:g}-fold, each channel normalised in the model, its mean/std added to its "
                     "tokens (jitter relative; no scaling or magnitude warping there)")
    elif model.level_scale:
        patching += " + each channel normalised in the model, its mean/std added to its tokens (jitter relative)"
    if model.rel_pos_bias:
        patching += "; relative-position bias in attention"
    if model.length_embed:
        patching += "; each series' length added to the global tokens"
    if cfg.jumbo_pool != SweepConfig.jumbo_pool:
        patching += f"; Jumbo models classify from {JUMBO_POOL_TEXT[cfg.jumbo_pool]}"
    if cfg.jumbo_multiplier != SweepConfig.jumbo_multiplier:
        patching += f"; Jumbo J={cfg.jumbo_multiplier} (registers matched to it)"
    if cfg.unequal_length == "resample":
        patching += "; shorter series resampled to the longest one's length"
    elif cfg.unequal_length == "zero":
        patching += "; shorter series zero-padded to the longest one's length"
    if cfg.layer_scale:
        patching += f"; LayerScale on every block, starting at {cfg.layer_scale:g}"
    if cfg.layers is not None:
        patching += f"; {cfg.layers} transformer layer{'s' if cfg.layers > 1 else ''}"
    if cfg.drop_path:
        patching += f"; stochastic depth up to {cfg.drop_path:g}"
    if cfg.dim is not None:
        patching += f"; token width {cfg.dim}"
    if cfg.pos_embed != SweepConfig.pos_embed:
        patching += "; no absolute position embedding" if cfg.pos_embed == "none" else "; sine-cosine positions"
    extras = f", gradient norm clipped to {cfg.grad_clip:g}" if cfg.grad_clip else ""
    extras += f", label smoothing {cfg.label_smoothing:g}" if cfg.label_smoothing else ""
    text = (f"{patching}; {length}; {batch}; AdamW, weight decay {cfg.weight_decay}{extras}; "
            f"warm-up {int(100 * cfg.warmup_fraction)}% then cosine to {cfg.min_lr:g}; seed {cfg.seed}")
    if cfg.seeds > 1:
        text += f" to {cfg.seed + cfg.seeds - 1} ({cfg.seeds} seeds per grid point)"
    text += "."
    if cfg.augment != "none":
        text += f" Augmentation: {cfg.augment.replace(',', ', ')} (each with probability 0.5 per series"
        text += f"; mixup alpha {cfg.mixup_alpha:g})." if "mixup" in cfg.augment else ")."
    if cfg.ema_decay:
        text += f" Scored: the exponential moving average of the weights (decay {cfg.ema_decay:g})."
    if cfg.lr_cycles > 1:
        text += (f" The learning-rate schedule restarts: {cfg.lr_cycles} cycles over the steps, each warmed up and "
                 "decayed as a run of its length.")
    if cfg.layer_decay is not None:
        text += (f" Layer-wise learning-rate decay {cfg.layer_decay:g}: each block's rate is the next block's times "
                 f"{cfg.layer_decay:g}, the head's the full rate.")
    if cfg.early_stop:
        when = ("at the end of each learning-rate cycle" + (f" from step {cfg.early_stop_from}"
                                                              if cfg.early_stop_from else "")
                if cfg.eval_every == "cycle" else f"every {cfg.eval_every} steps from step {cfg.early_stop_from}")
        text += (f" Early stopping: the validation half scored {when}, training stopped after "
                 f"{cfg.early_stop} scoring{'s' if cfg.early_stop > 1 else ''} without a "
                 f"{'lower validation loss' if cfg.early_stop_metric == 'loss' else 'higher validation accuracy'} "
                 "(the steps above are the budget), the "
                 "best scoring's weights kept.")
    if cfg.pretrain_epochs:
        source = (f"the training splits of {cfg.pretrain_on.replace(',', ', ')} (each target left out)"
                  if cfg.pretrain_on else "the training split")
        text += (f" Masked-patch pretraining on {source} first: the steps of {cfg.pretrain_epochs} epochs of the "
                 f"training split, mask ratio {cfg.pretrain_mask_ratio:g}, lr {cfg.pretrain_lr:g}.")
    if cfg.recipe != "paper":
        text += f" Recipe: {cfg.recipe}."
    return text


def _protocol_text(cfg: SweepConfig) -> str:
    """The split and the normalisation, in words."""
    if cfg.protocol == "seed":
        protocol = "official test set split 50/50 (stratified) into validation and test"
    else:
        protocol = "official train/test (selection on the test set: optimistic)"
    return protocol + {"train": "; channels standardised with training-split statistics",
                       "instance": "; each series normalised by its own statistics",
                       "auto": ("; channels standardised with training-split statistics, or each series by its own "
                                f"where the training series' scales differ more than {AUTO_SCALE_SPREAD:g}-fold"),
                       "none": ""}[cfg.normalize]


def _write_csv(path: Path, rows: Sequence[SummaryRow], ensemble: int) -> None:
    fields = list(CSV_FIELDS)
    if ensemble > 1:
        fields += ["ens_test_top1", "ens_val_top1", "ens_k"]
    if any(r.padded is not None for r in rows):
        fields += ["wall_seconds", "padded"]
    if any(r.best_step is not None for r in rows):
        fields += ["steps", "best_step"]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if getattr(r, k) is None else getattr(r, k)) for k in fields})
    atomic_write_text(path, buf.getvalue())


def _write_json(path: Path, result: SweepResult, cfg: SweepConfig) -> None:
    payload = {"sweep": cfg.identity(), "lrs": list(result.lrs), "dropouts": list(result.dropouts),
               "models": list(result.models), "summary": [r.to_dict() for r in result.rows], "ranks": result.ranks,
               "baselines": result.baselines, "dataset_seconds": result.dataset_seconds, "datasets": result.datasets,
               "runs": [asdict(r) for r in result.runs]}
    if result.ranks_all:
        payload["ranks_all"] = result.ranks_all
    if result.ensemble > 1:
        payload["ensemble"] = result.ensemble
    atomic_write_text(path, json.dumps(payload, indent=2, default=float) + "\n")


def _report_head(result: SweepResult, cfg: SweepConfig) -> list[str]:
    """report.md's title, protocol, sweep and the summary table."""
    branches = (f"Each model was trained with {cfg.branches} parallel branches per block (joined progressively "
                "over the first half of the steps) and collapsed exactly to the plain depth before scoring."
                if cfg.branches > 1 else "")
    lrs, dropouts, ensemble = result.lrs, result.dropouts, result.ensemble
    baseline_names = baseline_columns(result.rows)
    if baseline_names:
        ranked = (f"Ranks: 1 = best. \"mean rank\" ranks the transformer models; \"rank, all\" ranks them together "
                  f"with {', '.join(baseline_names)} (best run" + (", and ensemble" if ensemble > 1 else "") + ").")
    else:
        ranked = "Ranks: 1 = best, among the transformer models (MiniRocket, where shown, is not ranked)."
    padded = " *: series padded with zeros to equal length for the baseline." if any(
        r.padded for r in result.rows) else ""
    return [
        "# Time-series classification (PatchTST family)",
        "",
        f"Protocol: {_protocol_text(cfg)}; {training_text(cfg)} {branches}".rstrip(),
        f"Sweep: lr {', '.join(f'{v:g}' for v in lrs)} x dropout {', '.join(f'{v:g}' for v in dropouts)}"
        + (f" x {cfg.seeds} seeds" if cfg.seeds > 1 else "")
        + f" ({len(lrs) * len(dropouts) * cfg.seeds} run(s) per dataset and model).",
        "",
        "Test top-1 accuracy (%), best run chosen on validation / mean over the sweep"
        + (f" / mean probabilities of the {ensemble} runs best on validation" if ensemble > 1 else "")
        + f". {ranked}{padded}",
        "",
        format_summary(result.rows, result.ranks, result.models, markdown=True,
                       dataset_seconds=result.dataset_seconds, ranks_all=result.ranks_all, ensemble=ensemble),
        "",
    ]


def _report_details(result: SweepResult) -> list[str]:
    """report.md's datasets, skipped baselines and the per-model table."""
    md = ["## Datasets", ""] + [f"- {s}" for s in result.datasets.values()]
    skipped = [f"{name} on {d}: {r['skipped']}" for d, name, r in baseline_results(result.baselines)
               if "skipped" in r]
    if skipped:
        md += ["", "Baselines skipped: " + "; ".join(skipped)]
    columns = ["dataset", "model", "params", "patch len / stride / patches", "global tokens", "best lr / dropout",
               "step ms", "train s"]
    table = [dict(zip(columns, [r.dataset, r.model, f"{r.params:,}", f"{r.patch_len} / {r.stride} / {r.num_patches}",
                                str(r.global_tokens), f"{r.best_lr:g} / {r.best_dropout:g}", f"{r.step_ms:.1f}",
                                f"{r.train_seconds:.0f}"]))
             for r in result.rows if r.model in result.models]
    md += ["", "## Per model", "", markdown_table(table, columns).rstrip("\n")]
    return md + ["", "![accuracy per dataset and model](accuracy.png)", ""]


def write_reports(out_dir: Path, result: SweepResult, cfg: SweepConfig) -> dict[str, Path]:
    """results.csv, results.json, report.md and accuracy.png in ``out_dir`` (each written atomically)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: out_dir / name for name in ("results.csv", "results.json", "report.md", "accuracy.png")}
    _write_csv(paths["results.csv"], result.rows, result.ensemble)
    _write_json(paths["results.json"], result, cfg)
    atomic_write_text(paths["report.md"], "\n".join(_report_head(result, cfg) + _report_details(result)))
    _plot(paths["accuracy.png"], result.rows, result.models)
    return paths
