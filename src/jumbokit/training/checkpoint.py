"""Checkpoints of a run: ``Checkpointer`` writes resumable training states atomically and keeps the newest N;
``save_final_model`` writes the loadable model at the end.

A checkpoint is a folder ``checkpoints/{epoch|step}_{E}_{S}`` holding ``accelerator.save_state`` (model,
optimizer, RNG states of every process), ``trainer_state.json`` (position + what must match to resume) and,
with a weight average, ``ema.safetensors``. Nothing in it is unpickled on resume.

Naming and pruning stay ours rather than accelerate's ``ProjectConfiguration(automatic_checkpoint_naming=True,
total_limit=N)``: that writes ``checkpoint_<save count>`` in place (a kill mid-save leaves a half-written newest
checkpoint) after deleting the oldest (with ``keep_checkpoints=1``, the only good one), and its names no longer say
epoch and step (``--resume`` of a given checkpoint, and the checkpoints of runs written before).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from safetensors.torch import save_model
from torch import nn

from jumbokit.encoders import Encoder, save
from jumbokit.encoders.io import atomic_write

from .ema import WeightEMA
from .rundir import RunDir, atomic_write_json, checkpoint_name, list_checkpoints

__all__ = ["STATE_FILE", "EMA_FILE", "TrainerState", "Checkpointer", "save_final_model"]

STATE_FILE = "trainer_state.json"
EMA_FILE = "ema.safetensors"  # the weight average in a checkpoint (TrainConfig.ema_decay)


class TrainerState:
    """Optimizer step / epoch / micro-batch position, saved as ``trainer_state.json`` in each checkpoint; a mid-epoch
    checkpoint also keeps every process's running loss sum, so the resumed epoch's mean is the uninterrupted one."""

    def __init__(self) -> None:
        self.epoch = 0  # completed epochs
        self.step = 0  # optimizer steps taken
        self.batch_in_epoch = 0  # micro-batches consumed in the current epoch
        self.epoch_loss: list[float] = []  # mid-epoch: each process's running loss sum of the current epoch

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "step": self.step, "batch_in_epoch": self.batch_in_epoch,
                "epoch_loss": self.epoch_loss}

    def load(self, data: dict[str, Any]) -> None:
        self.epoch, self.step, self.batch_in_epoch = data["epoch"], data["step"], data["batch_in_epoch"]
        self.epoch_loss = list(data.get("epoch_loss", []))


class Checkpointer:
    """Saves training states into ``run.checkpoints_dir`` (temp folder + rename), keeping the newest ``keep``.

    ``extra`` goes into every ``trainer_state.json`` next to the position (model fingerprint, train config);
    ``ema`` (optional) is saved as ``EMA_FILE``. Every process calls ``save`` (each writes its RNG state)."""

    def __init__(self, accelerator, run: RunDir, keep: int, extra: dict[str, Any],
                 ema: WeightEMA | None = None) -> None:
        self.acc, self.run, self.keep, self.extra, self.ema = accelerator, run, keep, extra, ema
        self.saved: list[Path] = []

    def save(self, state: TrainerState, end_of_epoch: bool) -> Path:
        """Write the checkpoint of ``state`` (after epoch ``state.epoch``, or inside the next one) and return it."""
        acc = self.acc
        name = checkpoint_name(state.epoch if end_of_epoch else state.epoch + 1, state.step, end_of_epoch)
        folder = self.run.checkpoints_dir
        final, tmp = folder / name, folder / f".tmp-{name}"
        if acc.is_main_process:
            folder.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
        acc.wait_for_everyone()
        acc.save_state(str(tmp))
        acc.wait_for_everyone()
        if acc.is_main_process:
            if self.ema is not None:  # safetensors, not accelerate's custom-state pickle
                save_model(self.ema.module, str(tmp / EMA_FILE))
            atomic_write_json(tmp / STATE_FILE, {**state.to_dict(), **self.extra})
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            for old in list_checkpoints(folder)[:-self.keep]:
                shutil.rmtree(old, ignore_errors=True)
        acc.wait_for_everyone()
        self.saved.append(final)
        return final

    def kept(self) -> list[Path]:
        """The checkpoints this object wrote that still exist (older ones are pruned)."""
        return [p for p in self.saved if p.exists()]


def save_final_model(model: nn.Module, out_dir: Path) -> Path:
    """``model.safetensors`` + ``model_config.json`` (``jumbokit.save``); other modules get weights only."""
    if isinstance(model, Encoder) or hasattr(model, "saved_config"):
        return save(model, out_dir)
    return atomic_write(Path(out_dir) / "model.safetensors", lambda tmp: save_model(model, tmp))
