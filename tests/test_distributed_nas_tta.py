"""Many processes, one answer for the NAS and test-time-adaptation front doors: nas-search and sar-adapt give the
same history / results on 1 and 2 processes, and a supernet step whose architectures miss a global-token gene
trains under 2-process DDP. The in-process tests check the splitting itself; the torchrun tests (slow) launch
real processes on gloo."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import torch

import jumbokit
from jumbokit import nas
from jumbokit.adaptation import jobs
from jumbokit.adaptation.wild import MethodSettings
from jumbokit.nas.scoring import CandidateScorer
from jumbokit.training.jobs import JobQueue
from launch import launch, torchrun_command

SPACE = nas.search_space("digits")


def _supernet() -> nas.Supernet:
    torch.manual_seed(0)
    net = nas.Supernet(SPACE, num_classes=10, img_size=32, in_chans=1)
    with torch.no_grad():  # non-trivial norms and biases: candidates then score differently
        for p in net.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.3)
    return net.eval()


def _tiny_source(path: Path) -> Path:
    torch.manual_seed(0)
    model = jumbokit.create_model("vit_pico_reg16", img_size=32, patch_size=8, in_chans=1, num_classes=10, dim=16,
                                  num_heads=2, depth=2)
    jumbokit.save(model, path)
    data = {"dataset": "digits", "split": "train", "img_size": 32, "in_chans": 1, "mean": [0.309], "std": [0.349],
            "crop_pct": 1.0, "interpolation": "bicubic", "num_classes": 10, "classes": [str(c) for c in range(10)]}
    (path / "config.json").write_text(json.dumps({"data": data}))
    return path


# ------------------------------------------------------------------ in-process: the splits themselves
def test_scores_do_not_depend_on_grouping_or_on_which_share_scores_them():
    torch.manual_seed(1)
    loader = [(torch.randn(12, 1, 32, 32), torch.randint(0, 10, (12,))) for _ in range(3)]
    net = _supernet()
    archs = [SPACE.sample(__import__("random").Random(i)) for i in range(5)]
    whole = CandidateScorer(net, loader, group=8)(archs)
    single = CandidateScorer(net, loader, group=1)(archs)
    shares = {i: s for r in range(2) for i, s in zip(range(r, 5, 2), CandidateScorer(net, loader, group=2)(archs[r::2]))}
    assert whole == single == [shares[i] for i in range(5)]
    assert len(set(whole)) > 1  # the candidates are told apart


def test_batched_scoring_gives_the_per_candidate_search():
    def fitness(arch):
        return float(sum(arch["dims"]) % 97) + len(arch["global_tokens"]) / 10

    budget = SPACE.flops(SPACE.largest("cls"), 32, 1, 10) * 0.6
    options = dict(seed=3, population=12, iterations=3, parents=4, mutations=4, crossovers=4, window=0.8,
                   flops=lambda a: SPACE.flops(a, 32, 1, 10))
    one = nas.evolutionary_search(SPACE, fitness, budget, **options)
    calls = []

    def score(archs):  # as two processes would: even and odd candidates scored apart, then put back in order
        calls.append(len(archs))
        parts = {i: fitness(archs[i]) for r in range(2) for i in range(r, len(archs), 2)}
        return [parts[i] for i in range(len(archs))]

    batched = nas.evolutionary_search(SPACE, None, budget, score=score, **options)
    assert batched.history == one.history and calls[0] == 12 and len(calls) == 4


def test_jobs_split_across_ranks_merge_to_the_one_process_records():
    from jumbokit.adaptation.corruptions import CorruptedDataset, clean_image_transforms
    from jumbokit.data import build_dataset

    source = _tiny_source(Path(os.environ.get("TMPDIR", "/tmp")) / f"tta_src_{os.getpid()}")
    model = jumbokit.load(source)
    clean = build_dataset("digits", "test", "eval", img_size=32, in_chans=1, max_samples=24, seed=0)
    geometry, to_tensor = clean_image_transforms(32, [0.309], [0.349], 1.0, "bicubic")
    domains = {5: {c: CorruptedDataset(clean, c, 5, to_tensor, geometry).precompute()
                   for c in ("fog", "gaussian_noise", "contrast")}}
    todo = jobs.job_list("normal", list(domains[5]), [5], ["tent", "sar"])
    stream = jobs.StreamOptions("normal", batch_size=8, seed=0)
    built = []

    def build(needed):  # what a process builds, in the order it needs it
        built.append(needed)
        return {5: {c: domains[5][c] for c, _ in needed}}

    args = (model, todo, jobs.SetsOnDemand(build, list(domains[5])), 10, MethodSettings(), stream)
    one = jobs.merge_records(todo, jobs.run_jobs(*args))
    # the jobs read one corrupted set after another: each set is built once, when its first job needs it
    assert built == [{("fog", 5)}, {("gaussian_noise", 5)}, {("contrast", 5)}]
    # two processes (threads here) drawing the next job from one store
    store, answers = torch.distributed.HashStore(), {}

    def process(rank):
        queue = JobQueue(todo, store, "tta-test", processes=2, rank=rank)
        answers[rank] = jobs.run_jobs(*args[:2], lambda job: domains[job.severity], *args[3:], queue=queue)

    threads = [threading.Thread(target=process, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers[0] == answers[1]
    two = jobs.merge_records(todo, answers[0])
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in one]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in two]
    assert [(r["severity"], r["method"]) for r in one] == [(5, "tent"), (5, "sar")]
    shutil.rmtree(source, ignore_errors=True)


# ------------------------------------------------------------------ torchrun: real processes on gloo
def _torchrun(nproc: int, argv: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    return launch(torchrun_command(argv, nproc), timeout)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_nas_search_is_the_same_on_one_and_two_processes(tmp_path):
    jumbokit.save(_supernet(), tmp_path / "supernet")
    budget = SPACE.flops(SPACE.largest("cls"), 32, 1, 10) * 0.5
    flags = ["--checkpoint", str(tmp_path / "supernet"), "--flops", f"{budget / 1e6:.3f}M", "--window", "0.7",
             "--population", "8", "--iterations", "2", "--parents", "3", "--mutations", "3", "--crossovers", "2",
             "--max-eval-samples", "96", "--batch-size", "32", "--no-progress"]
    for n in (1, 2):
        _torchrun(n, ["nas-search", *flags, "--out", str(tmp_path / f"p{n}")])
    one, two = ((tmp_path / f"p{n}" / "history.jsonl").read_text() for n in (1, 2))
    assert one == two and len(one.splitlines()) == 18
    assert len({json.loads(line)["fitness"] for line in one.splitlines()}) > 1
    assert (json.loads((tmp_path / "p1" / "best_arch.json").read_text())
            == json.loads((tmp_path / "p2" / "best_arch.json").read_text()))


@pytest.mark.multiprocess
@pytest.mark.slow
def test_sar_adapt_is_the_same_on_one_and_two_processes(tmp_path):
    source = _tiny_source(tmp_path / "source")
    flags = ["--checkpoint", str(source), "--corruptions", "fog,gaussian_noise,contrast", "--severity", "3,5",
             "--methods", "tent,eata,sar", "--max-eval-samples", "32", "--fisher-size", "16", "--batch-size", "8",
             "--no-progress"]
    for n in (1, 2):
        _torchrun(n, ["sar-adapt", *flags, "--out", str(tmp_path / f"p{n}")])
    one, two = ((tmp_path / f"p{n}" / "results.csv").read_text() for n in (1, 2))
    assert one == two and len(one.splitlines()) == 1 + 2 * 3 * 4


@pytest.mark.multiprocess
@pytest.mark.slow
def test_supernet_steps_that_miss_a_gene_train_under_two_process_ddp(tmp_path):
    # one architecture per step: every step leaves two of the three global-token genes unused
    done = _torchrun(2, ["nas-supernet", "--epochs", "1", "--max-train-samples", "32", "--batch-size", "8",
                         "--num-archs", "1", "--log-every", "1", "--out", str(tmp_path / "sn"), "--no-progress"])
    lines = [json.loads(line) for line in (tmp_path / "sn" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if r["kind"] == "train"] == [1, 2], done.stdout
    assert isinstance(nas.load_supernet(tmp_path / "sn"), nas.Supernet)
