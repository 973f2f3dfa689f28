"""jumbokit's image models built by timm.create_model, and what timm's scripts use of a model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

timm = pytest.importorskip("timm")

import jumbokit  # noqa: E402
from jumbokit import timm_models  # noqa: E402
from jumbokit.encoders import from_timm  # noqa: E402

TINY = dict(img_size=32, num_classes=5)
PATCH = {"vit_res_pico_jumbo": 4, "vit_res_pico_reg4": 4}


def tiny_kwargs(name: str) -> dict:
    return {**TINY, "patch_size": PATCH.get(name, 8)} if "res" in name else {**TINY, "patch_size": 8, "depth": 3}


def test_every_image_model_is_registered_and_no_series_model():
    names = timm_models.image_model_names()
    assert timm_models.SKIPPED == [] and timm_models.REGISTERED == names
    assert {"vit_tiny_jumbo", "vit_pico_reg16", "vit_base_gap", "vit_res_tiny", "vit_resnas_small_jumbo"} <= set(names)
    assert all(timm.is_model(n) for n in names)
    assert not any(timm.is_model(n) for n in jumbokit.list_models("patchtst*") + ["series_cnn"])


@pytest.mark.parametrize("name", ["vit_pico_cls", "vit_pico_reg16", "vit_pico_jumbo", "vit_pico_gap",
                                  "vit_res_pico_jumbo", "vit_res_pico_reg4"])
def test_timm_create_model_equals_jumbokit_create_model(name):
    kwargs = tiny_kwargs(name)
    ours = jumbokit.create_model(name, **kwargs).eval()
    theirs = timm.create_model(name, pretrained=False, **kwargs).eval()
    assert type(theirs) is type(ours) and theirs.config == ours.config
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(theirs(x), ours(x))
    assert theirs.num_features == ours.num_features and theirs.pretrained_cfg is theirs.default_cfg


def test_the_arguments_of_timm_train_and_validate():
    model = timm.create_model(
        "vit_pico_jumbo", pretrained=False, in_chans=1, num_classes=4, drop_rate=0.3, proj_drop_rate=0.1,
        drop_path_rate=0.1, drop_block_rate=None, global_pool=None, bn_momentum=None, bn_eps=None,
        scriptable=None, checkpoint_path="", pretrained_cfg_overlay=dict(crop_pct=1.0), cache_dir=None,
        img_size=32, patch_size=8, depth=2)
    cfg = model.config
    assert (cfg["in_chans"], cfg["num_classes"], cfg["head_drop_rate"], cfg["drop_rate"], cfg["drop_path_rate"]) == (
        1, 4, 0.3, 0.1, 0.1)
    data = timm.data.resolve_model_data_config(model)
    assert data["input_size"] == (1, 32, 32) and data["crop_pct"] == 1.0 and len(data["mean"]) == 1
    model.reset_classifier(7, global_pool="token")
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 7)
    with pytest.raises(ValueError, match="global_pool"):
        model.reset_classifier(7, global_pool="avg")
    with pytest.raises(ValueError, match="pos_drop_rate"):
        timm.create_model("vit_pico_cls", pos_drop_rate=0.1)
    with pytest.raises(ValueError, match="unknown option"):
        timm.create_model("vit_pico_cls", jumbo_multplier=2)


def test_pretrained_needs_a_weight_source(tmp_path):
    with pytest.raises(ValueError, match="publishes no weights for 'vit_pico_jumbo'"):
        timm.create_model("vit_pico_jumbo", pretrained=True)
    source = jumbokit.create_model("vit_pico_jumbo", **tiny_kwargs("vit_pico_jumbo")).eval()
    target = jumbokit.save(source, tmp_path / "run")
    model = timm.create_model("vit_pico_jumbo", pretrained=True, pretrained_cfg_overlay=dict(file=str(target)),
                              **tiny_kwargs("vit_pico_jumbo")).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(x), source(x))


def test_layer_decay_groups_blocks_by_depth_as_timm_does():
    """timm's param_groups_layer_decay on a jumbokit model: stem, one group per block, head; the same lr scales as
    for timm's own ViT of the same architecture (parameter for parameter)."""
    from timm.optim import param_groups_layer_decay

    def _scales(model, no_weight_decay=()):
        groups = param_groups_layer_decay(model, weight_decay=0.05, layer_decay=0.5,
                                          no_weight_decay_list=no_weight_decay)
        names = {id(p): n for n, p in model.named_parameters()}
        return {names[id(p)]: (g["lr_scale"], g["weight_decay"]) for g in groups for p in g["params"]}

    torch.manual_seed(0)
    reference = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=3, num_classes=5,
                                  reg_tokens=2, no_embed_class=True)
    ours = from_timm(reference)
    theirs, mine = _scales(reference), _scales(ours)
    renamed = {n.replace("global_tokens.", ""): v for n, v in mine.items()}
    assert renamed == theirs
    assert mine["blocks.1.attn.qkv.weight"] == (0.5 ** 2, 0.05) and mine["head.weight"] == (1.0, 0.05)
    assert mine["global_tokens.cls_token"] == (0.5 ** 4, 0.05)
    assert _scales(ours, ours.no_weight_decay())["global_tokens.cls_token"] == (0.5 ** 4, 0.0)
    jumbo = _scales(jumbokit.create_model("vit_pico_jumbo", **tiny_kwargs("vit_pico_jumbo"), init_values=0.1))
    assert len({s for s, _ in jumbo.values()}) == 3 + 2  # stem, 3 blocks, head
    assert jumbo["global_tokens.jumbo_norms.1.weight"][0] == jumbo["blocks.1.norm1.weight"][0] == 0.5 ** 2
    assert jumbo["global_tokens.jumbo_mlp.fc1.weight"][0] == jumbo["blocks.2.mlp.fc1.weight"][0] == 0.5


def test_one_training_step_and_an_evaluation_the_timm_way():
    """What timm's train.py and validate.py do with a model, in-process on a tiny one."""
    from PIL import Image
    from timm.data import create_transform, resolve_model_data_config
    from timm.loss import LabelSmoothingCrossEntropy
    from timm.optim import create_optimizer_v2
    from timm.utils import AverageMeter, ModelEmaV3, accuracy

    torch.manual_seed(0)
    model = timm.create_model("vit_pico_reg16", **tiny_kwargs("vit_pico_reg16"), drop_path_rate=0.1)
    model.set_grad_checkpointing(True)
    optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05, layer_decay=0.75)
    ema = ModelEmaV3(model, decay=0.9)
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.train()
    loss = LabelSmoothingCrossEntropy(0.1)(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    ema.update(model)
    assert torch.isfinite(loss) and all(not torch.equal(before[n], p) for n, p in model.named_parameters())

    transform = create_transform(**resolve_model_data_config(model))
    images = torch.stack([transform(Image.fromarray(np.full((40, 48, 3), 40 * i, np.uint8))) for i in range(4)])
    assert images.shape == (4, 3, 32, 32)
    top1 = AverageMeter()
    ema.module.eval()
    with torch.no_grad():
        top1.update(accuracy(ema.module(images), y, topk=(1,))[0].item(), len(y))
    assert 0.0 <= top1.avg <= 100.0


def test_features_only_uses_forward_intermediates():
    model = timm.create_model("vit_pico_reg16", features_only=True, feature_cls="getter", out_indices=(0, 2),
                              **tiny_kwargs("vit_pico_reg16")).eval()
    maps = model(torch.randn(2, 3, 32, 32))
    assert [m.shape for m in maps] == [(2, 96, 4, 4)] * 2


@pytest.mark.parametrize("first,second", [("jumbokit", "timm"), ("timm", "jumbokit")])
def test_the_zoo_joins_timms_registry_whichever_is_imported_first(first, second):
    """jumbokit registers its models when timm is imported (before or after jumbokit); ``import jumbokit`` alone
    leaves timm unloaded (it would add seconds to every front door's start)."""
    import subprocess
    import sys

    code = (f"import sys; import {first}; loaded = 'timm' in sys.modules; import {second}; import timm; "
            "m = timm.create_model('vit_pico_jumbo', num_classes=3, img_size=32, patch_size=8, depth=1); "
            "print(loaded, type(m).__module__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded, module = proc.stdout.split()
    assert module == "jumbokit.encoders.encoder"
    assert loaded == str(first == "timm")


@pytest.mark.parametrize("name, channels, reduction", [("vit_pico_jumbo", [96] * 3, [16] * 3),
                                                       ("vit_res_pico_jumbo", [48, 96, 192], [4, 8, 16])])
def test_features_only_gives_timm_feature_maps(name, channels, reduction):
    """timm.create_model(features_only=True) takes the getter path of timm's ViTs: the last 3 blocks of a plain
    encoder, every stage of a multi-stage one, as NCHW maps equal to the model's own intermediates."""
    torch.manual_seed(0)
    features = timm.create_model(name, features_only=True, img_size=32).eval()
    assert features.feature_info.channels() == channels and features.feature_info.reduction() == reduction
    torch.manual_seed(0)
    whole = timm.create_model(name, img_size=32).eval()
    x = torch.randn(2, 3, 32, 32)
    maps = features(x)
    reference = whole.forward_intermediates(x, indices=3 if name.startswith("vit_pico") else None,
                                            intermediates_only=True)
    assert [tuple(m.shape) for m in maps] == [(2, c, 32 // r, 32 // r) for c, r in zip(channels, reduction)]
    assert all(torch.equal(a, b) for a, b in zip(maps, reference))


def test_multistage_intermediates_end_in_forward_features_and_prune_to_the_taken_stages():
    model = jumbokit.create_model("vit_res_pico_jumbo", img_size=32, num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    final, maps = model.forward_intermediates(x, indices=[0, -1], norm=True)
    assert torch.equal(model.forward_head(final), model(x))
    assert torch.allclose(maps[-1].flatten(2).transpose(1, 2), model.forward_features(x).patches, atol=1e-6)
    assert model.prune_intermediate_layers([0, 1]) == [0, 1] and len(model.stages) == 2
    assert model(x).shape == (2, 96)  # the head went with the dropped stage; the feature is stage 1's mean
    with pytest.raises(ValueError, match="stage index 5 is out of range for 2 stages"):
        model.forward_intermediates(x, indices=[5])
