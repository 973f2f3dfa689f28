"""recipes/supervised.py: a tiny end-to-end run writing the whole run directory, resume, --init, token-drop
schedule, branch flags and bad input."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import jumbokit
from jumbokit.data import read_data_info

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "supervised.py"


def load_recipe():
    import jumbokit.recipes.supervised as module

    return module


@pytest.fixture(scope="module")
def recipe():
    return load_recipe()


TINY = ["--model", "vit_pico_jumbo", "--img-size", "16", "--max-train-samples", "64", "--batch-size", "16",
        "--epochs", "1", "--no-progress", "--eval-batch-size", "512"]


@pytest.fixture(scope="module")
def finished_run(recipe, tmp_path_factory):
    out = tmp_path_factory.mktemp("sup") / "run"
    result = recipe.main([*TINY, "--out", str(out)])
    return out, result


def test_one_epoch_run_writes_every_file(finished_run):
    out, result = finished_run
    for name in ("config.json", "metrics.jsonl", "model.safetensors", "model_config.json", "report.md",
                 "results.csv", "curves.png"):
        assert (out / name).is_file(), name
    assert any((out / "checkpoints").iterdir())
    assert {r["split"] for r in result["rows"]} == {"val", "test"}
    for r in result["rows"]:  # whole numbers of correct samples, top-5 at least top-1
        assert r["n"] > 0 and abs(r["acc1"] * r["n"] - round(r["acc1"] * r["n"])) < 1e-9 and r["acc5"] >= r["acc1"]
    csv = (out / "results.csv").read_text().splitlines()
    assert csv[0].startswith("model,dataset,split,acc1") and len(csv) == 3
    assert "## Final metrics" in (out / "report.md").read_text()


def test_run_records_normalisation_and_classes(finished_run):
    out, _ = finished_run
    info = read_data_info(out)
    assert info["classes"] == [str(i) for i in range(10)] and info["in_chans"] == 1 and info["img_size"] == 16
    assert len(info["mean"]) == 1 and len(info["std"]) == 1
    config = json.loads((out / "config.json").read_text())
    assert config["recipe"] == "supervised" and config["model_config"]["patch_size"] == 4
    model = jumbokit.load(out)
    assert model(torch.randn(2, 1, 16, 16)).shape == (2, 10)


def test_rerun_needs_resume_or_overwrite_and_resume_continues(recipe, finished_run):
    out, _ = finished_run
    with pytest.raises(ValueError, match="already holds a run"):
        recipe.main([*TINY, "--out", str(out)])
    recipe.main([*TINY, "--epochs", "2", "--out", str(out), "--resume"])
    epochs = [r["epoch"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
              if r["kind"] == "epoch"]
    assert epochs == [1, 2]


def test_init_from_headless_checkpoint_replaces_head(recipe, tmp_path):
    encoder = jumbokit.create_model("vit_pico_cls", img_size=16, patch_size=4, in_chans=1, num_classes=0)
    jumbokit.save(encoder, tmp_path / "pretrained")
    out = tmp_path / "finetune"
    args = ["--init", str(tmp_path / "pretrained"), "--img-size", "16", "--max-train-samples", "32",
            "--batch-size", "16", "--epochs", "1", "--no-progress", "--checkpoint-every", "0", "--out", str(out)]
    recipe.main(args)
    tuned = jumbokit.load(out)
    assert tuned.num_classes == 10
    start = encoder.state_dict()["blocks.0.attn.qkv.weight"]
    assert not torch.equal(tuned.state_dict()["blocks.0.attn.qkv.weight"], start)  # it trained
    with pytest.raises(ValueError, match="expects 1-channel images, got --in-chans 3"):
        recipe.main([*args, "--in-chans", "3", "--overwrite"])
    with pytest.raises(ValueError, match="pass one of --model"):
        recipe.main([*args, "--model", "vit_pico_cls", "--overwrite"])


def test_token_drop_schedule_falls_linearly(recipe):
    class Probe(torch.nn.Module):
        num_patches = 64

        def __init__(self):
            super().__init__()
            self.kept: list[int] = []

        def forward(self, x, keep=None):
            self.kept.append(64 if keep is None else keep.shape[1])
            return torch.zeros(x.shape[0], 10, requires_grad=True)

    loss = recipe.TokenDropLoss(torch.nn.CrossEntropyLoss(), None, (0.9, 0.1))
    probe = Probe()
    batch = (torch.zeros(4, 1, 8, 8), torch.zeros(4, dtype=torch.long))
    rates = []
    for step in (0, 50, 100):
        loss.on_step(step, 100)
        rates.append(loss.drop_rate())
        _, logs = loss(probe, batch)
        assert logs["token_drop"] == pytest.approx(rates[-1])
    assert rates == pytest.approx([0.9, 0.5, 0.1])
    assert probe.kept == [6, 32, 58]  # round(64 * (1 - rate))
    no_drop = recipe.TokenDropLoss(torch.nn.CrossEntropyLoss(), None, None)
    no_drop(probe, batch)
    assert probe.kept[-1] == 64


def test_branch_flags_reach_create_model_only_when_branching(recipe, monkeypatch):
    seen = {}

    def fake_create_model(name, **kwargs):
        seen.update(kwargs, name=name)
        return torch.nn.Linear(1, 1)

    monkeypatch.setattr(recipe.jumbokit, "create_model", fake_create_model)
    args = recipe.build_parser().parse_args(["--branches", "2", "--join-schedule", "cosine",
                                             "--join-warmup-steps", "7"])
    recipe._build_model(args, num_classes=10, img_size=32, in_chans=1)
    assert seen["branches"] == 2 and seen["join_schedule"] == "cosine" and seen["join_warmup_steps"] == 7
    assert seen["patch_size"] == 8 and seen["name"] == "vit_tiny_jumbo"  # 32 px -> a 4x4 grid
    seen.clear()
    recipe._build_model(recipe.build_parser().parse_args([]), num_classes=10, img_size=224, in_chans=3)
    assert "branches" not in seen and "patch_size" not in seen


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--mixup", "0.8", "--batch-size", "15"], "even --batch-size"),
        (["--token-drop", "0.9", "1.0"], "--token-drop rates"),
        (["--branches", "0"], "--branches must be >= 1"),
    ],
)
def test_bad_flags_rejected_before_training(recipe, tmp_path, argv, message):
    with pytest.raises(ValueError, match=message):
        recipe.main([*argv, "--out", str(tmp_path / "x")])


def test_cli_prints_one_line_and_exits_nonzero(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(RECIPE), "--dataset", "cifar10", "--out", str(tmp_path / "x"), "--no-progress"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: unknown dataset 'cifar10'")
    assert "Traceback" not in proc.stderr


def test_branched_run_joins_by_default_and_writes_an_equal_collapsed_model(recipe, tmp_path):
    out = tmp_path / "join"
    tiny = [a if a != "vit_pico_jumbo" else "vit_pico_cls" for a in TINY]
    result = recipe.main([*tiny, "--epochs", "2", "--branches", "2", "--diversity-weight", "0.05",
                          "--out", str(out)])
    rows = {(r["model"], r["split"]): r["acc1"] for r in result["rows"]}
    assert rows[("vit_pico_cls (reparameterized)", "test")] == rows[("vit_pico_cls", "test")]
    plain = jumbokit.load(out / "reparameterized")
    assert plain.config["depth"] == 6
