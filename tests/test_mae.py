"""MAE wrapper: masking counts, masked-only loss, decoder unshuffle, every plug-in trains, bad input."""

from __future__ import annotations

import json

import pytest
import torch

import jumbokit
from jumbokit.encoders import Encoder
from jumbokit.ssl import (
    MaskedAutoencoder,
    masked_patch_loss,
    normalize_patches,
    num_visible,
    patchify,
    random_masking,
    unpatchify,
)

PLUGINS = {
    "none": {},
    "cls": {},
    "registers": {"num_registers": 2},
    "jumbo": {"jumbo_multiplier": 2},
}


def tiny_encoder(global_tokens: str = "cls", img_size: int = 16, in_chans: int = 1, **extra) -> Encoder:
    opts = {**PLUGINS[global_tokens], **extra}
    return Encoder(tokenizer="image", img_size=img_size, patch_size=4, in_chans=in_chans, dim=32, depth=2,
                   num_heads=2, global_tokens=global_tokens, **opts)


def tiny_mae(global_tokens: str = "cls", **kwargs) -> MaskedAutoencoder:
    encoder_opts = {k: kwargs.pop(k) for k in list(kwargs) if k in ("img_size", "in_chans")}
    return MaskedAutoencoder(tiny_encoder(global_tokens, **encoder_opts), decoder_dim=16, decoder_depth=1,
                             decoder_num_heads=2, **kwargs)


def digit_images(count: int = 32, size: int = 16) -> torch.Tensor:
    """Real scikit-learn digits (bundled, no download), upsampled to size x size, in [0, 1]."""
    from sklearn.datasets import load_digits

    images = torch.tensor(load_digits().images[:count], dtype=torch.float32).unsqueeze(1) / 16.0
    return torch.nn.functional.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)


@pytest.mark.parametrize("num_patches,ratio", [(16, 0.75), (64, 0.75), (49, 0.75), (10, 0.33), (16, 0.0), (7, 0.9)])
def test_masking_keeps_round_n_times_one_minus_ratio(num_patches, ratio):
    keep, mask = random_masking(5, num_patches, ratio, generator=torch.Generator().manual_seed(0))
    expected = int(round(num_patches * (1 - ratio)))
    assert num_visible(num_patches, ratio) == expected
    assert keep.shape == (5, expected)
    assert mask.shape == (5, num_patches)
    assert torch.all(mask.sum(dim=1) == num_patches - expected)
    for row_keep, row_mask in zip(keep, mask):
        assert len(set(row_keep.tolist())) == expected  # no duplicates
        assert torch.all(row_mask[row_keep] == 0)


def test_forward_encodes_only_visible_patches():
    model = tiny_mae("jumbo")  # 16x16 px, patch 4 -> 16 patches, keep 4
    images = torch.randn(3, 1, 16, 16)
    out, keep, mask, grid = model.forward_encoder(images)
    assert grid == (4, 4)
    assert keep.shape == (3, 4) and out.patches.shape == (3, 4, 32)
    assert out.global_tokens.shape == (3, 2, 32)  # J = 2 Jumbo tokens always stay
    result = model(images)
    assert result.pred.shape == (3, 16, 16) and result.mask.shape == (3, 16)
    assert torch.all(result.mask.sum(1) == 12)


def test_loss_counts_only_masked_patches():
    model = tiny_mae("cls")
    images = torch.randn(4, 1, 16, 16)
    out, keep, mask, grid = model.forward_encoder(images)
    pred = model.forward_decoder(out, keep, grid).detach().requires_grad_(True)
    target = model.target(images)
    loss = masked_patch_loss(pred, target, mask)
    loss.backward()
    visible = mask == 0
    assert torch.all(pred.grad[visible] == 0)
    assert torch.all(pred.grad[~visible].abs().sum(-1) > 0)
    manual = ((pred - target) ** 2).mean(-1)[~visible].mean()
    torch.testing.assert_close(loss, manual)
    # changing predictions of visible patches leaves the loss unchanged
    edited = pred.detach().clone()
    edited[visible] += 100.0
    torch.testing.assert_close(masked_patch_loss(edited, target, mask), loss.detach())


def test_ratio_zero_is_plain_autoencoding():
    pred, target = torch.randn(2, 5, 3), torch.randn(2, 5, 3)
    loss = masked_patch_loss(pred, target, torch.zeros(2, 5))
    torch.testing.assert_close(loss, ((pred - target) ** 2).mean())


def test_unshuffle_puts_tokens_back_in_patch_order():
    model = tiny_mae("cls")
    num_patches, width = 6, 16
    keep = torch.stack([torch.randperm(num_patches)[:4] for _ in range(3)])
    visible = torch.randn(3, 4, width)
    full = model.unshuffle(visible, keep, num_patches)
    assert full.shape == (3, num_patches, width)
    for b in range(3):
        for i in range(4):
            torch.testing.assert_close(full[b, keep[b, i]], visible[b, i])
        hidden = sorted(set(range(num_patches)) - set(keep[b].tolist()))
        for j in hidden:
            torch.testing.assert_close(full[b, j], model.mask_token[0, 0])


@pytest.mark.parametrize("global_tokens", list(PLUGINS))
def test_ratio_zero_sees_every_patch_whatever_the_shuffle(global_tokens):
    """With ratio 0 every patch is visible; two different random orders must decode identically."""
    model = tiny_mae(global_tokens).eval()
    images = torch.randn(2, 1, 16, 16)
    with torch.no_grad():
        first = model(images, mask_ratio=0.0, generator=torch.Generator().manual_seed(1))
        second = model(images, mask_ratio=0.0, generator=torch.Generator().manual_seed(2))
    assert first.keep.shape == (2, 16) and torch.all(first.mask == 0)
    assert not torch.equal(first.keep, second.keep)  # the shuffles differ ...
    torch.testing.assert_close(first.pred, second.pred, atol=1e-5, rtol=1e-5)  # ... the decoding does not


@pytest.mark.parametrize("global_tokens", list(PLUGINS))
def test_every_plugin_trains_with_decreasing_loss(global_tokens):
    torch.manual_seed(0)
    model = tiny_mae(global_tokens)
    images = digit_images(32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.05)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(30):
        loss = model(images, generator=generator).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses
    for name, param in model.named_parameters():
        if param.requires_grad:
            assert param.grad is not None, f"{name} got no gradient"


def test_zoo_models_wrap(tmp_path):
    for name in ("vit_pico_jumbo", "vit_pico_cls", "vit_pico_reg16", "vit_pico_gap"):
        encoder = jumbokit.create_model(name, img_size=16, patch_size=4, in_chans=3, depth=1, num_classes=0)
        model = MaskedAutoencoder(encoder, decoder_dim=32, decoder_depth=1, decoder_num_heads=2)
        out = model(torch.randn(2, 3, 16, 16))
        assert out.pred.shape == (2, 16, 48) and torch.isfinite(out.loss)
    json.dumps(model.config)  # the wrapper's config is JSON-able
    jumbokit.save(model.encoder, tmp_path)  # the encoder saves and reloads on its own
    reloaded = jumbokit.load(tmp_path)
    torch.testing.assert_close(reloaded.state_dict()["pos_embed"], model.encoder.state_dict()["pos_embed"])


def test_patchify_roundtrip_and_norm_pix_target():
    images = torch.randn(2, 3, 8, 12)
    patches = patchify(images, (4, 4))
    assert patches.shape == (2, 6, 48)
    torch.testing.assert_close(unpatchify(patches, (4, 4), (2, 3), 3), images)
    # patch order matches the encoder's conv patchify (row-major): patch 1 is rows 0-3, columns 4-7
    torch.testing.assert_close(patches[:, 1].reshape(2, 4, 4, 3).permute(0, 3, 1, 2), images[:, :, 0:4, 4:8])
    normed, mean, std = normalize_patches(patches)
    torch.testing.assert_close(normed.mean(-1), torch.zeros(2, 6), atol=1e-5, rtol=0)
    torch.testing.assert_close(normed * std + mean, patches)


def test_norm_pix_loss_switch():
    images = torch.rand(2, 1, 16, 16) * 5
    assert not torch.allclose(tiny_mae(norm_pix_loss=True).target(images), patchify(images, (4, 4)))
    torch.testing.assert_close(tiny_mae(norm_pix_loss=False).target(images), patchify(images, (4, 4)))


def test_reconstruct_pastes_visible_patches():
    model = tiny_mae("jumbo")
    images = torch.rand(2, 1, 16, 16)
    pics = model.reconstruct(images)
    for key in ("original", "masked", "reconstruction", "pasted"):
        assert pics[key].shape == images.shape
    visible = (pics["mask"] == 0).reshape(2, 1, 4, 4).repeat_interleave(4, 2).repeat_interleave(4, 3)
    torch.testing.assert_close(pics["pasted"][visible], images[visible])
    assert torch.all(pics["masked"][~visible] == 0)
    assert model.training  # reconstruct restores the mode


def test_bad_inputs():
    with pytest.raises(ValueError, match="mask_ratio"):
        tiny_mae(mask_ratio=1.0)
    with pytest.raises(ValueError, match="no visible patch"):
        tiny_mae(mask_ratio=0.99)
    with pytest.raises(ValueError, match="divisible by 4"):
        MaskedAutoencoder(tiny_encoder(), decoder_dim=18, decoder_num_heads=2)
    with pytest.raises(ValueError, match="decoder_num_heads"):
        MaskedAutoencoder(tiny_encoder(), decoder_dim=32, decoder_num_heads=3)
    with pytest.raises(ValueError, match="image or series encoder"):
        MaskedAutoencoder(torch.nn.Linear(2, 2))
    model = tiny_mae()
    with pytest.raises(ValueError, match="expected images of 1 channels, got 3"):
        model(torch.randn(2, 3, 16, 16))
    with pytest.raises(ValueError, match="divisible by the patch size"):
        model(torch.randn(2, 1, 18, 16))
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        model(torch.randn(1, 16, 16))


# ----------------------------------------------------------------------------------------- recipes
def load_recipe(name: str):
    import importlib

    return importlib.import_module(f"jumbokit.recipes.{name}")


TINY_RUN = ["--model", "vit_pico_cls", "--depth", "1", "--decoder-depth", "1", "--decoder-dim", "32",
            "--decoder-heads", "2", "--epochs", "1", "--batch-size", "32", "--max-train-samples", "64",
            "--val-samples", "16", "--vis-images", "2", "--no-progress", "--cpu"]


def check_probe_results(out, summary, above: float = 0.0) -> None:
    """The probe's test accuracy counts whole test images, top-5 >= top-1, and is above ``above`` percent."""
    import csv

    rows = {r["split"]: r for r in csv.DictReader(open(out / "results.csv"))}
    n_test = len(jumbokit.data.build_dataset("digits", "test", task="eval", img_size=16, in_chans=1))
    top1, top5 = float(rows["test"]["top1"]), float(rows["test"]["top5"])
    assert summary["test_top1"] == pytest.approx(top1, abs=1e-3)
    assert abs(top1 * n_test / 100 - round(top1 * n_test / 100)) < 1e-2 and top5 >= top1
    assert top1 > above


def test_recipes_end_to_end(tmp_path, capsys):
    """mae_pretrain -> run dir with a loadable encoder -> linear_probe; resume with other flags is refused."""
    mae_recipe, probe_recipe = load_recipe("mae_pretrain"), load_recipe("linear_probe")
    run = tmp_path / "mae"
    summary = mae_recipe.main([*TINY_RUN, "--out", str(run)])
    assert summary["epochs"] == 1 and summary["effective_batch"] == 32
    assert summary["lr"] == pytest.approx(1.5e-3 * 32 / 256)  # the digits base lr
    for name in ("model.safetensors", "model_config.json", "mae.safetensors", "reconstructions.png", "report.md",
                 "metrics.jsonl", "config.json"):
        assert (run / name).exists(), name
    encoder = jumbokit.load(run)
    assert encoder.config["patch_size"] == 4 and encoder.config["in_chans"] == 1
    with pytest.raises(ValueError, match="already holds a run"):
        mae_recipe.main([*TINY_RUN, "--out", str(run)])
    with pytest.raises(ValueError, match="--decoder-dim: run has 32, given 64"):  # resume keeps the run's flags
        mae_recipe.main([*TINY_RUN, "--out", str(run), "--resume", "--decoder-dim", "64"])
    result = probe_recipe.main(["--checkpoint", str(run), "--batch-size", "64", "--min-steps", "400",
                                "--max-train-samples", "128", "--no-progress", "--cpu"])
    check_probe_results(run / "linear_probe", result, above=20.0)  # chance is 10%
    assert result["epochs"] == 200  # --epochs not given: 2 steps per epoch, raised to reach 400 steps
    assert (run / "linear_probe" / "results.csv").exists()
    before = jumbokit.load(run).state_dict()
    result = probe_recipe.main(["--checkpoint", str(run), "--epochs", "1", "--batch-size", "64", "--optimizer",
                                "lars", "--max-train-samples", "128", "--no-cache-features", "--no-progress", "--cpu",
                                "--min-steps", "0", "--out", str(tmp_path / "probe_images")])
    check_probe_results(tmp_path / "probe_images", result)
    after = jumbokit.load(run).state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_recipe_help_and_bad_input(tmp_path, capsys):
    mae_recipe, probe_recipe = load_recipe("mae_pretrain"), load_recipe("linear_probe")
    for recipe in (mae_recipe, probe_recipe):
        with pytest.raises(SystemExit) as exit_info:
            recipe.build_parser().parse_args(["--help"])
        assert exit_info.value.code == 0
    assert "--mask-ratio" in capsys.readouterr().out
    args = mae_recipe.resolve_recipe_defaults(mae_recipe.build_parser().parse_args([]))  # every flag has a default
    assert (args.dataset, args.blr, tuple(args.betas), args.weight_decay, args.mask_ratio, args.norm_pix_loss) == (
        "digits", 1.5e-3, (0.9, 0.95), 0.05, 0.75, True)
    from jumbokit.cli.data import data_settings_from_args  # --scale / --hflip left out: the dataset's MAE defaults

    augmentation = data_settings_from_args(args).build("train", "mae", progress=False).info()["augmentation"]
    assert (augmentation["hflip"], tuple(augmentation["scale"])) == (0.0, (0.5, 1.0))
    folder = mae_recipe.resolve_recipe_defaults(mae_recipe.build_parser().parse_args(["--dataset", "folder:x"]))
    assert folder.blr == 1.5e-4  # MAE's recipe
    from jumbokit.data import dataset_defaults

    assert (dataset_defaults("folder:x").hflip, dataset_defaults("folder:x").crop_scale_for("mae")) == (0.5, (0.2, 1.0))
    given = mae_recipe.resolve_recipe_defaults(mae_recipe.build_parser().parse_args(["--blr", "1e-3"]))
    assert given.blr == 1e-3
    with pytest.raises(FileNotFoundError, match="does not exist"):
        probe_recipe.main(["--checkpoint", str(tmp_path / "missing")])
    with pytest.raises(FileNotFoundError, match="no MAE run"):
        probe_recipe.newest_mae_run(tmp_path)


# ----------------------------------------------------------------------------------------- resume, front-door errors
@pytest.fixture(scope="module")
def mae_run(tmp_path_factory):
    """One finished tiny MAE run (shared by the tests below, which copy it before changing it)."""
    run = tmp_path_factory.mktemp("mae") / "run"
    load_recipe("mae_pretrain").main([*TINY_RUN, "--out", str(run)])
    return run


def test_resume_honours_the_runs_flags(mae_run, tmp_path):
    """Resume continues with the stored flags; other flags are refused with each difference named; more --epochs
    are accepted and recorded in resumes.jsonl; config.json stays byte-for-byte the first one."""
    import shutil

    recipe = load_recipe("mae_pretrain")
    run = tmp_path / "run"
    shutil.copytree(mae_run, run)
    first = (run / "config.json").read_bytes()
    with pytest.raises(ValueError) as refused:
        recipe.main(["--out", str(run), "--resume", "--lr", "0.005", "--max-train-samples", "128"])
    assert "--lr: run has unset, given 0.005" in str(refused.value)
    assert "--max-train-samples: run has 64, given 128" in str(refused.value)
    summary = recipe.main(["--out", str(run), "--resume"])  # no flag repeated: the stored run continues
    assert (summary["model"], summary["epochs"], summary["effective_batch"]) == ("vit_pico_cls", 1, 32)
    summary = recipe.main(["--out", str(run), "--resume", "--epochs", "2", "--no-progress"])
    assert summary["epochs"] == 2
    assert (run / "config.json").read_bytes() == first
    resumes = [json.loads(line) for line in (run / "resumes.jsonl").read_text().splitlines()]
    assert [r["changed"] for r in resumes] == [{}, {"epochs": {"run": 1, "given": 2}}]
    assert recipe.main(["--out", str(run), "--resume"])["epochs"] == 2  # the accepted change holds from now on
    with pytest.raises(ValueError, match=r"--epochs: run has 2, given 1 \(on resume --epochs may only grow\)"):
        recipe.main(["--out", str(run), "--resume", "--epochs", "1"])


def test_given_flags_are_those_typed():
    from jumbokit.cli.config import given_flags

    parser = load_recipe("mae_pretrain").build_parser()
    assert given_flags(parser, []) == {}
    assert given_flags(parser, ["--lr", "0.1", "--no-norm-pix-loss", "--resume"]) == {
        "lr": 0.1, "norm_pix_loss": False, "resume": "latest"}


def test_mae_refuses_a_multistage_encoder_before_writing(tmp_path):
    with pytest.raises(ValueError, match=r"^--model vit_res_pico: MAE needs a plain encoder \(keep/drop of patch "
                                         r"tokens\); vit_res_\* models are multi-stage; pick e.g. vit_pico_jumbo$"):
        load_recipe("mae_pretrain").main(["--model", "vit_res_pico", "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()


def test_no_progress_keeps_the_summary_lines(mae_run, tmp_path, capsys):
    probe = load_recipe("linear_probe")
    probe.main(["--checkpoint", str(mae_run), "--out", str(tmp_path / "p"), "--epochs", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert "CPU threads:" in err and "linear probe of" in err


def test_probe_explicit_flags_win(mae_run, tmp_path, capsys):
    """--epochs given: --min-steps does not raise it; the default batch shrinks to a small subset (one log line);
    a batch the user gave that does not fit is refused before anything is written."""
    probe = load_recipe("linear_probe")
    result = probe.main(["--checkpoint", str(mae_run), "--out", str(tmp_path / "a"), "--epochs", "1",
                         "--max-train-samples", "128", "--no-progress"])
    assert (result["epochs"], result["batch_size"]) == (1, 128)
    assert "batch size 128 (the default 256 is larger than the 128 training samples)" in capsys.readouterr().err
    with pytest.raises(ValueError, match="^--batch-size 256 is larger than the 128 training samples; "
                                         "pass --batch-size <= 128$"):
        probe.main(["--checkpoint", str(mae_run), "--out", str(tmp_path / "b"), "--batch-size", "256",
                    "--max-train-samples", "128", "--no-progress"])
    assert not (tmp_path / "b").exists()
