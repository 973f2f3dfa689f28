"""Shared command-line flags for recipes (data, model, output, optimisation, resume, precision) and the wrapper
that turns bad input into one line on stderr and a non-zero exit."""
from __future__ import annotations

import argparse
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from .config import OPTIMIZERS, PRECISIONS, SCHEDULES, TrainConfig
from .rundir import RunDir, list_checkpoints
from .threads import ThreadChoice, add_threads_arg, configure_threads


def ema_decay_arg(text: str) -> float:
    """argparse type of ``--ema``: a decay in [0, 1) (0 = off)."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a decay in [0, 1) (0 = off), e.g. 0.998, got {text!r}")
    return value


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
    from jumbokit.data.cli import add_data_args

    add_data_args(parser, dataset=dataset, img_size=img_size)  # the "data" and "augmentation" groups

    run = parser.add_argument_group("run")
    if model is not None:
        run.add_argument("--model", default=model, help="zoo name, see jumbokit.list_models() (default: %(default)s)")
    run.add_argument("--out", default=None, help="run directory (default: runs/<recipe>_<model>_<dataset>)")
    run.add_argument("--resume", nargs="?", const="latest", default=None,
                     help="continue from the newest checkpoint in --out (or from the given checkpoint/run dir)")
    run.add_argument("--overwrite", action="store_true", help="replace an existing run in --out")
    run.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    run.add_argument("--mixed-precision", default="no", choices=PRECISIONS, help="(default: %(default)s)")
    run.add_argument("--cpu", action="store_true", help="train on CPU even when a GPU is present")
    run.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=True,
                     help="on a CUDA GPU, run fp32 matmuls and convolutions on TF32 tensor cores "
                          "(torch.set_float32_matmul_precision('high')); no effect on CPU (default: on)")
    run.add_argument("--checkpoint-every", type=int, default=1, help="epochs between checkpoints, 0 = off")
    run.add_argument("--checkpoint-steps", type=int, default=0,
                     help="also checkpoint every N optimizer steps inside epochs, 0 = off (long epochs)")
    run.add_argument("--log-every", type=int, default=10, help="optimizer steps between metrics.jsonl lines")
    run.add_argument("--log-with", default=None, help="accelerate tracker, e.g. tensorboard")
    run.add_argument("--no-progress", action="store_true", help="no progress bars or per-epoch lines")
    add_threads_arg(run)

    opt = parser.add_argument_group("optimisation")
    opt.add_argument("--epochs", type=int, default=epochs, help="(default: %(default)s)")
    opt.add_argument("--batch-size", type=int, default=batch_size, help="per-process batch (default: %(default)s)")
    opt.add_argument("--lr", type=float, default=lr, help="peak learning rate (default: %(default)s)")
    opt.add_argument("--min-lr", type=float, default=1e-6, help="final learning rate (default: %(default)s)")
    opt.add_argument("--weight-decay", type=float, default=weight_decay, help="(default: %(default)s)")
    opt.add_argument("--warmup-epochs", type=float, default=warmup_epochs, help="(default: %(default)s)")
    opt.add_argument("--optimizer", default=optimizer, choices=OPTIMIZERS, help="(default: %(default)s)")
    opt.add_argument("--schedule", default="cosine", choices=SCHEDULES, help="(default: %(default)s)")
    opt.add_argument("--betas", type=float, nargs=2, default=list(betas), help="AdamW betas (default: %(default)s)")
    opt.add_argument("--grad-clip", type=float, default=grad_clip, help="max gradient norm (default: off)")
    opt.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
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
    """Apply ``--threads`` (or the automatic count, see ``configure_threads``) and print the choice as the run's
    first line on the first process of each machine (unless ``--no-progress``)."""
    import os

    choice = configure_threads(getattr(args, "threads", None))
    if not getattr(args, "no_progress", False) and os.environ.get("LOCAL_RANK", "0") == "0":
        print(choice.describe(), flush=True)
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
        log_with=args.log_with, ema_decay=getattr(args, "ema", 0.0),
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
    """Check that ``out`` can take a new run: an existing finished or checkpointed run needs ``--resume`` or
    ``--overwrite`` (which deletes its checkpoints, metrics and model on the main process)."""
    from .loop import launch_state

    out = Path(out).expanduser()
    state = launch_state()
    holds_run = bool(list_checkpoints(out / RunDir.CHECKPOINTS)) or (out / "model.safetensors").exists()
    if holds_run and resume is None:
        if not overwrite:
            raise ValueError(
                f"{out} already holds a run; pass --resume to continue it, --overwrite to replace it, "
                f"or choose another --out"
            )
        if state.is_main_process:
            shutil.rmtree(out / RunDir.CHECKPOINTS, ignore_errors=True)
            for name in (RunDir.METRICS, "model.safetensors", "model_config.json", RunDir.REPORT, RunDir.RESULTS):
                (out / name).unlink(missing_ok=True)
    state.wait_for_everyone()
    return out


def run_cli(main: Callable[[], Any]) -> None:
    """Run ``main()``; bad input (ValueError, FileNotFoundError, ...) prints one line and exits 2,
    Ctrl-C exits 130 with a hint to resume."""
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted; continue with --resume (same --out)", file=sys.stderr)
        sys.exit(130)
    except (ValueError, FileNotFoundError, NotADirectoryError, FloatingPointError) as err:
        if "--debug" in sys.argv:
            traceback.print_exc()
        print(f"error: {one_line(err)}", file=sys.stderr)
        sys.exit(2)


def one_line(err: BaseException) -> str:
    """The readable part of an error (errors re-raised from DataLoader workers carry a whole traceback)."""
    text = str(err).strip()
    if "Original Traceback" in text:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        last = lines[-1]
        text = last.split(": ", 1)[1] if ": " in last else last
    return " ".join(text.split())
