"""Many processes, one answer for the shared training loop: the same global batch trains the same on 1 and 2
processes, evaluation counts every sample once, step schedules are counted after sharding, FSDP saves the model
DDP saves, and a 2-process run killed with SIGKILL resumes to the bit.

The in-process tests are fast; the torchrun tests (slow) start real processes over gloo with one thread each.
Tolerances: supervised runs differ only in the order of float reductions (two half-batch means averaged by the
all-reduce instead of one batch mean: 1 ulp at the first step, amplified by Adam to ~1e-6 after 16 steps), so
their losses are compared to 1e-4. MAE draws its masks per process (as MAE's reference seeds each rank with
seed + rank), so on 2 processes half of a global batch sees other masks: the epoch losses are compared to 1%
(measured gap ~0.1%), each step's loss to 5% (measured up to 2.4%).
"""
from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

from jumbokit.data import make_loader
from jumbokit.training import TrainConfig, classification_loss, evaluate_classifier, fit, make_accelerator
from jumbokit.training.accelerator import resolve_precision
from jumbokit.training.distributed import process_seed
from jumbokit.training.meters import MetricWindow
from launch import kill_tree, launch, launch_env, torchrun_command, wait_until

SUPERVISED = ["supervised", "--model", "vit_pico_cls", "--epochs", "1", "--max-train-samples", "256",
              "--log-every", "1", "--checkpoint-every", "0", "--no-progress", "--seed", "0"]
MAE = ["mae-pretrain", "--epochs", "1", "--max-train-samples", "256", "--log-every", "1", "--checkpoint-every", "0",
       "--vis-every", "0", "--val-samples", "64", "--no-progress"]


# ------------------------------------------------------------------ in process
def test_process_zero_keeps_the_one_process_stream_and_the_others_get_their_own():
    assert process_seed(7, 0) == 7 and process_seed(7, 1) == 8 and process_seed(7, 3) == 10


def test_auto_precision_is_bf16_on_a_cuda_gpu_with_bf16_and_fp32_elsewhere(monkeypatch):
    assert resolve_precision("auto", cpu=True) == "no"
    assert resolve_precision("fp16") == "fp16" and resolve_precision("no") == "no"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_precision("auto") == "bf16" and resolve_precision("auto", cpu=True) == "no"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_precision("auto") == "no"
    assert TrainConfig().mixed_precision == "auto"


def test_grad_norms_of_every_clip_return_type_are_logged():
    acc = make_accelerator(TrainConfig(cpu=True, progress=False))
    window = MetricWindow()
    for norm in (torch.tensor(2.0), 4.0, None):  # DDP / one process, a float, DeepSpeed (clips in its engine)
        window.add_grad_norm(norm)
        window.add(torch.tensor(1.0), {})
    assert window.reduce(acc)["grad_norm"] == pytest.approx(2.0)  # (2 + 4) over 3 optimizer steps


def _tiny_classifier() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 10))


def _digits(n: int, seed: int = 0):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(y), generator=g)[:n]
    images = torch.tensor(x[idx.numpy()], dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    return torch.utils.data.TensorDataset(images, torch.tensor(y[idx.numpy()]))


def test_fit_evaluates_every_sample_once_and_plans_after_sharding(tmp_path):
    val = _digits(53, seed=1)  # not a multiple of the evaluation batch: the last batch is short
    plans = []
    cfg = TrainConfig(epochs=2, lr=1e-2, progress=False, checkpoint_every=0, cpu=True, save_model=False)
    result = fit(_tiny_classifier(), make_loader(_digits(96), 16, train=True), classification_loss(), cfg,
                 out_dir=tmp_path, eval_loaders={"val": make_loader(val, 7, train=False)}, on_plan=plans.append)
    assert [(p.steps_per_epoch, p.total_steps) for p in plans] == [(6, 12)]
    record = result.history[-1]
    direct = evaluate_classifier(result.model, make_loader(val, 7, train=False), prefix="val_")
    assert record["val_n"] == len(val) == direct["val_n"]
    assert record["val_top1"] == direct["val_top1"] and record["val_loss"] == pytest.approx(direct["val_loss"])


# ------------------------------------------------------------------ torchrun: real processes on gloo
def _torchrun(nproc: int, argv: list[str], timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    return launch(torchrun_command(argv, nproc), timeout, **env)


def _records(run: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


def _results(run: Path) -> dict[str, dict]:
    with open(run / "results.csv") as fh:
        return {row["split"]: row for row in csv.DictReader(fh) if "reparameterized" not in row["model"]}


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.mark.multiprocess
@pytest.mark.slow
def test_supervised_same_global_batch_on_one_and_two_processes(tmp_path):
    one = _torchrun(1, [*SUPERVISED, "--batch-size", "16", "--out", str(tmp_path / "p1")])
    two = _torchrun(2, [*SUPERVISED, "--batch-size", "8", "--out", str(tmp_path / "p2")])
    assert one and two
    a, b = (_records(tmp_path / p, "train") for p in ("p1", "p2"))
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, 17))
    assert max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b)) < 1e-4
    (ea,), (eb,) = (_records(tmp_path / p, "epoch") for p in ("p1", "p2"))
    assert ea["train_loss"] == pytest.approx(eb["train_loss"], abs=1e-4)
    assert ea["val_loss"] == pytest.approx(eb["val_loss"], abs=1e-4)
    split_size = int(_results(tmp_path / "p1")["val"]["n"])  # the whole split, scored on one process
    assert ea["val_n"] == eb["val_n"] == split_size  # gathered over 2 processes: no padding counted twice
    assert abs(ea["val_top1"] - eb["val_top1"]) <= 100.0 / split_size + 1e-9  # at most one sample on a tie


@pytest.mark.multiprocess
@pytest.mark.slow
def test_mae_same_global_batch_on_one_and_two_processes(tmp_path):
    _torchrun(1, [*MAE, "--batch-size", "16", "--out", str(tmp_path / "p1")])
    _torchrun(2, [*MAE, "--batch-size", "8", "--out", str(tmp_path / "p2")])
    a, b = (_records(tmp_path / p, "train") for p in ("p1", "p2"))
    assert len(a) == len(b) == 16 and all(x["lr"] == y["lr"] for x, y in zip(a, b))
    assert all(abs(x["loss"] - y["loss"]) <= 0.05 * x["loss"] for x, y in zip(a, b))
    (ea,), (eb,) = (_records(tmp_path / p, "epoch") for p in ("p1", "p2"))
    assert eb["train_loss"] == pytest.approx(ea["train_loss"], rel=0.01)
    assert eb["val_loss"] == pytest.approx(ea["val_loss"], rel=0.01)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_progressive_join_finishes_on_two_processes(tmp_path):
    out = tmp_path / "join"
    _torchrun(2, [*SUPERVISED, "--epochs", "2", "--batch-size", "8", "--branches", "2", "--out", str(out)])
    steps = json.loads((out / "config.json").read_text())["total_steps"]
    join = json.loads((out / "model_config.json").read_text())["branched"]
    assert steps == 32 and join["join_warmup_steps"] == 16  # half the steps counted after sharding
    assert (out / "reparameterized" / "model.safetensors").is_file()
    assert "not fully joined" not in (out / "report.md").read_text()
    import jumbokit

    assert jumbokit.load(out / "reparameterized") is not None


@pytest.mark.multiprocess
@pytest.mark.slow
def test_fsdp_saves_the_model_ddp_saves(tmp_path):
    import jumbokit

    for name, argv in (("sup", [*SUPERVISED, "--batch-size", "8"]), ("mae", [*MAE, "--batch-size", "8"])):
        ddp = _torchrun(2, [*argv, "--out", str(tmp_path / f"{name}_ddp")])
        fsdp = _torchrun(2, [*argv, "--out", str(tmp_path / f"{name}_fsdp")], ACCELERATE_USE_FSDP="true")
        assert "FSDP2 over gloo on 2 CPU processes" in fsdp.stderr and "FSDP2" not in ddp.stderr
        a, b = (_records(tmp_path / f"{name}_{k}", "train") for k in ("ddp", "fsdp"))
        assert max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b)) < 1e-4
        wa, wb = (_weights(tmp_path / f"{name}_{k}") for k in ("ddp", "fsdp"))
        assert wa.keys() == wb.keys() and max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-4
        loaded = jumbokit.load(tmp_path / f"{name}_fsdp")
        assert sum(p.numel() for p in loaded.parameters()) > 0
    ra, rb = _results(tmp_path / "sup_ddp"), _results(tmp_path / "sup_fsdp")
    for split in ("val", "test"):
        assert float(ra[split]["top1"]) == pytest.approx(float(rb[split]["top1"]), abs=100.0 / int(ra[split]["n"]))
        assert float(ra[split]["loss"]) == pytest.approx(float(rb[split]["loss"]), abs=1e-3)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_process_run_killed_mid_epoch_resumes_bit_identical(tmp_path):
    argv = [*SUPERVISED, "--epochs", "2", "--batch-size", "8", "--checkpoint-steps", "4"]
    _torchrun(2, [*argv, "--out", str(tmp_path / "full")])
    part = tmp_path / "part"
    proc = subprocess.Popen(torchrun_command([*argv, "--out", str(part)], 2), env=launch_env(),
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: any((part / "checkpoints").glob("step_*")), proc, 600, "a mid-epoch checkpoint")
    kill_tree(proc)
    if not list((part / "checkpoints").glob("step_*")):
        pytest.skip("the 2-process run wrote no mid-epoch checkpoint before it ended")
    assert not (part / "model.safetensors").exists(), "the run finished before it could be killed"
    _torchrun(2, [*argv, "--out", str(part), "--resume"])
    resumed_from = json.loads((part / "resumes.jsonl").read_text())
    assert resumed_from["epoch"] == 0 and 0 < resumed_from["step"] < 16  # inside the first epoch
    full, resumed = _weights(tmp_path / "full"), _weights(part)
    assert full.keys() == resumed.keys() and all(torch.equal(full[k], resumed[k]) for k in full)
    def timeless(records: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "epoch_time_s"} for r in records]

    # every epoch record equal, the resumed epoch's mean loss included (the running sums are in the checkpoint)
    assert timeless(_records(tmp_path / "full", "epoch")) == timeless(_records(part, "epoch"))
