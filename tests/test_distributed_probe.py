"""Many processes, one answer for the linear probe: features are embedded sharded and gathered back in dataset order
(each sample once), and every process trains the same head with the global batch, so 2 processes give the
1-process results.csv. The in-process tests check the order logic and the batch/lr plan; the torchrun test (slow)
launches real processes on gloo."""
from __future__ import annotations

import json
import subprocess

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from jumbokit.encoders import Encoder
from jumbokit.ssl import (IndexedDataset, embed_shard, extract_features, extract_split_features, fit_batch_size,
                          probe_plan, real_rows, restore_order)
from launch import jumbokit_command, launch, torchrun_command


def _encoder() -> Encoder:
    torch.manual_seed(0)
    return Encoder(tokenizer="image", img_size=16, patch_size=4, in_chans=1, dim=32, depth=2, num_heads=2,
                   global_tokens="jumbo", jumbo_multiplier=2)


def _images(count: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(count, 1, 16, 16, generator=generator), torch.arange(count) % 3)


# ------------------------------------------------------------------ in-process: order, coverage, the plan
def test_restore_order_puts_rows_back_and_refuses_gaps_or_repeats():
    index = torch.tensor([3, 0, 4, 1, 2])
    values = torch.tensor([[30.0], [0.0], [40.0], [10.0], [20.0]])
    labels = index * 2
    ordered, ordered_labels = restore_order(index, 5, values, labels)
    assert ordered[:, 0].tolist() == [0.0, 10.0, 20.0, 30.0, 40.0] and ordered_labels.tolist() == [0, 2, 4, 6, 8]
    with pytest.raises(RuntimeError, match="1 samples missing, 1 repeated"):
        restore_order(torch.tensor([0, 1, 1, 3, 4]), 5, values)
    with pytest.raises(RuntimeError, match="6 rows, 0 samples missing, 1 repeated"):  # padding left in: counts twice
        restore_order(torch.tensor([0, 1, 2, 3, 4, 0]), 5, torch.zeros(6, 1))


def test_split_features_on_one_process_equal_the_plain_extraction():
    from jumbokit.training import TrainConfig, make_accelerator

    encoder, data = _encoder().train(), _images(11)
    accelerator = make_accelerator(TrainConfig(cpu=True, mixed_precision="auto"))  # auto: fp32 on a CPU
    feats, labels = extract_split_features(encoder, data, accelerator, batch_size=4, num_workers=0)
    plain, plain_labels = extract_features(encoder, DataLoader(data, batch_size=4))
    assert torch.equal(feats, plain) and torch.equal(labels, plain_labels)
    assert feats.dtype == torch.float32 and feats.shape == (11, encoder.num_features)
    assert encoder.training  # the encoder's mode is restored


def test_two_shards_gathered_give_every_sample_once_in_order():
    """Each of 2 processes embeds its shard of an Accelerate-sharded loader (the last batches padded from the start);
    per step the shards are concatenated and cut after the real samples, as ``gather_for_metrics`` does. Only real
    rows are embedded, in the batches a one-process run forms, so the features are bit for bit the one-process ones
    (a padded batch of 4 rounds differently from the real batch of 3)."""
    import contextlib
    from types import SimpleNamespace

    from accelerate.data_loader import prepare_data_loader

    from jumbokit.data import make_loader

    encoder, data = _encoder().eval(), _images(11)
    shards = []
    for rank in range(2):
        loader = prepare_data_loader(make_loader(IndexedDataset(data), 4, train=False, num_workers=0),
                                     num_processes=2, process_index=rank, put_on_device=False)
        process = SimpleNamespace(process_index=rank, num_processes=2, autocast=contextlib.nullcontext,
                                  is_main_process=rank == 0)
        shards.append(list(embed_shard(encoder, loader, process, len(data), 4)))
    assert [[i.tolist() for _, _, i in shard] for shard in shards] == [[[0, 1, 2, 3], [8, 9, 10, -1]],
                                                                      [[4, 5, 6, 7], [-1, -1, -1, -1]]]
    gathered = [tuple(torch.cat(column) for column in zip(*pair)) for pair in zip(*shards)]  # step by step
    feats, labels, index = (torch.cat(column)[:len(data)] for column in zip(*gathered))  # the padding cut
    feats, labels = restore_order(index, len(data), feats, labels)
    plain, plain_labels = extract_features(encoder, DataLoader(data, batch_size=4))
    assert torch.equal(labels, plain_labels) and torch.equal(feats, plain)


def test_real_rows_are_those_gather_for_metrics_keeps():
    # 11 samples, batch 4, 2 processes: the last step keeps 11 % 8 = 3 rows, all from process 0
    assert [real_rows(s, 2, 11, 4, r, 2) for s in range(2) for r in range(2)] == [4, 4, 3, 0]
    assert [real_rows(1, 2, 13, 4, r, 2) for r in range(2)] == [4, 1]
    assert [real_rows(0, 1, 8, 4, r, 2) for r in range(2)] == [4, 4]  # no remainder: nothing padded
    assert real_rows(2, 3, 11, 4, 0, 1) == 3  # one process: the partial last batch


def test_the_plan_follows_the_global_batch():
    one, two = probe_plan(64, 1257, 1, blr=0.1), probe_plan(32, 1257, 2, blr=0.1)
    assert (one.effective_batch, one.lr, one.epochs) == (two.effective_batch, two.lr, two.epochs) == (64, 0.025, 90)
    assert probe_plan(32, 1257, 2, optimizer="lars", min_steps=3000).epochs == 158  # 19 steps of 64 per epoch
    assert probe_plan(32, 1257, 4, lr=0.5).lr == 0.5  # an lr given wins
    assert probe_plan(256, 301, 2).batch_size == 150  # a default batch shrinks so batch x processes fits
    with pytest.raises(ValueError, match=r"^--batch-size 256 x 2 processes is larger than the 301 training samples; "
                                         r"pass --batch-size <= 150$"):
        fit_batch_size(256, 301, True, 2)


# ------------------------------------------------------------------ torchrun: real processes on gloo
TINY_MAE = ["mae-pretrain", "--model", "vit_pico_cls", "--depth", "1", "--decoder-depth", "1", "--decoder-dim", "32",
            "--decoder-heads", "2", "--epochs", "1", "--batch-size", "32", "--max-train-samples", "64",
            "--val-samples", "16", "--vis-images", "2", "--no-progress", "--cpu"]
PROBE = ["linear-probe", "--epochs", "3", "--max-train-samples", "301", "--threads", "1", "--no-progress"]


def _run(argv: list[str], nproc: int = 1, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m jumbokit ...`` (one process) or ``torchrun --nproc_per_node N --standalone -m jumbokit ...``."""
    return launch(torchrun_command(argv, nproc) if nproc > 1 else jumbokit_command(argv), timeout)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_probe_on_two_processes_equals_one(tmp_path):
    """Same global batch (64 x 1 = 32 x 2): results.csv and metrics.jsonl byte for byte, the head bit for bit, and
    n = the split sizes (301 train images, the whole val and test splits)."""
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available: torchrun cannot start CPU processes here")
    from safetensors.torch import load_file

    from jumbokit.data import build_dataset

    mae = tmp_path / "mae"
    _run([*TINY_MAE, "--out", str(mae)])
    _run([*PROBE, "--checkpoint", str(mae), "--batch-size", "64", "--out", str(tmp_path / "one")])
    _run([*PROBE, "--checkpoint", str(mae), "--batch-size", "32", "--out", str(tmp_path / "two")], nproc=2)
    one, two = tmp_path / "one", tmp_path / "two"
    assert (one / "results.csv").read_text() == (two / "results.csv").read_text()
    assert (one / "metrics.jsonl").read_text() == (two / "metrics.jsonl").read_text()
    heads = load_file(one / "probe_head.safetensors"), load_file(two / "probe_head.safetensors")
    assert all(torch.equal(heads[0][k], heads[1][k]) for k in heads[0])
    rows = {line.split(",")[0]: line.split(",") for line in (two / "results.csv").read_text().splitlines()[1:]}
    sizes = {split: len(build_dataset("digits", split, task="eval", img_size=16, in_chans=1))
             for split in ("val", "test")}
    assert {split: int(row[-1]) for split, row in rows.items()} == {**sizes, "train (fit)": 301}
    configs = [json.loads((run / "config.json").read_text()) for run in (one, two)]
    assert [(c["batch_size"], c["effective_batch"], c["lr"], c["epochs"]) for c in configs] == [
        (64, 64, configs[0]["lr"], 3), (32, 64, configs[0]["lr"], 3)]
