"""ONNX export: ONNX Runtime equals PyTorch for every model kind (exported at batch 2, run at batch 3), refusals
of models that are not in their deploy form, the missing-extra message, and the `jumbokit export` front door."""
from __future__ import annotations

import sys

import pytest
import torch

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import jumbokit  # noqa: E402
from jumbokit.cli import run_front_door  # noqa: E402
from jumbokit.export import example_input, export_onnx, onnx_io, to_onnx  # noqa: E402

TOL = 1e-4
TINY = dict(dim=32, depth=1, num_heads=2, mlp_ratio=2.0)
IMAGE = dict(tokenizer="image", img_size=32, patch_size=8, in_chans=3, num_classes=5, **TINY)
SERIES = dict(seq_len=40, in_chans=2, num_classes=3, dim=32, depth=1, num_heads=4, mlp_hidden=64)


def perturbed(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Move norms, biases, LayerScales and tokens off their initial values so every path carries signal."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if param.ndim == 1 and name.endswith("weight"):
                param.copy_(1.0 + 0.1 * noise)
            elif name.endswith(("bias", "gamma")) or "token" in name or "pos_embed" in name:
                param.add_(0.05 * noise)
    return model.eval()


def build(kind: str) -> torch.nn.Module:
    from jumbokit.encoders import Encoder
    from jumbokit.encoders.branches import build_branched_encoder

    torch.manual_seed(0)
    plugins = {"none": dict(global_tokens="none", num_classes=0), "cls": dict(global_tokens="cls"),
               "registers": dict(global_tokens="registers", num_registers=3),
               "jumbo": dict(global_tokens="jumbo", jumbo_multiplier=3, init_values=0.1)}
    if kind in plugins:
        return perturbed(Encoder(**{**IMAGE, **plugins[kind]}))
    if kind == "collapsed":
        branched = perturbed(build_branched_encoder({**IMAGE, "depth": 2, "global_tokens": "registers",
                                                     "num_registers": 2, "init_values": 0.1}, branches=2))
        branched.set_join(1.0)
        return jumbokit.reparameterize(branched).eval()
    if kind == "multistage":
        return perturbed(jumbokit.create_model(
            "vit_res_pico_jumbo", img_size=32, patch_size=4, dims=[16, 32], head_dims=[8, 16],
            heads=[[2], [2]], mlp_hidden=[[32], [64]], stem_chans=4, num_classes=4))
    if kind.startswith("patchtst"):
        stem = {"patchtst_jumbo": {"conv_stem": 8, "length_embed": True},  # masked conv pooling, lengths
                "patchtst_registers": {"trunk": "inception", "trunk_width": 2, "trunk_depth": 3, "trunk_diff": True,
                                       "token_stats": True, "rel_pos_bias": True, "level_scale": True,
                                       "trunk_head": True}}.get(kind, {})
        return perturbed(jumbokit.create_model(kind, **SERIES, **stem))
    raise KeyError(kind)


def ort_run(path, x: torch.Tensor) -> torch.Tensor:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


KINDS = ["none", "cls", "registers", "jumbo", "collapsed", "multistage", "patchtst", "patchtst_registers",
         "patchtst_jumbo"]


@pytest.mark.parametrize("kind", KINDS)
def test_onnx_runtime_equals_pytorch(kind, tmp_path, one_torch_thread):
    model = build(kind)
    result = export_onnx(model, tmp_path / "m.onnx", example_input(model, batch=2))
    assert result.check is not None and result.check.max_abs_diff <= TOL
    series = model.config["tokenizer"] == "series"
    x = example_input(model, batch=3, seed=5)
    if series:  # missing steps inside a series, a whole missing channel tail, and a complete sample
        x[1, 0, 10:17] = float("nan")
        x[2, 1, 25:] = float("nan")
        x[0] = torch.randn(x.shape[1:])
    with torch.no_grad():
        expected = model(x)
    got = ort_run(result.path, x)
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() <= TOL
    graph = onnx_io(result.path)
    assert graph["inputs"][0][0] == ("series" if series else "images")
    assert graph["inputs"][0][1][0] == "batch"
    assert graph["outputs"][0][0] == ("features" if kind == "none" else "logits")
    if series:  # a batch without missing steps (eager PyTorch then skips the mask; the graph always masks)
        x = torch.randn(3, *x.shape[1:])
        with torch.no_grad():
            assert (ort_run(result.path, x) - model(x)).abs().max().item() <= TOL
    else:  # another image size through the dynamic axes (position table resampled in the graph)
        x = example_input(model, batch=1, img_size=(48, 64) if kind != "multistage" else (64, 48))
        with torch.no_grad():
            expected = model(x)
        assert (ort_run(result.path, x) - expected).abs().max().item() <= TOL


def test_fixed_size_and_batch(tmp_path, one_torch_thread):
    from jumbokit.encoders import Encoder

    model = perturbed(Encoder(**{**IMAGE, "depth": 1, "dynamic_img_size": False}))
    with pytest.raises(ValueError, match="dynamic_img_size=False"):
        to_onnx(model, tmp_path / "m.onnx", example_input(model), dynamic_size=True)
    assert not (tmp_path / "m.onnx").exists()
    path = to_onnx(model, tmp_path / "m.onnx", example_input(model, batch=1), dynamic_batch=False)
    assert onnx_io(path)["inputs"][0][1] == [1, 3, 32, 32]


def test_branched_and_supernet_are_refused(tmp_path):
    from jumbokit import nas

    branched = jumbokit.create_model("vit_pico_cls", img_size=32, patch_size=8, depth=2, branches=2)
    with pytest.raises(ValueError, match=r"call jumbokit\.reparameterize\(model\) first"):
        to_onnx(branched, tmp_path / "b.onnx", torch.randn(2, 3, 32, 32))
    supernet = nas.Supernet(nas.search_space("digits"), num_classes=10, img_size=32, in_chans=1)
    with pytest.raises(ValueError, match=r"call supernet\.extract\(arch\) first"):
        to_onnx(supernet, tmp_path / "s.onnx", torch.randn(2, 1, 32, 32))
    assert not list(tmp_path.iterdir())


def test_missing_extra_is_one_line(monkeypatch, tmp_path, capsys):
    from jumbokit.recipes import export as recipe

    model = build("cls")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'jumbokit\[deploy\]'"):
        to_onnx(model, tmp_path / "m.onnx", example_input(model))
    with pytest.raises(RuntimeError, match=r"pip install 'jumbokit\[deploy\]'"):
        recipe.main([str(tmp_path), "--out", str(tmp_path / "m.onnx")])
    assert run_front_door("export", [str(tmp_path), "--out", str(tmp_path / "m.onnx")]) == 2  # one line, status 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'jumbokit[deploy]'" in err
    assert not (tmp_path / "m.onnx").exists()


def test_cli_exports_a_saved_run(tmp_path, capsys, one_torch_thread):
    from jumbokit.recipes import export as recipe

    model = jumbokit.create_model("patchtst_jumbo", seq_len=24, in_chans=2, num_classes=3, dim=16, depth=1,
                                  num_heads=2, mlp_hidden=32)
    jumbokit.save(model, tmp_path / "run")
    summary = recipe.main([str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert (tmp_path / "run" / "model.onnx").exists()
    assert summary["inputs"] == [("series", ["batch", 2, 24])] and summary["outputs"] == [("logits", ["batch", 3])]
    assert summary["max_abs_diff"] <= TOL
    assert "input   series" in out and "max abs difference" in out


def test_cli_refuses_bad_input_before_writing(tmp_path, capsys):
    from jumbokit.cli import main
    from jumbokit.nas import Supernet, search_space

    jumbokit.save(jumbokit.create_model("vit_pico_cls", img_size=32, patch_size=8, depth=2, branches=2),
                  tmp_path / "branched")
    jumbokit.save(Supernet(search_space("digits"), num_classes=10, img_size=32, in_chans=1), tmp_path / "supernet")
    cases = {
        (str(tmp_path / "missing"),): "does not exist",
        (str(tmp_path / "branched"),): "pass --reparameterize",
        (str(tmp_path / "supernet"),): "NAS supernet",
        (str(tmp_path / "branched"), "--out", str(tmp_path / "x.txt")): "must name a .onnx file",
        (str(tmp_path / "branched"), "--batch", "0"): "--batch must be",
    }
    for argv, message in cases.items():
        assert main(["export", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and message in err and len(err.splitlines()) == 1, err
    assert not list(tmp_path.rglob("*.onnx"))


@pytest.mark.slow
def test_deploy_benchmark_reports_the_flops_floor(tmp_path):
    """The deploy benchmark end to end at 32 px: every model exported within tolerance, and the collapsed / 12-layer
    FLOPs ratio it reports is the analytic count's."""
    sys.path.insert(0, "benchmarks")
    import deploy

    out = tmp_path / "deploy.json"
    result = deploy.main(["--img-size", "32", "--repeats", "2", "--latency-iters", "1", "--throughput-batch", "2",
                          "--throughput-iters", "1", "--warmup", "0", "--settle", "0", "--json", str(out)])
    rows = {row["model"]: row for row in result["rows"]}
    assert len(rows) == 6 and all(row["onnx_max_abs_diff"] <= TOL for row in rows.values())
    floor = rows[deploy.SIX]["gflops"] / rows[deploy.BASELINE]["gflops"]
    assert result["ratios"]["collapsed6_vs_12_flops"] == pytest.approx(floor, abs=1e-4)
    assert 0.5 < floor < 1.0 and out.with_suffix(".md").exists()
