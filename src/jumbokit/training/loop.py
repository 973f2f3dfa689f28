"""``fit``: the one Accelerate-driven training loop shared by every recipe.

Per optimizer step: ``update_join(step)`` (progressive-join models), learning rate from the warm-up + cosine
schedule, ``loss_fn(model, batch)``, backward (mixed precision, gradient accumulation, DDP through Accelerate),
gradient clipping, optimizer step. Per epoch: ``eval_fn`` on the main process, a ``metrics.jsonl`` line, an
atomic ``accelerator.save_state`` checkpoint. At the end: ``model.safetensors`` + ``model_config.json``.

Resuming restores model, optimizer, RNG states and the step counters, and the data order depends only on
(seed, epoch), so a resumed run ends where an uninterrupted one would.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from accelerate.utils import extract_model_from_parallel
from torch import nn

from .config import TrainConfig
from .ema import WeightEMA
from .optim import build_optimizer, set_lr, warmup_steps_for
from .rundir import CHECKPOINT_RE, RunDir, atomic_write_json, checkpoint_name, list_checkpoints

STATE_FILE = "trainer_state.json"
EMA_FILE = "ema.safetensors"  # the weight average in a checkpoint (TrainConfig.ema_decay)
# config keys that change regularisation only; a checkpoint may be resumed with other values of these
_REGULARISATION_KEYS = {"drop_rate", "attn_drop_rate", "drop_path_rate", "head_drop_rate", "proj_drop_rate"}

LossFn = Callable[[nn.Module, Any], "tuple[torch.Tensor, dict[str, float]]"]


@dataclass
class FitResult:
    """What ``fit`` returns: per-epoch records, the last one, the trained (unwrapped) model, the accelerator."""

    history: list[dict]
    final: dict
    model: nn.Module
    accelerator: Any
    out_dir: Path | None = None
    checkpoints: list[Path] = field(default_factory=list)


def use_cpu(cpu: bool = False) -> bool:
    """True when asked, or when launched as several processes (``WORLD_SIZE`` > 1, e.g. ``accelerate launch
    --multi_gpu`` / ``torchrun``) on a machine without a GPU: Accelerate then runs multi-CPU DDP over gloo
    instead of independent single processes."""
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("PMI_SIZE", "1")) or 1)
    return bool(cpu) or (world > 1 and not torch.cuda.is_available())


def launch_state(cpu: bool = False):
    """The process-group state (``accelerate.PartialState``) of this launch, created once with ``use_cpu``;
    recipes call it first to know the process count and the main process before building data."""
    from accelerate import PartialState

    return PartialState(cpu=use_cpu(cpu))


def make_accelerator(cfg: TrainConfig, out_dir: str | os.PathLike | None = None):
    """An ``accelerate.Accelerator`` for ``cfg`` (mixed precision, gradient accumulation, cpu, trackers).

    In a single process a previous accelerator state with other settings is reset (tests, notebooks); under
    ``accelerate launch`` with several processes the launch settings are kept.
    """
    from accelerate import Accelerator, DataLoaderConfiguration, PartialState
    from accelerate.state import AcceleratorState
    from accelerate.utils import ProjectConfiguration

    cpu = use_cpu(cfg.cpu)
    if AcceleratorState._shared_state and PartialState(cpu=cpu).num_processes == 1:
        AcceleratorState._reset_state(reset_partial_state=True)
    kwargs: dict[str, Any] = dict(
        mixed_precision=cfg.mixed_precision,
        gradient_accumulation_steps=cfg.grad_accum,
        cpu=cpu,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=cfg.seed),
    )
    if cfg.log_with:
        if out_dir is None:
            raise ValueError(f"log_with={cfg.log_with!r} needs an out_dir for the tracker logs")
        check_tracker(cfg.log_with)
        kwargs["log_with"] = cfg.log_with
        kwargs["project_config"] = ProjectConfiguration(project_dir=str(out_dir), logging_dir=str(Path(out_dir) / "logs"))
    accelerator = Accelerator(**kwargs)
    configure_tf32(cfg.tf32, accelerator.device)
    return accelerator


def configure_tf32(enabled: bool, device: torch.device | str) -> bool:
    """On a CUDA ``device``, let fp32 matmuls and convolutions use TF32 tensor cores (Ampere and newer: several
    times the fp32 rate, 10-bit mantissa inputs, fp32 accumulation) or forbid it; returns whether TF32 is on.

    Applied through ``torch.set_float32_matmul_precision`` ("high" / "highest"), process-wide. On a CPU nothing is
    changed: CPU fp32 math stays exact (the same call would also switch oneDNN's fp32 matmuls)."""
    if torch.device(device).type != "cuda":
        return False
    torch.set_float32_matmul_precision("high" if enabled else "highest")
    torch.backends.cudnn.allow_tf32 = bool(enabled)
    return bool(enabled)


def check_tracker(name: str) -> None:
    """Raise ``ValueError`` when the accelerate tracker ``name`` (e.g. "tensorboard") is unknown or its package is
    not installed (accelerate would otherwise drop it silently)."""
    from accelerate.utils import imports

    if name == "all":
        return
    checker = getattr(imports, f"is_{name}_available", None)
    if checker is None:
        raise ValueError(f"unknown tracker {name!r}; expected e.g. tensorboard, wandb, mlflow, aim, comet_ml")
    if not checker():
        raise ValueError(f"log_with={name!r} needs the {name} package; install it (pip install {name})")


def model_fingerprint(model: nn.Module) -> dict[str, Any]:
    """What must match to resume into ``model``: its config (when it has one) and parameter shapes."""
    config = getattr(model, "config", None)
    if not isinstance(config, dict):
        config = None
    shapes = {name: list(t.shape) for name, t in model.state_dict().items()}
    return {"config": json.loads(json.dumps(config, default=str)) if config else None, "shapes": shapes}


def flatten_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'encoder': {'dim': 96}} -> {'encoder.dim': 96}."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flatten_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_differences(saved: dict[str, Any], current: dict[str, Any], limit: int = 6) -> list[str]:
    """``"key: saved vs now"`` for each architecture key of two (nested) model configs that differs.

    Regularisation rates (dropout, stochastic depth) may change between runs and are not compared; at most
    ``limit`` differences are listed, then a count of the rest."""
    a, b = flatten_config(json.loads(json.dumps(saved, default=str))), flatten_config(
        json.loads(json.dumps(current, default=str)))
    diff = sorted(k for k in set(a) | set(b)
                  if k.rsplit(".", 1)[-1] not in _REGULARISATION_KEYS and a.get(k) != b.get(k))
    shown = [f"{k}: saved {a.get(k)!r} vs now {b.get(k)!r}" for k in diff[:limit]]
    return shown + ([f"+{len(diff) - limit} more"] if len(diff) > limit else [])


def check_fingerprint(saved: dict[str, Any], current: dict[str, Any], where: Path) -> None:
    """Raise ``ValueError`` naming the differences when a checkpoint was written for another model."""
    problems = []
    a, b = saved.get("config") or {}, current.get("config") or {}
    if a and b:
        problems += config_differences(a, b)
    sa, sb = saved.get("shapes", {}), current.get("shapes", {})
    if sa and sb and sa != sb and not problems:
        missing = sorted(set(sa) - set(sb))[:3]
        extra = sorted(set(sb) - set(sa))[:3]
        shape = [f"{k}: {sa[k]} vs {sb[k]}" for k in sa if k in sb and sa[k] != sb[k]][:3]
        problems += [f"only in checkpoint: {missing}"] * bool(missing) + [f"only now: {extra}"] * bool(extra) + shape
    if problems:
        raise ValueError(
            f"cannot resume from {where}: it was written for a different model config ({'; '.join(problems)}); "
            f"use a new --out directory or the same model flags"
        )


def resolve_resume(resume: str | os.PathLike | None, out_dir: str | os.PathLike | None) -> Path | None:
    """Checkpoint directory to resume from: None, "latest" (newest in ``out_dir``; None if there is none) or a
    path (a checkpoint, a ``checkpoints/`` folder or a run directory)."""
    if resume in (None, "", False):
        return None
    if str(resume) == "latest":
        if out_dir is None:
            raise ValueError("resume='latest' needs an out_dir holding checkpoints/")
        found = list_checkpoints(Path(out_dir) / RunDir.CHECKPOINTS)
        return found[-1] if found else None
    path = Path(resume).expanduser()
    if not path.exists():
        raise ValueError(f"resume path {path} does not exist (expected a checkpoint or run directory, or 'latest')")
    if CHECKPOINT_RE.match(path.name) and (path / STATE_FILE).exists():
        return path
    for folder in (path / RunDir.CHECKPOINTS, path):
        found = list_checkpoints(folder)
        if found:
            return found[-1]
    raise ValueError(f"no checkpoint found in {path} (expected {path}/checkpoints/epoch_*)")


def save_final_model(model: nn.Module, out_dir: Path) -> Path:
    """``model.safetensors`` + ``model_config.json`` (``jumbokit.save``); other modules get weights only."""
    from safetensors.torch import save_model

    from jumbokit.encoders import Encoder, atomic_write, save

    if isinstance(model, Encoder) or hasattr(model, "saved_config"):
        return save(model, out_dir)
    return atomic_write(Path(out_dir) / "model.safetensors", lambda tmp: save_model(model, tmp))


def _scalar_logs(logs: dict[str, Any] | None) -> dict[str, float]:
    out = {}
    for k, v in (logs or {}).items():
        if isinstance(v, torch.Tensor):
            v = v.detach().float().mean().item()
        if isinstance(v, bool):
            v = int(v)
        if isinstance(v, int):
            out[k] = v
        elif isinstance(v, float):
            out[k] = v
    return out


def _step_logs(logs: dict[str, Any] | None) -> dict[str, torch.Tensor | float]:
    """Per-step logs kept as detached device tensors (no host sync); plain numbers pass through."""
    out: dict[str, torch.Tensor | float] = {}
    for k, v in (logs or {}).items():
        if isinstance(v, torch.Tensor):
            out[k] = v.detach().float().mean()
        elif isinstance(v, (bool, int, float)):
            out[k] = float(v)
    return out


class _Counters:
    """Optimizer step / epoch / micro-batch position, saved as ``trainer_state.json`` in each checkpoint."""

    def __init__(self) -> None:
        self.epoch = 0  # completed epochs
        self.step = 0  # optimizer steps taken
        self.batch_in_epoch = 0  # micro-batches consumed in the current epoch

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "step": self.step, "batch_in_epoch": self.batch_in_epoch}

    def load(self, data: dict[str, int]) -> None:
        self.epoch, self.step, self.batch_in_epoch = data["epoch"], data["step"], data["batch_in_epoch"]


def resume_entry(checkpoint: Path, counters: "_Counters", num_processes: int, cfg: TrainConfig,
                 total_steps: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``resumes.jsonl`` line of one resume: when, from which checkpoint, where in training, on how many
    processes, the training length now, plus ``extra`` (entries given by the caller)."""
    from datetime import datetime, timezone

    return {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "checkpoint": str(checkpoint),
            "epoch": counters.epoch, "step": counters.step, "num_processes": num_processes,
            "epochs": cfg.epochs, "total_steps": total_steps, **(extra or {})}


def _check_finite(loss: float, where: str, cfg: TrainConfig) -> None:
    """The NaN/inf guard. It runs where the loop reads values back anyway (logging steps, epoch ends, checkpoints):
    a check per micro-batch would stall an accelerator on a host sync every time."""
    if not math.isfinite(loss):
        raise FloatingPointError(f"loss is {loss} {where}; lower the learning rate (lr={cfg.lr}) or enable grad_clip")


def _save_checkpoint(acc, run: RunDir, counters: _Counters, end_of_epoch: bool, extra: dict, keep: int,
                     ema: WeightEMA | None = None) -> Path:
    """``accelerator.save_state`` into a temp folder (plus the weight average as ``EMA_FILE``), then rename
    (every process writes its RNG state)."""
    epoch_label = counters.epoch if end_of_epoch else counters.epoch + 1
    name = checkpoint_name(epoch_label, counters.step, end_of_epoch)
    final = run.checkpoints_dir / name
    tmp = run.checkpoints_dir / f".tmp-{name}"
    if acc.is_main_process:
        run.checkpoints_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    acc.wait_for_everyone()
    acc.save_state(str(tmp))
    acc.wait_for_everyone()
    if acc.is_main_process:
        if ema is not None:  # safetensors, not accelerate's custom-state pickle: checkpoints are never unpickled
            from safetensors.torch import save_model

            save_model(ema.module, str(tmp / EMA_FILE))
        atomic_write_json(tmp / STATE_FILE, {**counters.to_dict(), **extra})
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for old in list_checkpoints(run.checkpoints_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    acc.wait_for_everyone()
    return final


def fit(
    model: nn.Module,
    train_loader: Iterable,
    loss_fn: LossFn,
    cfg: TrainConfig,
    out_dir: str | os.PathLike | None = None,
    eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
    accelerator=None,
    params: Iterable | None = None,
    *,
    run_config: dict[str, Any] | None = None,
    resume_record: dict[str, Any] | None = None,
    on_epoch_end: Callable[[int, nn.Module, dict], None] | None = None,
) -> FitResult:
    """Train ``model`` on ``train_loader`` with ``loss_fn`` for ``cfg.epochs`` epochs.

    Args:
        model: any ``nn.Module``; if it has ``update_join(step)`` that is called before every optimizer step.
        train_loader: a DataLoader (``jumbokit.data.make_loader`` for exact resume); prepared by Accelerate.
        loss_fn: ``loss_fn(model, batch) -> (loss, logs)``; ``model`` is the prepared (possibly DDP) model.
            Models exposing ``aux_loss`` after forward: the loss_fn adds it (see ``classification_loss``).
            A loss_fn object with ``on_step(step, total_steps)`` is told the step before every forward
            (schedules inside the loss, e.g. token dropping; exact after resume).
        cfg: TrainConfig. A NaN / inf loss raises ``FloatingPointError`` at the next logging step (every
            ``cfg.log_every`` optimizer steps), mid-epoch checkpoint or epoch end, never later than a checkpoint.
        out_dir: run directory (config.json, metrics.jsonl, checkpoints/, model.safetensors); None = no files.
        eval_fn: ``eval_fn(unwrapped_model) -> metrics`` run on the main process after every epoch
            (the model is in eval mode; wrap in ``torch.no_grad`` inside); with ``cfg.ema_decay`` > 0 it gets
            the weight average (``WeightEMA.module``).
        accelerator: reuse an Accelerator (default: ``make_accelerator(cfg, out_dir)``).
        params: param groups for the optimizer (default: ``param_groups(model)`` with no-decay groups).
        run_config: extra entries written to ``config.json`` next to the train config (dataset record, args).
            ``config.json`` is written once, when the run starts; a resume leaves it as it is.
        resume_record: extra entries for the line a resume appends to ``resumes.jsonl`` (e.g. the flags that
            changed); that line always holds time, checkpoint, epoch, step, num_processes, epochs, total_steps.
        on_epoch_end: ``on_epoch_end(epoch, unwrapped_model, record)`` on the main process (plots, samples);
            the weight average too with ``cfg.ema_decay`` > 0.
    Returns:
        FitResult(history, final, model (unwrapped; holding the weight average when ``cfg.ema_decay`` > 0),
        accelerator).
    """
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm

    acc = accelerator or make_accelerator(cfg, out_dir)
    main = acc.is_main_process
    run = RunDir(out_dir, enabled=main) if out_dir is not None else None
    set_seed(cfg.seed)

    fingerprint = model_fingerprint(model)
    resume_from = resolve_resume(cfg.resume, out_dir)
    if cfg.resume == "latest" and resume_from is None and main and cfg.progress:
        acc.print(f"no checkpoint in {out_dir}/checkpoints; starting from scratch")
    saved_state = None
    if resume_from is None and run is not None and run.checkpoints():
        raise ValueError(
            f"{run.path} already holds checkpoints of another run; resume it (resume='latest') "
            f"or use an empty out_dir"
        )
    if resume_from is not None:
        saved_state = json.loads((resume_from / STATE_FILE).read_text())
        check_fingerprint(saved_state.get("model", {}), fingerprint, resume_from)

    optimizer = build_optimizer(params if params is not None else model, cfg)
    model, optimizer, loader = acc.prepare(model, optimizer, train_loader)
    unwrapped = acc.unwrap_model(model)
    batches = len(loader)
    if batches == 0:
        raise ValueError(
            "the training loader yields no batches (dataset smaller than one batch per process?); "
            "lower the batch size"
        )
    steps_per_epoch = math.ceil(batches / cfg.grad_accum)
    total_steps = cfg.epochs * steps_per_epoch
    warmup = warmup_steps_for(cfg, steps_per_epoch)

    counters = _Counters()
    history: list[dict] = []
    ema = WeightEMA(unwrapped, cfg.ema_decay) if cfg.ema_decay > 0 else None
    scored = ema.module if ema is not None else unwrapped  # what eval_fn and on_epoch_end see
    if resume_from is not None:
        saved_ema = float(saved_state.get("train", {}).get("ema_decay", 0.0))
        if (saved_ema > 0) != (ema is not None):
            raise ValueError(f"{resume_from} was saved with ema_decay={saved_ema}, but this run has "
                             f"ema_decay={cfg.ema_decay}; resume with the same setting (on or off)")
        acc.load_state(str(resume_from))
        if ema is not None:
            from safetensors.torch import load_model

            load_model(ema.module, str(resume_from / EMA_FILE), device=str(acc.device))
        counters.load(saved_state)
        if run is not None:
            if main:
                run.truncate_metrics(counters.step)
            history = [r for r in run.read_metrics() if r.get("kind") == "epoch" and r["step"] <= counters.step]
        if main and cfg.progress:
            acc.print(f"resumed from {resume_from} (epoch {counters.epoch}, step {counters.step})")

    if run is not None and resume_from is None and main:
        run.write_text(RunDir.METRICS, "")  # a fresh run starts a fresh log
    if run is not None and (resume_from is None or not (run / RunDir.CONFIG).exists()):
        run.update_config(
            **(run_config or {}),
            train=cfg.to_dict(),
            model_config=fingerprint["config"],
            num_processes=acc.num_processes,
            steps_per_epoch=steps_per_epoch,
            total_steps=total_steps,
            warmup_steps=warmup,
        )
    if run is not None and resume_from is not None:
        run.append_resume(resume_entry(resume_from, counters, acc.num_processes, cfg, total_steps, resume_record))
    if cfg.log_with:
        flat = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in cfg.to_dict().items()}
        acc.init_trackers("jumbokit", config=flat)

    has_join = callable(getattr(unwrapped, "update_join", None))
    on_step = getattr(loss_fn, "on_step", None)
    ckpt_extra = {"model": fingerprint, "total_steps": total_steps, "train": cfg.to_dict()}
    saved: list[Path] = []
    bar = tqdm(
        total=total_steps, initial=counters.step, desc="train", dynamic_ncols=True,
        disable=not (cfg.progress and acc.is_local_main_process),
    )
    lr = optimizer.param_groups[0]["lr"]
    for epoch in range(counters.epoch, cfg.epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        batches_iter = acc.skip_first_batches(loader, counters.batch_in_epoch) if counters.batch_in_epoch else loader
        model.train()
        started = time.time()
        epoch_loss, epoch_batches = torch.zeros((), device=acc.device), 0
        window: dict[str, float] = defaultdict(float)
        window_n = 0
        for batch in batches_iter:
            if has_join:
                unwrapped.update_join(counters.step)
            if on_step is not None:
                on_step(counters.step, total_steps)
            lr = set_lr(optimizer, counters.step, total_steps, warmup, cfg)
            with acc.accumulate(model):
                loss, logs = loss_fn(model, batch)
                acc.backward(loss)
                if acc.sync_gradients and cfg.grad_clip:
                    grad_norm = acc.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                    window["grad_norm"] += grad_norm.detach().float()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            counters.batch_in_epoch += 1
            epoch_loss += loss.detach().float()
            epoch_batches += 1
            # accumulate on the device: reading values back every micro-batch would stall an accelerator
            window["loss"] += loss.detach().float()
            for k, v in _step_logs(logs).items():
                window[k] += v
            window_n += 1
            if not acc.sync_gradients:
                continue
            if ema is not None:
                ema.update(unwrapped, counters.step)
            counters.step += 1
            bar.update(1)
            if counters.step % cfg.log_every == 0:
                means = {k: v / window_n for k, v in window.items()}
                if cfg.grad_clip and "grad_norm" in window:
                    means["grad_norm"] = window["grad_norm"] / max(1, window_n // cfg.grad_accum)
                stacked = torch.stack([torch.as_tensor(v, dtype=torch.float32, device=acc.device).reshape(())
                                       for v in means.values()])
                reduced = acc.reduce(stacked, "mean").tolist()
                record = {"kind": "train", "epoch": epoch + counters.batch_in_epoch / batches,
                          "step": counters.step, "lr": lr, **dict(zip(means, reduced))}
                if run is not None:
                    run.append_metrics(record)
                if cfg.log_with:
                    acc.log({f"train/{k}": v for k, v in record.items() if k not in ("kind", "step")}, step=counters.step)
                _check_finite(record["loss"], f"over the {window_n} micro-batches up to step {counters.step} "
                                              f"(epoch {epoch + 1})", cfg)
                bar.set_postfix(epoch=epoch + 1, loss=f"{record['loss']:.4f}", lr=f"{lr:.2e}")
                window, window_n = defaultdict(float), 0
            if (
                run is not None and cfg.checkpoint_steps and counters.step % cfg.checkpoint_steps == 0
                and counters.batch_in_epoch < batches
            ):
                _check_finite(acc.reduce(epoch_loss, "sum").item(), f"in epoch {epoch + 1} before step "
                                                                    f"{counters.step}", cfg)
                saved.append(_save_checkpoint(acc, run, counters, False, ckpt_extra, cfg.keep_checkpoints, ema))

        counters.epoch, counters.batch_in_epoch = epoch + 1, 0
        train_loss = acc.reduce(epoch_loss / max(1, epoch_batches), "mean").item()
        _check_finite(train_loss, f"in epoch {epoch + 1} (up to step {counters.step})", cfg)
        record: dict[str, Any] = {"kind": "epoch", "epoch": epoch + 1, "step": counters.step, "lr": lr,
                                  "train_loss": train_loss, "epoch_time_s": round(time.time() - started, 3)}
        if eval_fn is not None and main:
            was_training = scored.training
            scored.eval()
            with acc.autocast():
                record.update(_scalar_logs(eval_fn(scored)))
            scored.train(was_training)
        history.append(record)
        if main:
            if run is not None:
                run.append_metrics(record)
            if cfg.progress:
                shown = "  ".join(
                    f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in record.items() if k not in ("kind", "step", "lr", "epoch")
                )
                bar.write(f"epoch {epoch + 1}/{cfg.epochs}  {shown}")
            if on_epoch_end is not None:
                on_epoch_end(epoch, scored, record)
        if cfg.log_with:
            acc.log({f"epoch/{k}": v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"},
                    step=counters.step)
        due = cfg.checkpoint_every and ((epoch + 1) % cfg.checkpoint_every == 0 or epoch + 1 == cfg.epochs)
        if run is not None and due:
            saved.append(_save_checkpoint(acc, run, counters, True, ckpt_extra, cfg.keep_checkpoints, ema))
    bar.close()
    if ema is not None:  # the returned and saved model is the average
        unwrapped.load_state_dict(ema.module.state_dict())

    if run is not None and cfg.save_model and main:
        save_final_model(unwrapped, run.path)
    if cfg.log_with:
        acc.end_training()
    acc.wait_for_everyone()
    final = dict(history[-1]) if history else {"epoch": counters.epoch, "step": counters.step}
    kept = [p for p in saved if p.exists()]
    return FitResult(history=history, final=final, model=unwrapped, accelerator=acc,
                     out_dir=run.path if run else None, checkpoints=kept)


def classification_loss(
    criterion: nn.Module | None = None,
    mixup: Callable | None = None,
    forward: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
) -> LossFn:
    """A ``loss_fn`` for ``fit`` on ``(images, labels)`` batches: optional mixup/cutmix, ``criterion`` (default
    cross-entropy; soft-target CE with mixup), plus the model's ``aux_loss`` when it exposes one; logs ``acc``
    (on hard labels, not under mixup) and ``aux_loss``.

    ``forward(model, x) -> logits`` replaces ``model(x)`` (e.g. token dropping through ``keep``).
    """
    if criterion is None:
        if mixup is not None:
            from timm.loss import SoftTargetCrossEntropy

            criterion = SoftTargetCrossEntropy()
        else:
            criterion = nn.CrossEntropyLoss()

    def loss_fn(model: nn.Module, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        x, y = batch[0], batch[1]
        if mixup is not None:
            x, target = mixup(x, y)
        else:
            target = y
        logits = forward(model, x) if forward is not None else model(x)
        loss = criterion(logits, target)
        logs: dict[str, torch.Tensor] = {}
        aux = getattr(extract_model_from_parallel(model), "aux_loss", None)
        if isinstance(aux, torch.Tensor):
            loss = loss + aux
            logs["aux_loss"] = aux.detach()
        if mixup is None:
            logs["acc"] = (logits.detach().argmax(-1) == y).float().mean()
        return loss, logs

    return loss_fn
