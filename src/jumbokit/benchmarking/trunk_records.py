"""The trunk benchmark's records and the rule for "the same runs": what ``benchmarks/timeseries_trunk.py`` writes
and what the rank tables read, in one place.

A trunk record is a JSON object with ``command`` (the ``tstrain`` command its runs were trained by), ``device``
and ``rows``: one per (set, model) with ``dataset``, ``model``, ``arm_best`` and ``arm_avg`` (test %, of the
validation-chosen run and the mean of the runs), ``arm_runs`` and ``arm_seconds``. Two recorded commands train the
same runs on a set when tstrain's own parser and recipe rules, decided on that set (:func:`settings_on`), give the
same settings; seeds, models, threads and device flags never matter. :func:`load_rows` reads the records for the
benchmark itself (its recipe's own runs) and for :mod:`~jumbokit.benchmarking.rank_tables`; the benchmark script
writes them, this module is where their shape is written down.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..timeseries.normalize import resolve_normalization

__all__ = ["differences", "front_end", "load_records", "load_rows", "settings_of", "settings_on"]

RUN_FLAGS = {"--seeds": 1, "--model": 1, "--threads": 1, "--runs-per-device": 1, "--cpu": 0}  # flag -> values
NOT_SETTINGS = ("recipe", "seed", "seeds")  # SweepConfig fields that do not change a run's model or data


def front_end(command: str) -> str:
    """The tstrain command without the flags that do not change a run's model or data (seeds, models,
    threads, device): the front end's text, for titles."""
    words, kept, skip = command.split(), [], 0
    for word in words:
        if skip:
            skip -= 1
        elif word in RUN_FLAGS:
            skip = RUN_FLAGS[word]
        else:
            kept.append(word)
    return " ".join(kept)


def settings_of(command: str, source: str) -> dict[str, Any]:
    """The run settings a recorded ``tstrain`` command resolves to (tstrain's own parser and recipe rules), less
    what does not change a run's model or data (recipe name, seeds); "auto" values stay undecided."""
    from ..cli.series import sweep_settings

    words = shlex.split(command)
    try:
        settings = sweep_settings(words[1:] if words[:1] == ["tstrain"] else words)
    except (SystemExit, ValueError) as err:
        why = "tstrain's message is above" if isinstance(err, SystemExit) else str(err)
        raise SystemExit(f"{source}: expected a command tstrain accepts ({why}), got: {command}")
    return {"config": settings.config, "lrs": settings.lrs, "dropouts": settings.dropouts}


@lru_cache(maxsize=None)
def training_series(dataset: str, protocol: str, split_seed: int) -> np.ndarray:
    """The training split of a local UCR/UEA set as loaded, before normalisation (n, C, L): what the "auto"
    settings read (its scale spread is the same after standardising with training statistics)."""
    from ..timeseries.data import DatasetNotFoundError, load_dataset

    try:
        return load_dataset(dataset, protocol=protocol, split_seed=split_seed, normalize="none").train.x
    except DatasetNotFoundError as err:
        raise SystemExit(f"a row of {dataset!r} has settings decided by the set ('auto'), and the set cannot be read "
                         f"here: {err}")


def settings_on(settings: dict[str, Any], dataset: str | None) -> dict[str, Any]:
    """``settings`` decided for one set as its runs decide them: ``--normalize auto`` and ``--level-scale auto``
    (with the augmentations it drops) by the training series' scale spread, ``--trunk-width auto`` by the set's
    length. Reads the set only where something is "auto"; with no set (None), "auto" values stay as they are."""
    cfg = settings["config"]
    model = cfg.model
    auto = cfg.normalize == "auto" or model.level_scale == "auto" or (model.trunk and model.trunk_width == "auto")
    if dataset is not None and auto:
        train_x = training_series(dataset, cfg.protocol, cfg.split_seed)
        on_set = cfg.for_dataset(train_x)
        cfg = replace(on_set, normalize=resolve_normalization(train_x, cfg.normalize),
                      model=replace(on_set.model, trunk_width=cfg.trunk_width_for(train_x.shape[-1])))
    # the series-model options beside the sweep's (no name is shared), so a difference names the option itself
    decided = {k: v for k, v in asdict(cfg).items() if k not in NOT_SETTINGS and k != "model"}
    return {**decided, **asdict(cfg.model), "lrs": settings["lrs"], "dropouts": settings["dropouts"]}


def differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The settings where ``a`` and ``b`` differ, as "name: a vs b" (or "the same")."""
    diff = [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return "; ".join(diff) or "the same"


def load_records(paths: list[Path]) -> list[tuple[Path, dict]]:
    """(path, record) of each input, SystemExit for one that is not a JSON of benchmarks/timeseries_trunk.py."""
    records = []
    for path in paths:
        try:
            record = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise SystemExit(f"{path}: expected a JSON of benchmarks/timeseries_trunk.py, got unreadable text ({err})")
        if not isinstance(record, dict) or "rows" not in record or "command" not in record:
            raise SystemExit(f"{path}: expected a JSON of benchmarks/timeseries_trunk.py (with 'rows' and 'command')")
        records.append((path, record))
    return records


def load_rows(paths: list[Path], command: str | None = None) -> tuple[str, dict[tuple[str, str], dict]]:
    """(the ranked front end, (set, model) -> row with its "device", "source" and "trunk_width"): each row from the
    first file whose settings, decided on that set, are those of ``command`` there (default: the first file's
    command). SystemExit for a file none of whose rows (or, with no rows, whose settings) match."""
    records = load_records(paths)
    ranked = settings_of(command, "--front-end") if command else settings_of(records[0][1]["command"], str(paths[0]))
    command = command or records[0][1]["command"]
    ranked_on: dict[str, dict[str, Any]] = {}  # set -> the ranked settings decided there
    rows: dict[tuple[str, str], dict] = {}
    for path, record in records:
        mine = settings_of(record["command"], str(path))
        matched = 0
        for row in record["rows"]:
            dataset = row["dataset"]
            if dataset not in ranked_on:
                ranked_on[dataset] = settings_on(ranked, dataset)
            decided = settings_on(mine, dataset)
            if decided != ranked_on[dataset]:
                continue
            matched += 1
            width = str(decided["trunk_width"]) if decided["trunk"] else None
            rows.setdefault((dataset, row["model"]), {**row, "device": record["device"], "source": path.name,
                                                      "trunk_width": width})
        if not matched:
            on = record["rows"][0]["dataset"] if record["rows"] else None
            why = differences(settings_on(ranked, on), settings_on(mine, on))
            raise SystemExit(f"the inputs come from different front ends, expected one: {path} differs from "
                             f"`{front_end(command)}`{f' on {on}' if on else ''} ({why})")
    return front_end(command), rows
