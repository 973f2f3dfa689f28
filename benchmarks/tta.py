"""Test-time adaptation benchmark: none / Tent / EATA / SAR over source models, settings and severities.

    python benchmarks/tta.py --checkpoints runs/supervised_vit_tiny_reg16_digits,runs/supervised_vit_tiny_jumbo_digits \\
        --settings normal,bs1,label_shift --severities 5,3 --out runs/bench_tta --jobs 4

Each (checkpoint, setting) is one run of ``recipes/sar_adapt.py`` (run in parallel with ``--jobs``);
this script collects their ``summary.json`` files into ``tta.json`` and ``tta.md`` (the average
accuracy per model, method, setting and severity; the full per-corruption tables; throughput and
SAR's recovery counters) and checks the targets: SAR >= none + 5 points in ``normal``; no NaN
for SAR in ``bs1`` / ``label_shift``; Jumbo+SAR >= Registers+SAR.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "sar_adapt.py"
LABELS = {"none": "No adapt", "tent": "Tent", "eata": "EATA", "sar": "SAR"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--checkpoints", required=True, help="comma-separated run directories (or .safetensors files)")
    p.add_argument("--settings", default="normal,bs1,label_shift", help="comma-separated settings")
    p.add_argument("--severities", default="5,3", help="comma-separated severities")
    p.add_argument("--bs1-severities", default=None, help="severities for bs1 (slow: one step per image); "
                                                          "default: as --severities")
    p.add_argument("--methods", default="none,tent,eata,sar")
    p.add_argument("--corruptions", default="common")
    p.add_argument("--dataset", default=None, help="clean dataset (default: each source's own)")
    p.add_argument("--max-samples", type=int, default=None, help="subset of the clean split (quick runs)")
    p.add_argument("--out", default="runs/bench_tta", help="output folder")
    p.add_argument("--jobs", type=int, default=1, help="recipe runs in parallel")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--recipe-args", default="", help="extra flags for recipes/sar_adapt.py, e.g. "
                                                     "'--sar-reset-constant 0.1' (one string)")
    p.add_argument("--collect-only", action="store_true", help="only aggregate existing summary.json files")
    p.add_argument("--redo", action="store_true",
                   help="rerun stages whose folder already holds a summary.json (default: skip them, so an "
                        "interrupted benchmark resumes)")
    return p.parse_args(argv)


def run_one(checkpoint: str, setting: str, severities: str, args: argparse.Namespace, out: Path) -> tuple[str, int, float]:
    cmd = [sys.executable, str(RECIPE), "--checkpoint", checkpoint, "--setting", setting, "--severity", severities,
           "--methods", args.methods, "--corruptions", args.corruptions, "--out", str(out), "--seed", str(args.seed),
           "--no-progress"]
    if args.dataset:
        cmd += ["--dataset", args.dataset]
    if args.max_samples:
        cmd += ["--max-eval-samples", str(args.max_samples)]
    if args.cpu:
        cmd += ["--cpu"]
    cmd += shlex.split(args.recipe_args)
    start = time.time()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "log.txt", "w") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    return str(out), code, time.time() - start


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    checkpoints = [c for c in args.checkpoints.split(",") if c]
    settings = [s for s in args.settings.split(",") if s]
    jobs = []
    for checkpoint in checkpoints:
        name = Path(checkpoint).name if Path(checkpoint).is_dir() else Path(checkpoint).stem
        for setting in settings:
            sev = args.bs1_severities if (setting == "bs1" and args.bs1_severities) else args.severities
            jobs.append((checkpoint, setting, sev, out / f"{name}__{setting}"))
    failed = []
    if not args.collect_only:
        from tqdm.auto import tqdm

        done = [j for j in jobs if (j[3] / "summary.json").is_file() and not args.redo]
        for *_, folder in done:
            print(f"{folder}: done before, skipped (--redo reruns it)")
        jobs_to_run = [j for j in jobs if j not in done]

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(run_one, c, s, sev, args, o) for c, s, sev, o in jobs_to_run]
            for fut in tqdm(futures, desc="tta runs"):
                folder, code, seconds = fut.result()
                status = "ok" if code == 0 else f"FAILED (exit {code}, see {folder}/log.txt)"
                tqdm.write(f"{folder}: {status} in {seconds:.0f} s")
                if code != 0:
                    failed.append(folder)

    summaries = []
    for checkpoint, setting, _, folder in jobs:
        path = folder / "summary.json"
        if path.is_file():
            summaries.append(json.loads(path.read_text()))
        else:
            print(f"missing {path}", file=sys.stderr)
    if not summaries:
        print(f"error: no stage has results under {out} (expected <source>__<setting>/summary.json); "
              + (f"see the logs of the failed stages: {', '.join(failed)}" if failed else "run without --collect-only"),
              file=sys.stderr)
        return 1
    rows = [r for s in summaries for r in s["rows"]]
    throughput = [dict(t, model=s["model"], setting=s["setting"]) for s in summaries for t in s["throughput"]]
    avg = {(r["model"], r["setting"], r["severity"], r["method"]): r["top1"] for r in rows if r["corruption"] == "avg"}

    models = list(dict.fromkeys(r["model"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    columns = list(dict.fromkeys((r["setting"], r["severity"]) for r in rows if r["corruption"] == "avg"))
    lines = ["| Model | Method | " + " | ".join(f"{s} sev{v}" for s, v in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for model in models:
        for method in methods:
            cells = [avg.get((model, s, v, method)) for s, v in columns]
            lines.append(f"| {model} | {LABELS.get(method, method)} | "
                         + " | ".join("" if c is None else f"{c:.1f}" for c in cells) + " |")
    overview = "\n".join(lines) + "\n"

    checks = []
    for model in models:
        for s, v in columns:
            if s == "normal" and (model, s, v, "sar") in avg and (model, s, v, "none") in avg:
                gain = round(avg[(model, s, v, "sar")] - avg[(model, s, v, "none")], 1) + 0.0  # no "-0.0"
                checks.append(f"{model} normal sev{v}: SAR - none = {gain:+.1f} points "
                              f"({'met' if gain >= 5 else 'missed'}, target >= +5)")
    for t in throughput:
        if t["method"] == "sar" and t["setting"] in ("bs1", "label_shift"):
            checks.append(f"{t['model']} {t['setting']} sev{t['severity']}: SAR NaN batches {t['nan_batches']}, "
                          f"recoveries {t['recoveries']}, skipped batches {t['skipped']}")
    jumbo = [m for m in models if "jumbo" in m]
    regs = [m for m in models if "reg" in m]
    for mj in jumbo:
        for mr in regs:
            for s, v in columns:
                a, b = avg.get((mj, s, v, "sar")), avg.get((mr, s, v, "sar"))
                if a is not None and b is not None:
                    checks.append(f"{s} sev{v}: Jumbo+SAR {a:.1f} vs Registers+SAR {b:.1f} "
                                  f"({'met' if a >= b else 'missed'})")

    tput_lines = ["| Model | Setting | Sev | Method | images/s | updates | recoveries | skipped | NaN batches |",
                  "|---|---|---|---|---|---|---|---|---|"]
    tput_lines += [f"| {t['model']} | {t['setting']} | {t['severity']} | {LABELS.get(t['method'], t['method'])} | "
                   f"{t['images_per_s']:.0f} | {t['updates']} | {t['recoveries']} | {t['skipped']} | "
                   f"{t['nan_batches']} |" for t in throughput]
    detail = []
    for s in summaries:
        folder = f"{s['model']}__{s['setting']}"
        report = out / folder / "report.md"
        body = report.read_text().split("\n## ", 1)[-1] if report.is_file() else ""
        body = ("#### " + body).replace("\n## ", "\n#### ").replace("](accuracy.png)", f"]({folder}/accuracy.png)")
        detail += [f"### {s['model']}, {s['setting']}\n", body]
    md = ["# Test-time adaptation benchmark", "", "Average top-1 accuracy (%) over the corruptions.", "",
          overview, "## Targets", "", *[f"- {c}" for c in checks], "", "## Throughput and counters", "",
          "\n".join(tput_lines), "", "## Per-corruption tables", "", *detail]
    print(overview)
    print("\n".join(checks))
    from jumbokit.benchmarking import machine_record, write_result

    write_result(out / "tta.json", {"rows": rows, "throughput": throughput, "checks": checks,
                                    "machine": machine_record()}, "\n".join(md))
    return 0 if len(summaries) == len(jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
