"""The training runtime shared by every recipe: one Accelerate-driven loop, optimizers and schedules,
run directories and a classification evaluation loop (the front doors' shared flags live in ``jumbokit.cli``).

```python
from jumbokit.training import TrainConfig, fit, classification_loss, evaluate_classifier, RunDir
cfg = TrainConfig(epochs=10, lr=1e-3, warmup_epochs=1, grad_clip=1.0)
result = fit(model, train_loader, classification_loss(), cfg, out_dir="runs/x",
             eval_loaders={"val": val_loader})   # val_top1, val_top5, val_loss, val_n; on every process
```
"""
from .threads import ThreadChoice, configure_threads
from .accelerator import configure_tf32, launch_state, make_accelerator, resolve_precision
from .distributed import evaluate_loaders, process_seed
from .checkpoint import Checkpointer, TrainerState, save_final_model
from .config import OPTIMIZERS, PRECISIONS, SCHEDULES, TrainConfig
from .ema import WeightEMA
from .evaluate import evaluate_classifier, topk_correct
from .losses import classification_loss
from .early_stop import EarlyStop
from .loop import FitResult, fit
from .meters import MetricWindow, RunningMean
from .optim import (
    StepPlan, build_lars, build_optimizer, epochs_for_min_steps, lr_lambda, param_groups, set_lr, warmup_steps_for,
)
from .progress import Progress
from .resume import config_differences, model_fingerprint, resolve_resume
from .rundir import (
    RunDir, atomic_save_figure, atomic_write_json, atomic_write_text, csv_text, find_latest_run, markdown_table,
    read_data_record, to_json,
)

__all__ = [
    "TrainConfig", "fit", "launch_state", "FitResult", "build_optimizer", "lr_lambda", "make_accelerator", "RunDir",
    "classification_loss", "evaluate_classifier", "topk_correct", "build_lars", "param_groups", "set_lr", "warmup_steps_for", "epochs_for_min_steps",
    "model_fingerprint", "config_differences", "resolve_resume", "save_final_model", "atomic_save_figure", "atomic_write_json", "atomic_write_text",
    "csv_text", "markdown_table", "to_json", "OPTIMIZERS", "PRECISIONS", "SCHEDULES", "configure_threads",
    "ThreadChoice", "configure_tf32", "WeightEMA", "Checkpointer", "TrainerState", "StepPlan",
    "MetricWindow", "RunningMean", "Progress", "find_latest_run", "read_data_record", "resolve_precision",
    "evaluate_loaders", "process_seed", "EarlyStop",
]
