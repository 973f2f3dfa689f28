"""Linear probe: frozen encoder stays unchanged, features, head training, metrics, bad input."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from jumbokit.encoders import Encoder
from jumbokit.ssl import (
    LinearProbe,
    build_probe_optimizer,
    evaluate_head,
    extract_features,
    make_probe_head,
    probe_feature_dim,
    train_head_on_features,
)


def tiny_encoder(global_tokens: str = "jumbo", **extra) -> Encoder:
    opts = {"jumbo": {"jumbo_multiplier": 2}, "registers": {"num_registers": 2}}.get(global_tokens, {})
    return Encoder(tokenizer="image", img_size=16, patch_size=4, in_chans=1, dim=32, depth=2, num_heads=2,
                   global_tokens=global_tokens, drop_rate=0.1, drop_path_rate=0.1, **opts, **extra)


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("optimizer", ["lars", "adamw"])
def test_probe_training_leaves_encoder_unchanged(optimizer):
    torch.manual_seed(0)
    encoder = tiny_encoder()
    before = snapshot(encoder)
    probe = LinearProbe(encoder, num_classes=3)
    # even an optimizer handed every parameter must not move the frozen encoder
    opt = build_probe_optimizer(probe, optimizer, lr=0.1 if optimizer == "lars" else 1e-2)
    images, labels = torch.randn(8, 1, 16, 16), torch.randint(0, 3, (8,))
    probe.train()
    assert not probe.encoder.training and probe.head.training
    head_before = snapshot(probe.head)
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(probe(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = snapshot(encoder)
    for name in before:
        assert torch.equal(before[name], after[name]), f"encoder tensor {name} changed"
    assert all(not p.requires_grad for p in encoder.parameters())
    assert not torch.equal(head_before["fc.weight"], probe.head.fc.weight)
    assert probe.head.bn.running_mean.abs().sum() > 0  # the head's BatchNorm does learn statistics


def test_frozen_encoder_is_deterministic_in_train_mode():
    """Dropout / drop-path stay off: eval mode is kept whatever train() is called with."""
    probe = LinearProbe(tiny_encoder(), num_classes=3).train()
    images = torch.randn(4, 1, 16, 16)
    torch.testing.assert_close(probe.features(images), probe.features(images))


@pytest.mark.parametrize("global_tokens", ["none", "cls", "registers", "jumbo"])
def test_feature_widths(global_tokens):
    encoder = tiny_encoder(global_tokens)
    images = torch.randn(3, 1, 16, 16)
    for kind, width in (("token", encoder.num_features), ("avg", 32)):
        assert probe_feature_dim(encoder, kind) == width
        assert LinearProbe(encoder, 5, feature=kind)(images).shape == (3, 5)
    if global_tokens == "jumbo":
        assert encoder.num_features == 64  # J * D


def test_extract_features_once_and_restore_mode():
    encoder = tiny_encoder().train()
    data = TensorDataset(torch.randn(10, 1, 16, 16), torch.arange(10) % 3)
    feats, labels = extract_features(encoder, DataLoader(data, batch_size=4))
    assert feats.shape == (10, 64) and labels.tolist() == (torch.arange(10) % 3).tolist()
    assert encoder.training  # mode restored
    dict_loader = [{"image": x, "label": y} for x, y in DataLoader(data, batch_size=5)]
    feats2, _ = extract_features(encoder, dict_loader)
    torch.testing.assert_close(feats, feats2)  # eval mode: dropout off, same features


@pytest.mark.parametrize("optimizer,lr", [("lars", 5.0), ("adamw", 1e-2)])
def test_head_learns_separable_features(optimizer, lr):
    torch.manual_seed(0)
    centers = torch.randn(4, 16) * 3
    labels = torch.arange(400) % 4
    feats = centers[labels] + torch.randn(400, 16)
    head = make_probe_head(16, 4)
    opt = build_probe_optimizer(head, optimizer, lr=lr)
    history = train_head_on_features(head, feats[:300], labels[:300], opt, epochs=15, batch_size=32,
                                     warmup_epochs=1, eval_sets={"val": (feats[300:], labels[300:])})
    assert len(history) == 15
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["val_top1"] > 90.0
    assert history[-1]["val_top5"] == 100.0
    assert evaluate_head(head, feats[300:], labels[300:])["top1"] == history[-1]["val_top1"]


def test_evaluate_head_topk_in_percent():
    logits = torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5]])
    labels = torch.tensor([1, 2, 0])
    head = torch.nn.Linear(3, 3)
    with torch.no_grad():
        head.weight.copy_(torch.eye(3))
        head.bias.zero_()
    acc = evaluate_head(head, logits, labels)
    assert acc["top1"] == pytest.approx(100 / 3)
    assert acc["top5"] == 100.0  # k above the class count counts every class
    from jumbokit.training import topk_correct

    assert topk_correct(logits, labels, (1, 2, 5)) == {1: 1, 2: 1, 5: 3}  # sample 1: top-2 is {0, 1}; sample 2: {2, 1}


def test_bad_inputs():
    encoder = tiny_encoder()
    with pytest.raises(ValueError, match="unknown probe feature"):
        LinearProbe(encoder, 3, feature="cls")
    with pytest.raises(ValueError, match="num_classes"):
        LinearProbe(encoder, 0)
    head = make_probe_head(8, 2)
    with pytest.raises(ValueError, match="unknown probe optimizer"):
        build_probe_optimizer(head, "sgdx")
    opt = build_probe_optimizer(head)
    with pytest.raises(ValueError, match="larger than the 10 training samples"):
        train_head_on_features(head, torch.randn(10, 8), torch.zeros(10, dtype=torch.long), opt, batch_size=16)
    with pytest.raises(ValueError, match="differ in length"):
        train_head_on_features(head, torch.randn(10, 8), torch.zeros(9, dtype=torch.long), opt, batch_size=4)
    with pytest.raises(ValueError, match="no batch"):
        extract_features(encoder, [])


def test_probe_of_the_last_layer_equals_the_default(tmp_path, monkeypatch):
    """``linear-probe --layer K``: the last block gives the default run's numbers exactly, an earlier one others."""
    import jumbokit
    from jumbokit.recipes import linear_probe

    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    jumbokit.save(Encoder(tokenizer="image", img_size=8, patch_size=2, in_chans=1, dim=32, depth=3, num_heads=2,
                          global_tokens="jumbo", jumbo_multiplier=2), tmp_path / "encoder")

    def probe(*flags: str) -> tuple[str, dict]:
        out = tmp_path / f"probe{'_'.join(flags)}"
        summary = linear_probe.main(["--checkpoint", str(tmp_path / "encoder"), "--dataset", "digits", "--epochs", "2",
                                     "--max-train-samples", "64", "--batch-size", "32", "--out", str(out),
                                     "--no-progress", "--cpu", *flags])
        return (out / "results.csv").read_text(), summary

    default, last, first = probe(), probe("--layer", "2"), probe("--feature-layer", "0")
    assert last[0] == default[0] and probe("--layer", "-1")[0] == default[0]
    assert first[0] != default[0]
    assert (default[1]["layer"], last[1]["layer"], first[1]["layer"]) == (None, 2, 0)
    with pytest.raises(ValueError, match="out of range"):
        LinearProbe(tiny_encoder(), num_classes=3, layer=2)


def test_probe_of_a_plain_class_folder_needs_a_held_out_split(tmp_path):
    """A plain class folder is no held-out set: without --val-split the probe is refused; with it the default test
    split it lacks is skipped, and an explicitly named one is still required."""
    import numpy as np
    from PIL import Image

    import jumbokit
    from jumbokit.data import DataError, SplitNotFoundError
    from jumbokit.recipes import linear_probe

    for c, name in enumerate(("a", "b")):
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in range(10):
            Image.fromarray(np.full((8, 8), 40 + 120 * c, np.uint8), "L").save(tmp_path / "imgs" / name / f"{i}.png")
    torch.manual_seed(0)
    jumbokit.save(Encoder(tokenizer="image", img_size=8, patch_size=2, in_chans=1, dim=32, depth=1, num_heads=2),
                  tmp_path / "encoder")
    base = ["--checkpoint", str(tmp_path / "encoder"), "--dataset", f"folder:{tmp_path / 'imgs'}", "--epochs", "2",
            "--batch-size", "8", "--no-progress", "--cpu"]
    with pytest.raises(DataError, match="no validation or test split to score.*--val-split 0.1"):
        linear_probe.main([*base, "--out", str(tmp_path / "p0")])
    assert not (tmp_path / "p0").exists()
    linear_probe.main([*base, "--val-split", "0.2", "--out", str(tmp_path / "p1")])
    splits = [line.split(",")[0] for line in (tmp_path / "p1" / "results.csv").read_text().splitlines()[1:]]
    assert splits == ["val", "train (fit)"]
    with pytest.raises(SplitNotFoundError, match="no 'test' split"):
        linear_probe.main([*base, "--val-split", "0.2", "--eval-splits", "val,test", "--out", str(tmp_path / "p2")])
