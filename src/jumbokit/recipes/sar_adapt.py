"""Test-time adaptation (none / Tent / EATA / SAR) of a source classifier on corrupted test sets.

    accelerate launch recipes/sar_adapt.py --checkpoint runs/supervised_vit_tiny_jumbo_digits \
        --dataset digits --methods none,tent,eata,sar --setting normal --severity 5 --out runs/tta
    python recipes/sar_adapt.py --imagenet-c /data/imagenet-c --checkpoint vit_base_patch16_224 \
        --weights vit_base.safetensors --dataset folder:/data/imagenet --setting label_shift

The source is a jumbokit run directory, a ``.safetensors`` file, or a timm model name plus
``--weights``. Images are normalised with the source's own mean/std (its run's config.json, the timm
model's pretrained config, or --mean/--std). Corruptions are generated from ``--dataset`` (test split)
unless ``--imagenet-c ROOT`` points at an ImageNet-C style tree. Writes ``results.csv``, ``report.md``,
``accuracy.png`` and ``summary.json`` to ``--out``; prints the table (accuracy % per corruption and
method, with the average) and the adaptation throughput.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

SHORT_NAMES = {
    "gaussian_noise": "Gauss", "shot_noise": "Shot", "impulse_noise": "Impul", "defocus_blur": "Defoc",
    "glass_blur": "Glass", "motion_blur": "Motion", "zoom_blur": "Zoom", "snow": "Snow", "frost": "Frost",
    "fog": "Fog", "brightness": "Brit", "contrast": "Contr", "elastic_transform": "Elast", "pixelate": "Pixel",
    "jpeg_compression": "JPEG", "speckle_noise": "Speck", "gaussian_blur": "GBlur", "spatter": "Spat",
    "saturate": "Satur",
}
METHOD_LABELS = {"none": "No adapt", "tent": "Tent", "eata": "EATA", "sar": "SAR"}


def build_parser() -> argparse.ArgumentParser:
    from jumbokit.training.threads import add_threads_arg

    from jumbokit.adaptation.wild import SETTINGS

    p = argparse.ArgumentParser(
        description="Test-time adaptation (none/Tent/EATA/SAR) on corrupted test sets; writes results.csv, "
                    "report.md, accuracy.png.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    src = p.add_argument_group("source model")
    src.add_argument("--checkpoint", default=None,
                     help="jumbokit run directory, .safetensors file, or timm model name (with --weights); "
                          "default: the newest supervised digits run under runs/")
    src.add_argument("--weights", default=None, help="weights file (.safetensors or .pth) for a timm model name")
    src.add_argument("--mean", default=None, help="override the normalisation mean, comma-separated")
    src.add_argument("--std", default=None, help="override the normalisation std, comma-separated")
    data = p.add_argument_group("data")
    data.add_argument("--dataset", default=None,
                      help="clean dataset (digits | folder:PATH | hf:NAME): corruptions are generated from its "
                           "test split; also the clean set for EATA's Fisher (default: the source's dataset)")
    data.add_argument("--split", default="test", help="split of --dataset to corrupt")
    data.add_argument("--imagenet-c", default=None, help="ROOT of an ImageNet-C tree ROOT/<corruption>/<severity>/<class>/")
    data.add_argument("--corruptions", default="common", help="common (15) | extra (4 held-out) | all | names")
    data.add_argument("--severity", default="5", help="severity 1-5, or a comma-separated list")
    data.add_argument("--max-samples", type=int, default=None, help="seeded subset of the clean split (quick runs)")
    data.add_argument("--upsample-small", action="store_true",
                      help="corrupt images smaller than 32 px through a 32 px upsampling (else an error)")
    data.add_argument("--passes", type=int, default=1,
                      help="stream each generated corruption this many times over the clean split, with fresh "
                           "corruption noise every pass (default: 1; small sets such as digits give only a few "
                           "updates per corruption in one pass)")
    data.add_argument("--num-workers", type=int, default=0, help="DataLoader workers")
    run = p.add_argument_group("adaptation")
    run.add_argument("--methods", default="none,tent,eata,sar", help="comma-separated subset of none,tent,eata,sar")
    run.add_argument("--setting", default="normal", choices=SETTINGS, help="test stream")
    run.add_argument("--batch-size", type=int, default=None, help="default: 64 (1 for bs1)")
    run.add_argument("--lr", type=float, default=None,
                     help="SGD lr (default: 0.001*batch/64, doubled for SAR at batch size 1, as in the SAR reference)")
    run.add_argument("--e0-factor", type=float, default=0.4, help="entropy margin E0 = factor * ln(classes)")
    run.add_argument("--sar-rho", type=float, default=0.05, help="SAM neighbourhood size")
    run.add_argument("--sar-reset-constant", type=float, default=None,
                     help="SAR recovery threshold on the loss EMA (default: 0.2*ln(classes)/ln(1000), the "
                          "reference's 0.2 at 1000 classes)")
    run.add_argument("--sar-exclude-last-blocks", type=int, default=None,
                     help="blocks at the top left frozen by SAR (default: a quarter of the depth)")
    run.add_argument("--fisher-size", type=int, default=2000, help="clean samples for EATA's Fisher")
    run.add_argument("--fisher-split", default="val",
                     help="clean split of --dataset for EATA's Fisher (falls back to --split when absent)")
    run.add_argument("--fisher-alpha", type=float, default=2000.0, help="EATA regulariser weight")
    run.add_argument("--d-margin", type=float, default=0.05, help="EATA redundancy threshold")
    run.add_argument("--imbalance-ratio", type=float, default=500000.0, help="label_shift imbalance ratio")
    run.add_argument("--stream-length", type=int, default=None, help="label_shift stream length (default: set size)")
    run.add_argument("--episodic", action="store_true", help="reset to the source before every batch")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--out", default=None, help="output folder (default: runs/tta_<setting>_<model>)")
    run.add_argument("--cpu", action="store_true", help="run on CPU even when a GPU is present")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_threads_arg(run)
    run.add_argument("--debug", action="store_true", help="print tracebacks of errors")
    return p


def _floats(text: str | None) -> tuple[float, ...] | None:
    return None if text is None else tuple(float(v) for v in text.split(",") if v.strip())


def find_latest_run(root: str | os.PathLike = "runs", dataset: str = "digits") -> Path | None:
    """The newest run directory under ``root`` with a model and a ``data`` record for ``dataset``."""
    best: tuple[float, Path] | None = None
    for cfg in Path(root).glob("*/config.json"):
        run = cfg.parent
        if not (run / "model.safetensors").is_file() or not run.name.startswith("supervised"):
            continue
        try:
            data = json.loads(cfg.read_text()).get("data", {})
        except (OSError, json.JSONDecodeError):
            continue
        if str(data.get("dataset")) == dataset:
            mtime = (run / "model.safetensors").stat().st_mtime
            if best is None or mtime > best[0]:
                best = (mtime, run)
    return None if best is None else best[1]


def read_weights(weights: str) -> dict[str, torch.Tensor]:
    """The state dict in ``--weights``: a .safetensors file, or a .pth/.pt file loaded with
    ``torch.load(weights_only=True)`` (never unpickling arbitrary objects); a checkpoint dict with a
    ``state_dict`` / ``model`` entry gives that entry. Unreadable files raise a one-line ``ValueError``."""
    import pickle

    if weights.endswith(".safetensors"):
        from jumbokit.encoders.zoo import read_safetensors

        return read_safetensors(weights)
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as err:
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise ValueError(
            f"--weights {weights}: not a tensor state dict that loads without unpickling code objects "
            f"({first[:160]}); save the weights as model.state_dict() or .safetensors"
        ) from None
    if isinstance(state, dict):
        state = state.get("state_dict", state.get("model", state))
    if not isinstance(state, dict) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"--weights {weights}: expected a dict of tensors (a state dict), got "
                         f"{type(state).__name__}" + (" with non-tensor values" if isinstance(state, dict) else ""))
    return state


def _timm_source(name: str, weights: str | None) -> tuple[nn.Module, dict[str, Any]]:
    import timm

    if weights is None:
        raise ValueError(f"timm model {name!r} needs --weights FILE (.safetensors or .pth state dict)")
    if not Path(weights).is_file():
        raise FileNotFoundError(f"weights file {weights} does not exist")
    state = read_weights(weights)
    head = next((v for k, v in state.items() if k.endswith("head.weight") or k.endswith("fc.weight")), None)
    kwargs = {"num_classes": int(head.shape[0])} if head is not None else {}
    model = timm.create_model(name, pretrained=False, **kwargs)
    model.load_state_dict(state)
    cfg = getattr(model, "pretrained_cfg", {}) or {}
    input_size = cfg.get("input_size", (3, 224, 224))
    info = {"mean": list(cfg.get("mean", ())), "std": list(cfg.get("std", ())), "img_size": int(input_size[-1]),
            "in_chans": int(input_size[0]), "crop_pct": float(cfg.get("crop_pct", 0.875)),
            "interpolation": cfg.get("interpolation", "bicubic"), "classes": None, "dataset": None}
    return model, info


def load_source(args: argparse.Namespace) -> tuple[nn.Module, dict[str, Any], str]:
    """(model, data info: mean/std/img_size/in_chans/crop_pct/classes/dataset, display name)."""
    import jumbokit
    from jumbokit.data import read_data_info

    checkpoint = args.checkpoint
    if checkpoint is None:
        latest = find_latest_run("runs", args.dataset or "digits")
        if latest is None:
            raise FileNotFoundError(
                "no supervised run found under runs/; create one with "
                "`python recipes/supervised.py --dataset digits --model vit_tiny_jumbo` or pass --checkpoint"
            )
        checkpoint = str(latest)
    path = Path(checkpoint)
    if path.is_dir() or path.suffix == ".safetensors":
        if not path.exists():
            raise FileNotFoundError(f"checkpoint {path} does not exist")
        model = jumbokit.load(path)
        run_dir = path if path.is_dir() else path.parent
        try:
            info = dict(read_data_info(run_dir))
        except ValueError:
            info = {}
        config = getattr(model, "config", {}) or {}
        info.setdefault("img_size", config.get("img_size", 224))
        info.setdefault("in_chans", config.get("in_chans", 3))
        name = run_dir.name if path.is_dir() else path.stem
    else:
        import timm

        if not timm.is_model(checkpoint):
            raise FileNotFoundError(
                f"checkpoint {checkpoint!r} is neither a run directory, a .safetensors file nor a timm model name"
            )
        model, info = _timm_source(checkpoint, args.weights)
        name = checkpoint
    if isinstance(info.get("img_size"), (list, tuple)):
        info["img_size"] = int(info["img_size"][0])
    mean, std = _floats(args.mean), _floats(args.std)
    if mean is not None:
        info["mean"] = list(mean)
    if std is not None:
        info["std"] = list(std)
    if not info.get("mean") or not info.get("std"):
        raise ValueError(
            f"the normalisation of {checkpoint} is unknown (no data record in its config.json); pass the mean "
            "and std the model was trained with, e.g. --mean 0.309 --std 0.349"
        )
    if len(info["mean"]) != int(info["in_chans"]) or len(info["std"]) != int(info["in_chans"]):
        raise ValueError(f"mean/std have {len(info['mean'])}/{len(info['std'])} values, the model takes "
                         f"{info['in_chans']} channels")
    info.setdefault("crop_pct", 1.0)
    info.setdefault("interpolation", "bicubic")
    return model.eval(), info, name


def num_outputs(model: nn.Module, in_chans: int, img_size: int) -> int:
    with torch.no_grad():
        return int(model(torch.zeros(1, in_chans, img_size, img_size)).shape[-1])


def build_data(args: argparse.Namespace, info: dict[str, Any], severities: list[int], corruptions: tuple[str, ...],
               progress: bool = True):
    """({severity: {corruption: dataset}}, clean set for EATA's Fisher or None, class names)."""
    from jumbokit.adaptation.corruptions import CorruptedDataset, clean_image_transforms, load_imagenet_c
    from jumbokit.data import SplitNotFoundError, build_dataset

    spec = args.dataset or info.get("dataset") or "digits"

    def clean_split(split: str, max_samples: int | None):
        return build_dataset(spec, split, task="eval", img_size=int(info["img_size"]), in_chans=int(info["in_chans"]),
                             mean=info["mean"], std=info["std"], crop_pct=float(info["crop_pct"]),
                             interpolation=info["interpolation"], max_samples=max_samples, seed=args.seed,
                             progress=progress)

    test = None
    if args.imagenet_c is None or args.dataset is not None:
        test = clean_split(args.split, args.max_samples)
    fisher = None
    if "eata" in args.methods:
        try:
            fisher = clean_split(args.fisher_split, args.fisher_size)
        except SplitNotFoundError:
            fisher = test if test is not None else clean_split(args.split, args.fisher_size)
    reference = test if test is not None else fisher
    classes = info.get("classes") or (reference.classes if reference is not None else None)
    if reference is not None and info.get("classes") and len(reference.classes) != len(info["classes"]):
        raise ValueError(f"the source was trained on {len(info['classes'])} classes, dataset {spec} has "
                         f"{len(reference.classes)}")
    domains: dict[int, dict[str, Any]] = {}
    if args.imagenet_c is not None:
        if args.passes != 1:
            raise ValueError(f"--passes {args.passes} applies to generated corruptions; an ImageNet-C folder is "
                             "streamed as it is (pass --passes 1)")
        if classes is None:
            raise ValueError("class names are unknown: pass --dataset with the clean dataset so labels line up")
        sets = load_imagenet_c(args.imagenet_c, classes, corruptions, severities, img_size=int(info["img_size"]),
                               mean=info["mean"], std=info["std"], in_chans=int(info["in_chans"]))
        for (corruption, severity), data in sets.items():
            domains.setdefault(severity, {})[corruption] = data
        return domains, fisher, classes
    geometry, to_tensor = clean_image_transforms(int(info["img_size"]), info["mean"], info["std"],
                                                 float(info["crop_pct"]), info["interpolation"])
    from tqdm.auto import tqdm

    jobs = [(s, c) for s in severities for c in corruptions]
    for severity, corruption in tqdm(jobs, desc="corrupting", disable=not progress):
        data = CorruptedDataset(test, corruption, severity, to_tensor, geometry, seed=args.seed,
                                small_images="upsample" if args.upsample_small else "error", passes=args.passes)
        domains.setdefault(severity, {})[corruption] = data.precompute()
    return domains, fisher, classes


def data_description(args: argparse.Namespace, info: dict[str, Any]) -> str:
    """One line for the report: where the corrupted images come from."""
    if args.imagenet_c:
        return f"ImageNet-C tree {args.imagenet_c}"
    passes = f", {args.passes} passes with fresh corruption noise" if args.passes > 1 else ""
    return f"corruptions generated from {args.dataset or info.get('dataset') or 'digits'} ({args.split} split{passes})"


def plot_accuracy(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Grouped bars: accuracy per corruption (and the average) for each method and severity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jumbokit.training import atomic_save_figure

    keys = list(dict.fromkeys((r["severity"], r["method"]) for r in rows))
    domains = list(dict.fromkeys(r["corruption"] for r in rows))
    acc = {(r["severity"], r["method"], r["corruption"]): r["accuracy"] for r in rows}
    fig, ax = plt.subplots(figsize=(max(8, 0.75 * len(domains) * max(1, len(keys)) / 3), 4))
    width = 0.8 / max(len(keys), 1)
    for k, (severity, method) in enumerate(keys):
        xs = [i + (k - (len(keys) - 1) / 2) * width for i in range(len(domains))]
        ax.bar(xs, [acc.get((severity, method, d), 0.0) for d in domains], width,
               label=f"{METHOD_LABELS.get(method, method)} (sev {severity})")
    ax.set_xticks(range(len(domains)))
    ax.set_xticklabels([SHORT_NAMES.get(d, d) for d in domains], rotation=45, ha="right")
    ax.set_ylabel("top-1 accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=min(4, len(keys)))
    ax.grid(axis="y", alpha=0.3)
    atomic_save_figure(path, fig)


def accuracy_table(rows: list[dict[str, Any]], severity: int, markdown: bool) -> str:
    """Table-2 layout: one row per method, one column per corruption, then the average."""
    sel = [r for r in rows if r["severity"] == severity]
    domains = [d for d in dict.fromkeys(r["corruption"] for r in sel) if d != "avg"] + ["avg"]
    methods = list(dict.fromkeys(r["method"] for r in sel))
    acc = {(r["method"], r["corruption"]): r["accuracy"] for r in sel}
    header = ["Method"] + [SHORT_NAMES.get(d, "Avg" if d == "avg" else d) for d in domains]
    lines = []
    for m in methods:
        lines.append([METHOD_LABELS.get(m, m)] + [f"{acc.get((m, d), float('nan')):.1f}" for d in domains])
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(line) + " |" for line in lines]
        return "\n".join(out) + "\n"
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([fmt(header), *(fmt(line) for line in lines)]) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    from accelerate import Accelerator
    from accelerate.utils import gather_object

    from jumbokit.adaptation.corruptions import resolve_corruptions
    from jumbokit.adaptation.wild import (
        DEFAULT_BATCH_SIZE, MethodSettings, build_episodes, build_method, check_methods, run_episodes,
    )
    from jumbokit.training.cli import check_count_flags, setup_threads
    from jumbokit.training.rundir import atomic_write_json, atomic_write_text, csv_text

    setup_threads(args)
    check_count_flags(args)
    methods = check_methods(args.methods)
    args.methods = methods
    severities = [int(s) for s in str(args.severity).split(",") if s.strip()]
    if not severities or any(s not in (1, 2, 3, 4, 5) for s in severities):
        raise ValueError(f"--severity must be integers in 1-5, got {args.severity!r}")
    corruptions = resolve_corruptions(args.corruptions)
    if args.passes < 1:
        raise ValueError(f"--passes must be >= 1, got {args.passes}")
    if args.setting == "bs1" and args.batch_size not in (None, 1):
        raise ValueError(f"--setting bs1 adapts on single samples; drop --batch-size {args.batch_size}")
    batch_size = args.batch_size or DEFAULT_BATCH_SIZE[args.setting]

    accelerator = Accelerator(cpu=args.cpu)
    main_process = accelerator.is_main_process
    torch.manual_seed(args.seed)
    model, info, name = load_source(args)
    model = model.to(accelerator.device)
    n_out = num_outputs(model.cpu(), int(info["in_chans"]), int(info["img_size"]))
    model = model.to(accelerator.device)
    progress = main_process and not args.no_progress
    domains, clean, classes = build_data(args, info, severities, corruptions, progress)
    n_classes = len(classes) if classes else n_out
    if n_out != n_classes:
        raise ValueError(f"the checkpoint predicts {n_out} classes but the dataset has {n_classes}")
    settings = MethodSettings(lr=args.lr, e0_factor=args.e0_factor, sar_rho=args.sar_rho,
                              sar_reset_constant=args.sar_reset_constant,
                              sar_exclude_last_blocks=args.sar_exclude_last_blocks,
                              eata_fisher_alpha=args.fisher_alpha, eata_d_margin=args.d_margin,
                              fisher_size=args.fisher_size, episodic=args.episodic)
    out = Path(args.out or f"runs/tta_{args.setting}_{name}")

    jobs = [(s, m) for s in severities for m in methods]
    mine = jobs[accelerator.process_index::accelerator.num_processes]
    records = []
    for severity, method in mine:
        clean_batches = None
        if method == "eata" and clean is not None:
            generator = torch.Generator().manual_seed(args.seed)
            clean_batches = torch.utils.data.DataLoader(clean, batch_size=64, shuffle=True, generator=generator,
                                                        num_workers=args.num_workers)
            clean_batches = ((x.to(accelerator.device), y) for x, y in clean_batches)
        adapter = build_method(method, model, batch_size, n_classes, settings, clean_batches)
        episodes = build_episodes(args.setting, domains[severity], batch_size, seed=args.seed,
                                  imbalance_ratio=args.imbalance_ratio, stream_length=args.stream_length,
                                  num_workers=args.num_workers)
        result = run_episodes(adapter, episodes, accelerator.device, progress=progress,
                              desc=f"{METHOD_LABELS[method]} sev {severity}")
        records.append({"severity": severity, "method": method, "correct": result.correct, "total": result.total,
                        "seconds": result.seconds, "nan_batches": result.nan_batches, "stats": result.stats})
        del adapter
    records = gather_object(records) if accelerator.num_processes > 1 else records
    if not main_process:
        return {}

    rows: list[dict[str, Any]] = []
    throughput: list[dict[str, Any]] = []
    order = {job: i for i, job in enumerate(jobs)}
    for rec in sorted(records, key=lambda r: order[(r["severity"], r["method"])]):
        accs = []
        for corruption in corruptions:
            total = rec["total"].get(corruption, 0)
            acc = 100.0 * rec["correct"].get(corruption, 0) / total if total else float("nan")
            accs.append(acc)
            rows.append({"model": name, "setting": args.setting, "severity": rec["severity"],
                         "method": rec["method"], "corruption": corruption, "accuracy": acc, "samples": total})
        images = sum(rec["total"].values())
        rows.append({"model": name, "setting": args.setting, "severity": rec["severity"], "method": rec["method"],
                     "corruption": "avg", "accuracy": sum(accs) / len(accs), "samples": images})
        stats = rec["stats"]
        throughput.append({"severity": rec["severity"], "method": rec["method"],
                           "images_per_s": images / rec["seconds"] if rec["seconds"] > 0 else float("nan"),
                           "updates": stats.get("updates", 0), "selected": stats.get("selected", 0),
                           "recoveries": stats.get("recoveries", ""), "skipped": stats.get("skipped", ""),
                           "nan_batches": rec["nan_batches"]})

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "results.csv", csv_text(rows))
    title = f"{name}: {args.setting}, batch {batch_size}"
    plot_accuracy([r for r in rows], out / "accuracy.png", title)
    report = [f"# Test-time adaptation: {name}", "",
              f"- source: `{args.checkpoint or name}`; normalisation mean {info['mean']} std {info['std']}",
              f"- data: {data_description(args, info)}",
              f"- setting `{args.setting}`, batch size {batch_size}, seed {args.seed}"
              + (f", imbalance ratio {args.imbalance_ratio:g}" if args.setting == "label_shift" else ""), ""]
    for severity in severities:
        report += [f"## Accuracy (%), severity {severity}", "", accuracy_table(rows, severity, markdown=True)]
    report += ["## Adaptation throughput and counters", "",
               "| severity | method | images/s | updates | selected | recoveries | skipped | NaN batches |",
               "|---|---|---|---|---|---|---|---|"]
    report += [f"| {t['severity']} | {METHOD_LABELS[t['method']]} | {t['images_per_s']:.1f} | {t['updates']} | "
               f"{t['selected']} | {t['recoveries']} | {t['skipped']} | {t['nan_batches']} |" for t in throughput]
    report += ["", "![accuracy](accuracy.png)", ""]
    atomic_write_text(out / "report.md", "\n".join(report))
    summary = {"model": name, "setting": args.setting, "batch_size": batch_size, "severities": severities,
               "methods": methods, "rows": rows, "throughput": throughput,
               "normalisation": {"mean": info["mean"], "std": info["std"]}, "created": time.strftime("%Y-%m-%d %H:%M:%S")}
    atomic_write_json(out / "summary.json", summary)

    for severity in severities:
        print(f"\n{title}, severity {severity}: top-1 accuracy (%)")
        print(accuracy_table(rows, severity, markdown=False), end="")
    print("\nthroughput (images/s): " + ", ".join(
        f"{METHOD_LABELS[t['method']]}{'' if len(severities) == 1 else ' sev ' + str(t['severity'])} "
        f"{t['images_per_s']:.0f}" + (f" (recoveries {t['recoveries']})" if t["recoveries"] not in ("", 0) else "")
        for t in throughput))
    print(f"wrote {out / 'results.csv'}, {out / 'report.md'}, {out / 'accuracy.png'}")
    return summary
