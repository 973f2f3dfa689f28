"""``fit``: the one Accelerate-driven training loop shared by every recipe.

Per optimizer step: ``update_join(step)`` (progressive-join models), learning rate from the warm-up + cosine
schedule, ``loss_fn(model, batch)``, backward (mixed precision, gradient accumulation, DDP through Accelerate),
gradient clipping, optimizer step, weight average; with an ``EarlyStop`` rule, a scoring on a held-out split every
so many steps (``early_stop``: training ends when it stops improving, on the best scoring's weights). Per epoch:
``eval_loaders`` on every process (combined with ``gather_for_metrics``), ``eval_fn`` on the main process, a
``metrics.jsonl`` line, an atomic checkpoint. At the end: ``model.safetensors`` + ``model_config.json``. Switches
of the ``TrainConfig``: gradient checkpointing and ``torch.compile`` of the model (``compute``), layer-wise lr decay
(``optim``), accelerate's trackers.

The loop stays short because its parts are collaborators: ``resume`` (find, check and restore a checkpoint;
the run's records), ``meters`` (running means kept on the device), ``checkpoint`` (``Checkpointer``),
``progress`` (the bar and the epoch line), ``accelerator`` (the ``Accelerator`` for a ``TrainConfig``),
``distributed`` (per-process seeds, evaluation on every process, the whole model under FSDP).

Step counts come from the loader after Accelerate sharded it. Each process draws from its own random stream
(``seed + process index``; process 0 keeps a one-process run's stream) while the data order and augmentation
follow the loader's seed, so the same global batch gives the same training on 1 or N processes up to the order
of floating-point reductions. Resuming restores model, optimizer, every
process's RNG states and the step counters, and the data order depends only on (seed, epoch), so a resumed run
ends where an uninterrupted one would.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from torch import nn

from .accelerator import launch_state, make_accelerator  # noqa: F401  (launch_state: imported from here too)
from .checkpoint import Checkpointer, TrainerState, save_final_model
from .compute import compile_model, enable_grad_checkpointing
from .config import TrainConfig
from .early_stop import EarlyStop, Stopper
from .distributed import FullModel, check_sharding, evaluate_loaders, seed_process
from .ema import WeightEMA
from .losses import LossFn
from .meters import MetricWindow, RunningMean, check_finite, format_record, scalar_logs
from .optim import StepPlan, build_optimizer, check_layer_decay, set_lr
from .progress import Progress
from .resume import find_resume, model_fingerprint, restore, resume_entry, write_start_records
from .rundir import RunDir

__all__ = ["FitResult", "fit"]


@dataclass
class FitResult:
    """What ``fit`` returns: per-epoch records, the last one, the trained (unwrapped) model, the accelerator."""

    history: list[dict]
    final: dict
    model: nn.Module
    accelerator: Any
    out_dir: Path | None = None
    checkpoints: list[Path] = field(default_factory=list)


@dataclass
class _Fit:
    """What one ``fit`` call shares between its step, epoch and end helpers."""

    acc: Any
    cfg: TrainConfig
    model: nn.Module  # prepared by Accelerate (possibly DDP- or FSDP-wrapped)
    unwrapped: nn.Module
    whole: FullModel
    optimizer: Any
    loader: Any
    loss_fn: LossFn
    plan: StepPlan
    state: TrainerState
    ema: WeightEMA | None
    run: RunDir | None
    checkpointer: Checkpointer | None
    progress: Progress
    lr: float
    stopper: Stopper | None = None
    stop_evals: "_Evals | None" = None

    def scored(self) -> nn.Module:
        """What ``eval_fn`` and ``on_epoch_end`` see on the main process: the weight average when there is one,
        else the whole model (called on every process: under FSDP gathering the model is collective)."""
        return self.ema.module if self.ema is not None else self.whole.refresh()


@dataclass
class _Evals:
    """The per-epoch evaluations of one ``fit`` call: ``eval_fn`` and ``on_epoch_end`` (main process), the
    prepared ``loaders`` (every process) and their ``forward``."""

    eval_fn: Callable | None
    loaders: dict[str, Any]
    forward: Callable | None
    on_epoch_end: Callable | None

    @property
    def on_main(self) -> bool:
        """Whether something runs the model on the main process alone."""
        return self.eval_fn is not None or self.on_epoch_end is not None


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
    eval_loaders: dict[str, Iterable] | None = None,
    eval_forward: Callable[[nn.Module, Any], Any] | dict[str, Callable] | None = None,
    on_plan: Callable[[StepPlan], None] | None = None,
    run_config: dict[str, Any] | None = None,
    resume_record: dict[str, Any] | None = None,
    on_epoch_end: Callable[[int, nn.Module, dict], None] | None = None,
    early_stop: EarlyStop | None = None,
) -> FitResult:
    """Train ``model`` on ``train_loader`` with ``loss_fn`` for ``cfg.epochs`` epochs.

    Args:
        model: any ``nn.Module``; if it has ``update_join(step)`` that is called before every optimizer step.
        train_loader: a DataLoader (``jumbokit.data.make_loader`` for exact resume); prepared by Accelerate, which
            shards it over the processes (the step counts are taken from the prepared loader).
        loss_fn: ``loss_fn(model, batch) -> (loss, logs)`` on the prepared (possibly DDP) model; it adds a
            model's ``aux_loss`` (see ``classification_loss``). A loss_fn with ``on_step(step, total_steps)`` is
            told the step before every forward. A NaN / inf loss raises ``FloatingPointError`` at the next
            logging step (``cfg.log_every``), mid-epoch checkpoint or epoch end.
        out_dir: run directory (config.json, metrics.jsonl, resumes.jsonl, checkpoints/, model.safetensors).
        eval_fn: ``eval_fn(model) -> metrics`` on the main process alone after every epoch, in eval mode (wrap in
            ``torch.no_grad`` inside; the weight average with ``cfg.ema_decay`` > 0); ``eval_loaders`` is faster.
        accelerator: reuse an Accelerator (default: ``make_accelerator(cfg, out_dir)``).
        params: param groups for the optimizer (default: ``param_groups(model)`` with no-decay groups, or
            ``layer_decay_groups`` with ``cfg.layer_decay``).
        eval_loaders: ``{split: loader of (images, labels)}`` evaluated after every epoch on every process (each
            on its shard of the prepared loader) and combined with ``gather_for_metrics``, so each sample counts
            once: the record gets ``{split}_top1``, ``{split}_top5`` (percent), ``{split}_loss``, ``{split}_n``.
        eval_forward: ``eval_forward(model, images) -> logits`` for ``eval_loaders`` (default ``model(images)``),
            or a dict of them by split.
        on_plan: told the ``StepPlan`` (steps per epoch and in all, after sharding) before the model is checked
            and prepared: schedules measured in steps (a progressive join's warm-up) are set here.
        run_config: entries for ``config.json`` next to the train config (dataset record, args); config.json
            is written when a run starts and left as it is by a resume.
        resume_record: entries for the ``resumes.jsonl`` line a resume appends (e.g. flags that changed); the
            line always holds time, checkpoint, epoch, step, num_processes, epochs, total_steps.
        on_epoch_end: ``on_epoch_end(epoch, model, record)`` on the main process (plots, samples); the model
            is the one ``eval_fn`` sees.
        early_stop: score ``eval_loaders[early_stop.split]`` every ``early_stop.every`` optimizer steps from step
            ``early_stop.start`` on (and after the last one) and stop once ``patience`` scorings did not beat the
            best; the model ends on the best scoring's weights (:mod:`.early_stop`). The final record gets
            ``early_stop`` (best step and value, where training ended, the curve). Not with checkpoints (the best
            weights are kept in memory) nor under FSDP.
    Returns:
        FitResult(history, final, model (unwrapped; the weight average with ``cfg.ema_decay`` > 0; under FSDP the
        whole model on the main process and the sharded module on the others), accelerator).
    """
    if cfg.grad_checkpointing:  # a model without it is refused before anything is written
        enable_grad_checkpointing(model)
    if cfg.layer_decay is not None and params is None:
        check_layer_decay(model, cfg.layer_decay)
    _check_early_stop(early_stop, eval_loaders, cfg, out_dir)
    acc = accelerator or make_accelerator(cfg, out_dir)
    check_sharding(acc, cfg.ema_decay)
    run = RunDir(out_dir, enabled=acc.is_main_process) if out_dir is not None else None
    seed_process(cfg.seed, acc)
    loader = acc.prepare(train_loader)
    plan = StepPlan.of(len(loader), cfg)
    if on_plan is not None:
        on_plan(plan)
    fingerprint = model_fingerprint(model)
    checkpoint, saved = find_resume(cfg, run, fingerprint, acc.is_main_process)
    whole = FullModel(acc, model)
    optimizer = build_optimizer(params if params is not None else model, cfg)
    model, optimizer = acc.prepare(model, optimizer)
    whole.attach(model)
    unwrapped, state = acc.unwrap_model(model), TrainerState()
    ema = WeightEMA(unwrapped, cfg.ema_decay) if cfg.ema_decay > 0 else None
    if cfg.compile:  # after the average's copy is taken (see compile_model)
        compile_model(unwrapped)
    history = restore(acc, checkpoint, saved, state, ema, run) if checkpoint is not None else []
    checkpointer = _open_run(acc, cfg, run, plan, fingerprint, ema, run_config,
                             None if checkpoint is None else resume_entry(
                                 checkpoint, state, acc.num_processes, cfg.epochs, plan.total_steps, resume_record))
    progress = Progress(plan.total_steps, state.step, cfg.progress and acc.is_local_main_process)
    evals = _Evals(eval_fn, {k: acc.prepare_data_loader(v) for k, v in (eval_loaders or {}).items()},
                   eval_forward, on_epoch_end)
    f = _Fit(acc, cfg, model, unwrapped, whole, optimizer, loader, loss_fn, plan, state, ema, run, checkpointer,
             progress, lr=optimizer.param_groups[0]["lr"])
    if early_stop is not None:
        _start_early_stop(f, early_stop, evals)
    try:
        for epoch in range(state.epoch, cfg.epochs):
            started = time.time()
            epoch_loss = _train_epoch(f, epoch)
            history.append(_end_epoch(f, epoch, epoch_loss, started, evals))
            if f.stopper is not None and f.stopper.stopped:
                break
    except ValueError:  # bad input (an unreadable image, a wrong shape) met before a fresh run's first checkpoint
        progress.close()
        if run is not None and checkpoint is None and not run.checkpoints():
            run.discard_start()
        raise
    progress.close()
    if f.stopper is not None:
        _end_early_stop(f, history)
    return _finish(f, history)


def _check_early_stop(rule: EarlyStop | None, eval_loaders: dict | None, cfg: TrainConfig, out_dir) -> None:
    """ValueError, before anything is written, for an early-stopping rule ``fit`` cannot follow."""
    if rule is None:
        return
    if not isinstance(rule, EarlyStop):
        raise TypeError(f"early_stop must be an EarlyStop, got {type(rule).__name__}")
    if rule.split not in (eval_loaders or {}):
        raise ValueError(f"early stopping scores the split {rule.split!r}: pass it in eval_loaders (got "
                         f"{sorted(eval_loaders or {})})")
    if out_dir is not None and (cfg.checkpoint_every or cfg.checkpoint_steps):
        raise ValueError("early stopping keeps the best weights in memory, not in checkpoints: train with "
                         "checkpoint_every=0 and checkpoint_steps=0, or without out_dir")


def _start_early_stop(f: _Fit, rule: EarlyStop, evals: "_Evals") -> None:
    """The run's stopper, scoring the rule's split of the prepared ``evals`` (refused under FSDP)."""
    if f.whole.sharded:
        raise ValueError("early stopping keeps the best weights of the whole model on every process; it does not "
                         "run under FSDP")
    f.stopper = Stopper(rule)
    f.stop_evals = _Evals(None, {rule.split: evals.loaders[rule.split]}, evals.forward, None)


def _stop_target(f: _Fit) -> nn.Module:
    """The module early stopping scores, keeps and restores: the weight average when there is one."""
    return f.ema.module if f.ema is not None else f.unwrapped


def _score_for_stop(f: _Fit) -> None:
    """The early-stopping scoring at the current step, on every process (the same numbers everywhere), of the
    module that is scored and returned (the weight average when there is one)."""
    metrics = _evaluate_everywhere(f, f.stop_evals)
    f.stopper.observe(f.state.step, metrics, _stop_target(f))
    if f.run is not None:
        f.run.append_metrics({"kind": "early_stop", **f.stopper.scorings[-1]})


def _end_early_stop(f: _Fit, history: list[dict]) -> None:
    """After the last step: score it too when it was not (so the final weights compete; the epoch's own evaluation of
    the split at that step is taken rather than scored twice), go back to the best scoring's weights, and add the
    rule's summary to the last record."""
    last = history[-1] if history else {}
    if f.stopper.last_step != f.state.step:
        if last.get("step") == f.state.step and f.stopper.rule.key in last:
            f.stopper.observe(f.state.step, last, _stop_target(f))
        else:
            _score_for_stop(f)
    f.stopper.restore(_stop_target(f))
    if history:
        history[-1]["early_stop"] = f.stopper.summary(f.plan.total_steps)


def _open_run(acc, cfg: TrainConfig, run: RunDir | None, plan: StepPlan, fingerprint: dict, ema: WeightEMA | None,
              run_config: dict | None, resumed: dict | None) -> Checkpointer | None:
    """The run's start records (config.json, or a resumes.jsonl line ``resumed``), the trackers, and the
    checkpointer (None without a run directory)."""
    if run is not None:
        write_start_records(run, {
            **(run_config or {}), "train": cfg.to_dict(), "model_config": fingerprint["config"],
            "num_processes": acc.num_processes, "steps_per_epoch": plan.steps_per_epoch,
            "total_steps": plan.total_steps, "warmup_steps": plan.warmup_steps}, resumed)
    if cfg.log_with:
        name = cfg.run_name or (run.path.name if run is not None else "jumbokit")
        acc.init_trackers(name, config=tracker_config({**cfg.to_dict(), **(run_config or {}).get("args", {})}))
    return None if run is None else Checkpointer(acc, run, cfg.keep_checkpoints, {
        "model": fingerprint, "total_steps": plan.total_steps, "train": cfg.to_dict()}, ema)


def tracker_config(config: dict[str, Any]) -> dict[str, int | float | str | bool]:
    """A run's settings as trackers take them (TensorBoard's hyperparameters: numbers, strings and booleans)."""
    return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in config.items()}


def _train_epoch(f: _Fit, epoch: int) -> RunningMean:
    """The micro-batches of one epoch (from the saved position after a resume); returns the epoch's loss meter."""
    acc, cfg, state = f.acc, f.cfg, f.state
    if hasattr(f.loader, "set_epoch"):
        f.loader.set_epoch(epoch)
    batches = acc.skip_first_batches(f.loader, state.batch_in_epoch) if state.batch_in_epoch else f.loader
    f.model.train()
    epoch_loss, window = RunningMean(acc.device), MetricWindow(cfg.grad_accum)
    if state.batch_in_epoch and len(state.epoch_loss) == acc.num_processes:  # resumed from a mid-epoch checkpoint
        epoch_loss.restore(state.epoch_loss, state.batch_in_epoch, acc.process_index)
    update_join = getattr(f.unwrapped, "update_join", None)
    on_step = getattr(f.loss_fn, "on_step", None)
    for batch in batches:
        if callable(update_join):
            update_join(state.step)
        if on_step is not None:
            on_step(state.step, f.plan.total_steps)
        f.lr = set_lr(f.optimizer, *f.plan.schedule_at(state.step), cfg)
        with acc.accumulate(f.model):
            loss, logs = f.loss_fn(f.model, batch)
            acc.backward(loss)
            if acc.sync_gradients and cfg.grad_clip:
                window.add_grad_norm(acc.clip_grad_norm_(f.model.parameters(), cfg.grad_clip))
            f.optimizer.step()
            f.optimizer.zero_grad(set_to_none=True)
        state.batch_in_epoch += 1
        epoch_loss.add(loss)
        window.add(loss, logs)
        if acc.sync_gradients:
            _after_optimizer_step(f, epoch, window, epoch_loss)
            if f.stopper is not None and f.stopper.stopped:
                break
    return epoch_loss


def _after_optimizer_step(f: _Fit, epoch: int, window: MetricWindow, epoch_loss: RunningMean) -> None:
    """Weight average, step count, bar; then the ``train`` metrics line and a mid-epoch checkpoint when due."""
    acc, cfg, state = f.acc, f.cfg, f.state
    if f.ema is not None:
        f.ema.update(f.unwrapped, state.step)
    state.step += 1
    f.progress.update(1)
    if state.step % cfg.log_every == 0:
        micro_batches = window.n
        record = {"kind": "train", "epoch": epoch + state.batch_in_epoch / f.plan.batches, "step": state.step,
                  "lr": f.lr, **window.reduce(acc)}
        if f.run is not None:
            f.run.append_metrics(record)
        if cfg.log_with:
            acc.log({f"train/{k}": v for k, v in record.items() if k not in ("kind", "step")}, step=state.step)
        check_finite(record["loss"], f"over the {micro_batches} micro-batches up to step {state.step} "
                                     f"(epoch {epoch + 1})", cfg.lr)
        f.progress.show(epoch=epoch + 1, loss=f"{record['loss']:.4f}", lr=f"{f.lr:.2e}")
    if (f.checkpointer is not None and cfg.checkpoint_steps and state.step % cfg.checkpoint_steps == 0
            and state.batch_in_epoch < f.plan.batches):
        state.epoch_loss = epoch_loss.sums(acc)
        check_finite(sum(state.epoch_loss), f"in epoch {epoch + 1} before step {state.step}", cfg.lr)
        f.checkpointer.save(state, end_of_epoch=False)
    if f.stopper is not None and f.stopper.due(state.step):
        _score_for_stop(f)


def _end_epoch(f: _Fit, epoch: int, epoch_loss: RunningMean, started: float, evals: _Evals) -> dict[str, Any]:
    """The epoch's record (train loss, time, the evaluations) to metrics.jsonl, the epoch line, trackers and
    ``on_epoch_end``; the epoch checkpoint when due. Returns the record."""
    acc, cfg, state = f.acc, f.cfg, f.state
    state.epoch, state.batch_in_epoch, state.epoch_loss = epoch + 1, 0, []
    train_loss = epoch_loss.mean(acc)
    check_finite(train_loss, f"in epoch {epoch + 1} (up to step {state.step})", cfg.lr)
    record: dict[str, Any] = {"kind": "epoch", "epoch": epoch + 1, "step": state.step, "lr": f.lr,
                              "train_loss": train_loss, "epoch_time_s": round(time.time() - started, 3)}
    if evals.loaders:
        record.update(_evaluate_everywhere(f, evals))
    scored = f.scored() if evals.on_main else None  # collective under FSDP: every process takes part
    if acc.is_main_process:
        if evals.eval_fn is not None:
            record.update(_evaluate(f, scored, evals.eval_fn))
        if f.run is not None:
            f.run.append_metrics(record)
        f.progress.line(f"epoch {epoch + 1}/{cfg.epochs}  {format_record(record)}")
        if evals.on_epoch_end is not None:
            evals.on_epoch_end(epoch, scored, record)
    if cfg.log_with:
        acc.log({f"epoch/{k}": v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"},
                step=state.step)
    due = cfg.checkpoint_every and ((epoch + 1) % cfg.checkpoint_every == 0 or epoch + 1 == cfg.epochs)
    if f.checkpointer is not None and due:
        f.checkpointer.save(state, end_of_epoch=True)
    return record


def _evaluate_everywhere(f: _Fit, evals: _Evals) -> dict[str, float | int]:
    """The ``eval_loaders`` on every process: the weight average (a plain copy on each process) or the model
    (unwrapped under DDP; the sharded module under FSDP, whose forward is collective)."""
    model = f.ema.module if f.ema is not None else (f.model if f.whole.sharded else f.unwrapped)
    was_training = model.training
    metrics = scalar_logs(evaluate_loaders(f.acc, model, evals.loaders, evals.forward))
    model.train(was_training)
    return metrics


def _evaluate(f: _Fit, scored: nn.Module, eval_fn: Callable[[nn.Module], dict]) -> dict[str, float | int]:
    """``eval_fn`` on the scored model in eval mode under the run's autocast; its numbers as Python scalars."""
    was_training = scored.training
    scored.eval()
    with f.acc.autocast():
        metrics = scalar_logs(eval_fn(scored))
    scored.train(was_training)
    return metrics


def _finish(f: _Fit, history: list[dict]) -> FitResult:
    """Load the weight average into the model (when kept), write the final model, end trackers."""
    if f.ema is not None:  # the returned and saved model is the average
        f.unwrapped.load_state_dict(f.ema.module.state_dict())
    final_model = f.whole.refresh()  # collective under FSDP
    if f.run is not None and f.cfg.save_model and f.acc.is_main_process:
        save_final_model(final_model, f.run.path)
    if f.cfg.log_with:
        f.acc.end_training()
    f.acc.wait_for_everyone()
    final = dict(history[-1]) if history else {"epoch": f.state.epoch, "step": f.state.step}
    return FitResult(history=history, final=final, model=final_model, accelerator=f.acc,
                     out_dir=f.run.path if f.run else None,
                     checkpoints=f.checkpointer.kept() if f.checkpointer else [])
