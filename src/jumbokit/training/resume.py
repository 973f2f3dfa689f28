"""Resuming a run: find the checkpoint, check that it fits this model and config, restore the training state,
and keep the run's records (``config.json`` stays as first written; each resume appends to ``resumes.jsonl``)."""
from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from safetensors.torch import load_model
from torch import nn

from .checkpoint import EMA_FILE, STATE_FILE, TrainerState
from .config import TrainConfig
from .ema import WeightEMA
from .rundir import CHECKPOINT_RE, RunDir, list_checkpoints, to_json

__all__ = ["model_fingerprint", "flatten_config", "config_differences", "check_fingerprint", "resolve_resume",
           "find_resume", "restore", "resume_entry", "write_start_records"]

logger = logging.getLogger(__name__)

# config keys that change regularisation only; a checkpoint may be resumed with other values of these
_REGULARISATION_KEYS = {"drop_rate", "attn_drop_rate", "drop_path_rate", "head_drop_rate", "proj_drop_rate"}


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


def find_resume(cfg: TrainConfig, run: RunDir | None, fingerprint: dict[str, Any],
                main: bool = True) -> tuple[Path | None, dict[str, Any]]:
    """The checkpoint ``cfg.resume`` names and its ``trainer_state.json`` (``(None, {})`` for a fresh start),
    checked before any work: a fresh start into a directory with checkpoints, another model config or another
    weight-average setting raise ``ValueError``."""
    checkpoint = resolve_resume(cfg.resume, run.path if run is not None else None)
    if checkpoint is None:
        if cfg.resume == "latest" and main:
            logger.info("no checkpoint in %s; starting from scratch", run.checkpoints_dir)
        if run is not None and run.checkpoints():
            raise ValueError(f"{run.path} already holds checkpoints of another run; resume it (resume='latest') "
                             f"or use an empty out_dir")
        return None, {}
    saved = json.loads((checkpoint / STATE_FILE).read_text())
    check_fingerprint(saved.get("model", {}), fingerprint, checkpoint)
    saved_ema = float(saved.get("train", {}).get("ema_decay", 0.0))
    if (saved_ema > 0) != (cfg.ema_decay > 0):
        raise ValueError(f"{checkpoint} was saved with ema_decay={saved_ema}, but this run has "
                         f"ema_decay={cfg.ema_decay}; resume with the same setting (on or off)")
    return checkpoint, saved


def restore(accelerator, checkpoint: Path, saved: dict[str, Any], state: TrainerState,
            ema: WeightEMA | None = None, run: RunDir | None = None) -> list[dict]:
    """Load model, optimizer and RNG states (and the weight average) from ``checkpoint`` into the prepared
    objects, set ``state`` to its position, drop metric lines logged after it; returns the epoch records so far."""
    accelerator.load_state(str(checkpoint))
    if ema is not None:
        load_model(ema.module, str(checkpoint / EMA_FILE), device=str(accelerator.device))
    state.load(saved)
    if accelerator.is_main_process:
        logger.info("resumed from %s (epoch %d, step %d)", checkpoint, state.epoch, state.step)
    if run is None:
        return []
    if accelerator.is_main_process:
        run.truncate_metrics(state.step)
    return [r for r in run.read_metrics() if r.get("kind") == "epoch" and r["step"] <= state.step]


def resume_entry(checkpoint: Path, state: TrainerState, num_processes: int, epochs: int, total_steps: int,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``resumes.jsonl`` line of one resume: when, from which checkpoint, where in training, on how many
    processes, the training length now, plus ``extra`` (entries given by the caller)."""
    return {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "checkpoint": str(checkpoint),
            "epoch": state.epoch, "step": state.step, "num_processes": num_processes,
            "epochs": epochs, "total_steps": total_steps, **(extra or {})}


def write_start_records(run: RunDir, config: dict[str, Any], resume: dict[str, Any] | None) -> None:
    """A fresh run (``resume`` None) starts an empty ``metrics.jsonl`` and writes ``config.json`` and, when the
    config holds the run's flags (``"args"``), ``args.yaml`` (the flags, a ``--config`` file for another run); a
    resume appends ``resume`` to ``resumes.jsonl`` and leaves ``config.json`` as it is (writing it only if
    missing)."""
    if resume is None:
        run.write_text(RunDir.METRICS, "")
        if isinstance(config.get("args"), dict):
            import yaml

            flags = {k: v for k, v in json.loads(to_json(config["args"], indent=None)).items() if k != "config"}
            run.write_text(RunDir.ARGS, yaml.safe_dump(flags, sort_keys=False))
    if resume is None or not (run / RunDir.CONFIG).exists():
        run.update_config(**config)
    if resume is not None:
        run.append_resume(resume)
