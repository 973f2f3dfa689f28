"""The sweep directory: ``sweep.json``, one record per finished run (with its probabilities), pretrained
weights and baseline results; every file written atomically, so an interrupted sweep resumes from it.

Layout: ``sweep.json``, ``runs/<dataset>/<model>/<run>.json`` + ``<run>.proba.safetensors`` + ``<run>.model.
safetensors`` (the run's weights with its model and data config, loadable with ``jumbokit.load``; sweeps written
before runs kept them have none), ``runs/<dataset>/<model>/pretrained_s<seed>.safetensors`` + ``.json``
(``.failed`` while a failed pretraining's runs are told to stop waiting), ``runs/<dataset>/<baseline>.json`` (+
``<baseline>.scores.safetensors``: its ridge scores of the validation and test halves, for late fusion); after
the sweep, ``models/<dataset>/<model>/`` holds the run chosen on validation (``model.safetensors`` +
``model_config.json``), the top-k ensemble's members (``ensemble/<rank>_<run>.safetensors``) when one is scored,
and ``kept.json`` (which runs, their accuracies); a fused model (``tstrain --fuse``) is kept the same way in
``models/<dataset>/<model>+<baseline>/``, with the baseline's fitted classifier (``runs/<dataset>/<baseline>.rocket.
safetensors``, linked as ``rocket.safetensors``) and ``fusion.json`` (:mod:`.fusion`).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from jumbokit.training.rundir import atomic_write_text

from .fusion import FUSION_FILE, ROCKET_FILE
from .protocol import SweepConfig, SweepMismatchError
from .run import RunResult

__all__ = ["run_id", "check_out_dir", "write_sweep_file", "read_sweep_file", "load_run", "run_paths", "load_runs", "write_run",
           "load_proba", "proba_path", "baseline_scores_path", "rocket_path", "write_baseline", "read_pretrained", "write_pretrained", "pretrain_record_path",
           "pretrain_failed_path", "clear_pretrain_failures", "model_path", "models_folder", "keep_models", "keep_fused",
           "kept_files", "KEPT_PATTERNS"]

# what a kept model's folder holds beside its weights and config (kept_files): the files that travel with it
KEPT_PATTERNS = ("kept.json", "ensemble/*.safetensors", FUSION_FILE, ROCKET_FILE)


def run_id(lr: float, dropout: float, seed_offset: int = 0) -> str:
    """File stem of a run: ``lr1e-3_do0.1``, plus ``_s<k>`` for the k-th extra seed."""
    return f"lr{lr:g}_do{dropout:g}" + (f"_s{seed_offset}" if seed_offset else "")


def check_out_dir(out_dir: Path, identity: dict[str, Any]) -> None:
    """Refuse a directory that holds another sweep, or files that are not a sweep's (SweepMismatchError)."""
    sweep_file = out_dir / "sweep.json"
    if sweep_file.exists():
        stored = SweepConfig.from_record(json.loads(sweep_file.read_text()), source=str(sweep_file))
        diff = stored.differences(SweepConfig.from_record(identity))
        if diff:
            desc = ", ".join(f"{k}: {a!r} there vs {b!r} now" for k, (a, b) in diff.items())
            raise SweepMismatchError(f"{out_dir} holds results of a different sweep ({desc}); pass another --out "
                                     "or the same settings to resume")
    elif out_dir.exists() and any(out_dir.iterdir()):
        raise SweepMismatchError(f"{out_dir} is not empty and holds no sweep.json (not a tstrain output "
                                 "directory); pass an empty or new --out")


def write_sweep_file(out_dir: Path, cfg: SweepConfig) -> None:
    """``sweep.json``, written once: what defines the sweep (:meth:`SweepConfig.identity`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if not (out_dir / "sweep.json").exists():
        atomic_write_text(out_dir / "sweep.json", json.dumps(cfg.identity(), indent=2) + "\n")


def read_sweep_file(out_dir: Path) -> SweepConfig | None:
    """The sweep stored in ``out_dir`` (any schema, :meth:`SweepConfig.from_record`); None without one."""
    sweep_file = out_dir / "sweep.json"
    if not sweep_file.is_file():
        return None
    return SweepConfig.from_record(json.loads(sweep_file.read_text()), source=str(sweep_file))


def load_run(path: Path) -> RunResult | None:
    """A finished run's record, or None when the file is missing, unreadable or lacks a field (redo the run)."""
    try:
        record = json.loads(path.read_text())
        names = {f.name for f in fields(RunResult)}
        return RunResult(**{k: v for k, v in record.items() if k in names})
    except (OSError, ValueError, TypeError):
        return None


def job_order(path: Path) -> tuple[int, str]:
    """Sort key of a run file in tstrain's job order: seed offset first (``..._s<k>.json``; none = 0), then the
    run's settings (``lr.._do..``)."""
    stem, _, offset = path.stem.rpartition("_s")
    return (int(offset), stem) if stem and offset.isdigit() else (0, path.stem)


def run_paths(out_dir: Path) -> list[Path]:
    """The run records of a sweep directory (``runs/<dataset>/<model>/*.json``), in tstrain's job order (seed
    ``_s10`` after ``_s2``); pretraining records left out."""
    return sorted((p for p in Path(out_dir, "runs").glob("*/*/*.json") if not p.name.startswith("pretrained")),
                  key=job_order)


def load_runs(out_dir: Path) -> list[RunResult]:
    """The finished runs of a sweep directory in tstrain's job order (:func:`run_paths`); unreadable records are
    left out."""
    return [r for r in map(load_run, run_paths(out_dir)) if r is not None]


def proba_path(run_path: Path) -> Path:
    """Where a run's validation / test probabilities lie, beside its record."""
    return run_path.with_name(run_path.stem + ".proba.safetensors")


def model_path(run_path: Path) -> Path:
    """Where a run's weights lie, beside its record."""
    return run_path.with_name(run_path.stem + ".model.safetensors")


def write_run(path: Path, run: RunResult, proba: dict[str, np.ndarray], model: torch.nn.Module | None = None,
              data_config: dict[str, Any] | None = None) -> None:
    """A finished run: its probabilities and weights (``model`` with its ``data_config``, config in the file's
    metadata) first, then its record (whose presence marks the run done)."""
    from safetensors.numpy import save_file

    from ..encoders import save
    from ..encoders.io import atomic_write

    arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in proba.items()}
    atomic_write(proba_path(path), lambda tmp: save_file(arrays, tmp))
    if model is not None:
        save(model, model_path(path), data_config=data_config, config_file=False)
    atomic_write_text(path, json.dumps(asdict(run), indent=1) + "\n")


def baseline_scores_path(path: Path) -> Path:
    """Where a baseline's ridge scores lie, beside its record (``runs/<dataset>/<baseline>.scores.safetensors``)."""
    return path.with_name(path.stem + ".scores.safetensors")


def rocket_path(path: Path) -> Path:
    """Where a baseline's fitted classifier lies, beside its record (``runs/<dataset>/<baseline>.rocket.
    safetensors``; kept for the fused models, :func:`~jumbokit.timeseries.rocket_classifiers.save_rocket`)."""
    return path.with_name(path.stem + ".rocket.safetensors")


def write_baseline(path: Path, result: dict[str, Any]) -> None:
    """A finished baseline: its fitted classifier (``result["classifier"]``, when kept) and its ridge scores of
    the validation and test halves (when it has them) first, then its record without them (whose presence marks
    the baseline done)."""
    from safetensors.numpy import save_file

    from ..encoders.io import atomic_write
    from .rocket_classifiers import save_rocket

    record = dict(result)
    classifier = record.pop("classifier", None)
    if classifier is not None:
        save_rocket(classifier, rocket_path(path))
    scores = record.pop("scores", None)
    if scores is not None:
        arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in scores.items()}
        atomic_write(baseline_scores_path(path), lambda tmp: save_file(arrays, tmp))
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")


def load_proba(path: Path) -> dict[str, np.ndarray] | None:
    """Stored probabilities ({"val": (n_val, K), "test": (n_test, K)}), or None when missing or damaged."""
    from safetensors.numpy import load_file

    try:
        return dict(load_file(str(path)))
    except Exception:  # missing, truncated or damaged: the run is redone
        return None


def pretrain_record_path(folder: Path, seed: int) -> Path:
    """The record ({"loss", "steps", "seconds"}) of the pretraining with ``seed`` in a model's folder."""
    return folder / f"pretrained_s{seed}.json"


def pretrain_failed_path(folder: Path, seed: int) -> Path:
    """The marker a failed pretraining with ``seed`` leaves, so that the runs waiting for it fail too."""
    return folder / f"pretrained_s{seed}.failed"


def clear_pretrain_failures(out_dir: Path) -> None:
    """Remove the markers of an earlier execution's failed pretrainings (they are tried again)."""
    for marker in Path(out_dir, "runs").glob("*/*/pretrained_s*.failed"):
        marker.unlink(missing_ok=True)


def read_pretrained(folder: Path, seed: int) -> tuple[dict[str, torch.Tensor], dict] | None:
    """Stored pretrained weights and their record, or None when missing or damaged (pretrain again)."""
    from ..encoders.io import read_safetensors

    weights, record = folder / f"pretrained_s{seed}.safetensors", pretrain_record_path(folder, seed)
    if not (weights.exists() and record.exists()):
        return None
    try:
        return read_safetensors(weights), json.loads(record.read_text())
    except ValueError:
        return None


def write_pretrained(folder: Path, seed: int, state: dict[str, torch.Tensor], record: dict) -> None:
    """Pretrained weights (safetensors) and their record."""
    from safetensors.torch import save_file

    from ..encoders.io import atomic_write

    tensors = {k: v.contiguous() for k, v in state.items()}
    atomic_write(folder / f"pretrained_s{seed}.safetensors", lambda tmp: save_file(tensors, tmp))
    atomic_write_text(pretrain_record_path(folder, seed), json.dumps(record, indent=1) + "\n")


def models_folder(out_dir: Path, dataset: str, model: str) -> Path:
    """Where the kept models of one (dataset, model) lie: ``models/<dataset>/<model>``."""
    return Path(out_dir) / "models" / dataset / model


def _link_or_copy(source: Path, target: Path) -> Path:
    """``target`` as a hard link to ``source`` (a copy where links are not possible), replaced atomically."""
    from ..encoders.io import atomic_write

    def write(tmp: str) -> None:
        os.unlink(tmp)
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)

    return atomic_write(target, write)


def _already_kept(folder: Path, run_names: list[str], ensemble: bool) -> bool:
    """Whether ``folder`` holds exactly these kept runs (``kept.json`` and every file it names)."""
    try:
        record = json.loads((folder / "kept.json").read_text())
    except (OSError, ValueError):
        return False
    entries = record.get("ensemble", [record.get("chosen", {})]) if ensemble else [record.get("chosen", {})]
    if ("ensemble" in record) != ensemble or [e.get("run") for e in entries] != run_names:
        return False
    return all((folder / e.get("file", "")).is_file() for e in entries) and (folder / "model.safetensors").is_file()


def keep_models(out_dir: Path, dataset: str, model: str, runs: Sequence[RunResult], paths: Sequence[Path],
                ensemble: int = 1) -> str | None:
    """Keep the run chosen on validation (and the top-``ensemble`` members) of one (dataset, model) in
    :func:`models_folder`: its weights linked as ``model.safetensors`` + ``model_config.json``, the members as
    ``ensemble/<rank>_<run>.safetensors``, and ``kept.json``. ``runs`` and their record ``paths`` in the sweep's
    order. Nothing is redone when the folder holds these runs already (the runs' own weights may then be deleted:
    the kept files are hard links, or copies). Returns None, or one line saying why no model is kept (runs written
    before runs kept their weights)."""
    from ..encoders.io import MODEL_FILE
    from ..encoders.zoo import CONFIG_FILE, load_config, load_data_config
    from .results import selection_ranking

    ranking = selection_ranking(runs)
    members = ranking[:ensemble] if ensemble > 1 else ranking[:1]
    folder = models_folder(out_dir, dataset, model)
    if _already_kept(folder, [paths[i].stem for i in members], ensemble > 1):
        return None  # also when the runs' own weights were deleted since: the kept files are links of their own
    missing = [paths[i].stem for i in members if not model_path(paths[i]).is_file()]
    if missing:
        return (f"{dataset} {model}: no model kept: run(s) {', '.join(missing)} have no saved weights (the sweep "
                "ran before runs kept them)")
    chosen = model_path(paths[members[0]])
    _link_or_copy(chosen, folder / MODEL_FILE)
    config = {**load_config(chosen), "pretrained_cfg": load_data_config(chosen)}
    atomic_write_text(folder / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True) + "\n")
    record: dict[str, Any] = {"dataset": dataset, "model": model}
    entries = []
    for rank, i in enumerate(members, start=1):
        entries.append({"run": paths[i].stem, "val_top1": runs[i].val_top1, "test_top1": runs[i].test_top1,
                        "lr": runs[i].lr, "dropout": runs[i].dropout})
        if ensemble > 1:
            entries[-1]["file"] = f"ensemble/{rank}_{paths[i].stem}.safetensors"
            _link_or_copy(model_path(paths[i]), folder / entries[-1]["file"])
    current = {folder / e["file"] for e in entries if "file" in e}
    for stale in (folder / "ensemble").glob("*.safetensors"):  # members of an earlier, other --ensemble
        if stale not in current:
            stale.unlink()
    record["chosen"] = {**entries[0], "file": MODEL_FILE}
    if ensemble > 1:
        record["ensemble"] = entries
    atomic_write_text(folder / "kept.json", json.dumps(record, indent=1) + "\n")
    return None


def kept_files(folder: str | os.PathLike) -> list[str]:
    """The files beside ``model.safetensors`` and ``model_config.json`` that make the model a sweep kept in
    ``folder``, relative to it: ``kept.json`` and an ensemble's members, and for a fused model its
    :data:`~jumbokit.timeseries.fusion.FUSION_FILE` and ROCKET classifier (what travels with it, e.g. to the Hub);
    [] for a folder no sweep kept. ValueError naming what is missing when a listed file is not there."""
    folder = Path(folder)
    if not (folder / "kept.json").is_file():
        return []
    try:
        members = json.loads((folder / "kept.json").read_text()).get("ensemble", [])
        files = ["kept.json", *(member["file"] for member in members)]
        if (folder / FUSION_FILE).is_file():
            files += [FUSION_FILE, json.loads((folder / FUSION_FILE).read_text())["rocket"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{folder}: expected a kept model's kept.json (and a fused one's {FUSION_FILE}), could not "
                         f"read them ({type(err).__name__}: {err})") from None
    missing = [name for name in files if not (folder / name).is_file()]
    if missing:
        raise ValueError(f"{folder}: a kept model without {', '.join(missing)}; run the sweep again to keep it")
    return files


def keep_fused(out_dir: Path, dataset: str, model: str, baseline: str, fusion: dict[str, Any],
               runs: Sequence[RunResult], paths: Sequence[Path], ensemble: int = 1) -> str | None:
    """Keep one fused model (``fusion``: :func:`~jumbokit.timeseries.fusion.late_fusion`'s result) in
    ``models/<dataset>/<model>+<baseline>/``: the transformer's chosen run (or ensemble) as :func:`keep_models`
    keeps it, the baseline's fitted classifier linked as ``rocket.safetensors`` and ``fusion.json``, written last.
    Returns None, or one line saying why it is not kept (a baseline fitted before fused models kept it)."""
    from .fusion import FUSION_FILE, ROCKET_FILE, fused_name, fusion_record

    name = fused_name(model, baseline)
    rocket = rocket_path(Path(out_dir) / "runs" / dataset / f"{baseline}.json")
    if not rocket.is_file():
        return (f"{dataset} {name}: no fused model kept: {rocket} is missing (the baseline was fitted before fused "
                "models kept their classifier; delete its record to fit it again)")
    note = keep_models(out_dir, dataset, name, runs, paths, ensemble)
    if note is not None:
        return note
    folder = models_folder(out_dir, dataset, name)
    _link_or_copy(rocket, folder / ROCKET_FILE)
    record = fusion_record(model, baseline, fusion["weight"], ensemble > 1, dataset=dataset,
                           val_top1=fusion["val_top1"], test_top1=fusion["test_top1"])
    atomic_write_text(folder / FUSION_FILE, json.dumps(record, indent=1) + "\n")
    return None
