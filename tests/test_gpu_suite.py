"""benchmarks/gpu_suite.py at tiny sizes on the CPU: the cheap sections write the keys a GPU run compares."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_suite_tiny_cpu_writes_ratios_and_rates(tmp_path, monkeypatch, one_torch_thread):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_suite

    out = tmp_path / "suite.json"
    record = gpu_suite.main(["--device", "cpu", "--tiny", "--sections", "inference,patchtst", "--batches", "2",
                             "--json", str(out)])
    assert out.exists() and out.with_suffix(".md").exists()
    assert set(record["sections"]) == {"inference", "patchtst"}
    assert all(s["status"] == "ok" and not s["errors"] for s in record["sections"].values())
    metrics = record["metrics"]
    expected = [f"{kind}_{mode}_b2" for kind in ("jumbo_d128_vs_reg16", "jumbo_d192_vs_reg16")
                for mode in ("fp32_tf32", "bf16")]
    expected += [f"{model}_{mode}_b2_img_s" for model in ("vit_nano_jumbo", "vit_tiny_reg16", "timm_vit_tiny")
                 for mode in ("fp32_tf32", "bf16")]
    expected += [f"patchtst_jumbo_vs_registers_{mode}_b4" for mode in ("fp32_tf32", "bf16")]
    expected += ["patchtst_jumbo_bf16_b4_series_s", "vit_tiny_jumbo_best_img_s"]
    assert all(metrics.get(key, 0) > 0 for key in expected), {k: metrics.get(k) for k in expected}
    ratio = next(t for t in record["targets"] if t["metric"] == "jumbo_d192_vs_reg16_bf16_b2")
    assert ratio["threshold"] == 1.0 and ratio["max_spread"] == 0.1 and isinstance(ratio["met"], bool)
    assert any(t["threshold"] == 40_800 and t["value"] > 0 for t in record["targets"])
    assert "jumbo_d192_vs_reg16_bf16_b2" in out.with_suffix(".md").read_text()
