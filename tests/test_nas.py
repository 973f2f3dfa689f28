"""Architecture search (the ViT-ResNAS paper): masked LayerNorm, supernet == extracted subnet,
multi-architecture batches, FLOPs, evolutionary search, the front doors."""

from __future__ import annotations

import json
import random

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import jumbokit
from jumbokit import nas

SPACE = nas.search_space("digits")


@pytest.fixture(scope="module")
def supernet():
    torch.manual_seed(0)
    net = nas.Supernet(SPACE, num_classes=10, img_size=32, in_chans=1)
    with torch.no_grad():  # non-trivial norms and biases, so slicing mistakes show
        for p in net.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return net.eval()


def _masks(sizes: torch.Tensor, width: int):
    mask = (torch.arange(width)[None] < sizes[:, None]).float().unsqueeze(1)
    return mask, sizes.view(-1, 1, 1).float()


def test_masked_layer_norm_equals_layer_norm_on_the_slice():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16)
    weight, bias = torch.randn(16), torch.randn(16)
    sizes = torch.tensor([16, 9, 4])
    mask, count = _masks(sizes, 16)
    out = nas.masked_layer_norm(x * mask, mask, count, weight, bias)
    for b, d in enumerate(sizes.tolist()):
        ref = F.layer_norm(x[b, :, :d], (d,), weight[:d], bias[:d], eps=1e-6)
        assert (out[b, :, :d] - ref).abs().max() <= 1e-6
        assert torch.all(out[b, :, d:] == 0)


def test_masked_layer_norm_is_two_pass():
    """Tokens with a large mean: E[x^2] - E[x]^2 (the reference's one pass) loses the variance in fp32."""
    torch.manual_seed(0)
    x = torch.randn(2, 4, 64) * 0.05 + 300
    sizes = torch.tensor([64, 40])
    mask, count = _masks(sizes, 64)
    ones, zeros = torch.ones(64), torch.zeros(64)
    out = nas.masked_layer_norm(x * mask, mask, count, ones, zeros)
    one_pass_var = (x * mask).square().sum(-1, keepdim=True) / count - ((x * mask).sum(-1, keepdim=True) / count) ** 2
    for b, d in enumerate(sizes.tolist()):
        exact = F.layer_norm(x[b, :, :d].double(), (d,), eps=1e-6).float()
        assert (out[b, :, :d] - exact).abs().max() <= 1e-3
        one_pass = (x[b, :, :d] - x[b, :, :d].mean(-1, keepdim=True)) * torch.rsqrt(one_pass_var[b] + 1e-6)
        assert torch.nan_to_num((one_pass - exact).abs(), nan=float("inf")).max() > 0.1  # wrong or NaN


def _archs_per_gene(count: int):
    rng = random.Random(0)
    for gene in SPACE.global_tokens:
        yield SPACE.largest(gene)
        yield SPACE.smallest(gene)
        for _ in range(count):
            arch = SPACE.sample(rng)
            arch["global_tokens"] = gene
            yield arch


def test_extracted_subnets_equal_the_masked_supernet_and_flops_match(supernet):
    x = torch.randn(2, 1, 32, 32)
    checked = 0
    for arch in _archs_per_gene(17):  # 3 genes x (17 random + smallest + largest) = 57 architectures
        model = supernet.extract(arch).eval()
        assert isinstance(model, jumbokit.encoders.MultiStageEncoder)
        with torch.no_grad():
            diff = (supernet(x, arch) - model(x)).abs().max().item()
        assert diff <= 1e-5, (arch, diff)
        if checked % 3 == 0:
            with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter, torch.no_grad():
                model(x[:1])
            assert SPACE.flops(arch, 32, 1, 10) == counter.get_total_flops()
        checked += 1
    assert checked == 57


def test_extracted_subnet_saves_and_loads(supernet, tmp_path):
    arch = SPACE.sample(random.Random(3))
    model = supernet.extract(arch).eval()
    jumbokit.save(model, tmp_path)
    x = torch.randn(2, 1, 32, 32)
    assert torch.equal(jumbokit.load(tmp_path).eval()(x), model(x))
    assert sum(1 for h in sum(arch["heads"], []) if h) == len(model.blocks)


def test_sub_batches_in_one_pass_equal_separate_passes_with_gradients():
    torch.manual_seed(1)
    net = nas.Supernet(SPACE, num_classes=10, img_size=32, in_chans=1).train()
    for m in net.modules():  # BatchNorm in the stem would mix statistics across sub-batches
        if isinstance(m, torch.nn.BatchNorm2d):
            m.eval()
    rng = random.Random(1)
    archs = [SPACE.sample(rng) for _ in range(4)]
    x, y = torch.randn(8, 1, 32, 32), torch.randint(0, 10, (8,))
    joint = F.cross_entropy(net(x, archs), y)
    joint.backward()
    grads = {n: p.grad.clone() for n, p in net.named_parameters() if p.grad is not None}
    net.zero_grad()
    separate = sum(F.cross_entropy(net(x[2 * i:2 * i + 2], a), y[2 * i:2 * i + 2]) for i, a in enumerate(archs)) / 4
    separate.backward()
    assert torch.allclose(joint, separate, atol=1e-6)
    for name, p in net.named_parameters():
        if p.grad is not None:
            assert torch.allclose(grads[name], p.grad, atol=1e-6), name


def test_warmup_opens_choices_from_the_largest():
    sampler = nas.MultiArchSampler(SPACE, num_archs=16, warmup=0.25, seed=0)
    first = sampler.sample(0, 100)
    assert all(a["dims"] == SPACE.largest()["dims"] and 0 not in sum(a["heads"], []) for a in first)
    late = [a for step in range(30, 40) for a in sampler.sample(step, 100)]
    assert {a["dims"][0] for a in late} == set(SPACE.dims[0])
    assert any(0 in sum(a["heads"], []) for a in late)  # skippable blocks are removed after the warm-up
    assert sampler.sample(7, 100) == sampler.sample(7, 100)  # resumable


def test_resort_keeps_the_largest_network_and_permutes_optimizer_state():
    torch.manual_seed(2)
    net = nas.Supernet(SPACE, num_classes=10, img_size=32, in_chans=1).eval()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x = torch.randn(2, 1, 32, 32)
    net(x, SPACE.largest()).square().sum().backward()
    opt.step()
    fc1 = net.stages[0].blocks[0].mlp.fc1.weight
    pairs_before = {tuple(row.tolist()): tuple(m.tolist()) for row, m in zip(fc1.data, opt.state[fc1]["exp_avg"])}
    before = net(x, SPACE.largest())
    net.resort_(opt)
    assert torch.allclose(net(x, SPACE.largest()), before, atol=1e-5)
    fc1 = net.stages[0].blocks[0].mlp.fc1.weight
    assert {tuple(r.tolist()): tuple(m.tolist()) for r, m in zip(fc1.data, opt.state[fc1]["exp_avg"])} == pairs_before
    score = fc1.abs().sum(1) + net.stages[0].blocks[0].mlp.fc1.bias.abs() + \
        net.stages[0].blocks[0].mlp.fc2.weight.abs().sum(0)
    assert torch.all(score[:-1] >= score[1:])


def test_validate_rejects_bad_architectures():
    arch = SPACE.largest()
    bad = json.loads(json.dumps(arch))
    bad["dims"][1] = 100
    with pytest.raises(ValueError, match=r"dims\[1\]=100 is not one of"):
        SPACE.validate(bad)
    bad = json.loads(json.dumps(arch))
    bad["heads"][0][0] = 0
    bad["mlp_hidden"][0][0] = 0
    with pytest.raises(ValueError, match="not skippable"):
        SPACE.validate(bad)
    with pytest.raises(ValueError, match="unknown search space"):
        nas.search_space("huge")
    assert SPACE.validate(SPACE.smallest()) is not None


def test_seed_spaces_contain_the_searched_networks():
    from jumbokit.encoders.zoo import VIT_RES_ARCHS

    for space_name, model in (("vit_resnas_tiny", "vit_resnas_tiny"), ("vit_resnas_small", "vit_resnas_small"),
                              ("vit_resnas_medium", "vit_resnas_medium")):
        space, ref = nas.search_space(space_name), VIT_RES_ARCHS[model]
        assert all(d in c for d, c in zip(ref["dims"], space.dims))
        for s, heads in enumerate(ref["heads"]):
            assert len(space.skippable[s]) - sum(space.skippable[s]) <= len(heads) <= len(space.skippable[s])
            assert set(heads) <= set(space.heads[s]) and set(ref["mlp_hidden"][s]) <= set(space.mlp_hidden[s])


def _synthetic_fitness(seed: int):
    """A fitness with a hidden preferred choice per gene: evolution has structure to exploit."""
    rng = random.Random(seed)
    target = nas.search_space("digits").largest()
    pref = {"dims": [rng.choice(c) for c in SPACE.dims],
            "heads": [[rng.choice(SPACE.heads[s]) for _ in range(d)] for s, d in enumerate(SPACE.depths)],
            "mlp_hidden": [[rng.choice(SPACE.mlp_hidden[s]) for _ in range(d)] for s, d in enumerate(SPACE.depths)]}
    del target

    def fitness(arch):
        score = sum(a == b for a, b in zip(arch["dims"], pref["dims"]))
        for key in ("heads", "mlp_hidden"):
            score += sum(a == b for s in range(SPACE.num_stages) for a, b in zip(arch[key][s], pref[key][s]))
        return float(score)

    return fitness


def test_search_window_uniqueness_history_and_resume(tmp_path):
    budget = SPACE.flops(SPACE.largest(), 32, 1, 10) * 0.6
    flops = lambda a: SPACE.flops(a, 32, 1, 10)  # noqa: E731
    calls = []
    fitness = _synthetic_fitness(0)

    def counting(arch):
        calls.append(1)
        return fitness(arch)

    kwargs = dict(seed=3, population=30, iterations=3, parents=8, mutations=10, crossovers=10, flops=flops)
    result = nas.evolutionary_search(SPACE, counting, budget, history_path=tmp_path / "h.jsonl", **kwargs)
    assert len(result.history) == 30 + 3 * 20 == len(calls)
    assert all(0.975 * budget <= r["flops"] <= budget for r in result.history)
    assert len({nas.arch_key(r["arch"]) for r in result.history}) == len(result.history)
    lines = (tmp_path / "h.jsonl").read_text().splitlines()
    (tmp_path / "h.jsonl").write_text("\n".join(lines[:45]) + "\n")  # interrupted in iteration 1
    calls.clear()
    resumed = nas.evolutionary_search(SPACE, counting, budget, history_path=tmp_path / "h.jsonl", **kwargs)
    assert len(calls) == 45
    assert resumed.history == result.history


def test_infeasible_window_is_a_clear_error():
    with pytest.raises(nas.InfeasibleWindowError, match="the space spans about"):
        nas.evolutionary_search(SPACE, lambda a: 0.0, 1e3, population=2, iterations=0, max_tries=50)


def test_evolution_beats_random_search_at_equal_evaluations():
    budget = SPACE.flops(SPACE.largest()) * 0.5
    wins = 0
    for seed in range(10):
        fitness = _synthetic_fitness(100 + seed)
        evo = nas.evolutionary_search(SPACE, fitness, budget, seed=seed, population=40, iterations=6, parents=10,
                                      mutations=10, crossovers=10, window=0.9)
        rand = nas.random_search(SPACE, fitness, budget, evaluations=len(evo.history), seed=seed, window=0.9)
        wins += evo.best["fitness"] > rand.best["fitness"]
    assert wins >= 8, wins


def test_recipes_end_to_end(tmp_path):
    """Supernet training -> search -> retraining the winner from scratch, on a few digits."""
    import importlib

    def recipe(name):
        return importlib.import_module(f"jumbokit.recipes.{name}")

    sn = tmp_path / "supernet"
    recipe("nas_supernet").main(["--epochs", "1", "--max-train-samples", "32", "--batch-size", "16",
                                 "--num-archs", "2", "--out", str(sn), "--no-progress"])
    assert isinstance(nas.load_supernet(sn), nas.Supernet)
    found = recipe("nas_search").main(["--checkpoint", str(sn), "--flops-of", "vit_pico_cls", "--population", "4",
                                       "--iterations", "1", "--parents", "2", "--mutations", "1", "--crossovers", "1",
                                       "--out", str(tmp_path / "search"), "--no-progress"])
    assert found["evaluated"] == 6
    history = [json.loads(line) for line in (tmp_path / "search" / "history.jsonl").read_text().splitlines()]
    assert len(history) == 6 and (tmp_path / "search" / "pareto.png").exists()
    best = json.loads((tmp_path / "search" / "best_arch.json").read_text())
    assert best["val_top1"] == max(r["fitness"] for r in history)
    assert 0 <= best["val_top1"] <= 100 and "val_top1" in (tmp_path / "search" / "results.csv").read_text()
    run = recipe("supervised").main(["--arch", str(tmp_path / "search" / "best_arch.json"), "--epochs", "1",
                                     "--max-train-samples", "32", "--out", str(tmp_path / "retrain"), "--no-progress"])
    model = jumbokit.load(tmp_path / "retrain")
    assert model.config["dims"] == best["arch"]["dims"] and run["rows"]
    with pytest.raises(ValueError, match="expects a number with a k/M/G unit"):
        recipe("nas_search").main(["--checkpoint", str(sn), "--flops", "lots"])
    with pytest.raises(ValueError, match="expects a number with a k/M/G unit"):
        nas.parse_flops("lots")
    assert nas.parse_flops("46.7M") == pytest.approx(46.7e6) and nas.parse_flops("1.2G") == pytest.approx(1.2e9)


def test_flops_without_a_unit_is_refused_before_the_supernet_is_read(tmp_path, capsys):
    from jumbokit.recipes import nas_search
    from jumbokit.cli.errors import run_cli

    # the checkpoint does not exist: the budget is checked first
    code = run_cli(lambda: nas_search.main(["--checkpoint", str(tmp_path / "none"), "--flops", "46.7",
                                            "--out", str(tmp_path / "o")]))
    assert code == 2 and not (tmp_path / "o").exists()
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "error: --flops needs a unit: e.g. 46.7M or 1.2G, got '46.7'"


def test_validate_rejects_unknown_keys():
    arch = {**SPACE.largest(), "depth": 3}
    with pytest.raises(ValueError) as info:
        SPACE.validate(arch)
    assert str(info.value) == ("unknown architecture key 'depth'; allowed keys are global_tokens, dims, heads, "
                               "mlp_hidden")


@pytest.mark.parametrize("name", ["nas_supernet", "nas_search"])
def test_nas_front_doors_take_debug_and_show_defaults_once(name):
    import argparse
    import importlib

    parser = importlib.import_module(f"jumbokit.recipes.{name}").build_parser()
    assert parser.parse_args(["--debug", "--checkpoint", "x", "--flops", "1M"] if name == "nas_search"
                             else ["--debug"]).debug
    formatter = parser._get_formatter()
    for action in parser._actions:
        text = formatter._expand_help(action)
        assert text.count("default") <= 1 and "seed 002" not in text and "(seed:" not in text, text
        if name == "nas_search" and not action.required and not isinstance(action, argparse._HelpAction) \
                and action.dest not in ("flops", "flops_of"):
            assert "default" in text, action.option_strings


def test_supernet_resume_refuses_other_flags(tmp_path):
    from jumbokit.recipes import nas_supernet

    out = str(tmp_path / "sn")
    common = ["--epochs", "1", "--max-train-samples", "16", "--batch-size", "16", "--out", out, "--no-progress"]
    nas_supernet.main(common + ["--num-archs", "2"])
    with pytest.raises(ValueError, match=r"--num-archs: run has 2, given 1"):
        nas_supernet.main(["--resume", "--out", out, "--num-archs", "1"])
