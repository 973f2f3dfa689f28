"""``TrainConfig``: every knob of the shared training loop, as a flat JSON-able dataclass."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

OPTIMIZERS = ("adamw", "sgd", "lars")
SCHEDULES = ("cosine", "linear", "constant")
PRECISIONS = ("auto", "no", "fp16", "bf16")


@dataclass
class TrainConfig:
    """Settings for :func:`jumbokit.training.fit`.

    Learning rate: ``lr`` is the peak (after warm-up) for every param group (groups may carry their own
    ``lr``); warm-up lasts ``warmup_epochs`` epochs or ``warmup_fraction`` of all steps (the fraction wins when
    set), then ``schedule`` decays to ``min_lr`` per optimizer step. ``lr_cycles`` > 1 restarts that schedule (warm
    restarts, as SGDR): the steps split into that many cycles, each scheduled as a run of its own length would be,
    so the first cycle's weights are those of the shorter run and a stop at a cycle's end (``early_stop`` scoring
    every cycle) compares weights taken at the bottom of a decay.
    ``grad_accum`` micro-batches make one optimizer step; ``checkpoint_every`` is in epochs (0 = off) and
    ``checkpoint_steps`` adds mid-epoch checkpoints every that many optimizer steps (0 = off).
    ``resume``: None (fresh), "latest" (newest checkpoint in out_dir; fresh start if none) or a checkpoint /
    run directory path.
    ``layer_decay`` (e.g. 0.75) scales each layer's learning rate by ``layer_decay ** (last layer - layer)`` with
    the model's ``group_matcher()`` (timm's ``param_groups_layer_decay``); None keeps ``param_groups``.
    ``compile`` and ``grad_checkpointing`` change how the steps run, not what they compute (see
    ``training.compute``); ``log_with`` names accelerate trackers (comma-separated) that get the run's config and
    metrics under ``run_name``.
    ``ema_decay`` > 0 keeps an exponential moving average of the weights, updated after every optimizer step
    with decay ``min(ema_decay, (1 + t) / (10 + t))`` at update t (timm's warm-up); the per-epoch evaluation, the
    returned model and the saved weights are then the average (0 = off).
    ``mixed_precision``: autocast of the forward passes; "auto" (the default) is bf16 on a CUDA GPU that supports
    it and "no" (fp32) elsewhere, CPU included, so CPU results stay exact; "no", "fp16" and "bf16" are taken as
    given (see ``accelerator.resolve_precision``).
    """

    epochs: int = 100
    lr: float = 1e-3
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.999)
    momentum: float = 0.9  # sgd / lars
    optimizer: str = "adamw"
    warmup_epochs: float = 0.0
    warmup_fraction: float | None = None
    min_lr: float = 1e-8
    schedule: str = "cosine"
    lr_cycles: int = 1
    grad_clip: float | None = None
    grad_accum: int = 1
    mixed_precision: str = "auto"
    seed: int = 0
    checkpoint_every: int = 1
    checkpoint_steps: int = 0
    keep_checkpoints: int = 2
    resume: str | None = None
    log_every: int = 10
    progress: bool = True
    cpu: bool = False
    tf32: bool = True  # CUDA only: fp32 matmuls / convolutions on TF32 tensor cores (see configure_tf32)
    log_with: str | None = None  # accelerate trackers, e.g. "tensorboard" or "tensorboard,wandb"
    run_name: str | None = None  # the trackers' run name (default: the run directory's name)
    compile: bool = False  # torch.compile the model (in place: state dict and checkpoints unchanged)
    grad_checkpointing: bool = False  # timm's set_grad_checkpointing: recompute block activations in backward
    layer_decay: float | None = None  # layer-wise lr decay (fine-tuning), e.g. 0.75; None = off
    save_model: bool = True  # write model.safetensors + model_config.json at the end
    ema_decay: float = 0.0  # weight EMA (0 = off), e.g. 0.998

    def __post_init__(self) -> None:
        self.betas = tuple(float(b) for b in self.betas)  # JSON round trips give lists
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the bad field, the expected values and the given value."""
        checks = [
            ("epochs", self.epochs >= 1, "an integer >= 1"),
            ("lr", self.lr > 0, "> 0"),
            ("weight_decay", self.weight_decay >= 0, ">= 0"),
            ("optimizer", self.optimizer in OPTIMIZERS, f"one of {OPTIMIZERS}"),
            ("schedule", self.schedule in SCHEDULES, f"one of {SCHEDULES}"),
            ("mixed_precision", self.mixed_precision in PRECISIONS, f"one of {PRECISIONS}"),
            ("warmup_epochs", self.warmup_epochs >= 0, ">= 0"),
            ("warmup_fraction", self.warmup_fraction is None or 0 <= self.warmup_fraction < 1, "in [0, 1)"),
            ("min_lr", 0 <= self.min_lr <= self.lr, f"in [0, lr={self.lr}]"),
            ("lr_cycles", isinstance(self.lr_cycles, int) and self.lr_cycles >= 1, "an integer >= 1 (1 = no restart)"),
            ("grad_clip", self.grad_clip is None or self.grad_clip > 0, "None or > 0"),
            ("grad_accum", self.grad_accum >= 1, "an integer >= 1"),
            ("checkpoint_every", self.checkpoint_every >= 0, ">= 0 (0 = off)"),
            ("checkpoint_steps", self.checkpoint_steps >= 0, ">= 0 (0 = off)"),
            ("keep_checkpoints", self.keep_checkpoints >= 1, ">= 1"),
            ("log_every", self.log_every >= 1, ">= 1"),
            ("ema_decay", 0 <= self.ema_decay < 1, "in [0, 1) (0 = off)"),
            ("layer_decay", self.layer_decay is None or 0 < self.layer_decay <= 1, "None or in (0, 1]"),
            ("betas", len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "two numbers in [0, 1)"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"TrainConfig.{name} must be {expected}, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        """Build from a dict, ignoring unknown keys (configs written by newer versions)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
