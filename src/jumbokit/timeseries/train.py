"""The Jumbo paper's time-series protocol: training runs, the 12-run sweep, selection, ranks, reports.

One run = one dataset, one model, one (learning rate, dropout): AdamW (weight decay 0.02), batch 256,
cross-entropy, linear warm-up over the first 10% of steps then cosine decay to 1e-8, 100 epochs (20
for the seed's very large sets), through the shared runtime (``jumbokit.training.fit``). The final
model is scored on the validation and test halves. Per dataset and model, "best" is the test accuracy
of the run with the best validation accuracy (ties: lower validation loss, then sweep order) and "avg"
is the mean test accuracy over the runs. Models are ranked per dataset and the ranks averaged.

A sweep directory holds ``sweep.json`` (what defines the sweep), ``runs/<dataset>/<model>/<run>.json``
(one file per finished run, written atomically, so an interrupted sweep resumes by skipping them) and
the reports: ``results.csv``, ``results.json``, ``report.md``, ``accuracy.png``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from torch import nn

from jumbokit.training.optim import epochs_for_min_steps
from jumbokit.training.rundir import atomic_save_figure, atomic_write_text

from .data import ClassificationData, SeriesSplit, load_dataset, load_raw
from .models import PATCHTST_MODELS, max_patches, patch_geometry

__all__ = [
    "SWEEP_LRS",
    "SWEEP_DROPOUTS",
    "LARGE_DATASETS",
    "SweepConfig",
    "RunResult",
    "SweepMismatchError",
    "build_model",
    "series_loader",
    "predict_proba",
    "evaluate",
    "train_config",
    "train_run",
    "minirocket_baseline",
    "check_patches",
    "summarize",
    "rank_models",
    "run_sweep",
    "write_reports",
    "format_summary",
]

SWEEP_LRS: tuple[float, ...] = (3e-3, 1e-3, 3e-4, 1e-4)
SWEEP_DROPOUTS: tuple[float, ...] = (0.0, 0.1, 0.2)
LARGE_DATASETS = frozenset({"Sleep", "Tiselac", "FaceDetection"})  # trained for 20 epochs in the seed
BASELINES = ("minirocket",)


LEGACY_SWEEP_KEYS = {"normalize": "instance", "min_steps": 0}


class SweepMismatchError(ValueError):
    """The output directory holds results of a sweep defined differently."""


@dataclass
class SweepConfig:
    """What defines a sweep's runs (stored in ``sweep.json``; a resumed sweep must match it)."""

    patches: int = 8
    epochs: int | None = None  # None: 100, or 20 for LARGE_DATASETS
    batch_size: int = 256
    weight_decay: float = 0.02
    warmup_fraction: float = 0.1
    min_lr: float = 1e-8
    seed: int = 0
    protocol: str = "seed"
    split_seed: int = 0
    mixed_precision: str = "no"
    normalize: str = "train"  # see jumbokit.timeseries.data.load_dataset
    branches: int = 1  # > 1: train progressive-join branches, collapse before scoring
    min_steps: int = 0  # raise the epochs of small sets so every run takes at least this many optimizer steps

    def epochs_for(self, dataset: str, steps_per_epoch: int = 1) -> int:
        """The protocol's epochs (100; 20 for the largest sets), raised to reach ``min_steps`` steps."""
        epochs = int(self.epochs) if self.epochs is not None else (20 if dataset in LARGE_DATASETS else 100)
        return epochs_for_min_steps(epochs, self.min_steps, steps_per_epoch)

    def identity(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunResult:
    """One finished run. Accuracies in [0, 1]."""

    dataset: str
    model: str
    lr: float
    dropout: float
    val_acc: float
    test_acc: float
    val_loss: float
    train_loss: float
    epochs: int
    steps: int
    train_seconds: float
    wall_seconds: float
    step_ms: float
    params: int
    patch_len: int
    stride: int
    num_patches: int
    global_tokens: int
    extra: dict[str, Any] = field(default_factory=dict)


def run_id(lr: float, dropout: float) -> str:
    return f"lr{lr:g}_do{dropout:g}"


# ---------------------------------------------------------------- building blocks
def build_model(name: str, data: ClassificationData, patches: int, dropout: float = 0.0,
                strict: bool = True, branches: int = 1) -> nn.Module:
    """The zoo model for a dataset: channels, length and classes from ``data``; ``dropout`` -> drop_rate.

    ``branches=n > 1``: the progressive-join training form with n times the layers in blocks of n parallel
    branches, which collapses exactly into the plain model's depth (``model.reparameterize()``)."""
    from ..encoders import create_model, model_config

    if name not in PATCHTST_MODELS:
        raise ValueError(f"expected a model among {', '.join(PATCHTST_MODELS)}, got {name!r}")
    if branches < 1:
        raise ValueError(f"branches must be >= 1, got {branches}")
    extra: dict[str, Any] = {}
    if branches > 1:
        extra = dict(branches=branches, depth=int(model_config(name, seq_len=data.seq_len)["depth"]) * branches)
    return create_model(name, num_classes=data.num_classes, in_chans=data.channels, seq_len=data.seq_len,
                        patches=patches, strict_patches=strict, drop_rate=float(dropout), **extra)


def series_loader(split: SeriesSplit, batch_size: int, shuffle: bool, seed: int = 0) -> torch.utils.data.DataLoader:
    """Batches of (x (B, C, L) float32 with NaN = missing/padded, y (B,) int64)."""
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(split.x), torch.from_numpy(split.y))
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator)


@torch.no_grad()
def predict_proba(model: nn.Module, x: np.ndarray | torch.Tensor, batch_size: int = 256,
                  device: torch.device | str | None = None) -> np.ndarray:
    """Class probabilities (n, num_classes) of series x (n, C, L) in eval mode."""
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    x = torch.as_tensor(x, dtype=torch.float32)
    out = []
    for start in range(0, x.shape[0], batch_size):
        logits = model(x[start:start + batch_size].to(device))
        out.append(torch.softmax(logits.float(), dim=-1).cpu())
    model.train(was_training)
    return torch.cat(out).numpy() if out else np.zeros((0, 0), dtype=np.float32)


def evaluate(model: nn.Module, split: SeriesSplit, batch_size: int = 256) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of a model on a split."""
    proba = predict_proba(model, split.x, batch_size)
    picked = proba[np.arange(len(split.y)), split.y]
    loss = float(-np.log(np.clip(picked, 1e-12, None)).mean())
    return float((proba.argmax(-1) == split.y).mean()), loss


def train_config(cfg: SweepConfig, lr: float, epochs: int, progress: bool = False, cpu: bool = False):
    """The shared runtime's TrainConfig for one run of the protocol (no checkpoints: runs are short)."""
    from ..training import TrainConfig

    return TrainConfig(epochs=epochs, lr=lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.999), optimizer="adamw",
                       warmup_fraction=cfg.warmup_fraction, min_lr=cfg.min_lr, schedule="cosine",
                       mixed_precision=cfg.mixed_precision, seed=cfg.seed, checkpoint_every=0, progress=progress,
                       cpu=cpu, save_model=False)


def train_run(data: ClassificationData, model_name: str, lr: float, dropout: float, cfg: SweepConfig,
              progress: bool = False, accelerator: Any = None, cpu: bool = False) -> RunResult:
    """Train one configuration on ``data`` with the shared runtime and score the final model."""
    from ..training import classification_loss, fit

    wall_start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    model = build_model(model_name, data, cfg.patches, dropout, branches=cfg.branches)
    loader = series_loader(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed)
    epochs = cfg.epochs_for(data.name, len(loader))
    steps = epochs * len(loader)
    if cfg.branches > 1:
        model.join_warmup_steps = max(1, steps // 2)  # joined by mid-training, then trained joined
    tcfg = train_config(cfg, lr, epochs, progress=progress, cpu=cpu)
    start = time.perf_counter()
    result = fit(model, loader, classification_loss(), tcfg, accelerator=accelerator)
    seconds = time.perf_counter() - start
    model = result.model
    if cfg.branches > 1:
        model = model.reparameterize()  # the plain model that is scored (and would be deployed)
    val_acc, val_loss = evaluate(model, data.val, cfg.batch_size)
    test_acc, _ = (val_acc, val_loss) if data.test is data.val else evaluate(model, data.test, cfg.batch_size)
    train_loss = float(result.final.get("train_loss", float("nan")))
    conf = model.config
    return RunResult(
        dataset=data.name, model=model_name, lr=float(lr), dropout=float(dropout), val_acc=val_acc,
        test_acc=test_acc, val_loss=val_loss, train_loss=train_loss, epochs=epochs, steps=steps,
        train_seconds=seconds, wall_seconds=time.perf_counter() - wall_start,
        step_ms=1000.0 * seconds / max(1, steps),
        params=sum(p.numel() for p in model.parameters()), patch_len=int(conf["patch_len"]),
        stride=int(conf["stride"]), num_patches=int(model.num_patches), global_tokens=int(model.num_global_tokens),
    )


def minirocket_baseline(data: ClassificationData, seed: int = 0, data_dir: str | Path | None = None) -> dict[str, Any]:
    """aeon's MiniRocket on the same splits (raw series; it normalises internally).

    Returns {"test_acc", "val_acc", "full_test_acc", "seconds"} or {"skipped": reason}."""
    from aeon.classification.convolution_based import MiniRocketClassifier

    if not data.meta.get("equal_length", False) or data.meta.get("missing_or_padded", False):
        return {"skipped": "unequal length or missing values (not supported by aeon's MiniRocket)"}
    if data.seq_len < 9:
        return {"skipped": f"series of {data.seq_len} steps (MiniRocket needs at least 9)"}
    x_train, y_train = load_raw(data.name, "train", data_dir, download=False)
    x_test, y_test = load_raw(data.name, "test", data_dir, download=False)
    start = time.perf_counter()
    clf = MiniRocketClassifier(random_state=seed)
    clf.fit(np.asarray(x_train), np.asarray(y_train).astype(str))
    pred = clf.predict(np.asarray(x_test))
    seconds = time.perf_counter() - start
    y_test = np.asarray(y_test).astype(str)
    correct = pred == y_test
    out = {"full_test_acc": float(correct.mean()), "seconds": seconds}
    if data.test_index is not None:
        out["test_acc"] = float(correct[data.test_index].mean())
        out["val_acc"] = float(correct[data.val_index].mean())
    else:
        out["test_acc"] = out["val_acc"] = out["full_test_acc"]
    return out


def check_patches(data: ClassificationData, patches: int) -> None:
    """Raise ValueError when ``patches`` cannot be cut from this dataset's (longest) series."""
    if patches > max_patches(data.seq_len):
        raise ValueError(f"--patches {patches} is larger than {data.name} allows: its longest series has "
                         f"{data.seq_len} steps, which give at most {max_patches(data.seq_len)} patches")
    patch_geometry(data.seq_len, patches, strict=True)


# ---------------------------------------------------------------- summaries
def summarize(runs: Iterable[RunResult | dict], baselines: dict[str, dict] | None = None) -> list[dict[str, Any]]:
    """One row per (dataset, model): best (validation-selected) and mean test accuracy, timings.

    Baselines (``{dataset: minirocket_result}``) add a row with model ``minirocket``."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        run = asdict(run) if isinstance(run, RunResult) else dict(run)
        groups.setdefault((run["dataset"], run["model"]), []).append(run)
    rows = []
    for (dataset, model), items in groups.items():
        best = min(items, key=lambda r: (-r["val_acc"], r["val_loss"]))
        tests = np.array([r["test_acc"] for r in items])
        rows.append({
            "dataset": dataset, "model": model, "runs": len(items), "best_test_acc": best["test_acc"],
            "best_val_acc": best["val_acc"], "avg_test_acc": float(tests.mean()), "std_test_acc": float(tests.std()),
            "max_test_acc": float(tests.max()), "best_lr": best["lr"], "best_dropout": best["dropout"],
            "train_seconds": float(sum(r["train_seconds"] for r in items)),
            "step_ms": float(np.mean([r["step_ms"] for r in items])), "params": best["params"],
            "patch_len": best["patch_len"], "stride": best["stride"], "num_patches": best["num_patches"],
            "global_tokens": best["global_tokens"],
        })
    for dataset, result in (baselines or {}).items():
        if "test_acc" in result:
            rows.append({"dataset": dataset, "model": "minirocket", "runs": 1, "best_test_acc": result["test_acc"],
                         "best_val_acc": result["val_acc"], "avg_test_acc": result["test_acc"], "std_test_acc": 0.0,
                         "max_test_acc": result["test_acc"], "best_lr": None, "best_dropout": None,
                         "train_seconds": result["seconds"], "step_ms": None, "params": None, "patch_len": None,
                         "stride": None, "num_patches": None, "global_tokens": None,
                         "full_test_acc": result["full_test_acc"]})
    order = {m: i for i, m in enumerate(PATCHTST_MODELS + BASELINES)}
    rows.sort(key=lambda r: (r["dataset"], order.get(r["model"], 99), r["model"]))
    return rows


def _ranks(values: list[float]) -> list[float]:
    """Rank 1 = highest value; ties share the mean rank."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def rank_models(rows: list[dict], models: Sequence[str]) -> dict[str, dict[str, float]]:
    """Mean rank over datasets of each model, by best and by avg test accuracy (datasets where all
    ``models`` have results). Returns {model: {"best": r, "avg": r, "datasets": n}}."""
    table: dict[str, dict[str, dict]] = {}
    for row in rows:
        table.setdefault(row["dataset"], {})[row["model"]] = row
    out = {m: {"best": 0.0, "avg": 0.0, "datasets": 0} for m in models}
    count = 0
    for per_model in table.values():
        if not all(m in per_model for m in models):
            continue
        count += 1
        for key in ("best", "avg"):
            for m, r in zip(models, _ranks([per_model[m][f"{key}_test_acc"] for m in models])):
                out[m][key] += r
    for m in models:
        out[m]["datasets"] = count
        for key in ("best", "avg"):
            out[m][key] = out[m][key] / count if count else float("nan")
    return out


# ---------------------------------------------------------------- files
def _pct(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def format_summary(rows: list[dict], ranks: dict[str, dict], models: Sequence[str], markdown: bool = False,
                   dataset_seconds: dict[str, float] | None = None) -> str:
    """A table: one line per dataset, best/avg test accuracy (%) per model, then mean ranks."""
    columns = list(models) + [b for b in BASELINES if any(r["model"] == b for r in rows)]
    by = {(r["dataset"], r["model"]): r for r in rows}
    datasets = sorted({r["dataset"] for r in rows})
    header = ["dataset"] + [f"{m} best/avg" if m in models else f"{m}" for m in columns]
    if dataset_seconds:
        header.append("sweep s")
    lines = []
    for d in datasets:
        cells = [d]
        for m in columns:
            r = by.get((d, m))
            if r is None:
                cells.append("-")
            elif m in models:
                cells.append(f"{_pct(r['best_test_acc'])} / {_pct(r['avg_test_acc'])}")
            else:
                cells.append(_pct(r["best_test_acc"]))
        if dataset_seconds:
            cells.append(f"{dataset_seconds.get(d, float('nan')):.0f}")
        lines.append(cells)
    means = ["mean acc"]
    for m in columns:
        vals = [by[(d, m)] for d in datasets if (d, m) in by]
        if not vals:
            means.append("-")
        elif m in models:
            means.append(f"{_pct(np.mean([v['best_test_acc'] for v in vals]))} / "
                         f"{_pct(np.mean([v['avg_test_acc'] for v in vals]))}")
        else:
            means.append(_pct(np.mean([v["best_test_acc"] for v in vals])) + f" ({len(vals)} sets)")
    if dataset_seconds:
        means.append(f"{sum(dataset_seconds.values()):.0f}")
    lines.append(means)
    rank_line = ["mean rank"] + [f"{ranks[m]['best']:.2f} / {ranks[m]['avg']:.2f}" if m in ranks else "-"
                                 for m in columns]
    if dataset_seconds:
        rank_line.append("")
    lines.append(rank_line)
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(c) + " |" for c in lines]
        return "\n".join(out)
    widths = [max(len(str(row[i])) for row in [header] + lines) for i in range(len(header))]
    fmt = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths))  # noqa: E731
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    return "\n".join([fmt(header), rule] + [fmt(r) for r in lines[:-2]] + [rule] + [fmt(r) for r in lines[-2:]])


def _plot(path: Path, rows: list[dict], models: Sequence[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = list(models) + [b for b in BASELINES if any(r["model"] == b for r in rows)]
    datasets = sorted({r["dataset"] for r in rows})
    by = {(r["dataset"], r["model"]): r for r in rows}
    width = 0.8 / max(1, len(columns))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(datasets) * max(1, len(columns)) / 2), 4.2))
    xs = np.arange(len(datasets))
    for i, m in enumerate(columns):
        best = [100 * by[(d, m)]["best_test_acc"] if (d, m) in by else np.nan for d in datasets]
        avg = [100 * by[(d, m)]["avg_test_acc"] if (d, m) in by else np.nan for d in datasets]
        pos = xs - 0.4 + width * (i + 0.5)
        ax.bar(pos, best, width, label=m)
        if m in models:
            ax.plot(pos, avg, "k.", markersize=6, label="sweep average" if i == 0 else None)
    ax.set_xticks(xs)
    ax.set_xticklabels(datasets, rotation=20, ha="right")
    ax.set_ylabel("test accuracy (%)")
    lows = [100 * r["avg_test_acc"] for r in rows if r["model"] in columns]
    ax.set_ylim(max(0.0, (min(lows) if lows else 0.0) - 10), 101)
    ax.set_title("Best run (validation-selected) per dataset; dots: mean over the sweep")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="y", alpha=0.3)
    atomic_save_figure(path, fig)


def write_reports(out_dir: Path, rows: list[dict], ranks: dict[str, dict], models: Sequence[str],
                  runs: list[RunResult], cfg: SweepConfig, baselines: dict[str, dict],
                  dataset_seconds: dict[str, float], lrs: Sequence[float], dropouts: Sequence[float],
                  data_summaries: dict[str, str]) -> dict[str, Path]:
    """results.csv, results.json, report.md and accuracy.png in ``out_dir`` (each written atomically)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: out_dir / name for name in ("results.csv", "results.json", "report.md", "accuracy.png")}
    buf = io.StringIO()
    fields = ["dataset", "model", "runs", "best_test_acc", "avg_test_acc", "std_test_acc", "best_val_acc",
              "max_test_acc", "best_lr", "best_dropout", "train_seconds", "step_ms", "params", "patch_len", "stride",
              "num_patches", "global_tokens", "full_test_acc"]
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in fields})
    atomic_write_text(paths["results.csv"], buf.getvalue())
    payload = {"sweep": cfg.identity(), "lrs": list(lrs), "dropouts": list(dropouts), "models": list(models),
               "summary": rows, "ranks": ranks, "baselines": baselines, "dataset_seconds": dataset_seconds,
               "datasets": data_summaries, "runs": [asdict(r) for r in runs]}
    atomic_write_text(paths["results.json"], json.dumps(payload, indent=2, default=float) + "\n")
    epochs = f"{cfg.epochs} epochs" if cfg.epochs is not None else "100 epochs (20 for Sleep, Tiselac, FaceDetection)"
    if cfg.min_steps:
        epochs += f", raised to reach at least {cfg.min_steps} optimizer steps"
    branches = (f"Each model was trained with {cfg.branches} parallel branches per block (joined progressively "
                "over the first half of the steps) and collapsed exactly to the plain depth before scoring."
                if cfg.branches > 1 else "")
    if cfg.protocol == "seed":
        protocol = "official test set split 50/50 (stratified) into validation and test"
    else:
        protocol = "official train/test (selection on the test set: optimistic)"
    protocol += {"train": "; channels standardised with training-split statistics",
                 "instance": "; each series normalised by its own statistics", "none": ""}[cfg.normalize]
    md = [
        "# Time-series classification (PatchTST family)",
        "",
        f"Protocol: {protocol}; "
        f"{cfg.patches} patches; {epochs}; batch {cfg.batch_size}; AdamW, weight decay {cfg.weight_decay}; "
        f"warm-up {int(100 * cfg.warmup_fraction)}% then cosine to {cfg.min_lr:g}; seed {cfg.seed}. {branches}".rstrip(),
        f"Sweep: lr {', '.join(f'{v:g}' for v in lrs)} x dropout {', '.join(f'{v:g}' for v in dropouts)} "
        f"({len(lrs) * len(dropouts)} run(s) per dataset and model).",
        "",
        "Test accuracy (%), best run chosen on validation / mean over the sweep. Ranks: 1 = best, among the "
        "transformer models (MiniRocket, where shown, is not ranked).",
        "",
        format_summary(rows, ranks, models, markdown=True, dataset_seconds=dataset_seconds),
        "",
        "## Datasets",
        "",
    ]
    md += [f"- {s}" for s in data_summaries.values()]
    skipped = {d: b["skipped"] for d, b in baselines.items() if "skipped" in b}
    if skipped:
        md += ["", "MiniRocket skipped: " + "; ".join(f"{d}: {why}" for d, why in skipped.items())]
    md += ["", "## Per model", "", "| dataset | model | params | patch len / stride / patches | global tokens | "
           "best lr / dropout | step ms | train s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["model"] in models:
            md.append(f"| {r['dataset']} | {r['model']} | {r['params']:,} | {r['patch_len']} / {r['stride']} / "
                      f"{r['num_patches']} | {r['global_tokens']} | {r['best_lr']:g} / {r['best_dropout']:g} | "
                      f"{r['step_ms']:.1f} | {r['train_seconds']:.0f} |")
    md += ["", "![accuracy per dataset and model](accuracy.png)", ""]
    atomic_write_text(paths["report.md"], "\n".join(md))
    _plot(paths["accuracy.png"], rows, models)
    return paths


# ---------------------------------------------------------------- the sweep
def _check_out_dir(out_dir: Path, identity: dict[str, Any]) -> None:
    sweep_file = out_dir / "sweep.json"
    if sweep_file.exists():
        stored = json.loads(sweep_file.read_text())
        # keys added after a sweep was written: what those sweeps did (series were normalised per instance)
        defaults = {**SweepConfig().identity(), **LEGACY_SWEEP_KEYS}
        diff = {k: (stored.get(k, defaults.get(k)), v) for k, v in identity.items()
                if stored.get(k, defaults.get(k)) != v}
        if diff:
            desc = ", ".join(f"{k}: {a!r} there vs {b!r} now" for k, (a, b) in diff.items())
            raise SweepMismatchError(f"{out_dir} holds results of a different sweep ({desc}); pass another --out "
                                     "or the same settings to resume")
    elif out_dir.exists() and any(out_dir.iterdir()):
        raise SweepMismatchError(f"{out_dir} is not empty and holds no sweep.json (not a tstrain output "
                                 "directory); pass an empty or new --out")


def _load_run(path: Path) -> RunResult | None:
    """A finished run's record, or None when the file is unreadable or lacks a field (the run is redone)."""
    try:
        record = json.loads(path.read_text())
        names = {f.name for f in fields(RunResult)}
        return RunResult(**{k: v for k, v in record.items() if k in names})
    except (OSError, ValueError, TypeError):
        return None


def run_sweep(datasets: Sequence[str], models: Sequence[str], cfg: SweepConfig, out_dir: str | Path,
              lrs: Sequence[float] = SWEEP_LRS, dropouts: Sequence[float] = SWEEP_DROPOUTS,
              baseline: str | None = None, data_dir: str | Path | None = None, progress: bool = True,
              skip_short: bool = False, log: Callable[[str], None] = print, cpu: bool = False) -> dict[str, Any]:
    """Run (or resume) the sweep and write the reports; returns {"rows", "ranks", "runs", "paths", ...}.

    Every dataset is loaded and checked before any training, so bad input fails with nothing written.
    ``skip_short``: drop datasets too short for ``cfg.patches`` (with a note) instead of failing.
    """
    from tqdm.auto import tqdm

    models = list(dict.fromkeys(models))
    for m in models:
        if m not in PATCHTST_MODELS:
            raise ValueError(f"unknown model {m!r}; expected one or more of {', '.join(PATCHTST_MODELS)}")
    if baseline is not None and baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; expected one of {BASELINES}")
    if not datasets:
        raise ValueError("no datasets to run")
    out_dir = Path(out_dir)
    _check_out_dir(out_dir, cfg.identity())

    loaded: dict[str, ClassificationData] = {}
    for name in datasets:
        data = load_dataset(name, protocol=cfg.protocol, split_seed=cfg.split_seed, data_dir=data_dir,
                            normalize=cfg.normalize)
        try:
            check_patches(data, cfg.patches)
        except ValueError as err:
            if not skip_short:
                raise
            log(f"skipping {name}: {err}")
            continue
        loaded[name] = data
    if not loaded:
        raise ValueError(f"none of the datasets ({', '.join(datasets)}) allows {cfg.patches} patches")

    from ..training import make_accelerator

    accelerator = make_accelerator(train_config(cfg, 1e-3, 1, cpu=cpu))
    is_main = accelerator.is_main_process
    if is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        if not (out_dir / "sweep.json").exists():
            atomic_write_text(out_dir / "sweep.json", json.dumps(cfg.identity(), indent=2) + "\n")

    grid = [(lr, do) for lr in lrs for do in dropouts]
    total = len(loaded) * len(models) * len(grid)
    if is_main:
        log(f"{len(loaded)} dataset(s) x {len(models)} model(s) x {len(grid)} run(s) = {total} runs -> {out_dir}")
    runs: list[RunResult] = []
    baselines: dict[str, dict] = {}
    dataset_seconds: dict[str, float] = {}
    bar = tqdm(total=total, desc="sweep", unit="run", disable=not (progress and is_main), dynamic_ncols=True)
    for name, data in loaded.items():
        if is_main:
            (bar.write if progress else log)(data.summary())
        for model in models:
            for lr, dropout in grid:
                path = out_dir / "runs" / name / model / f"{run_id(lr, dropout)}.json"
                done = _load_run(path) if path.exists() else None
                if done is None:
                    bar.set_postfix_str(f"{name} {model} lr={lr:g} do={dropout:g}")
                    done = train_run(data, model, lr, dropout, cfg, accelerator=accelerator, cpu=cpu)
                    if is_main:
                        atomic_write_text(path, json.dumps(asdict(done), indent=1) + "\n")
                    accelerator.free_memory()
                runs.append(done)
                dataset_seconds[name] = dataset_seconds.get(name, 0.0) + done.wall_seconds
                bar.update(1)
        if baseline == "minirocket" and is_main:
            path = out_dir / "runs" / name / "minirocket.json"
            if path.exists():
                baselines[name] = json.loads(path.read_text())
            else:
                bar.set_postfix_str(f"{name} minirocket")
                baselines[name] = minirocket_baseline(data, seed=cfg.seed, data_dir=data_dir)
                atomic_write_text(path, json.dumps(baselines[name], indent=1) + "\n")
    bar.close()

    rows = summarize(runs, baselines)
    ranks = rank_models(rows, models)
    result = {"rows": rows, "ranks": ranks, "runs": runs, "baselines": baselines, "models": models,
              "dataset_seconds": dataset_seconds, "paths": {}}
    if is_main:
        result["paths"] = write_reports(out_dir, rows, ranks, models, runs, cfg, baselines, dataset_seconds, lrs,
                                        dropouts, {n: d.summary() for n, d in loaded.items()})
    return result
