"""The Hugging Face Hub: push a trained model (weights, config with its data config, a model card) and fetch one.

```python
import jumbokit
jumbokit.push_to_hub("runs/supervised_vit_pico_jumbo_digits", "my-org/vit-pico-jumbo-digits")
model = jumbokit.load("hf-hub:my-org/vit-pico-jumbo-digits")      # model.pretrained_cfg: its data config
```

A pushed repository holds ``model.safetensors``, ``model_config.json`` (the model options and the
``pretrained_cfg`` block, see ``jumbokit.data.data_config``) and a ``README.md`` model card written from the run
(architecture, data, the metrics of its ``results.csv``). A fused series model (``tstrain --fuse``: a kept
``models/<set>/<model>+<baseline>`` folder) takes the rest of itself along (``fusion.json``, the fitted ROCKET
classifier, ``kept.json`` and a fused ensemble's members), so ``load_series_predictor("hf-hub:ORG/NAME")`` and
``jumbokit predict`` score it as the sweep did; any kept model takes its ``kept.json`` and its top-k ensemble's
members along (``predict --ensemble`` from the Hub). ``hf-hub:ORG/NAME[@REVISION]`` names are fetched with
``huggingface_hub.snapshot_download`` into the Hugging Face cache (``HF_HUB_CACHE``) or a ``local_dir``; with
``HF_HUB_OFFLINE=1`` only what is already there is used.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from torch import nn

__all__ = ["HUB_PREFIX", "HUB_FILES", "parse_hub_name", "snapshot", "push_to_hub", "model_card"]

HUB_PREFIX = "hf-hub:"
HUB_FILES = ("model.safetensors", "model_config.json", "README.md")


def parse_hub_name(name: str) -> tuple[str, str | None]:
    """``"hf-hub:ORG/NAME[@REVISION]"`` -> ``("ORG/NAME", REVISION or None)``; raises ``ValueError`` otherwise."""
    text = str(name)
    repo, _, revision = text[len(HUB_PREFIX):].partition("@") if text.startswith(HUB_PREFIX) else ("", "", "")
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"expected a Hugging Face Hub name hf-hub:ORG/NAME[@REVISION], got {text!r}")
    return repo, revision or None


def snapshot(name: str, *, cache_dir: str | os.PathLike | None = None,
             local_dir: str | os.PathLike | None = None) -> Path:
    """The local folder of the model files of ``hf-hub:ORG/NAME[@REVISION]`` (fetched when online).

    Raises ``ValueError`` with one line when the repository is unknown, or not in the cache while offline."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    from jumbokit.timeseries.store import KEPT_PATTERNS

    repo, revision = parse_hub_name(name)

    try:
        folder = snapshot_download(repo, revision=revision, cache_dir=cache_dir, local_dir=local_dir,
                                   allow_patterns=[*HUB_FILES, *KEPT_PATTERNS], library_name="jumbokit")
    except LocalEntryNotFoundError:
        raise ValueError(f"{name} is not in the local Hugging Face cache and the Hub cannot be reached (offline, "
                         "HF_HUB_OFFLINE=1?); fetch it once online, or pass its downloaded folder") from None
    except RevisionNotFoundError:
        raise ValueError(f"{name}: the Hub repository has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise ValueError(f"{name}: no such model repository on the Hugging Face Hub (or it is private: log in "
                         "with `hf auth login`)") from None
    except HfHubHTTPError as err:
        raise ValueError(f"{name}: the Hugging Face Hub answered {' '.join(str(err).split())}") from None
    path = Path(folder)
    if not (path / "model.safetensors").is_file():
        raise ValueError(f"{name} holds no model.safetensors (a jumbokit model pushed with jumbokit.push_to_hub?)")
    return path


def _stage(run_or_model: str | os.PathLike | nn.Module, folder: Path) -> tuple[dict, dict | None, dict]:
    """Write the model files into ``folder``: (model config, data config, run record ({} for a bare model))."""
    from jumbokit.data.data_config import check_data_config, read_run_data_config
    from jumbokit.encoders import load as load_saved
    from jumbokit.encoders import save
    from jumbokit.encoders.zoo import load_config

    if isinstance(run_or_model, nn.Module):
        model, record = run_or_model, {}
        data_config = getattr(model, "pretrained_cfg", None)
    else:
        path = Path(run_or_model).expanduser()
        model = load_saved(path)
        data_config = getattr(model, "pretrained_cfg", None) or read_run_data_config(path)
        record = _run_record(path)
    data_config = check_data_config(data_config) if data_config else None
    save(model, folder, data_config=data_config)
    for name in record.get("companions", []):  # a kept series model: kept.json, its ensemble, a fused model's parts
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path / name, folder / name)
    return load_config(folder), data_config, record


def _run_record(path: Path) -> dict[str, Any]:
    """The run's config.json and its results.csv rows (``{}`` / ``[]`` where missing); for a model a tstrain
    sweep kept (``models/DATASET/MODEL``), its ``kept.json``: the model's name, the set and the chosen run's
    validation and test top-1."""
    from jumbokit.timeseries.fusion import FUSION_FILE
    from jumbokit.timeseries.store import kept_files

    run = path if path.is_dir() else path.parent
    companions = kept_files(path) if path.is_dir() else []
    fused = FUSION_FILE in companions
    try:
        kept = json.loads((run / "kept.json").read_text())
        scored = json.loads((run / FUSION_FILE).read_text()) if fused else kept["chosen"]
        return {"model_name": kept["model"], "recipe": "tstrain", "data": {"dataset": kept["dataset"]},
                "results": [{"split": split, "top1": f"{scored[f'{split}_top1']:.2f}"} for split in ("val", "test")],
                "companions": companions, **({"fusion": scored} if fused else {})}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        record = json.loads((run / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        record = {}
    try:
        with open(run / "results.csv", newline="") as fh:
            rows = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(fh)]
    except OSError:
        rows = []
    return {**(record if isinstance(record, dict) else {}), "results": rows}


def _number(text: str) -> Any:
    """A CSV cell as an int or float where it reads as one (so the card formats it), else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except (TypeError, ValueError):
            pass
    return text


def model_card(repo_id: str, config: dict[str, Any], data_config: dict[str, Any] | None,
               record: dict[str, Any]) -> str:
    """The README.md of a pushed model: front matter, architecture, data, metrics and how to use it."""
    from jumbokit.data.data_config import is_series_config
    from jumbokit.training.rundir import markdown_table

    name = record.get("model_name") or config.get("encoder") or "jumbokit encoder"
    arch = ", ".join(f"{label} {config[key]}" for key, label in (
        ("global_tokens", "global tokens"), ("depth", "depth"), ("dim", "width"), ("num_heads", "heads"),
        ("patch_size", "patch"), ("num_classes", "classes")) if config.get(key) is not None)
    params = record.get("num_params")
    series = is_series_config(data_config)
    head = (["tags:", "- time-series-classification", "- jumbokit", "- patchtst"] if series else
            ["pipeline_tag: image-classification", "tags:", "- image-classification", "- jumbokit",
             "- vision-transformer"])
    lines = ["---", "library_name: jumbokit", *head, "---", "",
             f"# {repo_id}", "",
             f"A jumbokit {'time-series' if series else 'image'} classifier: `{name}` ({arch}"
             + (f"; {params / 1e6:.2f}M parameters" if isinstance(params, (int, float)) else "") + ")"
             + (f", trained by `jumbokit {record['recipe']}`" if record.get("recipe") else "")
             + (f" on `{record['data']['dataset']}`" if isinstance(record.get("data"), dict)
                and record["data"].get("dataset") else "") + ".", ""]
    names = (data_config or {}).get("label_names") or []
    classes = (f"- classes ({len(names) or (data_config or {}).get('num_classes', '?')}): "
               + (", ".join(map(str, names[:50])) + (" ..." if len(names) > 50 else "") if names else "by index"))
    if series:
        scaled = {"train": f"per channel with the training split's mean {data_config.get('mean')} and std "
                           f"{data_config.get('std')}", "instance": "each series by its own mean and std",
                  "none": "none"}[data_config["normalize"]]
        lines += ["## Data", "",
                  f"- input: {data_config['in_chans']} channel(s) x {data_config['seq_len']} steps (shorter series: "
                  f"{data_config['unequal_length']})", f"- normalisation: {scaled}", classes, ""]
    elif data_config:
        lines += ["## Data", "",
                  f"- input: {' x '.join(map(str, data_config['input_size']))} (channels x height x width), "
                  f"resized to height / crop_pct = {data_config.get('crop_pct')} ({data_config.get('interpolation')})"
                  f" and center-cropped",
                  f"- normalisation: mean {list(data_config['mean'])}, std {list(data_config['std'])}",
                  classes, ""]
    fusion = record.get("fusion")
    if fusion:
        lines += ["## Fusion", "",
                  "The transformer's class probabilities (`model.safetensors`"
                  + (", with its ensemble's members" if fusion["ensemble"] else "") + ") mixed with those of a "
                  f"`{fusion['baseline']}` ridge classifier (`{fusion['rocket']}`; a softmax of its scores at "
                  f"temperature {fusion['ridge_temperature']}): transformer share {fusion['weight']}, chosen on the "
                  "validation half (`fusion.json`). The ROCKET half reads the raw series.", ""]
    if record.get("results"):
        columns = ["split", "top1"] if series else ["split", "top1", "top5", "loss", "n"]
        source = ("the sweep's fused model (`fusion.json`)" if fusion else "the sweep's chosen run (`kept.json`)"
                  if series else "the run's `results.csv`")
        lines += ["## Metrics", "", f"Top-1{'' if series else ' / top-5'} accuracy in percent, from {source}.", "",
                  markdown_table(record["results"], columns, formats={"top1": ".2f", "top5": ".2f", "loss": ".4f"}
                               ).rstrip(), ""]
    if fusion:
        lines += ["## Use", "", "```python", "from jumbokit.inference.series import load_series_predictor, "
                  "read_series_file",
                  f'predictor = load_series_predictor("hf-hub:{repo_id}")',
                  'series = read_series_file("series.tsv", predictor.cfg)   # .ts, .tsv, .csv or .npy',
                  "proba = predictor.proba(series.x, series.raw)   # the prepared and the raw series", "```", "",
                  f"or `jumbokit predict --checkpoint hf-hub:{repo_id} series.tsv`.", ""]
    elif series:
        lines += ["## Use", "", "```python", "import jumbokit",
                  "from jumbokit.timeseries.data_config import prepare_series",
                  f'model = jumbokit.load("hf-hub:{repo_id}").eval()',
                  "x = prepare_series(raw_series, model.pretrained_cfg)   # (n, C, L) float32, as in training",
                  "```", "", f"or `jumbokit predict --checkpoint hf-hub:{repo_id} series.ts`.", ""]
    else:
        lines += ["## Use", "", "```python", "import jumbokit, timm.data",
                  f'model = jumbokit.load("hf-hub:{repo_id}").eval()',
                  "transform = timm.data.create_transform(**timm.data.resolve_model_data_config(model))",
                  "```", "", f"or `jumbokit predict --checkpoint hf-hub:{repo_id} images/`.", ""]
    return "\n".join(lines)


def push_to_hub(run_or_model: str | os.PathLike | nn.Module, repo_id: str, *, api=None, private: bool = False,
                token: str | None = None, revision: str | None = None,
                commit_message: str = "Upload a jumbokit model") -> Any:
    """Upload a run directory (or ``.safetensors`` file, or a model) to the Hub repository ``repo_id``.

    The repository gets ``model.safetensors``, ``model_config.json`` with the data config and a generated
    ``README.md`` model card (and a kept series model's other files); it is created when missing. ``api``: a
    ``huggingface_hub.HfApi`` (default: a new one with ``token``). Returns what ``api.upload_folder`` returns (the commit information).
    """
    parse_hub_name(HUB_PREFIX + repo_id)
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="jumbokit-hub-") as tmp:
        folder = Path(tmp)
        config, data_config, record = _stage(run_or_model, folder)
        (folder / "README.md").write_text(model_card(repo_id, config, data_config, record))
        try:
            api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
            return api.upload_folder(repo_id=repo_id, repo_type="model", folder_path=str(folder),
                                     commit_message=commit_message, revision=revision)
        except Exception as err:
            raise _push_error(repo_id, err) from None


def _push_error(repo_id: str, err: Exception) -> Exception:
    """One-line ``ValueError`` for a failed push: the Hub's answer, or that it cannot be reached (connection
    errors of httpx / requests / urllib3 / the OS); any other error is returned as it is."""
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(err, HfHubHTTPError):
        return ValueError(f"push to {repo_id}: the Hugging Face Hub answered {' '.join(str(err).split())}")
    network = isinstance(err, (OSError, TimeoutError)) or type(err).__module__.split(".")[0] in (
        "httpx", "httpcore", "requests", "urllib3")
    if network:
        return ValueError(f"push to {repo_id}: cannot reach the Hugging Face Hub ({type(err).__name__}: "
                          f"{' '.join(str(err).split())[:160]}); check the network, HF_ENDPOINT and HF_HUB_OFFLINE")
    return err
