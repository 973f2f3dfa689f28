"""Shared command-line flags for recipes (data, model, output, optimisation, resume, precision), the resume that
honours a run's stored flags, and the wrapper that turns bad input into one line on stderr and a non-zero exit."""
from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .config import OPTIMIZERS, PRECISIONS, SCHEDULES, TrainConfig
from .rundir import RunDir, list_checkpoints
from .threads import ThreadChoice, add_threads_arg, configure_threads

logger = logging.getLogger(__name__)


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


def add_config_arg(parser: argparse.ArgumentParser, written: str = "config.json and args.yaml") -> None:
    """``--config FILE``: a YAML or JSON file of flags that sets the defaults of a new run (see ``parse_flags``);
    ``written`` names where the run writes its full settings back (for the help)."""
    parser.add_argument("--config", "-c", default=None, metavar="FILE",
                        help="YAML or JSON file of flags (keys as the flags' names: lr, batch_size or batch-size) "
                             "whose values a new run starts from; flags given on the command line win; the run "
                             f"writes its full settings back to {written} (default: none)")


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
    from jumbokit.data.cli import add_data_args

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
    from .loop import launch_state

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
                         RunDir.CONFIG, RunDir.ARGS, RESUMES_FILE):
                (out / name).unlink(missing_ok=True)
    state.wait_for_everyone()
    return out


# ------------------------------------------------------------------------------------------------ resume
RESUMES_FILE = "resumes.jsonl"
# flags that change how a run is watched or where and how it runs, never what it computes: free on resume (the
# values a --config file sets are compared one by one)
NEUTRAL_ON_RESUME = frozenset({"resume", "out", "overwrite", "no_progress", "debug", "threads", "num_workers",
                               "log_every", "log_with", "run_name", "checkpoint_every", "checkpoint_steps",
                               "compile", "grad_checkpointing", "config"})


class _Unset:
    """Marks a flag the command line did not give (see ``given_flags``)."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


class _GivenOnly(argparse.Namespace):
    """A namespace that claims to hold every attribute, so argparse fills in no default: after parsing, its
    ``vars`` are exactly the flags on the command line."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # argparse's own bookkeeping (unrecognised arguments)
            raise AttributeError(name)
        return _UNSET


def given_flags(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The flags given explicitly in ``argv`` (dest -> parsed value), without any default: ``argv`` is parsed a
    second time into a namespace on which argparse sets no default."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return dict(vars(parser.parse_args(argv, namespace=_GivenOnly())))


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping of a ``--config`` file: JSON (``.json``) or YAML (anything else; JSON is YAML too)."""
    import yaml

    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except OSError as err:
        raise FileNotFoundError(f"--config {path}: cannot read it ({err.strerror or err})") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"--config {path}: not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'} "
                         f"({one_line(err)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of flag names to values, got a "
                         f"{type(data).__name__}")
    return data


def _config_value(action: argparse.Action, flag: str, value: Any, path: Path) -> Any:
    """``value`` of ``flag`` from a config file, converted and checked as argparse would check it typed."""
    where = f"--config {path}: {flag}"
    if value is None:
        return None
    if action.nargs == 0:  # store_true / BooleanOptionalAction / store_const
        if not isinstance(value, bool):
            raise ValueError(f"{where} takes true or false, got {value!r}")
        return action.const if value and action.const is not None else value
    many = action.nargs in ("+", "*") or isinstance(action.nargs, int)
    items = list(value) if many and isinstance(value, (list, tuple)) else [value]
    if isinstance(action.nargs, int) and len(items) != action.nargs:
        raise ValueError(f"{where} takes {action.nargs} values, got {value!r}")
    converted = []
    for item in items:
        try:
            item = (action.type or str)(str(item))  # as typed: argparse hands every type a string
        except argparse.ArgumentTypeError as err:
            raise ValueError(f"{where}: {one_line(err)}") from None
        except (TypeError, ValueError):
            kind = getattr(action.type, "__name__", "value")
            raise ValueError(f"{where} takes {'an' if kind[0] in 'aeiou' else 'a'} {kind}, got {item!r}") from None
        if action.choices is not None and item not in action.choices:
            raise ValueError(f"{where} must be one of {', '.join(map(str, action.choices))}, got {item!r}")
        converted.append(item)
    return converted if many else converted[0]


def config_file_defaults(parser: argparse.ArgumentParser, path: str | Path) -> dict[str, Any]:
    """The flags a ``--config`` file sets (dest -> value, converted and checked like typed flags).

    Keys are flag names with or without dashes (``batch_size``, ``batch-size``, ``--batch-size``). A key that is no
    flag of ``parser`` raises one ``ValueError`` naming it and the closest flag."""
    import difflib

    path = Path(path).expanduser()
    actions = {action.dest: action for action in parser._actions  # argparse has no public list of its actions
               if action.option_strings and action.dest not in ("help", "config")}
    names = _flag_names(parser)
    values = {}
    for key, value in read_config_file(path).items():
        dest = str(key).lstrip("-").replace("-", "_")
        if dest not in actions:
            close = difflib.get_close_matches(dest, list(actions), n=1)
            hint = f"; did you mean {names[close[0]]}?" if close else f"; see {parser.prog} --help"
            raise ValueError(f"--config {path}: {key!r} is not a flag of {parser.prog}{hint}")
        values[dest] = _config_value(actions[dest], names.get(dest, "--" + dest), value, path)
    return values


def parse_flags(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
                ) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Parse ``argv`` after the ``--config`` file (when given) has set the parser's defaults, like timm's ``-c``:
    flags on the command line win over the file, the file over the recipe's defaults. Returns the flags and those
    the user chose (dest -> value: the file's, then the command line's)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    from_file = config_file_defaults(parser, args.config) if getattr(args, "config", None) else {}
    if from_file:
        parser.set_defaults(**from_file)
        args = parser.parse_args(argv)
    return args, {**from_file, **given_flags(parser, argv)}


def read_stored_args(run: str | Path) -> dict[str, Any] | None:
    """The flags a run runs with: those stored under ``"args"`` in its ``config.json``, with the changes its
    resumes accepted (``"changed"`` in ``resumes.jsonl``) applied in order; None when there is no such record."""
    config = Path(run) / RunDir.CONFIG
    try:
        stored = json.loads(config.read_text()).get("args")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    if not isinstance(stored, dict):
        return None
    for record in RunDir(run, create=False).read_resumes():
        for dest, change in (record.get("changed") or {}).items():
            stored[dest] = change.get("given", stored.get(dest))
    return stored


def _flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """dest -> the flag as typed (``lr`` -> ``--lr``)."""
    names = {}
    for action in parser._actions:  # argparse has no public list of its actions
        longs = [o for o in action.option_strings if o.startswith("--")] or action.option_strings
        if longs:
            names.setdefault(action.dest, longs[0])
    return names


def _plain(value: Any) -> Any:
    """A value as stored in config.json (tuples as lists, paths as strings)."""
    from .rundir import to_json

    return json.loads(to_json(value, indent=None))


def _show(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(_show(v) for v in value)
    return "unset" if value is None else str(value)


def resume_differences(
    parser: argparse.ArgumentParser, stored: dict[str, Any], given: dict[str, Any]
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Compare the flags given on resume with a run's stored flags. Returns (refused, accepted): one line per
    refused difference (``--lr: run has 0.001, given 0.005``) and the accepted changes ``{dest: {"run": old,
    "given": new}}`` (more ``--epochs``). Flags that only change how a run is watched are ignored."""
    defaults = vars(parser.parse_args([]))
    names = _flag_names(parser)
    refused: list[str] = []
    accepted: dict[str, dict[str, Any]] = {}
    for dest, value in given.items():
        if dest in NEUTRAL_ON_RESUME:
            continue
        old, new = _plain(stored.get(dest, defaults.get(dest))), _plain(value)
        if old == new:
            continue
        flag = names.get(dest, "--" + dest.replace("_", "-"))
        if dest == "epochs" and isinstance(old, int) and new > old:
            accepted[dest] = {"run": old, "given": new}
            continue
        note = " (on resume --epochs may only grow)" if dest == "epochs" else ""
        refused.append(f"{flag}: run has {_show(old)}, given {_show(new)}{note}")
    return refused, accepted


@dataclass
class RunArgs:
    """What ``parse_run_args`` returns: the flags to run with, the run directory, the flags typed on the command
    line, and (when continuing a stored run) the entries for its ``resumes.jsonl`` line (``fit(resume_record=)``)."""

    args: argparse.Namespace
    out: Path
    given: dict[str, Any]
    resume_record: dict[str, Any] | None = None


def _record_folder(args: argparse.Namespace, out: Path) -> Path:
    """The run whose stored flags a resume continues: ``out``, or the run holding the checkpoint given to
    ``--resume PATH`` when ``out`` has no record yet."""
    if (out / RunDir.CONFIG).exists() or args.resume in (None, "latest"):
        return out
    path = Path(args.resume).expanduser()
    for folder in (path, path.parent, path.parent.parent):
        if (folder / RunDir.CONFIG).exists():
            return folder
    return out


def parse_run_args(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    default_out: Callable[[argparse.Namespace], Path],
) -> RunArgs:
    """Parse a front door's flags; with ``--resume``, continue with the flags the run stored in its
    ``config.json`` (``"args"``): a user repeats none of them, and a given flag that differs from the stored one
    raises one ``ValueError`` listing every difference (except more ``--epochs``, accepted and recorded).

    ``default_out(args)`` names the run directory when ``--out`` is not given.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args, given = parse_flags(parser, argv)
    out = Path(args.out).expanduser() if getattr(args, "out", None) else default_out(args)
    if getattr(args, "resume", None) is None:
        return RunArgs(args, out, given)
    folder = _record_folder(args, out)
    stored = read_stored_args(folder)
    if stored is None:
        if (folder / RunDir.CONFIG).exists():
            logger.info(f"{folder}/config.json holds no stored flags; resuming with the flags given")
        return RunArgs(args, out, given)
    refused, accepted = resume_differences(parser, stored, given)
    if refused:
        raise ValueError(f"cannot resume {folder} with other flags than it was started with ("
                         + "; ".join(refused) + "); leave them out to continue the run as it was, or start a "
                         "new run with another --out")
    merged = vars(parser.parse_args([]))
    merged.update({k: v for k, v in stored.items() if k in merged})
    merged.update({k: v for k, v in given.items() if k in NEUTRAL_ON_RESUME or k in accepted})
    merged["out"] = str(out)
    for dest, change in accepted.items():
        logger.info(f"resuming with {_flag_names(parser).get(dest, dest)} {change['given']} "
                    f"(the run had {change['run']})")
    record = {"argv": argv, "changed": accepted}
    return RunArgs(argparse.Namespace(**merged), out, given, record)


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
