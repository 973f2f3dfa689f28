"""The flags every training front door shares (data, model, output, optimisation, resume, precision, threads),
their value types, and what they turn into: the ``TrainConfig``, the thread choice and the run directory."""
from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path
from typing import Any

from ..training.config import OPTIMIZERS, PRECISIONS, SCHEDULES, TrainConfig
from ..training.accelerator import launch_state
from ..training.rundir import RunDir, list_checkpoints
from ..training.threads import ThreadChoice, configure_threads
from .config import add_config_arg
from .data import add_data_args

logger = logging.getLogger(__name__)


def add_threads_arg(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add ``--threads`` (CPU threads for torch; default: automatic, see
    :func:`~jumbokit.training.threads.configure_threads`)."""
    parser.add_argument(
        "--threads", type=int, default=None,
        help="CPU threads for torch (default: the cores available to this process, divided among the processes "
             "on this machine; a user's OMP_NUM_THREADS is kept, the 1 that `accelerate launch` sets is not)",
    )


def fraction_arg(noun: str, example: str):
    """An argparse type for a float in [0, 1) (0 = off); the error names ``noun`` and ``example``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not 0 <= value < 1:
            raise argparse.ArgumentTypeError(f"expected a {noun} in [0, 1) (0 = off), e.g. {example}, got {text!r}")
        return value

    return parse


ema_decay_arg = fraction_arg("decay", "0.998")  # argparse type of ``--ema``


def layer_decay_arg(text: str) -> float:
    """The argparse type of ``--layer-decay``: a rate in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a rate in (0, 1], e.g. 0.75, got {text!r}")
    return value


def add_tracker_args(group) -> None:
    """``--log-with`` (accelerate trackers) and ``--run-name``."""
    group.add_argument("--log-with", default=None, metavar="TRACKERS",
                       help="log the run's config and metrics through accelerate's trackers, comma-separated: "
                            "tensorboard (offline, under <out>/logs/<run name>), wandb, mlflow, aim, comet_ml, "
                            "all (default: none)")
    group.add_argument("--run-name", default=None,
                       help="the trackers' run name (default: the run directory's name)")


def add_common_args(
    parser: argparse.ArgumentParser,
    *,
    dataset: str = "digits",
    model: str | None = "vit_tiny_jumbo",
    epochs: int = 30,
    batch_size: int = 64,
    lr: float = 1e-3,
    weight_decay: float = 0.05,
    warmup_epochs: float = 2.0,
    optimizer: str = "adamw",
    betas: tuple[float, float] = (0.9, 0.999),
    grad_clip: float | None = None,
    img_size: int | None = None,
) -> argparse.ArgumentParser:
    """Add the flags every image recipe shares; recipe-specific defaults are passed as keywords."""
    add_config_arg(parser)
    add_data_args(parser, dataset=dataset, img_size=img_size)  # the "data" and "augmentation" groups

    run = parser.add_argument_group("run")
    if model is not None:
        run.add_argument("--model", default=model, help="zoo name, see jumbokit.list_models() (default: %(default)s)")
    run.add_argument("--out", default=None, help="run directory (default: runs/<recipe>_<model>_<dataset>)")
    run.add_argument("--resume", nargs="?", const="latest", default=None,
                     help="continue the run in --out with its stored flags from its newest checkpoint (or from the "
                          "given checkpoint / run directory); only more --epochs may be given (default: off)")
    run.add_argument("--overwrite", action="store_true", help="replace an existing run in --out (default: off)")
    run.add_argument("--seed", type=int, default=0,
                     help="random seed of initialisation, data order and subsets (default: %(default)s)")
    run.add_argument("--mixed-precision", default="auto", choices=PRECISIONS,
                     help="autocast precision of the forward pass; auto: bf16 on a CUDA GPU that supports it, else "
                          "no (fp32) (default: %(default)s)")
    run.add_argument("--cpu", action="store_true", help="train on CPU even when a GPU is present (default: off)")
    run.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=True,
                     help="on a CUDA GPU, run fp32 matmuls and convolutions on TF32 tensor cores "
                          "(torch.set_float32_matmul_precision('high')); no effect on CPU (default: on)")
    run.add_argument("--checkpoint-every", type=int, default=1,
                     help="epochs between checkpoints, 0 = off (default: %(default)s)")
    run.add_argument("--checkpoint-steps", type=int, default=0,
                     help="also checkpoint every N optimizer steps inside epochs, 0 = off (default: %(default)s)")
    run.add_argument("--log-every", type=int, default=10,
                     help="optimizer steps between metrics.jsonl lines (default: %(default)s)")
    add_tracker_args(run)
    run.add_argument("--compile", action="store_true",
                     help="torch.compile the model (the first steps are slow while it compiles) (default: off)")
    run.add_argument("--grad-checkpointing", action="store_true",
                     help="recompute each block's activations in the backward pass instead of keeping them (timm's "
                          "set_grad_checkpointing): less memory, the same gradients (default: off)")
    run.add_argument("--no-progress", action="store_true",
                     help="hide progress bars; the summary lines stay (default: bars shown)")
    add_threads_arg(run)

    opt = parser.add_argument_group("optimisation")
    opt.add_argument("--epochs", type=int, default=epochs,
                     help="passes over the training set (default: %(default)s)")
    opt.add_argument("--batch-size", type=int, default=batch_size, help="per-process batch (default: %(default)s)")
    opt.add_argument("--lr", type=float, default=lr,
                     help="peak learning rate (default: " + ("%(default)s)" if lr is not None else
                                                             "--blr x effective batch / 256)"))
    opt.add_argument("--min-lr", type=float, default=1e-6, help="final learning rate (default: %(default)s)")
    opt.add_argument("--weight-decay", type=float, default=weight_decay,
                     help="decoupled weight decay of matrices (default: %(default)s)")
    opt.add_argument("--warmup-epochs", type=float, default=warmup_epochs,
                     help="epochs of linear learning-rate warm-up (default: %(default)s)")
    opt.add_argument("--optimizer", default=optimizer, choices=OPTIMIZERS, help="optimizer (default: %(default)s)")
    opt.add_argument("--schedule", default="cosine", choices=SCHEDULES,
                     help="learning-rate schedule after warm-up (default: %(default)s)")
    opt.add_argument("--betas", type=float, nargs=2, default=list(betas),
                     help="AdamW betas (default: %(default)s)")
    opt.add_argument("--grad-clip", type=float, default=grad_clip,
                     help="max gradient norm (default: " + ("%(default)s)" if grad_clip is not None else "off)"))
    opt.add_argument("--grad-accum", type=int, default=1,
                     help="micro-batches per optimizer step (default: %(default)s)")
    opt.add_argument("--layer-decay", type=layer_decay_arg, default=None, metavar="RATE",
                     help="layer-wise learning-rate decay for fine-tuning: layer i of L gets lr x RATE^(L - i), "
                          "the head the full lr (timm's param_groups_layer_decay), e.g. 0.75 (default: off)")
    opt.add_argument("--ema", type=ema_decay_arg, default=0.0, metavar="DECAY",
                     help="keep an exponential moving average of the weights with this decay (e.g. 0.9998), "
                          "evaluate and save it instead of the last weights (default: 0, off)")
    return parser


_COUNT_FLAGS = {"batch_size": "the per-process batch", "eval_batch_size": "the evaluation batch",
                "epochs": "passes over the training set", "grad_accum": "micro-batches per optimizer step"}


def check_count_flags(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` naming the flag when ``--batch-size``, ``--eval-batch-size``, ``--epochs`` or
    ``--grad-accum`` (those the parser has and the user set) is below 1, before anything derived from them (the
    learning rate scaled with the batch) fails with a less helpful message."""
    for name, meaning in _COUNT_FLAGS.items():
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be an integer >= 1 ({meaning}), got {value}")


def setup_threads(args: argparse.Namespace) -> ThreadChoice:
    """Apply ``--threads`` (or the automatic count, see ``configure_threads``) and log the choice as the run's
    first line on the first process of each machine (``--no-progress`` hides bars only, not this line)."""
    import os

    from jumbokit.logs import configure_logging

    choice = configure_threads(getattr(args, "threads", None))
    if not logging.getLogger("jumbokit").handlers:  # a front door that did not configure logging yet
        configure_logging()
    if os.environ.get("LOCAL_RANK", "0") == "0":
        logger.info(choice.describe())
    return choice


def train_config_from_args(args: argparse.Namespace, **overrides: Any) -> TrainConfig:
    """TrainConfig from the flags of ``add_common_args`` (plus ``overrides``)."""
    values = dict(
        epochs=args.epochs, lr=args.lr, min_lr=args.min_lr, weight_decay=args.weight_decay,
        betas=tuple(args.betas), optimizer=args.optimizer, warmup_epochs=args.warmup_epochs,
        schedule=args.schedule, grad_clip=args.grad_clip, grad_accum=args.grad_accum,
        mixed_precision=args.mixed_precision, tf32=getattr(args, "tf32", True), seed=args.seed, checkpoint_every=args.checkpoint_every,
        checkpoint_steps=getattr(args, "checkpoint_steps", 0),
        resume=args.resume, log_every=args.log_every, progress=not args.no_progress, cpu=args.cpu,
        log_with=args.log_with, ema_decay=getattr(args, "ema", 0.0), run_name=getattr(args, "run_name", None),
        compile=getattr(args, "compile", False), grad_checkpointing=getattr(args, "grad_checkpointing", False),
        layer_decay=getattr(args, "layer_decay", None),
    )
    values.update(overrides)
    if values["lr"] is None:
        raise ValueError("no learning rate: pass --lr (or compute it before calling train_config_from_args)")
    values["min_lr"] = min(values["min_lr"], values["lr"])
    return TrainConfig(**values)


def default_out_dir(recipe: str, model: str | None, dataset: str) -> Path:
    """``runs/<recipe>_<model>_<dataset kind>``."""
    kind = dataset.split(":", 1)[0]
    tail = Path(dataset.split(":", 1)[1]).name if ":" in dataset else ""
    parts = [recipe, model or "model", kind + (f"-{tail}" if tail else "")]
    return Path("runs") / "_".join(p.replace("/", "-") for p in parts if p)


def prepare_out_dir(out: str | Path, resume: str | None, overwrite: bool) -> Path:
    """Check that ``out`` can take a new run: an existing run (a checkpoint, a final model or its ``config.json``)
    needs ``--resume`` or ``--overwrite`` (which deletes its files on the main process)."""
    out = Path(out).expanduser()
    state = launch_state()
    holds_run = bool(list_checkpoints(out / RunDir.CHECKPOINTS)) or any(
        (out / name).exists() for name in ("model.safetensors", RunDir.CONFIG))
    if holds_run and resume is None:
        if not overwrite:
            raise ValueError(
                f"{out} already holds a run; pass --resume to continue it, --overwrite to replace it, "
                f"or choose another --out"
            )
        if state.is_main_process:
            shutil.rmtree(out / RunDir.CHECKPOINTS, ignore_errors=True)
            for name in (RunDir.METRICS, "model.safetensors", "model_config.json", RunDir.REPORT, RunDir.RESULTS,
                         RunDir.CONFIG, RunDir.ARGS, RunDir.RESUMES):
                (out / name).unlink(missing_ok=True)
    state.wait_for_everyone()
    return out


