"""Every front door at tiny settings, run from a foreign working directory: the accuracies it writes (results.csv,
report.md, metrics.jsonl, JSON summaries) follow the one convention: ``top1`` / ``top5`` in percent (split-prefixed
``val_top1`` ... where a record holds several splits), losses ``loss``, counts ``n``; no ``acc1``, ``acc``,
``accuracy`` or ``best_test_acc`` is left."""
from __future__ import annotations

import csv
import importlib
import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

# names of the old conventions (fractions or other names); a key is checked without its split prefix as well
OLD_NAMES = re.compile(r"(^|_)(acc\d*|accuracy|best_test_acc|top-\d)$", re.IGNORECASE)
TOP = re.compile(r"(^|_)top[15]$")
SKIPPED_FILES = {"config.json", "model_config.json", "resumes.jsonl", "best_arch.json"}


def main_of(command: str):
    """``main(argv)`` of ``jumbokit COMMAND``."""
    from jumbokit.cli import COMMANDS

    return importlib.import_module(f"jumbokit.recipes.{COMMANDS[command]}").main


def _markdown_rows(text: str) -> Iterator[dict[str, str]]:
    lines = text.splitlines()
    for i in range(len(lines) - 1):
        if lines[i].startswith("|") and re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", lines[i + 1]):
            header = [c.strip() for c in lines[i].strip().strip("|").split("|")]
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                yield dict(zip(header, (c.strip() for c in row.strip().strip("|").split("|"))))


def _json_items(data: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield str(key), value
            yield from _json_items(value)
    elif isinstance(data, list):
        for item in data:
            yield from _json_items(item)


def written_metrics(out: Path) -> Iterator[tuple[str, str, Any]]:
    """(file, key, value) of every metric-looking entry the run wrote under ``out``."""
    for path in sorted(out.rglob("*")):
        if not path.is_file() or path.name in SKIPPED_FILES or "checkpoints" in path.parts:
            continue
        where = str(path.relative_to(out))
        if path.suffix == ".csv":
            for row in csv.DictReader(path.open()):
                yield from ((where, k, v) for k, v in row.items())
        elif path.suffix == ".md":
            for row in _markdown_rows(path.read_text()):
                yield from ((where, k, v) for k, v in row.items())
        elif path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                if line.strip():
                    yield from ((where, k, v) for k, v in _json_items(json.loads(line)))
        elif path.suffix == ".json":
            yield from ((where, k, v) for k, v in _json_items(json.loads(path.read_text())))


def check_units(out: Path, expect_accuracy: bool = True) -> None:
    """No old accuracy name anywhere; every top1/top5 a number in [0, 100]; percent, not fractions."""
    old, bad, tops = [], [], []
    for where, key, value in written_metrics(out):
        if OLD_NAMES.search(key.strip()):
            old.append(f"{where}: {key}")
        if TOP.search(key.strip()) and value not in (None, ""):
            try:
                number = float(str(value).rstrip("%"))
            except ValueError:
                continue
            tops.append(number)
            if not 0.0 <= number <= 100.0:
                bad.append(f"{where}: {key}={value}")
    assert not old, f"old accuracy names: {sorted(set(old))[:10]}"
    assert not bad, f"accuracies outside [0, 100]: {bad[:10]}"
    if expect_accuracy:
        assert tops, f"no top1/top5 written under {out}"
        assert max(tops) > 1.0, f"accuracies look like fractions: {tops[:10]}"


TINY_MAE = ["--model", "vit_pico_cls", "--depth", "1", "--decoder-depth", "1", "--decoder-dim", "32",
            "--decoder-heads", "2", "--epochs", "1", "--batch-size", "32", "--max-train-samples", "64",
            "--val-samples", "16", "--vis-images", "2", "--no-progress", "--cpu"]
TINY_SUPERVISED = ["--model", "vit_pico_cls", "--epochs", "1", "--batch-size", "32", "--max-train-samples", "64",
                   "--no-progress", "--cpu"]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A working directory outside the checkout; the front doors run from it."""
    return tmp_path_factory.mktemp("front_doors")


@pytest.fixture(scope="module")
def mae_run(work) -> Path:
    out = work / "mae"
    main_of("mae-pretrain")([*TINY_MAE, "--out", str(out)])
    return out


@pytest.fixture(scope="module")
def supervised_run(work) -> Path:
    out = work / "supervised"
    main_of("supervised")([*TINY_SUPERVISED, "--out", str(out)])
    return out


@pytest.fixture(scope="module")
def supernet_run(work) -> Path:
    out = work / "supernet"
    main_of("nas-supernet")(["--epochs", "1", "--max-train-samples", "32", "--batch-size", "16", "--num-archs", "2",
                             "--out", str(out), "--no-progress"])
    return out


@pytest.fixture(autouse=True)
def foreign_cwd(work, monkeypatch):
    monkeypatch.chdir(work)


def test_mae_pretrain(mae_run):
    check_units(mae_run, expect_accuracy=False)
    assert "train_loss" in (mae_run / "results.csv").read_text().splitlines()[0]


def test_linear_probe(mae_run, work):
    out = work / "probe"
    main_of("linear-probe")(["--checkpoint", str(mae_run), "--epochs", "1", "--max-train-samples", "64",
                             "--batch-size", "32", "--out", str(out), "--no-progress", "--cpu"])
    check_units(out)
    assert (out / "results.csv").read_text().splitlines()[0] == "split,top1,top5,loss,n"


def test_supervised(supervised_run):
    check_units(supervised_run)


def test_sar_adapt(supervised_run, work):
    out = work / "tta"
    main_of("sar-adapt")(["--checkpoint", str(supervised_run), "--corruptions", "gaussian_noise", "--severity", "3",
                          "--max-eval-samples", "16", "--methods", "none,tent", "--batch-size", "8",
                          "--out", str(out), "--no-progress", "--cpu"])
    check_units(out)


@pytest.mark.slow  # the supernet and search take about a minute each on 2 cores
def test_nas_supernet(supernet_run):
    check_units(supernet_run)


@pytest.mark.slow  # the supernet and search take about a minute each on 2 cores
def test_nas_search(supernet_run, work):
    out = work / "search"
    main_of("nas-search")(["--checkpoint", str(supernet_run), "--flops-of", "vit_pico_cls", "--population", "4",
                           "--iterations", "1", "--parents", "2", "--mutations", "1", "--crossovers", "1",
                           "--out", str(out), "--no-progress"])
    check_units(out)


@pytest.mark.slow  # one sweep run with aeon's loading, ~40 s on 2 cores
def test_tstrain(work):
    out = work / "tstrain"
    summary = main_of("tstrain")(["--dataset", "ItalyPowerDemand", "--model", "patchtst", "--epochs", "1",
                                  "--lr", "1e-3", "--dropout", "0.1", "--seeds", "1", "--out", str(out),
                                  "--no-progress"])
    assert summary["out"] == str(out) and summary["paths"]
    check_units(out)
