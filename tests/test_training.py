"""Training runtime: schedules, no-decay groups, config checks, run-dir files, grad accumulation, exact resume."""
from __future__ import annotations

import json
import logging
import math
import re

import pytest
import torch
from torch import nn

from jumbokit.data import build_dataset, make_loader
from jumbokit.training import (
    RunDir,
    TrainConfig,
    WeightEMA,
    build_optimizer,
    classification_loss,
    evaluate_classifier,
    fit,
    lr_lambda,
    param_groups,
    resolve_resume,
)
from jumbokit.cli.errors import one_line
from jumbokit.cli.training import default_out_dir, prepare_out_dir


class TinyNet(nn.Module):
    """8x8 digits -> 10 classes, with a token-like parameter, a norm, dropout (RNG) and biases."""

    def __init__(self) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 16))
        self.fc1 = nn.Linear(64, 16)
        self.norm = nn.LayerNorm(16)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(16, 10)

    def no_weight_decay(self) -> set[str]:
        return {"cls_token"}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.fc1(x.flatten(1)) + self.cls_token)
        return self.head(self.drop(torch.nn.functional.gelu(h)))


def tiny_model(seed: int = 0) -> TinyNet:
    torch.manual_seed(seed)
    return TinyNet()


@pytest.fixture(scope="module")
def digits8():
    """96 training digits at 8 px with random crops (so augmentation RNG matters for resume)."""
    return build_dataset("digits", "train", "supervised", img_size=8, max_samples=96)


def quiet(**kw) -> TrainConfig:
    base = dict(epochs=3, lr=5e-3, warmup_epochs=1, progress=False, log_every=2, seed=1)
    base.update(kw)
    return TrainConfig(**base)


def params_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ----------------------------------------------------------------------------------------------- schedule


def test_lr_lambda_warmup_then_cosine_to_min():
    total, warm, base, min_lr = 100, 10, 1e-3, 1e-5
    values = [lr_lambda(s, total, warm, base, min_lr) * base for s in range(total)]
    assert values[0] == pytest.approx(base / warm)
    assert values[warm - 1] == pytest.approx(base)
    assert values[warm] == pytest.approx(base)  # cosine starts at the peak
    mid = warm + (total - warm) // 2
    assert values[mid] == pytest.approx(min_lr + (base - min_lr) * 0.5, rel=1e-6)
    assert all(a >= b for a, b in zip(values[warm:], values[warm + 1:]))  # monotone decay
    assert lr_lambda(total, total, warm, base, min_lr) * base == pytest.approx(min_lr)


def test_lr_lambda_linear_and_constant():
    assert lr_lambda(5, 10, 0, schedule="linear") == pytest.approx(0.5)
    assert lr_lambda(7, 10, 2, schedule="constant") == 1.0
    with pytest.raises(ValueError, match="schedule"):
        lr_lambda(1, 10, 0, schedule="step")


def test_fit_applies_schedule_per_step(digits8, tmp_path):
    cfg = quiet(epochs=2, warmup_epochs=1, log_every=1, min_lr=1e-6)
    fit(tiny_model(), make_loader(digits8, 16), classification_loss(), cfg, out_dir=tmp_path)
    lrs = [r["lr"] for r in RunDir(tmp_path).read_metrics() if r["kind"] == "train"]
    steps = 2 * (96 // 16)
    expected = [cfg.lr * lr_lambda(s, steps, 6, cfg.lr, cfg.min_lr) for s in range(steps)]
    assert lrs == pytest.approx(expected)


# ----------------------------------------------------------------------------------------------- optimizer


def test_no_decay_groups_cover_norms_biases_tokens():
    model = tiny_model()
    groups = {g["group"]: set(g["names"]) for g in param_groups(model, 0.05)}
    assert groups["decay"] == {"fc1.weight", "head.weight"}
    assert groups["no_decay"] == {"cls_token", "fc1.bias", "norm.weight", "norm.bias", "head.bias"}
    opt = build_optimizer(model, TrainConfig(weight_decay=0.05))
    wd = sorted(g["weight_decay"] for g in opt.param_groups)
    assert wd == [0.0, 0.05]


def test_no_decay_groups_on_zoo_encoder():
    from jumbokit import create_model

    model = create_model("vit_pico_jumbo", img_size=16, patch_size=4, in_chans=1, num_classes=3)
    groups = {g["group"]: set(g["names"]) for g in param_groups(model, 0.05)}
    assert "pos_embed" in groups["no_decay"]
    assert any("jumbo" in n and "token" in n for n in groups["no_decay"])
    assert all(not n.endswith(".bias") for n in groups["decay"])
    assert "blocks.0.attn.qkv.weight" in groups["decay"]


def test_lars_and_sgd_optimizers():
    for name in ("lars", "sgd"):
        opt = build_optimizer(tiny_model(), TrainConfig(optimizer=name, lr=0.1))
        assert opt.param_groups[0]["base_lr"] == 0.1
    assert type(build_optimizer(tiny_model(), TrainConfig(optimizer="lars"))).__name__ == "Lars"


@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_lars_step_matches_a_hand_computation(weight_decay):
    """Matrices: step lr * trust * (g + wd w), trust = 0.001 ||w|| / (||g|| + wd ||w||) even at wd 0; vectors
    (biases, norms, the token): plain SGD step without decay (first step: momentum buffer = update)."""
    model = tiny_model(3)
    cfg = TrainConfig(optimizer="lars", lr=0.1, momentum=0.9, weight_decay=weight_decay)
    opt = build_optimizer(model, cfg)
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(0))
    model.eval()(x).square().mean().backward()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    assert before["cls_token"].norm() == 0  # a zero tensor keeps the plain step (trust ratio 1)
    for name, p in model.named_parameters():
        w, g = before[name], grads[name]
        if w.ndim > 1:
            decay = 0.0 if name == "cls_token" else weight_decay  # tokens are in the no-decay group
            trust = 0.001 * w.norm() / (g.norm() + decay * w.norm() + 1e-8) if w.norm() > 0 else 1.0
            expected = w - 0.1 * trust * (g + decay * w)
        else:
            expected = w - 0.1 * g
        assert torch.allclose(p.detach(), expected, rtol=1e-5, atol=1e-9), name
    assert not torch.allclose(model.fc1.weight.detach(), before["fc1.weight"] - 0.1 * grads["fc1.weight"])


@pytest.mark.parametrize(
    "kwargs, field",
    [({"epochs": 0}, "epochs"), ({"optimizer": "adam"}, "optimizer"), ({"mixed_precision": "fp8"}, "mixed_precision"),
     ({"grad_accum": 0}, "grad_accum"), ({"lr": 1e-3, "min_lr": 1e-2}, "min_lr"), ({"ema_decay": 1.0}, "ema_decay")],
)
def test_train_config_rejects_bad_values(kwargs, field):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**kwargs)


def test_train_config_round_trips_json():
    cfg = TrainConfig(betas=(0.9, 0.95), grad_clip=1.0)
    again = TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())) | {"unknown": 1})
    assert again == cfg


# ----------------------------------------------------------------------------------------------- run dir


def test_rundir_writes_files(tmp_path):
    run = RunDir(tmp_path / "r")
    run.write_config({"a": 1, "t": (1, 2)})
    run.update_config(b=2)
    run.append_metrics({"step": 1, "loss": 0.5})
    run.append_metrics({"step": 2, "loss": 0.4})
    run.truncate_metrics(1)
    run.write_report("# report")
    run.write_results_csv([{"model": "m", "acc": 0.91234567}, {"model": "n", "acc": 0.5, "extra": 1}])
    assert run.read_config() == {"a": 1, "t": [1, 2], "b": 2}
    assert run.read_metrics() == [{"step": 1, "loss": 0.5}]
    assert (run / "report.md").read_text() == "# report\n"
    assert (run / "results.csv").read_text().splitlines() == ["model,acc,extra", "m,0.912346,", "n,0.5,1"]
    assert not [p for p in run.path.iterdir() if p.name.startswith(".")]  # no temp files left
    disabled = RunDir(tmp_path / "other", enabled=False)
    disabled.write_config({"x": 1})
    assert not (tmp_path / "other").exists()


def test_rundir_rejects_file_path(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        RunDir(tmp_path / "f")


# ----------------------------------------------------------------------------------------------- fit


def test_fit_writes_run_directory(digits8, tmp_path):
    val = build_dataset("digits", "val", "eval", img_size=8)
    result = fit(
        tiny_model(), make_loader(digits8, 16), classification_loss(), quiet(),
        out_dir=tmp_path, eval_fn=lambda m: evaluate_classifier(m, make_loader(val, 64), prefix="val_"),
        run_config={"data": digits8.info()},
    )
    assert [r["epoch"] for r in result.history] == [1, 2, 3]
    assert result.final["step"] == 18
    # the logged metric is the final model's, evaluated in eval mode (dropout off): recomputing gives it again
    again = evaluate_classifier(result.model, make_loader(val, 64), prefix="val_")
    assert result.final["val_top1"] == again["val_top1"] and result.final["val_loss"] == again["val_loss"]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["train"]["epochs"] == 3 and config["data"]["classes"][0] == "0"
    assert (tmp_path / "model.safetensors").exists()
    assert [p.name for p in RunDir(tmp_path).checkpoints()] == ["epoch_0002_00000012", "epoch_0003_00000018"]
    kinds = [r["kind"] for r in RunDir(tmp_path).read_metrics()]
    assert kinds.count("epoch") == 3 and kinds.count("train") == 9


def test_fit_trains_zoo_encoder_and_saves_loadable_model(tmp_path):
    import jumbokit

    data = build_dataset("digits", "train", img_size=16, max_samples=32)
    model = jumbokit.create_model("vit_pico_jumbo", img_size=16, patch_size=4, in_chans=1, num_classes=10)
    fit(model, make_loader(data, 16), classification_loss(), quiet(epochs=1, checkpoint_every=0), out_dir=tmp_path)
    loaded = jumbokit.load(tmp_path)
    x = torch.randn(2, 1, 16, 16)
    model.eval(), loaded.eval()
    torch.testing.assert_close(loaded(x), model(x))


def test_grad_accumulation_matches_large_batch(digits8):
    torch.manual_seed(0)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    data = torch.utils.data.TensorDataset(x, y)

    def run(batch: int, accum: int) -> dict:
        torch.manual_seed(3)
        model = nn.Sequential(nn.Linear(64, 10))
        loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=False)
        fit(model, loader, classification_loss(), quiet(epochs=2, grad_accum=accum, warmup_epochs=0, optimizer="sgd"))
        return params_of(model)

    big, small = run(16, 1), run(8, 2)
    for k in big:
        torch.testing.assert_close(small[k], big[k], rtol=1e-5, atol=1e-6)


class StopAfter(Exception):
    pass


def _interrupting(loss_fn, calls: int):
    count = {"n": 0}

    def wrapped(model, batch):
        count["n"] += 1
        if count["n"] > calls:
            raise StopAfter
        return loss_fn(model, batch)

    return wrapped


@pytest.mark.parametrize("checkpoint_steps, stop_after, ema_decay", [(0, 14, 0.0), (4, 10, 0.0), (4, 10, 0.9)])
def test_resume_ends_where_uninterrupted_run_ends(digits8, tmp_path, checkpoint_steps, stop_after, ema_decay):
    """Stop inside epoch 3 (end-of-epoch checkpoints) or mid-epoch (step checkpoints), resume with 'latest':
    parameters (the weight average, with EMA), optimizer state and logged epoch metrics equal those of an
    uninterrupted run."""
    cfg = quiet(epochs=4, checkpoint_steps=checkpoint_steps, grad_clip=1.0, ema_decay=ema_decay)
    loader = make_loader(digits8, 16, seed=5)
    full = fit(tiny_model(), loader, classification_loss(), cfg, out_dir=tmp_path / "full")

    part_dir = tmp_path / "part"
    with pytest.raises(StopAfter):
        fit(tiny_model(), make_loader(digits8, 16, seed=5), _interrupting(classification_loss(), stop_after), cfg,
            out_dir=part_dir)
    latest = RunDir(part_dir).latest_checkpoint()
    assert latest is not None
    assert (latest / "ema.safetensors").is_file() == (ema_decay > 0) and not list(latest.glob("custom_checkpoint*"))
    resumed_cfg = quiet(epochs=4, checkpoint_steps=checkpoint_steps, grad_clip=1.0, resume="latest",
                        ema_decay=ema_decay)
    resumed = fit(tiny_model(seed=99), make_loader(digits8, 16, seed=5), classification_loss(), resumed_cfg,
                  out_dir=part_dir)

    for k, v in params_of(full.model).items():
        torch.testing.assert_close(params_of(resumed.model)[k], v, rtol=0, atol=0)
    assert [r["step"] for r in resumed.history] == [6, 12, 18, 24]
    assert resumed.history[-1]["train_loss"] == pytest.approx(full.history[-1]["train_loss"], abs=0)
    steps = [r["step"] for r in RunDir(part_dir).read_metrics() if r["kind"] == "train"]
    assert steps == sorted(set(steps))  # no duplicated lines after resuming


def test_resume_keeps_config_and_appends_a_resume_record(digits8, tmp_path):
    """config.json is the run's first record: a resume leaves it byte for byte and appends one line to
    resumes.jsonl (time, checkpoint, position, processes, training length, the caller's entries)."""
    fit(tiny_model(), make_loader(digits8, 32), classification_loss(), quiet(epochs=1), out_dir=tmp_path,
        run_config={"args": {"epochs": 1}})
    first = (tmp_path / "config.json").read_text()
    assert RunDir(tmp_path).read_resumes() == []
    for epochs in (2, 3):
        fit(tiny_model(), make_loader(digits8, 32), classification_loss(), quiet(epochs=epochs, resume="latest"),
            out_dir=tmp_path, run_config={"args": {"epochs": epochs}},
            resume_record={"changed": {"epochs": [epochs - 1, epochs]}})
    assert (tmp_path / "config.json").read_text() == first
    records = RunDir(tmp_path).read_resumes()
    assert [(r["epoch"], r["step"], r["epochs"], r["total_steps"]) for r in records] == [(1, 3, 2, 6), (2, 6, 3, 9)]
    assert records[0]["checkpoint"].endswith("epoch_0001_00000003") and records[0]["num_processes"] == 1
    assert records[1]["changed"] == {"epochs": [2, 3]} and records[1]["time"][:2] == "20"


def test_epoch_lines_and_resume_message_are_logged_when_bars_are_off(digits8, tmp_path):
    """Without progress bars the per-epoch summary and the resume message still reach the log (INFO);
    accuracies follow the metric convention: top1 in percent, 2 decimals in text."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    val = make_loader(build_dataset("digits", "val", "eval", img_size=8), 64)
    logger, handler = logging.getLogger("jumbokit.training"), Collect()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        for cfg in (quiet(epochs=1), quiet(epochs=2, resume="latest")):
            fit(tiny_model(), make_loader(digits8, 32), classification_loss(), cfg, out_dir=tmp_path,
                eval_fn=lambda m: evaluate_classifier(m, val, prefix="val_"))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    epoch_lines = [m for m in messages if m.startswith("epoch ")]
    assert len(epoch_lines) == 2 and any(m.startswith("resumed from ") for m in messages)
    expected = (r"epoch 2/2  train_loss \d+\.\d{4}  epoch_time_s \S+  val_top1 \d+\.\d{2}  val_top5 \d+\.\d{2}  "
                r"val_loss \d+\.\d{4}  val_n \d+")
    assert re.fullmatch(expected, epoch_lines[1]), epoch_lines[1]
    train = [r for r in RunDir(tmp_path).read_metrics() if r["kind"] == "train"]
    assert train and all(0.0 <= r["top1"] <= 100.0 for r in train)


def test_weight_ema_follows_its_warmed_up_decay():
    model = nn.Sequential(nn.Linear(2, 1), nn.BatchNorm1d(1))
    ema = WeightEMA(model, decay=0.5)
    expected = model[0].weight.detach().clone()
    for step, value in enumerate([1.0, -2.0, 4.0, 0.5] + [3.0] * 10):
        with torch.no_grad():
            model[0].weight.fill_(value)
            model[1].running_mean.fill_(value)
        ema.update(model, step)
        decay = min(0.5, (1 + step) / (10 + step))
        expected = decay * expected + (1 - decay) * value
        torch.testing.assert_close(ema.module[0].weight, expected)
        assert ema.module[1].running_mean.item() == value  # buffers are copied, not averaged
    assert ema.get_decay(0) == pytest.approx(0.1) and ema.get_decay(100) == 0.5
    assert not any(p.requires_grad for p in ema.module.parameters())
    with pytest.raises(ValueError, match="EMA decay in \\(0, 1\\), got 1.0"):
        WeightEMA(model, decay=1.0)


def test_weight_ema_equals_the_earlier_average_bit_for_bit():
    """timm's ModelEmaV3 under our decay rule gives the weights of the earlier hand-written average (a fused lerp of
    the floating-point parameters with weight 1 - min(decay, (1 + t) / (10 + t)), buffers copied) exactly."""
    model = tiny_model(3)
    ema = WeightEMA(model, decay=0.99)
    reference = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(200):
        opt.zero_grad()
        model(torch.randn(4, 8, 8)).logsumexp(-1).mean().backward()
        opt.step()
        ema.update(model, step)
        torch._foreach_lerp_(reference, [p.detach() for p in model.parameters()],
                             1.0 - min(0.99, (1.0 + step) / (10.0 + step)))
    for mine, expected in zip(ema.module.parameters(), reference, strict=True):
        assert torch.equal(mine, expected)


def test_fit_with_ema_scores_and_returns_the_average(digits8, tmp_path):
    """eval_fn and on_epoch_end see the average every epoch; the returned and saved model is the average, not
    the last weights."""
    seen, shown = [], []

    def eval_fn(model):
        seen.append(params_of(model))
        return {}

    loader = make_loader(digits8, 16, seed=5)
    last = fit(tiny_model(), loader, classification_loss(), quiet(epochs=2)).model
    averaged = fit(tiny_model(), make_loader(digits8, 16, seed=5), classification_loss(), quiet(epochs=2, ema_decay=0.9),
                   out_dir=tmp_path, eval_fn=eval_fn, on_epoch_end=lambda e, m, r: shown.append(params_of(m))).model
    assert len(seen) == len(shown) == 2
    for k, v in params_of(averaged).items():
        torch.testing.assert_close(seen[-1][k], v, rtol=0, atol=0)
        torch.testing.assert_close(shown[-1][k], v, rtol=0, atol=0)
    assert not torch.allclose(averaged.fc1.weight, last.fc1.weight)
    from safetensors.torch import load_file

    torch.testing.assert_close(load_file(tmp_path / "model.safetensors")["fc1.weight"], averaged.fc1.weight)
    with pytest.raises(ValueError, match="saved with ema_decay=0.9.*ema_decay=0.0"):
        fit(tiny_model(), make_loader(digits8, 16, seed=5), classification_loss(), quiet(epochs=3, resume="latest"),
            out_dir=tmp_path)


def test_resume_with_other_model_config_is_refused(tmp_path):
    import jumbokit

    data = build_dataset("digits", "train", img_size=16, max_samples=32)
    kw = dict(img_size=16, patch_size=4, in_chans=1, num_classes=10)
    fit(jumbokit.create_model("vit_pico_jumbo", **kw), make_loader(data, 16), classification_loss(),
        quiet(epochs=1), out_dir=tmp_path)
    other = jumbokit.create_model("vit_pico_cls", **kw)
    with pytest.raises(ValueError, match="different model config.*global_tokens"):
        fit(other, make_loader(data, 16), classification_loss(), quiet(epochs=2, resume="latest"), out_dir=tmp_path)


def test_fresh_run_into_used_directory_is_refused(digits8, tmp_path):
    fit(tiny_model(), make_loader(digits8, 32), classification_loss(), quiet(epochs=1), out_dir=tmp_path)
    with pytest.raises(ValueError, match="already holds checkpoints"):
        fit(tiny_model(), make_loader(digits8, 32), classification_loss(), quiet(epochs=1), out_dir=tmp_path)
    with pytest.raises(ValueError, match="already holds a run"):
        prepare_out_dir(tmp_path, resume=None, overwrite=False)
    prepare_out_dir(tmp_path, resume=None, overwrite=True)
    assert RunDir(tmp_path).latest_checkpoint() is None and not (tmp_path / "model.safetensors").exists()


def test_resolve_resume(tmp_path):
    assert resolve_resume(None, tmp_path) is None
    assert resolve_resume("latest", tmp_path) is None  # nothing yet: fresh start
    with pytest.raises(ValueError, match="does not exist"):
        resolve_resume(tmp_path / "missing", tmp_path)
    with pytest.raises(ValueError, match="no checkpoint"):
        resolve_resume(tmp_path, tmp_path)


def test_update_join_called_every_step_and_aux_loss_added(digits8):
    class Joined(TinyNet):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[int] = []

        def update_join(self, step: int) -> None:
            self.seen.append(step)

        def forward(self, x):
            out = super().forward(x)
            self.aux_loss = 0.0 * out.sum() + 0.25
            return out

    model = Joined()
    result = fit(model, make_loader(digits8, 32), classification_loss(), quiet(epochs=2, log_every=1))
    assert model.seen == list(range(6))
    assert result.history[-1]["train_loss"] > 0.25


def test_nan_loss_is_caught_at_the_next_logging_step_not_every_micro_batch(digits8, tmp_path):
    calls = []

    def nan_at_second(model, batch):
        calls.append(1)
        loss = nn.functional.cross_entropy(model(batch[0]), batch[1])
        return (loss * float("nan") if len(calls) == 2 else loss), {}

    with pytest.raises(FloatingPointError, match=r"loss is nan over the 4 micro-batches up to step 4 \(epoch 1\)"):
        fit(tiny_model(), make_loader(digits8, 8), nan_at_second, quiet(epochs=1, log_every=4))
    assert len(calls) == 4  # no host sync per micro-batch: the loss is read back at the logging step
    calls.clear()
    with pytest.raises(FloatingPointError, match="in epoch 1"):  # logging steps beyond the epoch: its end checks
        fit(tiny_model(), make_loader(digits8, 8), nan_at_second, quiet(epochs=2, log_every=100),
            out_dir=tmp_path / "run")
    assert len(calls) == 12 and not list((tmp_path / "run" / "checkpoints").glob("*"))  # no NaN checkpoint


def test_nan_loss_stops_with_clear_message(digits8):
    def bad_loss(model, batch):
        return model(batch[0]).sum() * float("nan"), {}

    with pytest.raises(FloatingPointError, match="lower the learning rate"):
        fit(tiny_model(), make_loader(digits8, 32), bad_loss, quiet(epochs=1))


def test_evaluate_classifier_topk():
    class Fixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return x

    logits = torch.tensor([[3.0, 2.0, 1.0], [1.0, 3.0, 2.0], [1.0, 2.0, 3.0], [3.0, 1.0, 2.0]])
    labels = torch.tensor([0, 2, 0, 1])
    out = evaluate_classifier(Fixed(), [(logits, labels)], topk=(1, 2, 5), prefix="test_")
    assert out["test_top1"] == 25.0 and out["test_top2"] == 50.0 and "test_top5" not in out
    assert out["test_n"] == 4 and math.isfinite(out["test_loss"])


def test_cli_helpers():
    assert str(default_out_dir("supervised", "vit_tiny_jumbo", "folder:/data/imagenet")) == (
        "runs/supervised_vit_tiny_jumbo_folder-imagenet"
    )
    err = ValueError("Caught X in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
                     "  File ...\njumbokit.data.errors.CorruptImageError: cannot read image file /a/b.png")
    assert one_line(err) == "cannot read image file /a/b.png"


def test_unknown_or_missing_tracker_is_a_clear_error(tmp_path):
    from jumbokit.training.accelerator import check_tracker

    with pytest.raises(ValueError, match="unknown tracker 'bogus'"):
        check_tracker("bogus")
    with pytest.raises(ValueError, match="needs an out_dir"):
        fit(tiny_model(), [], classification_loss(), quiet(log_with="tensorboard"))


def test_multi_process_launch_without_gpu_uses_cpu_ddp(monkeypatch):
    from jumbokit.training.accelerator import use_cpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert use_cpu(False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not use_cpu(False) and use_cpu(True)


def test_config_differences_flattens_nested_configs_and_ignores_regularisation():
    from jumbokit.training import config_differences

    saved = {"encoder": {"dim": 96, "drop_path_rate": 0.0}, "decoder_dim": 16}
    assert config_differences(saved, {"encoder": {"dim": 96, "drop_path_rate": 0.2}, "decoder_dim": 16}) == []
    assert config_differences(saved, {"encoder": {"dim": 64, "drop_path_rate": 0.0}, "decoder_dim": 16}) == [
        "encoder.dim: saved 96 vs now 64"]
    many = config_differences({f"k{i}": i for i in range(9)}, {f"k{i}": -i - 1 for i in range(9)}, limit=2)
    assert many[-1] == "+7 more" and len(many) == 3


# ----------------------------------------------------------------------------------------------- early stopping


@pytest.fixture(scope="module")
def digits8_val():
    return build_dataset("digits", "val", "eval", img_size=8, max_samples=64)


def test_a_stopping_rule_that_never_fires_changes_nothing(digits8, digits8_val):
    """Scoring reads no random numbers and the schedule keeps the budget's length: a rule that cannot stop and
    keeps the last weights ends on exactly the weights of the run without it, after every step of the budget."""
    from jumbokit.training import EarlyStop

    plain = fit(tiny_model(), make_loader(digits8, 16, seed=5), classification_loss(), quiet(epochs=2)).model
    rule = EarlyStop(every=5, patience=1000, restore_best=False)
    result = fit(tiny_model(), make_loader(digits8, 16, seed=5), classification_loss(), quiet(epochs=2),
                 eval_loaders={"val": make_loader(digits8_val, 16, train=False)}, early_stop=rule)
    for k, v in params_of(plain).items():
        torch.testing.assert_close(params_of(result.model)[k], v, rtol=0, atol=0)
    summary = result.final["early_stop"]
    assert summary["stopped"] is False and summary["last_step"] == summary["budget_steps"] == 12
    assert summary["scorings"] == 3  # steps 5 and 10, and the last step (12) so the final weights compete


def test_a_run_stops_after_its_patience_and_ends_on_the_best_weights(digits8, digits8_val):
    """With a learning rate that wrecks the model after its first steps, the scorings stop improving: training ends
    `patience` scorings after the best one, and the model returned scores the best value on the split."""
    from jumbokit.training import EarlyStop

    rule = EarlyStop(every=2, patience=2)
    val_loader = make_loader(digits8_val, 16, train=False)
    result = fit(tiny_model(), make_loader(digits8, 16, seed=5), classification_loss(),
                 quiet(epochs=20, lr=5.0, warmup_epochs=0), eval_loaders={"val": val_loader}, early_stop=rule)
    summary = result.final["early_stop"]
    assert summary["stopped"] is True and summary["last_step"] < summary["budget_steps"] == 120
    assert summary["last_step"] == summary["best_step"] + 2 * rule.every  # two scorings past the best, then out
    assert summary["last_step"] % rule.every == 0 and result.final["step"] == summary["last_step"]
    steps = [point["step"] for point in summary["curve"]]
    losses = [point["val_loss"] for point in summary["curve"]]
    assert steps == list(range(rule.every, summary["last_step"] + 1, rule.every))
    assert min(losses) == summary["best_val_loss"] and steps[losses.index(min(losses))] == summary["best_step"]
    again = evaluate_classifier(result.model, val_loader)
    assert again["loss"] == pytest.approx(summary["best_val_loss"], rel=1e-5)
    best = summary["curve"][losses.index(min(losses))]  # every number scored is kept, the accuracy too
    assert best["val_top1"] == pytest.approx(again["top1"]) and best["val_n"] == again["n"]


def test_no_scoring_before_the_rules_start(digits8, digits8_val):
    """``start`` (Keras' start_from_epoch): the steps before it are neither scored nor kept as the best."""
    from jumbokit.training import EarlyStop

    rule = EarlyStop(every=5, patience=1000, start=7)
    result = fit(tiny_model(), make_loader(digits8, 16, seed=5), classification_loss(), quiet(epochs=2),
                 eval_loaders={"val": make_loader(digits8_val, 16, train=False)}, early_stop=rule)
    summary = result.final["early_stop"]
    assert summary["scorings"] == 2 and summary["best_step"] in (10, 12)  # steps 10 and 12 (the last)
    assert [point["step"] for point in summary["curve"]] == [10, 12]


def test_a_cycled_schedule_restarts_and_its_first_cycle_is_the_shorter_run(digits8, digits8_val):
    """lr_cycles=2 over two epochs: each epoch is scheduled as a one-epoch run (warm-up and decay again), so the
    weights at the end of the first cycle, scored by an early-stopping rule that never fires, are those of the
    one-epoch run; the plan's schedule positions and a bad count refused."""
    from jumbokit.training import EarlyStop, StepPlan
    from jumbokit.training.evaluate import evaluate_classifier

    short = fit(tiny_model(), make_loader(digits8, 16, seed=5), classification_loss(), quiet(epochs=1,
                                                                                            warmup_epochs=0.5)).model
    val_loader = make_loader(digits8_val, 16, train=False)
    rule = EarlyStop(every=6, start=6, patience=1000, restore_best=False)  # 96 / 16 = 6 steps an epoch
    cycled = fit(tiny_model(), make_loader(digits8, 16, seed=5), classification_loss(),
                 quiet(epochs=2, warmup_epochs=0.5, lr_cycles=2), eval_loaders={"val": val_loader}, early_stop=rule)
    first, last = cycled.final["early_stop"]["curve"]
    assert first["step"] == 6 and last["step"] == 12
    assert first["val_loss"] == pytest.approx(evaluate_classifier(short, val_loader)["loss"], rel=1e-6)
    plan = StepPlan.of(1500, TrainConfig(epochs=1, warmup_fraction=0.1, lr_cycles=3))
    assert (plan.warmup_steps, plan.cycle_steps) == (150, 500)
    assert [plan.schedule_at(s) for s in (0, 499, 500, 1499)] == [(0, 500, 50), (499, 500, 50), (0, 500, 50),
                                                                   (499, 500, 50)]
    assert StepPlan.of(1500, TrainConfig(epochs=1, warmup_fraction=0.1)).schedule_at(700) == (700, 1500, 150)
    with pytest.raises(ValueError, match="lr_cycles must be an integer >= 1"):
        TrainConfig(lr_cycles=0).validate()


@pytest.mark.parametrize("kwargs, message", [
    (dict(every=5, patience=1, start=-1), "start must be an integer >= 0"),
    (dict(every=0, patience=1), "every must be an integer >= 1"),
    (dict(every=5, patience=0), "patience must be an integer >= 1"),
    (dict(every=5, patience=2, metric="f1"), "metric must be one of loss, top1"),
])
def test_bad_stopping_rules_are_refused(kwargs, message):
    from jumbokit.training import EarlyStop

    with pytest.raises(ValueError, match=message):
        EarlyStop(**kwargs)


def test_a_stopping_rule_fit_cannot_follow_is_refused_before_anything_is_written(digits8, digits8_val, tmp_path):
    from jumbokit.training import EarlyStop

    rule = EarlyStop(every=2, patience=2)
    with pytest.raises(ValueError, match=r"scores the split 'val': pass it in eval_loaders \(got \['test'\]\)"):
        fit(tiny_model(), make_loader(digits8, 16, seed=5), classification_loss(), quiet(epochs=1),
            eval_loaders={"test": make_loader(digits8_val, 16, train=False)}, early_stop=rule)
    with pytest.raises(ValueError, match="not in checkpoints"):
        fit(tiny_model(), make_loader(digits8, 16, seed=5), classification_loss(), quiet(epochs=1),
            out_dir=tmp_path / "run", eval_loaders={"val": make_loader(digits8_val, 16, train=False)}, early_stop=rule)
    assert not (tmp_path / "run").exists()
