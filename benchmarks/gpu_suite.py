"""One GPU run, every speed number: inference, MAE / supervised / time-series training steps, host syncs.

    python benchmarks/gpu_suite.py --device cuda                     # one H100/H200, at most ~9 min
    python benchmarks/gpu_suite.py --device cuda --sections inference,train --time-budget 200
    OMP_NUM_THREADS=1 python benchmarks/gpu_suite.py --device cpu --tiny --threads 1   # a check: ~2 min on 2 cores

On a machine with its own Python and torch (a GPU machine: a virtual environment is too big to carry there), run it
from a source checkout; nothing needs installing, and --out names the folder the results must come back from:

    PYTHONPATH=src python3 benchmarks/gpu_suite.py --device cuda --out OUT_DIR

It needs torch, numpy, accelerate, safetensors and wrapt; timm (with torchvision and huggingface_hub) only for the
reference ViT-Tiny, which is recorded as not built without it. It never imports the data-set packages (aeon, sktime,
datasets, imagecorruptions): tests/test_gpu_suite.py runs it that way with those blocked.

Results: --out DIR (default: benchmarks/results) gets gpu_suite_<GPU name>.json (gpu_suite_cpu.json on a CPU) and a
markdown copy beside it. They are written when the run starts, again after every cell and every section (the
targets recomputed each time), and at the end; a time limit, a crash of the compiler or a kill loses at most the
cell in progress, and a section cut short reads "running" (or "interrupted: <signal>" after a SIGTERM or Ctrl-C).
Every cell prints its medians, spreads and ratio as it finishes.

Time: --time-budget (480 s from the process start) bounds the run: a cell is not started unless its estimated time
(rounds x min round seconds per model) fits, and a compiled model not unless COMPILE_SECONDS_PER_MODEL (75 s, a
ViT compile on a cold cache takes 30-70 s) plus its timing fits; it is checked before each model's compile, so a
cell can time the models it compiled and skip the rest. The whole call (imports included) should end within
~9 minutes. The GPU time is an estimate (the suite has not run on a GPU yet). The CPU check was measured: 113 s on
the 2-core CPU with Inductor's cache warm (the compile section 47 s of it); a cold cache adds minutes.

Sections, in the order they run (``--sections`` picks some; the order stays):

  inference  224 px, batch 256 and 1024, fp32+TF32 and bf16 autocast: Jumbo J=6 vs registers R=16 at D=128
             (vit_nano_*) and D=192 (vit_tiny_*), built as benchmarks/throughput.py builds them
             (jumbokit.benchmarking.steps), with timm's vit_tiny_patch16_224 (pretrained=False) timed beside the
             D=192 pair as a reference.
  mae        an MAE training step (mask 0.75, decoder 512x8, AdamW; jumbokit.ssl.MaskedAutoencoder) of
             vit_base_jumbo vs vit_base_cls at 224 px in bf16: images/s and peak memory (CUDA only).
  train      a supervised step (forward, cross-entropy, backward, AdamW step) of vit_tiny_jumbo vs vit_tiny_reg16
             (--train-model) at 224 px, bf16 and fp32+TF32, batch 256; peak memory (CUDA only).
  patchtst   a tstrain-style step of patchtst_jumbo vs patchtst_registers: batch 64, 1 channel, length 512,
             64 patches, 10 classes, fp32+TF32 and bf16; the batches are declared NaN-free as tstrain declares a
             set without NaN (no host read in the tokenizer), and patchtst_jumbo is also timed with the default
             per-batch NaN check (a host sync each step): patchtst_jumbo_declared_vs_nan_check_<mode>_b64.
  sync       the Jumbo models' forward passes and training steps, with torch.cuda.set_sync_debug_mode("error") on
             a GPU; on a CPU the host reads (item, bool, nonzero, ... of a tensor: a sync on a GPU) are recorded
             instead (jumbokit.benchmarking.hostsync). Pass, or the error text; one check (the per-batch NaN check
             of an undeclared PatchTST) is expected to find one.
  compile    inference in bf16 + torch.compile (static shapes) at --compile-batches (default 1024, the batch the
             40,800 images/s target is measured at; each batch size recompiles); last because compiling
             dominates its time. D=192 first (vit_tiny_jumbo, vit_tiny_reg16, then timm's), then D=128.

Every measurement warms up, then times interleaved rounds (the models of a comparison alternate, ABBA), each round
at least --min-round-s seconds of work (calls per round chosen once per cell from a timed call; 15 rounds of
>= 0.2 s at full size: 8 rounds of one batch each gave 23-51% spreads on an H100 at batch 256), and reports the
median round with min, max and spread = (max - min) / median. Ratios are Jumbo / registers (MAE: Jumbo / CLS) of the
median rates; the per-round ratios give their min and max, and a ratio's spread is the larger of its two models'
spreads. Keys compare across machines, e.g. ``jumbo_d192_vs_reg16_bf16_b256`` (a ratio) and
``vit_tiny_jumbo_bf16_compile_b1024_img_s``; compiled models also record ``..._compile_s`` (the first call).

Targets recorded in the JSON: Jumbo / registers >= 1.00 at D=128 and D=192 in fp32+TF32 and bf16 with both spreads
<= 10%; ViT-Tiny+Jumbo (J=6, D=192) >= 40,800 images/s at its best over modes and batches; training steps
Jumbo >= 0.95x registers (supervised and PatchTST).

Each section (and each cell inside it) is guarded: an error is recorded in the JSON and the rest still runs. --tiny
shrinks every size (32 px, batches of 2-4, vit_pico for the MAE and training steps, 3 short rounds) to check the
script on a CPU; its numbers mean nothing. --compile-backend eager checks the compile section's code without
Inductor's compile time.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import statistics
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

import jumbokit
from jumbokit.benchmarking import machine_record, result_path, results_folder, time_interleaved, write_result
from jumbokit.benchmarking.hostsync import HostReads
from jumbokit.benchmarking.steps import jumbo_vs_registers, mae_step, train_step
from jumbokit.benchmarking.timing import calls_per_round
from jumbokit.timeseries.models.tokenizer import declared_missing
from jumbokit.training.rundir import markdown_table

RESULTS = results_folder(__file__)  # this script's results folder, the default of its output

SECTIONS = ("inference", "mae", "train", "patchtst", "sync", "compile")
EAGER_MODES = ("fp32_tf32", "bf16")
TARGET_RATIO = 1.00
TARGET_SPREAD = 0.10
TARGET_VIT_TINY_JUMBO_IMG_S = 40_800
TARGET_TRAIN_RATIO = 0.95

# full size (CUDA) and --tiny (a CPU check); any of them can be set on the command line
FULL = dict(img_size=224, batches=[256, 1024], compile_batches=[1024], repeats=15, min_round_s=0.2, iters=1,
            warmup=3, compile_warmup=2, mae_model="vit_base", mae_batch=128, mae_decoder="512x8",
            train_model="vit_tiny", train_batch=256, train_repeats=11, series_batch=64, series_len=512,
            series_patches=64, sync_batch=32)
TINY = dict(img_size=32, batches=[2, 4], compile_batches=[4], repeats=3, min_round_s=0.0, iters=1,
            warmup=1, compile_warmup=1, mae_model="vit_pico", mae_batch=2, mae_decoder="64x1",
            train_model="vit_pico", train_batch=2, train_repeats=3, series_batch=4, series_len=64, series_patches=8,
            sync_batch=2)
HELP = dict(batches="eager inference batch sizes", compile_batches="batch sizes compiled (each one recompiles)",
            repeats="timed rounds per inference cell", min_round_s="seconds of work per timed round, at least",
            iters="calls per timed round, at least", mae_model="the MAE pair: <name>_jumbo vs <name>_cls",
            train_model="the supervised pair (and the sync checks' image models): <name>_jumbo vs <name>_reg16",
            train_repeats="timed rounds per training cell")
COMPILE_SECONDS_PER_MODEL = 75  # budget per torch.compile of one model (cold cache: 30-70 s for a ViT)
CELL_OVERHEAD_S = 2.0  # building models and warming up, per model (estimate for the budget)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="cuda or cpu (default: cuda where there is one)")
    p.add_argument("--tiny", action="store_true", help="tiny sizes and short rounds, to check the script on a CPU")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)")
    p.add_argument("--time-budget", type=float, default=480.0,
                   help="seconds from the process start; cells (and compiles) that would not end by then are "
                        "skipped (default: %(default)s)")
    p.add_argument("--out", type=Path, default=RESULTS,
                   help="folder of the result files gpu_suite_<device name>.json/.md, written after every cell "
                        "(default: %(default)s; on a remote GPU machine, the folder whose files are copied back)")
    p.add_argument("--compile-backend", default="inductor",
                   help="torch.compile backend of the compile section (default: %(default)s; 'eager' checks the "
                        "section's code quickly)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")

    def shown(value: Any) -> str:
        return ",".join(map(str, value)) if isinstance(value, list) else str(value)

    for key, value in FULL.items():
        kind = (lambda s: [int(v) for v in s.split(",")]) if isinstance(value, list) else type(value)
        p.add_argument(f"--{key.replace('_', '-')}", type=kind, default=None,
                       help=f"{HELP[key] + ' ' if key in HELP else ''}(default: {shown(value)}; "
                            f"--tiny: {shown(TINY[key])})")
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
    per_round = [a / b for a, b in zip(num, den, strict=True)]
    return {"ratio": statistics.median(num) / statistics.median(den), "min": min(per_round), "max": max(per_round)}


class Budget:
    """--time-budget's seconds, counted from ``already`` seconds ago (the process start; default: now)."""

    now = staticmethod(time.perf_counter)

    def __init__(self, seconds: float, already: float = 0.0) -> None:
        self.start, self.seconds = self.now() - already, seconds

    def elapsed(self) -> float:
        return self.now() - self.start

    def allows(self, needed: float = 0.0) -> bool:
        return self.elapsed() + needed < self.seconds


class Interrupted(BaseException):
    """A SIGTERM (a time limit's kill) turned into an exception, so the record says where the run stopped."""


def timing_estimate(args, models: int, repeats: int | None = None) -> float:
    """Seconds a cell of ``models`` models should take: build and warm-up, then its timed rounds."""
    rounds = args.repeats if repeats is None else repeats
    return models * (CELL_OVERHEAD_S + rounds * args.min_round_s) if not args.tiny else 0.0


class Suite:
    """The run's record: its sections, metrics and targets, written to ``path`` whenever ``save`` is called."""

    def __init__(self, args, path: Path, budget: Budget) -> None:
        from jumbokit.training import configure_tf32

        self.args, self.path, self.budget = args, path, budget
        tf32 = configure_tf32(True, args.device)  # fp32 = fp32 on TF32 cores on a GPU; exact fp32 on a CPU
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        self.result: dict[str, Any] = {"benchmark": "gpu_suite", "settings": settings,
                                       "machine": machine_record(device=args.device), "tf32": tf32,
                                       "status": "running", "sections": {}, "metrics": {}, "targets": []}

    def save(self) -> None:
        """Write the record as it stands (targets recomputed) to the JSON and its markdown copy."""
        self.result["targets"] = targets(self.result, self.args)
        self.result["wall_seconds"] = round(self.budget.elapsed(), 1)
        write_result(self.path, self.result, markdown(self.result), quiet=True)


class Section:
    """Rows, metrics and errors of one section; ``cell`` guards one measurement of it."""

    def __init__(self, name: str, suite: Suite) -> None:
        self.name, self.suite, self.budget = name, suite, suite.budget
        self.result = suite.result
        self.record: dict[str, Any] = {"status": "running", "rows": [], "errors": [], "skipped": []}

    def log(self, text: str) -> None:
        print(f"[{self.budget.elapsed():6.1f}s] {self.name}: {text}", flush=True)

    def metric(self, key: str, value: float) -> None:
        self.result["metrics"][key] = round(float(value), 4)

    def row(self, **row: Any) -> None:
        self.record["rows"].append({"section": self.name, **row})

    def skip(self, label: str) -> None:
        self.record["skipped"].append(f"{label}: skipped: time budget")
        self.log(f"{label}: skipped: time budget")

    def cell(self, label: str, fn: Callable[[], None], needed: float = 0.0) -> None:
        if not self.budget.allows(needed):
            self.skip(label)
            self.suite.save()
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
        self.suite.save()


def free_memory() -> None:
    """Between cells on a GPU: the last cell's tensors freed and the cache emptied (nothing to do on a CPU)."""
    if torch.cuda.is_available():
        import gc

        gc.collect()
        torch.cuda.empty_cache()


def autocast(args, bf16: bool):
    if bf16:
        return torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


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


def timed_rates(args, calls: dict[str, Callable[[], object]], batch: int, repeats: int, warmup: int
                ) -> tuple[dict[str, list[float]], int]:
    """({name: samples/s per round}, calls per round): warm-up, rounds lengthened to --min-round-s, interleaved."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    iters = calls_per_round(calls, args.min_round_s, minimum=args.iters, sync=sync_fn(args))
    timings = time_interleaved(calls, repeats, iters, warmup=0, alternate=True, sync=sync_fn(args))
    return {name: [batch / s for s in t.rounds] for name, t in timings.items()}, iters


def record_pair(section: Section, rates: dict[str, list[float]], mems: dict[str, float | None], prefix: str,
                mode: str, batch: int, jumbo: str, other: str | None, ratio_key: str, unit: str,
                iters: int = 1, extra: dict[str, float] | None = None) -> None:
    """Rows and metrics of a cell's models, and the ratio ``jumbo / other`` when both were timed; printed."""
    for name, r in rates.items():
        s = stats(r)
        section.row(mode=mode, batch=batch, model=name, unit=unit, **s, calls_per_round=iters,
                    peak_mem_mib=mems.get(name), **({"compile_s": extra[name]} if extra and name in extra else {}))
        section.metric(f"{prefix}{name}_{mode}_b{batch}_{unit.replace('/', '_')}", s["median"])
        section.metric(f"{prefix}{name}_{mode}_b{batch}_spread", s["spread"])
        if mems.get(name) is not None:
            section.metric(f"{prefix}{name}_{mode}_b{batch}_peak_mem_mib", mems[name])
        if extra and name in extra:
            section.metric(f"{prefix}{name}_{mode}_b{batch}_compile_s", extra[name])
        section.log(f"  {name:22} {s['median']:12.1f} {unit} (min {s['min']:.1f}, max {s['max']:.1f}, spread "
                    f"{s['spread']:.1%}, {s['rounds']} rounds x {iters} calls)")
    if other is None or jumbo not in rates or other not in rates:
        section.log(f"  {ratio_key}: not measured (a model was not timed)")
        return
    r = ratio_stats(rates[jumbo], rates[other])
    spread = max(stats(rates[jumbo])["spread"], stats(rates[other])["spread"])
    section.metric(ratio_key, r["ratio"])
    section.row(mode=mode, batch=batch, model=ratio_key, unit="ratio", median=r["ratio"], min=r["min"], max=r["max"],
                spread=spread)
    section.log(f"  {ratio_key} = {r['ratio']:.3f} (rounds {r['min']:.3f}-{r['max']:.3f}, spread {spread:.1%})")


# ------------------------------------------------------------------------------------------ inference
def inference_models(args, dim: int) -> dict[str, Callable[[], torch.nn.Module]]:
    """{zoo-style key: builder}, the most important first: the Jumbo J=6 / registers R=16 pair at ``dim``, then
    timm's plain ViT-Tiny beside the D=192 pair (left out, with a note, where timm is not installed)."""
    size = {128: "nano", 192: "tiny"}[dim]
    pair: dict[str, torch.nn.Module] = {}

    def member(key: str) -> Callable[[], torch.nn.Module]:
        def build() -> torch.nn.Module:
            if not pair:
                pair.update(jumbo_vs_registers(args.img_size, dim))
            return pair.pop(key)
        return build

    models = {f"vit_{size}_jumbo": member(f"D={dim} Jumbo J=6"), f"vit_{size}_reg16": member(f"D={dim} registers R=16")}
    if dim == 192:
        def timm_vit_tiny() -> torch.nn.Module:
            import timm

            return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=args.img_size,
                                     num_classes=1000)
        models["timm_vit_tiny"] = timm_vit_tiny
    return models


def compile_model(model: torch.nn.Module, call: Callable[[torch.nn.Module], object], args
                  ) -> tuple[torch.nn.Module, float]:
    """(``torch.compile(model)``, seconds of its first call, which compiles it)."""
    compiled = torch.compile(model, dynamic=False, backend=args.compile_backend)
    if is_cuda(args):
        torch.cuda.synchronize()
    start = time.perf_counter()
    call(compiled)
    if is_cuda(args):
        torch.cuda.synchronize()
    return compiled, time.perf_counter() - start


def inference_cell(section: Section, args, dim: int, mode: str, batch: int) -> None:
    bf16, compile = mode.startswith("bf16"), mode.endswith("compile")
    x = torch.randn(batch, 3, args.img_size, args.img_size, device=args.device)

    def forward(m: torch.nn.Module) -> object:
        with torch.inference_mode(), autocast(args, bf16):
            return m(x)

    builders = inference_models(args, dim)
    models, compile_s = {}, {}
    for key, build in builders.items():
        if compile and not section.budget.allows(COMPILE_SECONDS_PER_MODEL + timing_estimate(args, len(models) + 1)):
            section.skip(f"D={dim} {mode} batch {batch} {key} (compile)")
            continue
        torch.manual_seed(0)
        try:
            model = build().eval().to(args.device)
        except ImportError as exc:  # timm's reference: optional
            section.record["errors"].append({"cell": f"D={dim} {mode} batch {batch} {key}",
                                             "error": f"not built: {type(exc).__name__}: {exc}"[:500]})
            section.log(f"{key}: not built ({exc})")
            continue
        if compile:
            models[key], compile_s[key] = compile_model(model, forward, args)
            section.log(f"  {key} compiled in {compile_s[key]:.1f} s")
        else:
            models[key] = model
    if not models:
        return
    warmup = args.compile_warmup if compile else args.warmup
    rates, iters = timed_rates(args, {k: (lambda m=m: forward(m)) for k, m in models.items()}, batch, args.repeats,
                               warmup)
    mems = {}
    if not compile:
        mems = {key: peak_mib_of(lambda m=model: forward(m), args) for key, model in models.items()}
    size = "nano" if dim == 128 else "tiny"
    jumbo, reg = f"vit_{size}_jumbo", f"vit_{size}_reg16"
    record_pair(section, rates, mems, "", mode, batch, jumbo, reg, f"jumbo_d{dim}_vs_reg16_{mode}_b{batch}", "img/s",
                iters, compile_s)
    if "timm_vit_tiny" in rates and jumbo in rates:
        section.metric(f"jumbo_d192_vs_timm_vit_tiny_{mode}_b{batch}",
                       ratio_stats(rates[jumbo], rates["timm_vit_tiny"])["ratio"])
    del models


def run_inference(section: Section, args) -> None:
    for mode in EAGER_MODES:
        for batch in args.batches:
            for dim in (128, 192):
                section.cell(f"D={dim} {mode} batch {batch}",
                             lambda dim=dim, mode=mode, batch=batch: inference_cell(section, args, dim, mode, batch),
                             needed=timing_estimate(args, 3 if dim == 192 else 2))


def run_compile(section: Section, args) -> None:
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    # each compiled model is checked against the budget before its compile (inference_cell)
    for dim in (192, 128):
        for batch in sorted(args.compile_batches, reverse=True):
            section.cell(f"D={dim} bf16_compile batch {batch}",
                         lambda dim=dim, batch=batch: inference_cell(section, args, dim, "bf16_compile", batch))
    torch._dynamo.reset()


# ------------------------------------------------------------------------------------------ training steps
def mae_cell(section: Section, args) -> None:
    from jumbokit.ssl import build_image_mae

    dim, depth = (int(v) for v in args.mae_decoder.lower().split("x"))
    images = torch.randn(args.mae_batch, 3, args.img_size, args.img_size, device=args.device)
    steps, mems = {}, {}
    jumbo, cls = f"{args.mae_model}_jumbo", f"{args.mae_model}_cls"
    for name in (jumbo, cls):
        torch.manual_seed(0)
        base = torch.cuda.memory_allocated() if is_cuda(args) else None
        model = build_image_mae(name, args.img_size, 3, patch_size=16, decoder_dim=dim, decoder_depth=depth,
                                decoder_heads=max(1, dim // 32), mask_ratio=0.75).to(args.device)
        step = mae_step(model, images, "bf16")
        steps[name] = lambda s=step: s(0.75)
        steps[name]()  # optimizer state exists before the peak is taken
        mems[name] = peak_mib_of(steps[name], args, base)
    rates, iters = timed_rates(args, steps, args.mae_batch, args.train_repeats, args.warmup)
    record_pair(section, rates, mems, "mae_", "bf16", args.mae_batch, jumbo, cls,
                f"mae_jumbo_vs_cls_bf16_b{args.mae_batch}", "img/s", iters)


def classification_steps(args, models: dict[str, torch.nn.Module], x: torch.Tensor, y: torch.Tensor, mode: str):
    """{name: tstrain-style step (forward, cross-entropy, backward, AdamW)}, with peak memory (CUDA) of each step
    above what was allocated before its model moved to the device."""
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
    jumbo, reg = f"{args.train_model}_jumbo", f"{args.train_model}_reg16"
    models = {name: jumbokit.create_model(name, img_size=args.img_size, num_classes=1000) for name in (jumbo, reg)}
    steps, mems = classification_steps(args, models, x, y, mode)
    rates, iters = timed_rates(args, steps, batch, args.train_repeats, args.warmup)
    record_pair(section, rates, mems, "train_", mode, batch, jumbo, reg,
                f"train_jumbo_vs_reg16_{mode}_b{batch}", "img/s", iters)


def series_models(args) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {name: jumbokit.create_model(name, num_classes=10, in_chans=1, seq_len=args.series_len,
                                        patches=args.series_patches)
            for name in ("patchtst_jumbo", "patchtst_registers")}


def patchtst_cell(section: Section, args, mode: str) -> None:
    """The pair with NaN-free batches declared (as tstrain declares a set without NaN), and patchtst_jumbo again
    with the default per-batch NaN check (``patchtst_jumbo_nan_check``: a host read, so a GPU sync, each step)."""
    batch = args.series_batch
    x = torch.randn(batch, 1, args.series_len, device=args.device)
    y = torch.randint(0, 10, (batch,), device=args.device)
    models = series_models(args)
    models["patchtst_jumbo_nan_check"] = series_models(args)["patchtst_jumbo"]
    with contextlib.ExitStack() as declared:
        for name in ("patchtst_jumbo", "patchtst_registers"):
            declared.enter_context(declared_missing(models[name], False))
        steps, mems = classification_steps(args, models, x, y, mode)
        rates, iters = timed_rates(args, steps, batch, args.train_repeats, args.warmup)
    record_pair(section, rates, mems, "", mode, batch, "patchtst_jumbo", "patchtst_registers",
                f"patchtst_jumbo_vs_registers_{mode}_b{batch}", "series/s", iters)
    check = ratio_stats(rates["patchtst_jumbo"], rates["patchtst_jumbo_nan_check"])["ratio"]
    section.metric(f"patchtst_jumbo_declared_vs_nan_check_{mode}_b{batch}", check)
    section.log(f"  patchtst_jumbo_declared_vs_nan_check_{mode}_b{batch} = {check:.3f}")


def run_mae(section: Section, args) -> None:
    section.cell(f"{args.mae_model}_jumbo vs {args.mae_model}_cls bf16", lambda: mae_cell(section, args),
                 needed=timing_estimate(args, 2, args.train_repeats))


def run_train(section: Section, args) -> None:
    for mode in ("bf16", "fp32_tf32"):
        section.cell(f"{args.train_model}_jumbo vs {args.train_model}_reg16 {mode}",
                     lambda mode=mode: train_cell(section, args, mode),
                     needed=timing_estimate(args, 2, args.train_repeats))


def run_patchtst(section: Section, args) -> None:
    for mode in ("fp32_tf32", "bf16"):
        section.cell(f"patchtst_jumbo vs patchtst_registers {mode}",
                     lambda mode=mode: patchtst_cell(section, args, mode),
                     needed=timing_estimate(args, 3, args.train_repeats))


# ------------------------------------------------------------------------------------------ host syncs
def sync_calls(args) -> dict[str, tuple[Callable[[], Callable[[], object]], bool]]:
    """{label: (builder of one call, whether a sync is expected)}: forward passes and training steps of the Jumbo
    models; PatchTST as tstrain runs it on a NaN-free set (declared), and with its per-batch NaN check."""
    from jumbokit.ssl import build_image_mae

    dev, kind, b, img = args.device, torch.device(args.device).type, args.sync_batch, args.img_size
    image = f"{args.train_model}_jumbo"

    def forward(name: str, bf16: bool):
        def build():
            model = jumbokit.create_model(name, img_size=img, num_classes=1000).eval().to(dev)
            x = torch.randn(b, 3, img, img, device=dev)

            def call():
                with torch.inference_mode(), torch.autocast(kind, dtype=torch.bfloat16, enabled=bf16):
                    return model(x)
            return call
        return build

    def train(name: str, bf16: bool, series: bool = False, missing: bool | None = None):
        def build():
            if series:
                model = series_models(args)[name].to(dev)
                model.patch_embed.missing = missing
                x = torch.randn(b, 1, args.series_len, device=dev)
            else:
                model = jumbokit.create_model(name, img_size=img, num_classes=1000).to(dev)
                x = torch.randn(b, 3, img, img, device=dev)
            y = torch.randint(0, 10, (b,), device=dev)
            return train_step(AutocastForward(model, kind) if bf16 else model, x, y)
        return build

    def mae():
        model = build_image_mae(f"{args.mae_model}_jumbo", img, 3, patch_size=16, mask_ratio=0.75).to(dev)
        step = mae_step(model, torch.randn(b, 3, img, img, device=dev), "bf16")
        return lambda: step(0.75)

    return {
        f"forward {image} fp32": (forward(image, False), False),
        f"forward {image} bf16": (forward(image, True), False),
        "forward vit_nano_jumbo bf16": (forward("vit_nano_jumbo", True), False),
        f"train step {image} fp32": (train(image, False), False),
        f"train step {image} bf16": (train(image, True), False),
        f"MAE step {args.mae_model}_jumbo bf16": (mae, False),
        "train step patchtst_jumbo fp32 (NaN-free declared, as tstrain)":
            (train("patchtst_jumbo", False, series=True, missing=False), False),
        "train step patchtst_jumbo fp32 (per-batch NaN check)":
            (train("patchtst_jumbo", False, series=True, missing=None), True),
    }


@contextlib.contextmanager
def sync_errors(args) -> Iterator[HostReads | None]:
    """CUDA: ``set_sync_debug_mode("error")`` (a sync raises); CPU: :class:`HostReads` (records what would sync)."""
    if not is_cuda(args):
        with HostReads() as reads:
            yield reads
        return
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield None
    finally:
        torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()


def sync_cell(section: Section, args, label: str, build: Callable[[], Callable[[], object]], expected: bool) -> None:
    call = build()
    call()  # lazy initialisation (cuBLAS handles, optimizer state) is not what is checked
    entry: dict[str, Any] = {"check": label, "method": "cuda sync debug mode" if is_cuda(args) else
                             "host reads recorded on the CPU", "sync_expected": expected}
    try:
        with sync_errors(args) as reads:
            for _ in range(2):
                call()
        error = None if reads is None or not reads.calls else f"host reads: {reads.describe()}"
    except Exception as exc:  # the finding itself: recorded, never raised
        error = f"{type(exc).__name__}: {exc}"
    entry.update(ok=error is None, error=None if error is None else error[:2000])
    section.record.setdefault("checks", []).append(entry)
    section.result.setdefault("host_sync", {})[label] = entry["ok"]
    found = "pass" if entry["ok"] else "SYNC " + entry["error"][:200]
    section.log(f"{label}: {found}{' (expected)' if expected and not entry['ok'] else ''}")


def run_sync(section: Section, args) -> None:
    for label, (build, expected) in sync_calls(args).items():
        section.cell(label, lambda label=label, build=build, expected=expected:
                     sync_cell(section, args, label, build, expected))


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
                            "met": None if value is None or spread is None else
                            bool(value >= TARGET_RATIO and spread <= TARGET_SPREAD)})
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
             "", f"Run {result['status']}. {s['img_size']} px; medians of interleaved rounds of at least "
             f"{s['min_round_s']} s, spread = (max - min) / median; ratios are Jumbo / registers (MAE: Jumbo / CLS), "
             f"a ratio row's min/max over paired rounds and its spread the larger of its two models'; TF32 "
             f"{'on' if result['tf32'] else 'off'}; wall {result.get('wall_seconds', 0):.0f} s.", "", "## Targets",
             "", markdown_table([{**t, "met": {True: "yes", False: "NO", None: "-"}[t["met"]]}
                                 for t in result["targets"]], ["target", "metric", "value", "spread", "met"]),
             "## Sections", ""]
    for name, rec in result["sections"].items():
        lines.append(f"- {name}: {rec['status']} ({rec.get('seconds', 0):.0f} s)"
                     + (f"; {len(rec.get('errors', []))} error(s)" if rec.get("errors") else "")
                     + (f"; {len(rec.get('skipped', []))} skipped" if rec.get("skipped") else ""))
        for e in rec.get("errors", []):
            lines.append(f"  - {e['cell']}: `{e['error'][:300]}`")
        for skipped in rec.get("skipped", []):
            lines.append(f"  - {skipped}")
        for c in rec.get("checks", []):
            verdict = "pass" if c["ok"] else "SYNC" + (" (expected)" if c.get("sync_expected") else "")
            lines.append(f"  - {c['check']}: {verdict}" + ("" if c["ok"] else f" `{str(c['error'])[:300]}`"))
    rows = [r for rec in result["sections"].values() for r in rec.get("rows", [])]
    if rows:
        lines += ["", "## Measurements", "",
                  markdown_table(rows, ["section", "mode", "batch", "model", "unit", "median", "min", "max", "spread",
                                        "calls_per_round", "peak_mem_mib", "compile_s"])]
    return "\n".join(lines) + "\n"


def finish_section(section: Section, start: float) -> None:
    rec = section.record
    if rec["status"] == "running":
        if rec["errors"]:
            rec["status"] = "error" if not rec["rows"] and not rec.get("checks") else "partial"
        elif rec["skipped"]:
            rec["status"] = "partial: time budget"
        else:
            rec["status"] = "ok"
    rec["seconds"] = round(time.perf_counter() - start, 1)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM (``timeout``'s first signal) into :class:`Interrupted` in the main thread, restored after."""
    def handler(signum, frame):
        raise Interrupted(signal.Signals(signum).name)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv=None, started: float | None = None) -> dict[str, Any]:
    """Run the suite; ``started``: the ``time.time()`` the budget counts from (default: now)."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    budget = Budget(args.time_budget, already=0.0 if started is None else max(0.0, time.time() - started))
    path = result_path(args.out, "gpu_suite", device_slug(args.device))
    path.parent.mkdir(parents=True, exist_ok=True)
    suite = Suite(args, path, budget)
    result = suite.result
    print(f"gpu suite on {result['machine']['device']}: sections {','.join(args.sections)}, budget "
          f"{args.time_budget:.0f} s ({budget.elapsed():.0f} s gone), writing {path}", flush=True)
    suite.save()
    section = None
    with sigterm_raises():
        try:
            for name in SECTIONS:
                if name not in args.sections:
                    continue
                if not budget.allows():
                    result["sections"][name] = {"status": "skipped: time budget"}
                    print(f"[{budget.elapsed():6.1f}s] {name}: skipped: time budget", flush=True)
                    suite.save()
                    continue
                section = Section(name, suite)
                result["sections"][name] = section.record
                start = time.perf_counter()
                try:
                    RUNNERS[name](section, args)
                except Exception as exc:  # a section's own failure is recorded like a cell's
                    section.record["errors"].append({"cell": "(section)",
                                                     "error": f"{type(exc).__name__}: {exc}"[:2000],
                                                     "traceback": traceback.format_exc()[-3000:]})
                finally:
                    free_memory()
                finish_section(section, start)
                section.log(f"{section.record['status']} in {section.record['seconds']:.0f} s")
                suite.save()
                section = None
            result["status"] = "finished"
        except (Interrupted, KeyboardInterrupt) as exc:
            why = f"interrupted: {str(exc) or type(exc).__name__}"
            result["status"] = why
            if section is not None:
                section.record["status"] = why
            print(f"[{budget.elapsed():6.1f}s] {why}; writing what was measured", flush=True)
            raise
        finally:
            suite.save()
    text = markdown(result)
    print(text)
    print(f"wrote {path} and {path.with_suffix('.md')}")
    return result


if __name__ == "__main__":
    from jumbokit.benchmarking.records import process_start_time

    main(started=process_start_time())
