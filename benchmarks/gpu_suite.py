"""One GPU run, every speed number: inference, MAE / supervised / time-series training steps, host syncs.

    python benchmarks/gpu_suite.py --device cuda                     # one H100/H200, at most ~9 min
    python benchmarks/gpu_suite.py --device cuda --sections inference,train --time-budget 200
    OMP_NUM_THREADS=1 python benchmarks/gpu_suite.py --device cpu --tiny --threads 1   # a check: ~5 min on 2 cores

On a GPU the default --time-budget (480 s) bounds the run: sections and cells are not started after it, and a
compile cell only with ~30 s per model left, so the whole call (imports included) should end within ~9 minutes.
The GPU time is an estimate (the suite has not run on a GPU yet); the CPU time was measured.

Sections, in the order they run (``--sections`` picks some; the order stays):

  inference  224 px, batch 256 and 1024, fp32+TF32 and bf16 autocast: Jumbo J=6 vs registers R=16 at D=128
             (vit_nano_*) and D=192 (vit_tiny_*), built as benchmarks/throughput.py builds them, with timm's
             vit_tiny_patch16_224 (pretrained=False) timed beside the D=192 pair as a reference.
  mae        an MAE training step (mask 0.75, decoder 512x8, AdamW; jumbokit.ssl.MaskedAutoencoder) of
             vit_base_jumbo vs vit_base_cls at 224 px in bf16: images/s and peak memory (CUDA only).
  train      a supervised step (forward, cross-entropy, backward, AdamW step) of vit_tiny_jumbo vs vit_tiny_reg16
             at 224 px, bf16 and fp32+TF32, batch 256; peak memory (CUDA only).
  patchtst   a tstrain-style step of patchtst_jumbo vs patchtst_registers: batch 64, 1 channel, length 512,
             64 patches, 10 classes, fp32+TF32 and bf16.
  sync       CUDA only: torch.cuda.set_sync_debug_mode("error") around forward passes and training steps of the
             Jumbo models above; pass, or the error text.
  compile    inference as above in bf16 + torch.compile (static shapes); last because compiling dominates its
             time: the cells run D=192 first, batch 1024 first, and stop at the time budget.

Every measurement warms up, then times interleaved rounds (the models of a comparison alternate, ABBA) and reports
the median round with min, max and spread = (max - min) / median. Ratios are Jumbo / registers (MAE: Jumbo / CLS)
of the median rates; the per-round ratios give their min and max, and a ratio's spread is the larger of its two
models' spreads. Keys compare across machines, e.g.
``jumbo_d192_vs_reg16_bf16_b256`` (a ratio) and ``vit_tiny_jumbo_bf16_compile_b1024_img_s``.

Targets recorded in the JSON: Jumbo / registers >= 1.00 at D=128 and D=192 in fp32+TF32 and bf16 with both spreads
<= 10%; ViT-Tiny+Jumbo (J=6, D=192) >= 40,800 images/s at its best over modes and batches; training steps
Jumbo >= 0.95x registers (supervised and PatchTST).

Each section (and each cell inside it) is guarded: an error is recorded in the JSON and the rest still runs. After
--time-budget seconds the remaining cells and sections are marked "skipped: time budget". Writes
benchmarks/results/gpu_suite_<GPU name>.json (gpu_suite_cpu.json on a CPU; or --json) and a markdown copy, and
prints the table. --tiny shrinks every size (32 px, batches of 2-4, 1-2 repeats) to check the script on a CPU; its
numbers mean nothing.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # the sibling scripts whose helpers this suite calls (throughput, mae, timeseries)

import jumbokit  # noqa: E402
from jumbokit.benchmarking import machine_record, result_path, time_interleaved, write_result  # noqa: E402
from jumbokit.training.rundir import markdown_table  # noqa: E402

SECTIONS = ("inference", "mae", "train", "patchtst", "sync", "compile")
EAGER_MODES = ("fp32_tf32", "bf16")
TARGET_RATIO = 1.00
TARGET_SPREAD = 0.10
TARGET_VIT_TINY_JUMBO_IMG_S = 40_800
TARGET_TRAIN_RATIO = 0.95

# full size (CUDA) and --tiny (a CPU check); any of them can be set on the command line
FULL = dict(img_size=224, batches=[256, 1024], repeats=9, iters=8, warmup=3, compile_warmup=3,
            mae_batch=128, mae_decoder="512x8", train_batch=256, train_repeats=7, train_iters=4,
            series_batch=64, series_len=512, series_patches=64, sync_batch=32)
TINY = dict(img_size=32, batches=[2, 4], repeats=2, iters=1, warmup=1, compile_warmup=1,
            mae_batch=2, mae_decoder="64x1", train_batch=2, train_repeats=2, train_iters=1,
            series_batch=4, series_len=64, series_patches=8, sync_batch=2)
COMPILE_SECONDS_PER_MODEL = 30  # a compile cell is not started with less budget than this per model left


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="cuda or cpu (default: cuda where there is one)")
    p.add_argument("--tiny", action="store_true", help="tiny sizes and 1-2 repeats, to check the script on a CPU")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)")
    p.add_argument("--time-budget", type=float, default=480.0,
                   help="seconds; cells and sections not started by then are skipped (default: %(default)s)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--json", type=Path, default=None,
                   help="result file (default: benchmarks/results/gpu_suite_<device name>.json)")
    def shown(value: Any) -> str:
        return ",".join(map(str, value)) if isinstance(value, list) else str(value)

    for key, value in FULL.items():
        kind = (lambda s: [int(v) for v in s.split(",")]) if isinstance(value, list) else type(value)
        p.add_argument(f"--{key.replace('_', '-')}", type=kind, default=None,
                       help=f"(default: {shown(value)}; --tiny: {shown(TINY[key])})")
    args = p.parse_args(argv)
    for key in FULL:
        if getattr(args, key) is None:
            setattr(args, key, (TINY if args.tiny else FULL)[key])
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown or not args.sections:
        p.error(f"--sections: expected names from {','.join(SECTIONS)}, got {unknown or 'none'}")
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda, but torch sees no CUDA GPU; pass --device cpu (with --tiny for a quick check)")
    return args


# --------------------------------------------------------------------------------------------- small helpers
def device_slug(device: str) -> str:
    """``cpu`` or the GPU's name as a file-name part: ``NVIDIA H100 80GB HBM3`` -> ``nvidia_h100_80gb_hbm3``."""
    if torch.device(device).type != "cuda":
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "_", torch.cuda.get_device_name(torch.device(device)).lower()).strip("_")


def is_cuda(args) -> bool:
    return torch.device(args.device).type == "cuda"


def sync_fn(args) -> Callable[[], None] | None:
    return torch.cuda.synchronize if is_cuda(args) else None


def stats(rates: list[float]) -> dict[str, float]:
    """Median, min, max and spread ((max - min) / median) of per-round rates."""
    median = statistics.median(rates)
    return {"median": median, "min": min(rates), "max": max(rates), "spread": (max(rates) - min(rates)) / median,
            "rounds": len(rates)}


def ratio_stats(num: list[float], den: list[float]) -> dict[str, float]:
    """Ratio of the median rates, with the min and max of the per-round ratios (rounds are interleaved pairs)."""
    per_round = [a / b for a, b in zip(num, den)]
    return {"ratio": statistics.median(num) / statistics.median(den), "min": min(per_round), "max": max(per_round)}


class Budget:
    def __init__(self, seconds: float) -> None:
        self.start, self.seconds = time.perf_counter(), seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def allows(self, needed: float = 0.0) -> bool:
        return self.elapsed() + needed < self.seconds


class Section:
    """Rows, metrics and errors of one section; ``cell`` guards one measurement of it."""

    def __init__(self, name: str, result: dict[str, Any], budget: Budget) -> None:
        self.name, self.result, self.budget = name, result, budget
        self.record: dict[str, Any] = {"status": "ok", "rows": [], "errors": [], "skipped": []}

    def log(self, text: str) -> None:
        print(f"[{self.budget.elapsed():6.1f}s] {self.name}: {text}", flush=True)

    def metric(self, key: str, value: float) -> None:
        self.result["metrics"][key] = round(float(value), 4)

    def row(self, **row: Any) -> None:
        self.record["rows"].append({"section": self.name, **row})

    def cell(self, label: str, fn: Callable[[], None], needed: float = 0.0) -> None:
        if not self.budget.allows(needed):
            self.record["skipped"].append(f"{label}: skipped: time budget")
            self.log(f"{label}: skipped: time budget")
            return
        self.log(label)
        try:
            fn()
        except Exception as exc:  # one failed cell is recorded; the others still run
            self.record["errors"].append({"cell": label, "error": f"{type(exc).__name__}: {exc}"[:2000],
                                          "traceback": traceback.format_exc()[-3000:]})
            self.log(f"{label}: FAILED {type(exc).__name__}: {str(exc)[:300]}")
        finally:
            free_memory()


def free_memory() -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def cell_args(args, batch: int, bf16: bool, compile: bool) -> argparse.Namespace:
    """The namespace ``throughput.time_group`` / ``prepare`` read."""
    return argparse.Namespace(device=args.device, img_size=args.img_size, batch_size=batch, bf16=bf16,
                              compile=compile, repeats=args.repeats, iters=args.iters,
                              warmup=args.compile_warmup if compile else args.warmup)


class AutocastForward(torch.nn.Module):
    """``model`` with its forward under bf16 autocast and fp32 outputs: the loss and backward run outside."""

    def __init__(self, model: torch.nn.Module, device_type: str) -> None:
        super().__init__()
        self.model, self.device_type = model, device_type

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            return self.model(*args, **kwargs).float()


def peak_mib_of(call: Callable[[], object], args, base: int | None = None) -> float | None:
    """CUDA: peak memory (MiB) of one ``call`` above ``base`` bytes (default: what is allocated now); CPU: None."""
    if not is_cuda(args):
        return None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated() if base is None else base
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    return round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)


# ------------------------------------------------------------------------------------------ inference
def inference_models(args, dim: int) -> dict[str, torch.nn.Module]:
    """{zoo-style key: model}: throughput.py's Jumbo J=6 / registers R=16 pair at ``dim``; timm's plain
    ViT-Tiny beside the D=192 pair."""
    import throughput

    size = {128: "nano", 192: "tiny"}[dim]
    pair = throughput.jumbo_vs_registers(argparse.Namespace(img_size=args.img_size), dim)
    models = {f"vit_{size}_reg16": pair[f"D={dim} registers R=16"], f"vit_{size}_jumbo": pair[f"D={dim} Jumbo J=6"]}
    if dim == 192:
        import timm

        models["timm_vit_tiny"] = timm.create_model("vit_tiny_patch16_224", pretrained=False,
                                                    img_size=args.img_size, num_classes=1000)
    return models


def inference_cell(section: Section, args, dim: int, mode: str, batch: int) -> None:
    import throughput

    bf16, compile = mode.startswith("bf16"), mode.endswith("compile")
    a = cell_args(args, batch, bf16, compile)
    torch.manual_seed(0)
    eager = cell_args(args, batch, bf16, False)
    models = {k: throughput.prepare(m, eager) for k, m in inference_models(args, dim).items()}
    if compile:
        models = {k: torch.compile(m, dynamic=False) for k, m in models.items()}
    rates = throughput.time_group(models, a)
    x = torch.randn(batch, 3, args.img_size, args.img_size, device=args.device)
    mems = {}
    if not compile:
        with torch.inference_mode(), throughput.autocast(a):
            mems = {key: peak_mib_of(lambda m=model: m(x), args) for key, model in models.items()}
    size = "nano" if dim == 128 else "tiny"
    jumbo, reg = f"vit_{size}_jumbo", f"vit_{size}_reg16"
    record_pair(section, rates, mems, "", mode, batch, jumbo, reg, f"jumbo_d{dim}_vs_reg16_{mode}_b{batch}", "img/s")
    if "timm_vit_tiny" in rates:
        section.metric(f"jumbo_d192_vs_timm_vit_tiny_{mode}_b{batch}",
                       ratio_stats(rates[jumbo], rates["timm_vit_tiny"])["ratio"])
    del models


def run_inference(section: Section, args) -> None:
    for mode in EAGER_MODES:
        for batch in args.batches:
            for dim in (128, 192):
                section.cell(f"D={dim} {mode} batch {batch}", lambda: inference_cell(section, args, dim, mode, batch))


def run_compile(section: Section, args) -> None:
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    for dim in (192, 128):
        for batch in sorted(args.batches, reverse=True):
            section.cell(f"D={dim} bf16_compile batch {batch}",
                         lambda: inference_cell(section, args, dim, "bf16_compile", batch),
                         needed=0 if args.tiny else COMPILE_SECONDS_PER_MODEL * (3 if dim == 192 else 2))
    torch._dynamo.reset()


# ------------------------------------------------------------------------------------------ training steps
def time_steps(args, steps: dict[str, Callable[[], None]], batch: int) -> dict[str, list[float]]:
    """Samples per second of each training step, one value per interleaved (ABBA) round."""
    timings = time_interleaved(steps, args.train_repeats, args.train_iters, warmup=args.warmup, alternate=True,
                               sync=sync_fn(args))
    return {name: [batch / s for s in t.rounds] for name, t in timings.items()}


def record_pair(section: Section, rates: dict[str, list[float]], mems: dict[str, float | None], prefix: str,
                mode: str, batch: int, jumbo: str, other: str, ratio_key: str, unit: str) -> None:
    for name, r in rates.items():
        s = stats(r)
        section.row(mode=mode, batch=batch, model=name, unit=unit, **s, peak_mem_mib=mems.get(name))
        section.metric(f"{prefix}{name}_{mode}_b{batch}_{unit.replace('/', '_')}", s["median"])
        section.metric(f"{prefix}{name}_{mode}_b{batch}_spread", s["spread"])
        if mems.get(name) is not None:
            section.metric(f"{prefix}{name}_{mode}_b{batch}_peak_mem_mib", mems[name])
    r = ratio_stats(rates[jumbo], rates[other])
    section.metric(ratio_key, r["ratio"])
    section.row(mode=mode, batch=batch, model=ratio_key, unit="ratio", median=r["ratio"], min=r["min"], max=r["max"],
                spread=max(stats(rates[jumbo])["spread"], stats(rates[other])["spread"]))


def mae_cell(section: Section, args) -> None:
    from mae import make_step

    from jumbokit.ssl import build_image_mae

    dim, depth = (int(v) for v in args.mae_decoder.lower().split("x"))
    images = torch.randn(args.mae_batch, 3, args.img_size, args.img_size, device=args.device)
    steps, mems = {}, {}
    for name in ("vit_base_jumbo", "vit_base_cls"):
        torch.manual_seed(0)
        base = torch.cuda.memory_allocated() if is_cuda(args) else None
        model = build_image_mae(name, args.img_size, 3, patch_size=16, decoder_dim=dim, decoder_depth=depth,
                                decoder_heads=max(1, dim // 32), mask_ratio=0.75).to(args.device)
        step = make_step(model, images, "bf16")
        steps[name] = lambda s=step: s(0.75)
        steps[name]()  # optimizer state exists before the peak is taken
        mems[name] = peak_mib_of(steps[name], args, base)
    rates = time_steps(args, steps, args.mae_batch)
    record_pair(section, rates, mems, "mae_", "bf16", args.mae_batch, "vit_base_jumbo", "vit_base_cls",
                f"mae_jumbo_vs_cls_bf16_b{args.mae_batch}", "img/s")


def classification_steps(args, models: dict[str, torch.nn.Module], x: torch.Tensor, y: torch.Tensor, mode: str):
    """{name: tstrain-style step (timeseries.train_step: forward, cross-entropy, backward, AdamW)}, with peak
    memory (CUDA) of each step above what was allocated before its model moved to the device."""
    from timeseries import train_step

    steps, mems = {}, {}
    for name, model in models.items():
        base = torch.cuda.memory_allocated() if is_cuda(args) else None
        model = model.to(args.device)
        if mode == "bf16":
            model = AutocastForward(model, torch.device(args.device).type)
        steps[name] = train_step(model, x, y)
        steps[name]()
        mems[name] = peak_mib_of(steps[name], args, base)
    return steps, mems


def train_cell(section: Section, args, mode: str) -> None:
    batch = args.train_batch
    x = torch.randn(batch, 3, args.img_size, args.img_size, device=args.device)
    y = torch.randint(0, 1000, (batch,), device=args.device)
    torch.manual_seed(0)
    models = {name: jumbokit.create_model(name, img_size=args.img_size, num_classes=1000)
              for name in ("vit_tiny_jumbo", "vit_tiny_reg16")}
    steps, mems = classification_steps(args, models, x, y, mode)
    rates = time_steps(args, steps, batch)
    record_pair(section, rates, mems, "train_", mode, batch, "vit_tiny_jumbo", "vit_tiny_reg16",
                f"train_jumbo_vs_reg16_{mode}_b{batch}", "img/s")


def series_models(args) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {name: jumbokit.create_model(name, num_classes=10, in_chans=1, seq_len=args.series_len,
                                        patches=args.series_patches)
            for name in ("patchtst_jumbo", "patchtst_registers")}


def patchtst_cell(section: Section, args, mode: str) -> None:
    batch = args.series_batch
    x = torch.randn(batch, 1, args.series_len, device=args.device)
    y = torch.randint(0, 10, (batch,), device=args.device)
    steps, mems = classification_steps(args, series_models(args), x, y, mode)
    rates = time_steps(args, steps, batch)
    record_pair(section, rates, mems, "", mode, batch, "patchtst_jumbo", "patchtst_registers",
                f"patchtst_jumbo_vs_registers_{mode}_b{batch}", "series/s")


def run_mae(section: Section, args) -> None:
    section.cell("vit_base_jumbo vs vit_base_cls bf16", lambda: mae_cell(section, args))


def run_train(section: Section, args) -> None:
    for mode in ("bf16", "fp32_tf32"):
        section.cell(f"vit_tiny_jumbo vs vit_tiny_reg16 {mode}", lambda: train_cell(section, args, mode))


def run_patchtst(section: Section, args) -> None:
    for mode in ("fp32_tf32", "bf16"):
        section.cell(f"patchtst_jumbo vs patchtst_registers {mode}", lambda: patchtst_cell(section, args, mode))


# ------------------------------------------------------------------------------------------ host syncs
def sync_calls(args) -> dict[str, Callable[[], Callable[[], object]]]:
    """{label: builder of one call}: forward passes and training steps of the Jumbo models."""
    from mae import make_step
    from timeseries import train_step

    from jumbokit.ssl import build_image_mae

    dev, kind, b, img = args.device, torch.device(args.device).type, args.sync_batch, args.img_size

    def forward(name: str, bf16: bool):
        def build():
            model = jumbokit.create_model(name, img_size=img, num_classes=1000).eval().to(dev)
            x = torch.randn(b, 3, img, img, device=dev)

            def call():
                with torch.inference_mode(), torch.autocast(kind, dtype=torch.bfloat16, enabled=bf16):
                    return model(x)
            return call
        return build

    def train(name: str, bf16: bool, series: bool = False):
        def build():
            if series:
                model = series_models(args)[name].to(dev)
                x = torch.randn(b, 1, args.series_len, device=dev)
            else:
                model = jumbokit.create_model(name, img_size=img, num_classes=1000).to(dev)
                x = torch.randn(b, 3, img, img, device=dev)
            y = torch.randint(0, 10, (b,), device=dev)
            return train_step(AutocastForward(model, kind) if bf16 else model, x, y)
        return build

    def mae():
        model = build_image_mae("vit_base_jumbo", img, 3, patch_size=16, mask_ratio=0.75).to(dev)
        step = make_step(model, torch.randn(b, 3, img, img, device=dev), "bf16")
        return lambda: step(0.75)

    return {
        "forward vit_tiny_jumbo fp32": forward("vit_tiny_jumbo", False),
        "forward vit_tiny_jumbo bf16": forward("vit_tiny_jumbo", True),
        "forward vit_nano_jumbo bf16": forward("vit_nano_jumbo", True),
        "train step vit_tiny_jumbo fp32": train("vit_tiny_jumbo", False),
        "train step vit_tiny_jumbo bf16": train("vit_tiny_jumbo", True),
        "MAE step vit_base_jumbo bf16": mae,
        "train step patchtst_jumbo fp32": train("patchtst_jumbo", False, series=True),
    }


def sync_cell(section: Section, args, label: str, build: Callable[[], Callable[[], object]]) -> None:
    call = build()
    call()  # lazy initialisation (cuBLAS handles, optimizer state) is not what is checked
    if is_cuda(args):
        torch.cuda.synchronize()
    entry: dict[str, Any] = {"check": label}
    try:
        if is_cuda(args):
            torch.cuda.set_sync_debug_mode("error")
        for _ in range(2):
            call()
        entry.update(ok=True, error=None)
    except Exception as exc:  # the finding itself: recorded, never raised
        entry.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:2000])
    finally:
        if is_cuda(args):
            torch.cuda.set_sync_debug_mode(0)
            torch.cuda.synchronize()
    section.record.setdefault("checks", []).append(entry)
    section.result.setdefault("host_sync", {})[label] = entry["ok"]
    section.log(f"{label}: {'pass' if entry['ok'] else 'FAIL ' + entry['error'][:200]}")


def run_sync(section: Section, args) -> None:
    if not is_cuda(args):
        section.record["status"] = "skipped: CUDA only"
        return
    for label, build in sync_calls(args).items():
        section.cell(label, lambda label=label, build=build: sync_cell(section, args, label, build))


RUNNERS = {"inference": run_inference, "mae": run_mae, "train": run_train, "patchtst": run_patchtst,
           "sync": run_sync, "compile": run_compile}


# ------------------------------------------------------------------------------------------ targets, report
def targets(result: dict[str, Any], args) -> list[dict[str, Any]]:
    m = result["metrics"]
    out = []
    for dim in (128, 192):
        size = "nano" if dim == 128 else "tiny"
        for mode in EAGER_MODES:
            for b in args.batches:
                key = f"jumbo_d{dim}_vs_reg16_{mode}_b{b}"
                spreads = [m.get(f"vit_{size}_{k}_{mode}_b{b}_spread") for k in ("jumbo", "reg16")]
                value = m.get(key)
                spread = max(spreads) if None not in spreads else None
                out.append({"target": f"Jumbo/registers D={dim} {mode} batch {b} >= {TARGET_RATIO:.2f}, spread "
                                      f"<= {TARGET_SPREAD:.0%}", "metric": key, "value": value,
                            "threshold": TARGET_RATIO, "spread": spread, "max_spread": TARGET_SPREAD,
                            "met": None if value is None else bool(value >= TARGET_RATIO and spread <= TARGET_SPREAD)})
    tiny = {k: v for k, v in m.items() if re.fullmatch(r"vit_tiny_jumbo_.+_b\d+_img_s", k)}
    best = max(tiny, key=tiny.get) if tiny else None
    if best:
        m["vit_tiny_jumbo_best_img_s"] = tiny[best]
        result["vit_tiny_jumbo_best"] = {"metric": best, "img_s": tiny[best]}
    out.append({"target": f"ViT-Tiny+Jumbo (J=6, D=192) best over modes >= {TARGET_VIT_TINY_JUMBO_IMG_S:,} img/s",
                "metric": best or "vit_tiny_jumbo_best_img_s", "value": tiny.get(best),
                "threshold": TARGET_VIT_TINY_JUMBO_IMG_S,
                "spread": m.get(best.replace("_img_s", "_spread")) if best else None,
                "max_spread": None, "met": None if best is None else bool(tiny[best] >= TARGET_VIT_TINY_JUMBO_IMG_S)})
    ratio_spread = {r["model"]: r["spread"] for s in result["sections"].values() for r in s.get("rows", [])
                    if r.get("unit") == "ratio"}
    for key in sorted(k for k in m if re.fullmatch(r"(train_jumbo_vs_reg16|patchtst_jumbo_vs_registers)_.+", k)):
        out.append({"target": f"training step Jumbo >= {TARGET_TRAIN_RATIO:.2f}x registers", "metric": key,
                    "value": m[key], "threshold": TARGET_TRAIN_RATIO, "spread": ratio_spread.get(key),
                    "max_spread": None,
                    "met": bool(m[key] >= TARGET_TRAIN_RATIO)})
    return out


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [f"# GPU suite ({result['machine']['device']}{', tiny sizes: numbers mean nothing' if s['tiny'] else ''})",
             "", f"{s['img_size']} px; medians of interleaved rounds, spread = (max - min) / median; ratios are "
             f"Jumbo / registers (MAE: Jumbo / CLS), a ratio row's min/max over paired rounds and its spread the "
             f"larger of its two models'; TF32 {'on' if result['tf32'] else 'off'}; "
             f"wall {result['wall_seconds']:.0f} s.", "", "## Targets", "",
             markdown_table([{**t, "met": {True: "yes", False: "NO", None: "-"}[t["met"]]} for t in result["targets"]],
                            ["target", "metric", "value", "spread", "met"]), "## Sections", ""]
    for name, rec in result["sections"].items():
        lines.append(f"- {name}: {rec['status']} ({rec.get('seconds', 0):.0f} s)"
                     + (f"; {len(rec.get('errors', []))} error(s)" if rec.get("errors") else "")
                     + (f"; {len(rec.get('skipped', []))} cell(s) skipped" if rec.get("skipped") else ""))
        for e in rec.get("errors", []):
            lines.append(f"  - {e['cell']}: `{e['error'][:300]}`")
        for c in rec.get("checks", []):
            lines.append(f"  - {c['check']}: {'pass' if c['ok'] else 'FAIL `' + str(c['error'])[:300] + '`'}")
    rows = [r for rec in result["sections"].values() for r in rec.get("rows", [])]
    if rows:
        lines += ["", "## Measurements", "",
                  markdown_table(rows, ["section", "mode", "batch", "model", "unit", "median", "min", "max", "spread",
                                        "peak_mem_mib"])]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from jumbokit.training import configure_tf32

    tf32 = configure_tf32(True, args.device)  # fp32 = fp32 on TF32 cores on a GPU; exact fp32 on a CPU
    budget = Budget(args.time_budget)
    path = args.json or result_path("gpu_suite", device_slug(args.device))
    settings = {k: v for k, v in vars(args).items() if k != "json"}
    result: dict[str, Any] = {"benchmark": "gpu_suite", "settings": settings,
                              "machine": machine_record(device=args.device), "tf32": tf32, "sections": {},
                              "metrics": {}, "targets": []}
    print(f"gpu suite on {result['machine']['device']}: sections {','.join(args.sections)}, "
          f"budget {args.time_budget:.0f} s", flush=True)
    for name in SECTIONS:
        if name not in args.sections:
            continue
        if not budget.allows():
            result["sections"][name] = {"status": "skipped: time budget"}
            print(f"[{budget.elapsed():6.1f}s] {name}: skipped: time budget", flush=True)
            continue
        section = Section(name, result, budget)
        start = time.perf_counter()
        try:
            RUNNERS[name](section, args)
        except Exception as exc:  # a section's own failure is recorded like a cell's
            section.record["errors"].append({"cell": "(section)", "error": f"{type(exc).__name__}: {exc}"[:2000],
                                             "traceback": traceback.format_exc()[-3000:]})
        finally:
            free_memory()
        rec = section.record
        if rec["status"] == "ok" and rec["errors"]:
            rec["status"] = "error" if not rec["rows"] and not rec.get("checks") else "partial"
        elif rec["status"] == "ok" and rec["skipped"]:
            rec["status"] = "partial: time budget"
        rec["seconds"] = round(time.perf_counter() - start, 1)
        result["sections"][name] = rec
        section.log(f"{rec['status']} in {rec['seconds']:.0f} s")
    result["targets"] = targets(result, args)
    result["wall_seconds"] = round(budget.elapsed(), 1)
    text = markdown(result)
    print(text)
    write_result(path, result, text)
    return result


if __name__ == "__main__":
    main()
