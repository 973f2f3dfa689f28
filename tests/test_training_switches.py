"""The training switches every image front door shares: --compile (same loss as eager), --grad-checkpointing (the
same gradients), --layer-decay (timm's groups), --log-with / --run-name (TensorBoard event files, offline) and
--config FILE (defaults of a new run, flags given win, written back; a key that is no flag is one line, exit 2)."""
from __future__ import annotations

import copy
import json

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import jumbokit
from jumbokit.training import TrainConfig, build_optimizer, fit, param_groups
from jumbokit.cli.config import parse_flags
from jumbokit.training.compute import enable_grad_checkpointing
from jumbokit.training.losses import classification_loss
from jumbokit.training.optim import layer_decay_groups

torch.set_num_threads(1)

SUPERVISED = ["--model", "vit_pico_jumbo", "--img-size", "16", "--max-train-samples", "32", "--batch-size", "16",
              "--epochs", "1", "--no-progress", "--eval-batch-size", "512", "--cpu"]


def tiny_model(**kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    return jumbokit.create_model("vit_pico_jumbo", img_size=16, in_chans=1, patch_size=4, num_classes=3, **kwargs)


def tiny_loader() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    images, labels = torch.randn(24, 1, 16, 16, generator=generator), torch.randint(0, 3, (24,), generator=generator)
    return DataLoader(TensorDataset(images, labels), batch_size=8)


def tiny_fit(tmp_path=None, **switches):
    cfg = TrainConfig(epochs=2, lr=1e-3, cpu=True, progress=False, checkpoint_every=0, save_model=False,
                      log_every=1, **switches)
    return fit(tiny_model(), tiny_loader(), classification_loss(), cfg, out_dir=tmp_path)


def losses(result) -> list[float]:
    return [record["train_loss"] for record in result.history]


# ------------------------------------------------------------------------------------------------ --compile
@pytest.mark.slow  # torch.compile's first graphs take minutes on a small shared CPU
def test_compile_gives_the_same_losses_on_cpu():
    eager, compiled = tiny_fit(), tiny_fit(compile=True)
    assert losses(compiled) == pytest.approx(losses(eager), abs=1e-5)
    state = compiled.model.state_dict()
    assert state.keys() == eager.model.state_dict().keys()  # compiled in place: checkpoints keep their names


# ------------------------------------------------------------------------------------------------ --grad-checkpointing
def test_grad_checkpointing_gives_identical_gradients():
    plain = tiny_model(drop_path_rate=0.1)
    checkpointed = copy.deepcopy(plain)
    assert enable_grad_checkpointing(checkpointed) == [""]
    images, labels = torch.randn(4, 1, 16, 16), torch.tensor([0, 1, 2, 0])
    for model in (plain, checkpointed):
        torch.manual_seed(1)  # the same drop-path draws
        torch.nn.functional.cross_entropy(model(images), labels).backward()
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_grad_checkpointing_through_fit_trains_identically():
    assert losses(tiny_fit(grad_checkpointing=True)) == losses(tiny_fit())


def test_grad_checkpointing_reaches_a_wrapped_encoder_and_refuses_a_model_without_it():
    from jumbokit import ssl

    mae = ssl.build_image_mae("vit_pico_cls", 16, 1, patch_size=4, decoder_dim=16, decoder_depth=1, decoder_heads=2)
    assert enable_grad_checkpointing(mae) == ["encoder"]
    assert mae.encoder.grad_checkpointing
    with pytest.raises(ValueError, match="set_grad_checkpointing"):
        enable_grad_checkpointing(torch.nn.Linear(2, 2))


# ------------------------------------------------------------------------------------------------ --layer-decay
def _groups(groups: list[dict]) -> list[tuple]:
    return [(g["lr_scale"], g["weight_decay"], [id(p) for p in g["params"]]) for g in groups]


@pytest.mark.parametrize("name", ["vit_pico_jumbo", "vit_pico_cls"])
def test_layer_decay_groups_equal_timms(name):
    from timm.optim import param_groups_layer_decay

    model = jumbokit.create_model(name, img_size=16, in_chans=1, patch_size=4, num_classes=3)
    ours = layer_decay_groups(model, 0.05, 0.75)
    theirs = param_groups_layer_decay(model, 0.05, model.no_weight_decay(), layer_decay=0.75)
    assert _groups(ours) == _groups(theirs)
    assert len({g["lr_scale"] for g in ours}) > 2  # stem, blocks, head: really layered
    assert max(g["lr_scale"] for g in ours) == 1.0


def test_layer_decay_groups_equal_timms_own_optimizer_on_a_timm_vit():
    import timm
    from timm.optim import create_optimizer_v2

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=3,
                              num_classes=5)
    theirs = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05, layer_decay=0.75)
    ours = build_optimizer(model, TrainConfig(lr=1e-3, weight_decay=0.05, layer_decay=0.75))
    assert [(g["lr_scale"], g["weight_decay"], [id(p) for p in g["params"]]) for g in ours.param_groups] == \
        [(g["lr_scale"], g["weight_decay"], [id(p) for p in g["params"]]) for g in theirs.param_groups]
    assert [g["lr"] for g in ours.param_groups] == pytest.approx([1e-3 * g["lr_scale"] for g in ours.param_groups])
    from jumbokit.training import set_lr

    assert set_lr(ours, 10, 20, 0, TrainConfig(lr=1e-3, min_lr=0.0)) == pytest.approx(0.5e-3)  # the head's rate


def test_without_layer_decay_the_groups_stay_decay_then_no_decay():
    model = tiny_model()
    optimizer = build_optimizer(model, TrainConfig(lr=1e-3))
    expected = param_groups(model, 0.05)
    assert [[id(p) for p in g["params"]] for g in optimizer.param_groups] == \
        [[id(p) for p in g["params"]] for g in expected]
    assert [g["group"] for g in optimizer.param_groups] == ["decay", "no_decay"]
    assert all(g["lr"] == 1e-3 and "lr_scale" not in g for g in optimizer.param_groups)


@pytest.mark.parametrize("switch, message", [({"layer_decay": 0.75}, "group_matcher"),
                                             ({"grad_checkpointing": True}, "set_grad_checkpointing")])
def test_a_model_without_layers_is_refused_before_anything_is_written(tmp_path, switch, message):
    cfg = TrainConfig(epochs=1, cpu=True, progress=False, **switch)
    with pytest.raises(ValueError, match=message):
        fit(torch.nn.Linear(2, 2), tiny_loader(), classification_loss(), cfg, out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------ --log-with
def test_tensorboard_writes_event_files_under_the_run_name(tmp_path):
    pytest.importorskip("tensorboard")
    tiny_fit(tmp_path, log_with="tensorboard", run_name="trial")
    events = list((tmp_path / "logs" / "trial").glob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events)


def test_unknown_tracker_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="unknown tracker 'tensorbord'"):
        tiny_fit(tmp_path / "run", log_with="tensorboard,tensorbord")
    assert not (tmp_path / "run").exists()


def test_supervised_logs_to_tensorboard_offline(tmp_path):
    pytest.importorskip("tensorboard")
    from jumbokit.recipes import supervised

    supervised.main([*SUPERVISED, "--out", str(tmp_path / "run"), "--log-with", "tensorboard"])
    assert list((tmp_path / "run" / "logs" / "run").glob("events.out.tfevents.*"))


# ------------------------------------------------------------------------------------------------ --config
@pytest.fixture
def supervised_parser():
    from jumbokit.recipes import supervised

    return supervised.build_parser()


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_config_file_sets_defaults_and_given_flags_win(supervised_parser, tmp_path, suffix):
    values = {"lr": 0.01, "batch-size": 16, "epochs": 3, "betas": [0.9, 0.95], "no_progress": True,
              "optimizer": "sgd", "layer_decay": 0.65}
    file = tmp_path / f"run{suffix}"
    file.write_text(json.dumps(values))  # JSON is YAML too
    args, given = parse_flags(supervised_parser, ["--config", str(file), "--epochs", "5"])
    assert (args.lr, args.batch_size, args.epochs, args.betas) == (0.01, 16, 5, [0.9, 0.95])
    assert (args.no_progress, args.optimizer, args.layer_decay) == (True, "sgd", 0.65)
    assert given["epochs"] == 5 and given["lr"] == 0.01  # the file's flags count as chosen


@pytest.mark.parametrize("text, message", [
    ("lrr: 0.1\n", "'lrr' is not a flag of .*; did you mean --lr\\?"),
    ("optimizer: adam\n", "--optimizer must be one of adamw, sgd, lars, got 'adam'"),
    ("epochs: many\n", "--epochs takes an int, got 'many'"),
    ("ema: 2\n", "--ema: expected a decay in \\[0, 1\\)"),
    ("betas: 0.9\n", "--betas takes 2 values"),
    ("cpu: 1\n", "--cpu takes true or false"),
    ("- lr\n", "expected a mapping"),
])
def test_bad_config_file_is_one_clear_error(supervised_parser, tmp_path, text, message):
    file = tmp_path / "run.yaml"
    file.write_text(text)
    with pytest.raises(ValueError, match=message):
        parse_flags(supervised_parser, ["--config", str(file)])


def test_config_key_that_is_no_flag_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    from jumbokit.cli import main

    file = tmp_path / "run.yaml"
    file.write_text("epochs: 1\nwarmup: 2\n")
    assert main(["supervised", "--config", str(file), "--out", str(tmp_path / "run")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith(f"error: --config {file}: 'warmup' is not a flag of ")
    assert "did you mean --warmup-epochs?" in lines[-1]
    assert not (tmp_path / "run").exists()


def test_run_writes_its_full_flags_back_and_args_yaml_rebuilds_them(supervised_parser, tmp_path):
    import yaml

    from jumbokit.recipes import supervised

    file = tmp_path / "base.yaml"
    file.write_text("lr: 0.002\nlabel_smoothing: 0.0\nlayer-decay: 0.8\n")
    out = tmp_path / "run"
    supervised.main([*SUPERVISED, "--config", str(file), "--out", str(out)])
    stored = json.loads((out / "config.json").read_text())
    assert stored["args"]["lr"] == 0.002 and stored["args"]["label_smoothing"] == 0.0
    assert stored["args"]["config"] == str(file) and stored["train"]["layer_decay"] == 0.8
    written = yaml.safe_load((out / "args.yaml").read_text())
    assert written == {k: v for k, v in stored["args"].items() if k != "config"}
    again, _ = parse_flags(supervised_parser, ["--config", str(out / "args.yaml")])
    assert {k: v for k, v in vars(again).items() if k != "config"} == written


def test_tstrain_takes_a_config_file(tmp_path, capsys):
    from jumbokit.cli import tstrain_main
    from jumbokit.cli.series import sweep_settings

    file = tmp_path / "sweep.yaml"
    file.write_text("weight-decay: 0.1\nrecipe: small-data-trunk\n")
    assert sweep_settings(["--config", str(file)]).config.weight_decay == 0.1
    assert sweep_settings(["--config", str(file), "--weight-decay", "0.2"]).config.weight_decay == 0.2
    file.write_text("weight_decy: 0.1\n")
    assert tstrain_main(["--config", str(file), "--dataset", "BasicMotions", "--out", str(tmp_path / "x")]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == f"error: --config {file}: 'weight_decy' is not a flag of tstrain; did you mean --weight-decay?"
    assert not (tmp_path / "x").exists()


def test_mae_and_linear_probe_take_the_switches(tmp_path):
    """mae-pretrain with --grad-checkpointing and TensorBoard; linear-probe (cached features) with a --config file
    and TensorBoard: both write event files and their flags back."""
    pytest.importorskip("tensorboard")
    import yaml

    from jumbokit.recipes import linear_probe, mae_pretrain

    mae = tmp_path / "mae"
    mae_pretrain.main(["--model", "vit_pico_cls", "--depth", "1", "--decoder-depth", "1", "--decoder-dim", "32",
                       "--decoder-heads", "2", "--epochs", "1", "--batch-size", "32", "--max-train-samples", "32",
                       "--val-samples", "16", "--vis-images", "2", "--no-progress", "--cpu", "--grad-checkpointing",
                       "--log-with", "tensorboard", "--run-name", "pretrain", "--out", str(mae)])
    assert list((mae / "logs" / "pretrain").glob("events.out.tfevents.*"))
    assert yaml.safe_load((mae / "args.yaml").read_text())["grad_checkpointing"] is True
    file = tmp_path / "probe.yaml"
    file.write_text("epochs: 2\nmax-train-samples: 32\nno_progress: true\n")
    probe = tmp_path / "probe"
    linear_probe.main(["--checkpoint", str(mae), "--config", str(file), "--log-with", "tensorboard", "--cpu",
                       "--out", str(probe)])
    assert list((probe / "logs" / "probe").glob("events.out.tfevents.*"))
    written = yaml.safe_load((probe / "args.yaml").read_text())
    assert (written["epochs"], written["max_train_samples"], written["log_with"]) == (2, 32, "tensorboard")
