"""Fingerprints of every zoo model (and of the other places a global-token kind reaches) at a tiny size.

``tests/data/global_kinds/reference.json`` holds the fingerprints as the code computed them before the global-token
kinds became registered plug-ins; ``tests/data/global_kinds/saved/`` holds models saved in that layout.
``test_global_kinds.py`` recomputes the fingerprints and asserts that they are equal: bit for bit the initial weights
(a SHA-256 of every tensor's bytes, in state-dict order), the configs, the FLOPs and the weight-decay exclusions; the
outputs on a fixed input (float32, CPU, one torch thread) to within float rounding (:func:`same_output`), since
matrix kernels round differently on different CPUs (the same revision gave outputs a few units in the last place
apart on two machines).

``python tests/global_kinds_reference.py --record`` rewrites both (only ever from a revision whose behaviour is the
reference).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

import jumbokit
from jumbokit.encoders import model_config
from jumbokit.encoders.flops import encoder_flops

DATA = Path(__file__).parent / "data" / "global_kinds"
REFERENCE = DATA / "reference.json"
SAVED = DATA / "saved"
SEED = 0


def tensor_digest(tensors: dict[str, torch.Tensor] | list[torch.Tensor]) -> str:
    """SHA-256 of names, dtypes, shapes and bytes, in order (bit-exact)."""
    items = tensors.items() if isinstance(tensors, dict) else enumerate(tensors)
    h = hashlib.sha256()
    for name, t in items:
        t = t.detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


OUTPUT_PROJECTIONS = 16  # seeded random directions an output is read along (besides its sum and absolute sum)
OUTPUT_RTOL, OUTPUT_ATOL = 1e-4, 1e-5  # float rounding of another CPU's kernels, far below any change of behaviour


def output_stats(tensors: list[torch.Tensor]) -> dict[str, Any]:
    """An output's shapes and a few numbers that stand for its values: their sum, absolute sum and projections on
    :data:`OUTPUT_PROJECTIONS` seeded random unit directions. Weights are compared bit for bit
    (:func:`tensor_digest`); outputs go through matrix kernels whose rounding differs between CPUs, so they are
    compared to within :data:`OUTPUT_RTOL` / :data:`OUTPUT_ATOL` (:func:`same_output`)."""
    values = torch.cat([t.detach().double().reshape(-1).cpu() for t in tensors]).numpy()
    directions = np.random.default_rng(0).standard_normal((OUTPUT_PROJECTIONS, values.size)) / np.sqrt(values.size)
    return {"shapes": [list(t.shape) for t in tensors],
            "numbers": [float(values.sum()), float(np.abs(values).sum()), *(directions @ values).tolist()]}


def same_output(got: dict[str, Any], want: dict[str, Any]) -> bool:
    """Whether two :func:`output_stats` agree: the same shapes, every number within the tolerances (relative to the
    largest of them, so that a projection near zero is not held to a relative bound of its own)."""
    if got["shapes"] != want["shapes"] or len(got["numbers"]) != len(want["numbers"]):
        return False
    a, b = np.asarray(got["numbers"]), np.asarray(want["numbers"])
    scale = max(float(np.abs(b).max()), 1.0)
    return bool(np.all(np.abs(a - b) <= OUTPUT_ATOL * scale + OUTPUT_RTOL * np.abs(b)))


def same_fingerprint(got: Any, want: Any) -> bool:
    """Two fingerprints (nested dicts and lists) equal, their output statistics within the tolerances."""
    if isinstance(want, dict) and set(want) == {"shapes", "numbers"}:
        return isinstance(got, dict) and set(got) == set(want) and same_output(got, want)
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(
            same_fingerprint(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            same_fingerprint(g, w) for g, w in zip(got, want))
    return got == want


def config_digest(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


# ------------------------------------------------------------------------------------------------ the cases
def _image_input(batch: int = 2, chans: int = 3, size: int = 32) -> torch.Tensor:
    return torch.randn(batch, chans, size, size, generator=torch.Generator().manual_seed(1))


def _series_input(batch: int = 2, chans: int = 2, length: int = 32) -> torch.Tensor:
    return torch.randn(batch, chans, length, generator=torch.Generator().manual_seed(1))


def _plain_overrides(name: str) -> dict[str, Any]:
    heads = model_config(name)["num_heads"]
    return dict(img_size=32, patch_size=8, depth=2, dim=16 * heads, num_classes=5)


def _multistage_overrides(name: str) -> dict[str, Any]:
    """The registered architecture with every width a quarter (heads and depths as registered), 32 px images."""
    cfg = model_config(name)
    return dict(img_size=32, patch_size=4, num_classes=5, dims=[d // 4 for d in cfg["dims"]],
                head_dims=[max(1, d // 4) for d in cfg["head_dims"]],
                mlp_hidden=[[f // 4 for f in fs] for fs in cfg["mlp_hidden"]])


SERIES = dict(seq_len=32, in_chans=2, num_classes=3, patches=4)


def zoo_cases() -> dict[str, tuple[Callable[[], torch.nn.Module], Callable[[], torch.Tensor]]]:
    """name -> (build the model, its input): every registered model at a tiny size."""
    cases = {}
    for name in jumbokit.list_models():
        cfg = model_config(name, seq_len=32) if name.startswith(("patchtst", "series")) else model_config(name)
        if cfg.get("encoder") == "multistage":
            cases[name] = (lambda n=name: jumbokit.create_model(n, **_multistage_overrides(n)), _image_input)
        elif cfg.get("encoder") == "rocket_hybrid":
            cases[name] = (lambda n=name: _fitted_hybrid(n), _series_input)
        elif cfg.get("tokenizer") == "series":
            cases[name] = (lambda n=name: jumbokit.create_model(n, **SERIES), _series_input)
        else:
            cases[name] = (lambda n=name: jumbokit.create_model(n, **_plain_overrides(n)), _image_input)
    return cases


def _fitted_hybrid(name: str) -> torch.nn.Module:
    model = jumbokit.create_model(name, rocket_features=168, **SERIES)
    return model.fit_features(_series_input(batch=6).numpy())


TINY = dict(tokenizer="image", img_size=16, patch_size=8, in_chans=3, dim=16, depth=2, num_heads=2, num_classes=4)


def option_cases() -> dict[str, tuple[Callable[[], torch.nn.Module], Callable[[], torch.Tensor]]]:
    """The global-token options the zoo names leave at their defaults."""
    from jumbokit.encoders import Encoder

    def image16() -> torch.Tensor:
        return _image_input(size=16)

    variants = {
        "registers_no_cls": dict(global_tokens="registers", num_registers=3, class_token=False),
        "registers_token_pool": dict(global_tokens="registers", num_registers=2),
        "jumbo_unshared": dict(global_tokens="jumbo", jumbo_multiplier=2, jumbo_share=False),
        "jumbo_lora_ls": dict(global_tokens="jumbo", jumbo_multiplier=2, jumbo_lora_rank=2, init_values=0.1),
        "jumbo_mean_pool": dict(global_tokens="jumbo", jumbo_multiplier=3, jumbo_pool="jumbo+mean",
                                jumbo_mlp_ratio=2.0),
        "jumbo_segments": dict(global_tokens="jumbo", jumbo_multiplier=2, jumbo_pool="segments"),
        "jumbo_own_ls": dict(global_tokens="jumbo", jumbo_multiplier=2, jumbo_init_values=0.5),
        "jumbo_avg_pool": dict(global_tokens="jumbo", jumbo_multiplier=2, global_pool="avg"),
        "cls_avg_pool": dict(global_tokens="cls", global_pool="avg"),
        "none_token_pool": dict(global_tokens="none"),
    }
    return {f"option:{k}": (lambda v=v: Encoder(**{**TINY, **v}), image16) for k, v in variants.items()}


def branch_cases() -> dict[str, tuple[Callable[[], torch.nn.Module], Callable[[], torch.Tensor]]]:
    """Progressive join: the branched form, and the collapsed form at lambda = 1."""
    cases = {}
    for name in ("vit_pico_cls", "vit_pico_reg16", "vit_pico_jumbo", "vit_pico_gap"):
        overrides = {**_plain_overrides(name), "depth": 4, "init_values": 0.1}

        def branched(n=name, o=overrides):
            return jumbokit.create_model(n, branches=2, **o)

        def collapsed(n=name, o=overrides):
            model = jumbokit.create_model(n, branches=2, **o)
            model.set_join(1.0)
            return jumbokit.reparameterize(model)

        cases[f"branched:{name}"] = (branched, _image_input)
        cases[f"collapsed:{name}"] = (collapsed, _image_input)
    return cases


def timm_cases() -> dict[str, tuple[Callable[[], torch.nn.Module], Callable[[], torch.Tensor]]]:
    from jumbokit.encoders import to_timm

    cases = {}
    for name in ("vit_pico_cls", "vit_pico_reg16", "vit_pico_gap"):
        cases[f"to_timm:{name}"] = (lambda n=name: to_timm(jumbokit.create_model(n, **_plain_overrides(n))),
                                    _image_input)
    return cases


def tiny_space():
    from jumbokit.nas import search_space

    return search_space("digits", dims=[[16, 8], [32, 16], [48, 32]], head_dims=[4, 8, 8],
                        heads=[[2, 1], [2, 1], [2, 1]], mlp_hidden=[[32, 16], [64, 32], [96, 48]],
                        global_tokens=["cls", "none", "reg3", "jumbo2", "jumbo1"])


def supernet_archs(space) -> list[dict[str, Any]]:
    import random

    rng = random.Random(3)
    archs = [space.largest(g) for g in space.global_tokens] + [space.smallest(g) for g in space.global_tokens]
    return archs + [space.sample(rng) for _ in range(6)]


def supernet_fingerprint() -> dict[str, Any]:
    from jumbokit.nas import Supernet

    space = tiny_space()
    torch.manual_seed(SEED)
    net = Supernet(space, num_classes=5, img_size=32).eval()
    x = _image_input(batch=len(supernet_archs(space)))
    archs = supernet_archs(space)
    out: dict[str, Any] = {"params": tensor_digest(net.state_dict()), "no_weight_decay": sorted(net.no_weight_decay())}
    with torch.no_grad():
        out["mixed_logits"] = output_stats([net(x, archs)])
        extracted = []
        for arch in archs:
            model = net.extract(arch).eval()
            extracted.append({"params": tensor_digest(model.state_dict()), "config": config_digest(model.config),
                              "logits": output_stats([model(x[:2])]), "single": output_stats([net(x[:2], arch)]),
                              "flops": space.flops(arch, 32, 3, 5)})
    out["extracted"] = extracted
    out["genes"] = {g: _gene(g) for g in space.global_tokens}
    return out


def _gene(gene: str) -> dict[str, Any]:
    from jumbokit.nas import token_gene_config

    return token_gene_config(gene)


def fingerprint(model: torch.nn.Module, x: torch.Tensor) -> dict[str, Any]:
    model.eval()
    with torch.no_grad():
        y = model(x)
    out = {"params": tensor_digest(model.state_dict()), "output": output_stats([y])}
    config = getattr(model, "config", None)
    if isinstance(config, dict):
        out["config"] = config_digest(config)
        try:
            out["flops"] = encoder_flops(config)
        except (KeyError, TypeError, ValueError):
            pass
    if hasattr(model, "no_weight_decay"):
        out["no_weight_decay"] = sorted(model.no_weight_decay())
    return out


def all_cases():
    return {**zoo_cases(), **option_cases(), **branch_cases(), **timm_cases()}


def compute() -> dict[str, Any]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = {}
        for name, (build, make_input) in all_cases().items():
            torch.manual_seed(SEED)
            model = build()
            result[name] = fingerprint(model, make_input())
        result["supernet"] = supernet_fingerprint()
        return result
    finally:
        torch.set_num_threads(threads)


# ------------------------------------------------------------------------------- saved models of the old layout
def saved_cases() -> dict[str, tuple[Callable[[], torch.nn.Module], Callable[[], torch.Tensor]]]:
    """Small models whose files the layout test loads."""
    from jumbokit.encoders import Encoder, MultiStageEncoder

    def image16() -> torch.Tensor:
        return _image_input(size=16)

    def multistage(**v):
        return MultiStageEncoder(img_size=32, patch_size=4, in_chans=3, dims=[8, 16, 24], head_dims=[4, 4, 8],
                                 heads=[[2], [2, 2], [1]], mlp_hidden=[[16], [32, 16], [48]], stem_chans=4,
                                 num_classes=3, **v)

    return {
        "plain_cls": (lambda: Encoder(**TINY, global_tokens="cls"), image16),
        "plain_gap": (lambda: Encoder(**TINY, global_tokens="none", global_pool="avg"), image16),
        "plain_registers": (lambda: Encoder(**TINY, global_tokens="registers", num_registers=2), image16),
        "plain_jumbo": (lambda: Encoder(**TINY, global_tokens="jumbo", jumbo_multiplier=2, jumbo_lora_rank=2,
                                        init_values=0.1), image16),
        "plain_jumbo_unshared": (lambda: Encoder(**TINY, global_tokens="jumbo", jumbo_multiplier=2,
                                                 jumbo_share=False), image16),
        "multistage_registers": (lambda: multistage(global_tokens="registers", num_registers=2), _image_input),
        "multistage_jumbo": (lambda: multistage(global_tokens="jumbo", jumbo_multiplier=2), _image_input),
        "series_jumbo": (lambda: jumbokit.create_model("patchtst_jumbo", dim=16, num_heads=2, mlp_hidden=32,
                                                       **SERIES), _series_input),
        "branched_jumbo": (lambda: jumbokit.create_model("vit_pico_jumbo", branches=2, **{
            **_plain_overrides("vit_pico_jumbo"), "dim": 16, "num_heads": 2, "depth": 2}), _image_input),
    }


def saved_supernet():
    from jumbokit.nas import Supernet

    torch.manual_seed(SEED)
    return Supernet(tiny_space(), num_classes=5, img_size=32)


def record() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    REFERENCE.write_text(json.dumps(compute(), indent=1, sort_keys=True) + "\n")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    saved = {}
    for name, (build, make_input) in saved_cases().items():
        torch.manual_seed(SEED)
        model = build()
        jumbokit.save(model, SAVED / name)
        saved[name] = fingerprint(model, make_input())
    net = saved_supernet().eval()
    jumbokit.save(net, SAVED / "supernet")
    archs = supernet_archs(net.space)
    with torch.no_grad():
        saved["supernet"] = {"params": tensor_digest(net.state_dict()),
                             "output": output_stats([net(_image_input(batch=len(archs)), archs)])}
    torch.set_num_threads(threads)
    (SAVED / "fingerprints.json").write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/global_kinds_reference.py --record")
    record()
