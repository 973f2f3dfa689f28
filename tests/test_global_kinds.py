"""Global-token kinds are registered plug-ins.

- Behaviour unchanged: every zoo model (and the global-token options, progressive join, ``to_timm`` and the supernet)
  gives, bit for bit, the weights, configs and FLOPs recorded before the kinds became plug-ins, and the outputs to
  within float rounding across CPUs (``global_kinds_reference.py``); models saved in the previous layout load.
- A kind registered from here, outside the package, builds, counts its FLOPs, saves and loads, exports to timm,
  joins and collapses branches, runs as a multi-stage encoder, and is searched by the supernet, with no edit under
  ``src/``.
- No module outside a kind's own file names a kind (the rule is stated in ``test_only_a_kinds_own_file_names_it``).
"""

from __future__ import annotations

import ast
import json
import random
import re
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import global_kinds_reference as reference
import jumbokit
from jumbokit.encoders import (Encoder, GlobalTokenKind, GlobalTokens, MultiStageEncoder, TokenTable, from_timm,
                               global_token_kind, global_token_kinds, register_global_tokens, to_timm,
                               unregister_global_tokens)
from jumbokit.encoders.flops import encoder_flops, layer_flops, multistage_flops
from jumbokit.encoders.global_kinds import first_tokens, masked_mean

SRC = Path(__file__).resolve().parents[1] / "src" / "jumbokit"
REFERENCE = json.loads(reference.REFERENCE.read_text())
SAVED = json.loads((reference.SAVED / "fingerprints.json").read_text())


# ---------------------------------------------------------------------------------------------- behaviour unchanged
@pytest.mark.parametrize("name", sorted(reference.all_cases()))
def test_fingerprint_matches_the_recorded_one(name, one_torch_thread):
    build, make_input = reference.all_cases()[name]
    torch.manual_seed(reference.SEED)
    got = reference.fingerprint(build(), make_input())
    assert reference.same_fingerprint(got, REFERENCE[name]), (got, REFERENCE[name])


def test_supernet_fingerprint_matches_the_recorded_one(one_torch_thread):
    got = json.loads(json.dumps(reference.supernet_fingerprint()))
    assert reference.same_fingerprint(got, REFERENCE["supernet"]), (got, REFERENCE["supernet"])


def test_every_case_of_the_reference_is_checked():
    assert set(REFERENCE) == set(reference.all_cases()) | {"supernet"}
    assert set(jumbokit.list_models()) <= set(REFERENCE)


@pytest.mark.parametrize("name", sorted(reference.saved_cases()))
def test_models_saved_in_the_previous_layout_load(name, one_torch_thread):
    model = jumbokit.load(reference.SAVED / name).eval()
    _, make_input = reference.saved_cases()[name]
    got = reference.fingerprint(model, make_input())
    assert reference.same_fingerprint(got, SAVED[name]), (got, SAVED[name])


def test_supernet_saved_in_the_previous_layout_loads(one_torch_thread):
    from jumbokit.nas import load_supernet

    net = load_supernet(reference.SAVED / "supernet").eval()
    archs = reference.supernet_archs(net.space)
    with torch.no_grad():
        out = net(reference._image_input(batch=len(archs)), archs)
    assert reference.tensor_digest(net.state_dict()) == SAVED["supernet"]["params"]
    assert reference.same_output(reference.output_stats([out]), SAVED["supernet"]["output"])


# ------------------------------------------------------------------------------------ a kind from outside the core
class SinkTokens(GlobalTokens):
    """S learned "sink" tokens that every patch may attend to; the feature is the mean patch token ("patches") or
    that beside the mean sink token ("both", twice as wide)."""

    kind = "sink"

    def __init__(self, dim: int, count: int, pool: str, learn_tokens: bool = True) -> None:
        super().__init__(dim)
        self.num_tokens = count
        self.pool_mode = pool
        self.feature_dim = 2 * dim if pool == "both" else dim
        self.sink_token = nn.Parameter(torch.randn(1, count, dim) * 0.02) if learn_tokens else None

    def tokens(self) -> torch.Tensor | None:
        return self.sink_token

    def pool(self, global_tokens, patches, pad_mask):
        mean = masked_mean(patches, pad_mask)
        return torch.cat([mean, global_tokens.mean(dim=1)], dim=-1) if self.pool_mode == "both" else mean


class SinkKind(GlobalTokenKind):
    options = {"sink_tokens": 2, "sink_pool": "patches"}
    token_params = ("sink_token",)
    gene_help = "'sink<S>'"

    def build(self, cfg, dim, depth, learn_tokens=True):
        return SinkTokens(dim, self.option(cfg, "sink_tokens"), self.option(cfg, "sink_pool"), learn_tokens)

    def num_tokens(self, cfg):
        return self.option(cfg, "sink_tokens")

    def feature_dim(self, cfg, dim):
        return 2 * dim if self.option(cfg, "sink_pool") == "both" else dim

    def timm_args(self, cfg):  # timm's register tokens without a class token, pooled by the mean patch
        return None if self.option(cfg, "sink_pool") == "both" else {"class_token": False,
                                                                    "reg_tokens": self.option(cfg, "sink_tokens")}

    def timm_prefix(self, cfg):
        return [("sink_token", "reg_token", self.option(cfg, "sink_tokens"))]

    def parse_gene(self, gene):
        match = re.fullmatch(r"sink(\d+)", gene)
        return {"sink_tokens": int(match.group(1))} if match else None

    def supernet_tokens(self, genes):
        most = max(self.option(g, "sink_tokens") for g in genes)
        return [TokenTable("sink_token", most, lambda count, width: torch.randn(1, count, width) * 0.02)]

    def supernet_join(self, net, opts):
        return [first_tokens(net.sink_token, self.option(opts, "sink_tokens"))]

    def supernet_extract(self, net, model, opts, dims, kept):
        count = self.option(opts, "sink_tokens")
        model.stages[0].global_tokens.sink_token.copy_(first_tokens(net.sink_token, count, dims[0]))
        super().supernet_extract(net, model, opts, dims, kept)


@pytest.fixture
def sink():
    register_global_tokens("sink", SinkKind())
    yield global_token_kind("sink")
    unregister_global_tokens("sink")


def counted_flops(model: nn.Module, x: torch.Tensor) -> int:
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops()


SINK = dict(tokenizer="image", img_size=32, patch_size=8, in_chans=3, dim=32, depth=2, num_heads=4, num_classes=5,
            global_tokens="sink", sink_tokens=3)


@pytest.mark.parametrize("pool", ["patches", "both"])
def test_a_registered_kind_builds_trains_and_counts_its_flops(sink, pool, one_torch_thread):
    torch.manual_seed(0)
    model = Encoder(**SINK, sink_pool=pool)
    assert model.num_global_tokens == 3 and model.config["sink_tokens"] == 3
    assert model.num_features == (64 if pool == "both" else 32)
    assert "global_tokens.sink_token" in model.no_weight_decay() and "sink_token" in model.state_dict()
    x = torch.randn(2, 3, 32, 32)
    out = model.forward_features(x)
    assert out.global_tokens.shape == (2, 3, 32) and model.forward_head(out).shape == (2, 5)
    model(x).square().mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    model.reset_classifier(0)  # encoder_flops counts the encoder (embedding and blocks), not a plain head
    assert encoder_flops(model) == counted_flops(model.eval(), x[:1])
    assert layer_flops(32, 16, "sink", sink_tokens=3).total == layer_flops(32, 16, "registers", num_registers=3,
                                                                           class_token=False).total
    groups = model.group_matcher()
    assert re.match(groups["stem"], "global_tokens.sink_token")


def test_a_registered_kind_saves_loads_and_exports_to_timm(sink, tmp_path, one_torch_thread):
    torch.manual_seed(0)
    model = Encoder(**SINK).eval()
    x = torch.randn(2, 3, 32, 32)
    jumbokit.save(model, tmp_path / "sink")
    back = jumbokit.load(tmp_path / "sink").eval()
    assert torch.equal(back(x), model(x))
    theirs = to_timm(model)
    assert theirs.num_reg_tokens == 3 and theirs.cls_token is None
    assert torch.equal(theirs.reg_token, model.global_tokens.sink_token)
    with torch.no_grad():
        assert torch.allclose(theirs(x), model(x), atol=1e-6)
        returned = from_timm(theirs).eval()  # timm's register tokens come back as the core's registers kind
        assert returned.config["global_tokens"] == "registers"
        assert torch.allclose(returned(x), model(x), atol=1e-6)
    with pytest.raises(ValueError, match="no 'sink' global tokens; to_timm converts global_tokens 'none', 'cls' or "
                                         "'registers'"):
        to_timm(Encoder(**SINK, sink_pool="both"))


def test_a_registered_kind_in_zoo_models_series_and_progressive_join(sink, one_torch_thread):
    torch.manual_seed(0)
    series = jumbokit.create_model("patchtst", seq_len=32, in_chans=2, num_classes=3, patches=4,
                                   global_tokens="sink", sink_tokens=2, dim=16, num_heads=2, mlp_hidden=32)
    x = torch.randn(2, 2, 32)
    assert series(x).shape == (2, 3) and series.num_global_tokens == 2
    series.reset_classifier(0)
    assert encoder_flops(series) == counted_flops(series.eval(), x[:1])

    branched = jumbokit.create_model("vit_pico_cls", img_size=32, patch_size=8, depth=4, num_classes=5, branches=2,
                                     global_tokens="sink", init_values=0.1)
    branched.set_join(1.0)
    plain = jumbokit.reparameterize(branched).eval()
    assert plain.config["global_tokens"] == "sink" and plain.depth == 2
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(plain(images), branched.eval()(images), atol=1e-5)


def test_a_registered_kind_runs_as_a_multistage_encoder(sink, tmp_path, one_torch_thread):
    torch.manual_seed(0)
    model = MultiStageEncoder(img_size=32, patch_size=4, dims=[16, 32], head_dims=[8, 8], heads=[[2], [2, 4]],
                              mlp_hidden=[[32], [64, 64]], stem_chans=8, num_classes=4, global_tokens="sink",
                              sink_tokens=2, sink_pool="both").eval()
    x = torch.randn(1, 3, 32, 32)
    assert model(x).shape == (1, 4) and model.num_features == 64
    assert multistage_flops(model) == counted_flops(model, x)
    jumbokit.save(model, tmp_path / "ms")
    assert torch.equal(jumbokit.load(tmp_path / "ms").eval()(x), model(x))


def test_a_registered_kind_is_searched_by_the_supernet(sink, one_torch_thread):
    from jumbokit import nas
    from jumbokit.nas.scoring import CandidateScorer

    space = nas.search_space("digits", dims=[[16, 8], [32, 16], [48, 32]], head_dims=[4, 8, 8],
                             heads=[[2, 1], [2, 1], [2, 1]], mlp_hidden=[[32, 16], [64, 32], [96, 48]],
                             global_tokens=["cls", "sink2", "sink3"])
    assert nas.token_gene_config("sink3") == {"global_tokens": "sink", "sink_tokens": 3}
    torch.manual_seed(0)
    net = nas.Supernet(space, num_classes=5, img_size=32)
    assert tuple(net.sink_token.shape) == (1, 3, 16) and "sink_token" in net.no_weight_decay()
    x = torch.randn(6, 3, 32, 32)
    archs = [space.largest("sink3"), space.smallest("sink2"), space.sample(random.Random(0))]
    net(x, archs).sum().backward()
    assert net.sink_token.grad is not None and net.sink_token.grad.abs().sum() > 0
    net.eval()
    for arch in archs:
        model = net.extract(arch).eval()
        with torch.no_grad():
            assert torch.allclose(model(x[:2]), net(x[:2], arch), atol=1e-5)
        assert space.flops(arch, 32, 3, 5) == counted_flops(model, x[:1])
    scorer = CandidateScorer(net, [(x, torch.arange(6) % 5)])
    budget = space.flops(space.largest("sink3"))
    result = nas.evolutionary_search(space, None, budget, score=scorer, window=0.2, population=6, iterations=1,
                                     parents=3, mutations=3, crossovers=3, write_history=False)
    assert any(r["arch"]["global_tokens"].startswith("sink") for r in result.history)


def test_registry_refuses_what_it_cannot_hold(sink):
    class Clash(SinkKind):
        options = {"num_registers": 1}

    with pytest.raises(ValueError, match="num_registers belong to kind 'registers'"):
        register_global_tokens("clash", Clash())
    with pytest.raises(ValueError, match="unknown global_tokens 'nope'"):
        Encoder(**{**SINK, "global_tokens": "nope"})
    from jumbokit.nas import token_gene_config

    with pytest.raises(ValueError, match="expected 'none', 'cls', 'reg<R>', 'jumbo<J>' or 'sink<S>'"):
        token_gene_config("sunk2")
    with pytest.raises(ValueError, match="default global-token kind"):
        unregister_global_tokens("cls")
    with pytest.raises(TypeError, match="GlobalTokenKind"):
        register_global_tokens("odd", object())


def test_the_core_registers_four_kinds_and_every_config_holds_their_options():
    assert list(global_token_kinds()) == ["none", "cls", "registers", "jumbo"]  # the sink above is gone again
    config = Encoder(tokenizer="image", img_size=16, patch_size=8, dim=16, depth=1, num_heads=2).config
    assert {"num_registers", "class_token", "jumbo_multiplier", "jumbo_pool"} <= set(config)
    assert "sink_tokens" not in config


# ----------------------------------------------------------------------------------- who may name a kind
KIND_NAMES = ("cls", "registers", "jumbo")
KINDS_DIR = SRC / "encoders" / "global_kinds"
TABLES = {"register_model": "a zoo entry's config", "SearchSpace": "a search space's genes"}


def _named_kinds(path: Path) -> list[tuple[int, str]]:
    """(line, kind) of every string constant naming a kind in ``path``, docstrings and allowed tables left out."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in TABLES:
            for keyword in node.keywords:
                if keyword.arg == "global_tokens":
                    skip |= {id(n) for n in ast.walk(keyword.value)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in KIND_NAMES and id(node) not in skip]


def test_only_a_kinds_own_file_names_it():
    """The rule: under src/jumbokit, a string literal equal to a kind's name ('cls', 'registers', 'jumbo') appears
    only in that kind's own module (encoders/global_kinds/<name>.py, where it may also name a value of the kind's
    options, e.g. the Jumbo pool "jumbo"), or as the ``global_tokens=`` value of a ``register_model(...)`` call (a zoo
    entry's config: the model is a name in a table, not a switch) or of a ``SearchSpace(...)`` call (a search space's
    genes). Docstrings and comments are prose and do not count. 'none' is not checked: the same word is the "off"
    value of many options (``pos_embed="none"``, ``normalize="none"``, ...); the 'none' kind has no switch left on it
    either (see the modules' code), but a grep cannot tell the words apart."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        for line, kind in _named_kinds(path):
            if path.parent == KINDS_DIR and path.stem == kind:
                continue
            offenders.append(f"{path.relative_to(SRC)}:{line} names {kind!r}")
    assert offenders == []


def test_the_rule_sees_a_switch(tmp_path):
    scratch = tmp_path / "switch.py"
    scratch.write_text('def f(cfg):\n    """"jumbo" in a docstring is prose."""\n'
                       '    register_model("m", global_tokens="jumbo")\n'
                       '    return cfg["global_tokens"] in ("cls", "registers")\n')
    assert _named_kinds(scratch) == [(4, "cls"), (4, "registers")]
