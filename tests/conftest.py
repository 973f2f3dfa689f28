"""Shared test helpers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one torch thread per test worker (the workers share the cores), also for the processes a test starts
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


def _write_ts(folder, name: str, split: str, series: np.ndarray, labels: list[str]) -> None:
    """A tiny univariate .ts file (aeon's text format) at ``folder/name/name_SPLIT.ts``."""
    folder = folder / name
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"@problemName {name}", "@timestamps false", "@missing true", "@univariate true",
             "@equalLength true", f"@seriesLength {series.shape[-1]}",
             f"@classLabel true {' '.join(sorted(set(labels)))}", "@data"]
    for row, label in zip(series, labels):
        lines.append(",".join("NaN" if np.isnan(v) else f"{v:.4f}" for v in row) + f":{label}")
    (folder / f"{name}_{split.upper()}.ts").write_text("\n".join(lines) + "\n")


@pytest.fixture
def write_ts():
    """``write_ts(folder, name, split, series (n, L), labels)`` writes a local UCR-style dataset file."""
    return _write_ts


@pytest.fixture
def one_torch_thread():
    """Run a test with one torch thread (tiny models are fastest that way), restoring the count afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def jumbokit_cli(capsys):
    """``jumbokit_cli(argv)`` runs ``jumbokit ARGV`` in this process: (exit status, stdout, stderr)."""
    from jumbokit.cli import main

    def run(argv: list[str]) -> tuple[int, str, str]:
        try:
            status = main(argv)
        except SystemExit as stop:
            status = stop.code
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


class FakeHubApi:
    """Stands in for ``huggingface_hub.HfApi``: records the calls; an upload becomes a snapshot (``commit``) of the
    local Hub cache ``cache`` (the layout ``snapshot_download`` reads offline)."""

    commit = "0123456789abcdef0123456789abcdef01234567"

    def __init__(self, cache):
        self.cache, self.calls = cache, []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))

    def upload_folder(self, repo_id, folder_path, **kwargs):
        self.calls.append(("upload_folder", repo_id, sorted(p.name for p in Path(folder_path).iterdir())))
        repo = self.cache / f"models--{repo_id.replace('/', '--')}"
        shutil.copytree(folder_path, repo / "snapshots" / self.commit)
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(self.commit)
        return f"https://huggingface.co/{repo_id}/commit/{self.commit}"


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """HF_HUB_OFFLINE=1 and an empty Hub cache under tmp_path."""
    from huggingface_hub import constants

    cache = tmp_path / "hub_cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def hub_api(offline_cache):
    """A :class:`FakeHubApi` writing into ``offline_cache``: push_to_hub(..., api=hub_api), then load offline."""
    return FakeHubApi(offline_cache)
