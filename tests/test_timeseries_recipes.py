"""Time series on small sets: masked-series MAE, augmentation, pretraining, recipes, ensembles, baselines."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
import torch

import jumbokit
from jumbokit.ssl import MaskedAutoencoder, masked_series_loss, observed_masking
from jumbokit.cli import tstrain_main
from jumbokit.cli import series as flags
from jumbokit.timeseries import baselines as ts_baselines
from jumbokit.timeseries import protocol as ts_protocol
from jumbokit.timeseries import report as ts_report
from jumbokit.timeseries import results as ts_results
from jumbokit.timeseries import store as ts_store
from jumbokit.timeseries import sweep as ts_sweep
from jumbokit.timeseries.models.config import SeriesModelConfig
from jumbokit.timeseries.augment import (AUGMENTATIONS, DEFAULT_AUGMENT, SeriesAugment, SeriesMixup, observed_std,
                                        parse_augment)
from jumbokit.timeseries.pretrain import StepBatches, pretrain_series

# what a run file and sweep.json (schema 1) of the paper's protocol held before the recipes existed
PAPER_SWEEP_KEYS = ["patches", "epochs", "batch_size", "weight_decay", "warmup_fraction", "min_lr", "seed", "protocol",
                    "split_seed", "mixed_precision", "normalize", "branches", "min_steps"]
RUN_KEYS = {"dataset", "model", "lr", "dropout", "val_top1", "test_top1", "val_loss", "train_loss", "epochs", "steps",
            "train_seconds", "wall_seconds", "step_ms", "params", "patch_len", "stride", "num_patches",
            "global_tokens", "extra"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small models: one thread is fastest


def tiny_series_model(name: str = "patchtst_jumbo", chans: int = 2, seq_len: int = 32, **kw):
    return jumbokit.create_model(name, num_classes=kw.pop("num_classes", 0), in_chans=chans, seq_len=seq_len,
                                 patches=8, dim=32, depth=1, num_heads=2, mlp_hidden=32, **kw)


def tiny(out, *extra: str) -> list[str]:
    return ["--dataset", "ItalyPowerDemand", "--lr", "1e-3", "--dropout", "0.1", "--out", str(out), "--no-progress",
            "--cpu", "--model", "patchtst", *extra]


# ---------------------------------------------------------------- masked-series MAE
def test_series_mae_loss_only_on_masked_observed_steps():
    torch.manual_seed(0)
    mae = MaskedAutoencoder(tiny_series_model(), decoder_dim=16, decoder_depth=1, decoder_num_heads=2,
                            mask_ratio=0.5)
    assert mae.modality == "series" and not mae.norm_pix_loss  # PatchTST regresses the patch values
    x = torch.randn(3, 2, 32)
    x[0, :, 14:] = float("nan")  # a short series, padded
    x[1, 1, 5:9] = float("nan")  # missing values inside
    out = mae(x, generator=torch.Generator().manual_seed(0))
    out.pred.retain_grad()
    out.loss.backward()
    assert torch.isfinite(out.loss)
    patches, observed = mae.encoder.patch_embed.patchify(x)
    observed = observed.reshape(6, 8, -1)  # rows = series x channel
    has_obs = observed.any(-1)
    mask = out.mask.bool()
    assert not (mask & ~has_obs).any()  # a patch with no observed step is never masked
    n_obs = has_obs.sum(1)
    assert mask.sum(1).tolist() == torch.round(n_obs * 0.5).long().tolist()  # the ratio among observed patches
    grad = out.pred.grad
    step_has_grad = grad != 0
    tok = mae.encoder.patch_embed
    hidden = mae.hidden_steps(out.mask).unfold(-1, tok.patch_len, tok.stride)  # steps no visible patch shows
    assert hidden.any() and not (hidden & ~mask[..., None]).any()
    assert not (step_has_grad & ~mask[..., None]).any()  # visible patches never enter the loss
    assert not (step_has_grad & ~observed).any()  # nor NaN padding / missing steps
    assert not (step_has_grad & ~hidden).any()  # nor steps a visible neighbour shows the encoder
    assert step_has_grad[hidden & observed].float().mean() > 0.99
    # the loss is the per-patch MSE over hidden observed steps, averaged over masked patches that have one
    targets = hidden & observed
    per_step = (out.pred.detach() - mae.target(x).nan_to_num()) ** 2 * targets
    per_patch = per_step.sum(-1) / targets.sum(-1).clamp_min(1)
    torch.testing.assert_close(out.loss.detach(), per_patch[mask & targets.any(-1)].mean())
    # the encoder sees only visible patches (never the padded ones when observed ones are left)
    vis = out.keep
    assert vis.shape[1] == int((n_obs - torch.round(n_obs * 0.5).long()).max())


@pytest.mark.parametrize("front_end", [dict(), dict(conv_stem=8), dict(trunk="resnet", trunk_width=4, trunk_diff=True),
                                       dict(trunk="inception", trunk_width=2, trunk_mix=True), dict(level_scale=True)])
def test_series_mae_encoder_never_reads_a_hidden_step(front_end):
    """Convolutions and level/scale span patch borders: what the encoder computes must not change with the
    steps only masked patches cover (before, a trunk's visible tokens read their masked neighbours)."""
    torch.manual_seed(0)
    mae = MaskedAutoencoder(tiny_series_model(seq_len=64, drop_rate=0.0, **front_end), decoder_dim=16,
                            decoder_depth=1, decoder_num_heads=2, mask_ratio=0.5)
    x = torch.randn(4, 2, 64)
    x[0, :, 50:] = float("nan")  # NaN padding keeps working
    out, keep, mask, _ = mae.forward_encoder(x, generator=torch.Generator().manual_seed(1))
    hidden = mae.hidden_steps(mask, 64).reshape(x.shape)
    assert hidden.float().mean() > 0.05
    changed, *_ = mae.forward_encoder(x + 5.0 * hidden, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(changed.patches, out.patches)
    torch.testing.assert_close(changed.global_tokens, out.global_tokens)
    shown = torch.rand(x.shape) < 0.3  # a visible step, by contrast, does reach the encoder
    moved, *_ = mae.forward_encoder(x + 5.0 * (shown & ~hidden), generator=torch.Generator().manual_seed(1))
    assert not torch.allclose(moved.patches, out.patches)


def test_hidden_steps_are_those_no_visible_patch_covers():
    mae = MaskedAutoencoder(tiny_series_model("patchtst", chans=1, seq_len=32), decoder_dim=16, decoder_depth=1,
                            decoder_num_heads=2, mask_ratio=0.4)
    tok = mae.encoder.patch_embed
    assert (tok.patch_len, tok.stride) == (8, 4)  # half-overlapping patches, end padding: steps 0..35
    mask = torch.zeros(1, 8)
    mask[0, [2, 5, 6]] = 1  # patch 2 (steps 8-15) sits between visible patches; 5 and 6 (20-31) are neighbours
    hidden = mae.hidden_steps(mask)
    assert hidden.shape == (1, 36) and torch.nonzero(hidden[0]).flatten().tolist() == list(range(24, 28))
    assert mae.hidden_steps(mask, 32).shape == (1, 32)


def test_masked_series_loss_ignores_nan_and_visible_patches():
    pred = torch.randn(2, 4, 5)
    target = torch.randn(2, 4, 5)
    target[0, 1, 2:] = float("nan")
    target[1, 3] = float("nan")  # a patch without an observed step
    mask = torch.tensor([[1.0, 1, 0, 0], [0, 1, 0, 1]])
    loss = masked_series_loss(pred, target, mask)
    changed = pred.clone()
    changed[:, 2] += 5.0  # visible patch
    changed[0, 1, 2:] += 5.0  # missing steps of a masked patch
    changed[1, 3] += 5.0  # masked patch without observations
    torch.testing.assert_close(masked_series_loss(changed, target, mask), loss)
    expected = torch.stack([((pred[0, 0] - target[0, 0]) ** 2).mean(), ((pred[0, 1, :2] - target[0, 1, :2]) ** 2).mean(),
                            ((pred[1, 1] - target[1, 1]) ** 2).mean()]).mean()
    torch.testing.assert_close(loss, expected)


def test_observed_masking_without_missing_is_plain_random_masking():
    keep, mask = observed_masking(torch.ones(5, 10, dtype=torch.bool), 0.4, torch.Generator().manual_seed(0))
    assert keep.shape == (5, 6) and mask.sum(1).tolist() == [4.0] * 5
    assert all(set(k.tolist()).isdisjoint(set(torch.nonzero(m).flatten().tolist())) for k, m in zip(keep, mask))


def test_series_mae_on_complete_series_and_reconstruct():
    mae = MaskedAutoencoder(tiny_series_model("patchtst"), decoder_dim=16, decoder_depth=1, decoder_num_heads=2,
                            mask_ratio=0.4, norm_pix_loss=True)
    x = torch.randn(2, 2, 32)
    out = mae(x)
    assert out.pred.shape == (4, 8, mae.patch_size[0]) and out.grid == (8,) and out.mask.sum(1).tolist() == [3.0] * 4
    pics = mae.reconstruct(x)
    visible = pics["mask"] == 0
    torch.testing.assert_close(pics["pasted"][visible], pics["patches"][visible])
    with pytest.raises(ValueError, match=r"expected series of shape \(B, 2, L\)"):
        mae(torch.randn(2, 3, 32))


# ---------------------------------------------------------------- augmentation
@pytest.mark.parametrize("ops", [(op,) for op in AUGMENTATIONS if op != "mixup"] + [AUGMENTATIONS])
def test_augmentation_keeps_shape_and_nan_padding(ops):
    torch.manual_seed(0)
    x = torch.randn(6, 3, 40)
    x[0, :, 17:] = float("nan")  # padded
    x[3, :, 30:] = float("nan")
    generator = torch.Generator().manual_seed(1)
    augment = SeriesAugment(ops, prob=1.0, generator=generator)
    y = augment(x)
    if "mixup" in ops:
        y, soft = SeriesMixup(3, alpha=0.4, augment=augment, generator=generator)(x, torch.tensor([0, 1, 2] * 2))
        torch.testing.assert_close(soft.sum(1), torch.ones(6))
    assert y.shape == x.shape
    torch.testing.assert_close(torch.isnan(y), torch.isnan(x))  # padding stays, observed steps stay finite
    assert not torch.equal(y.nan_to_num(), x.nan_to_num())


def test_augmentation_names_and_identities():
    assert parse_augment("default") == ("jitter", "scaling", "magnitude_warp", "time_warp", "window_slice")
    assert parse_augment("none") == () and parse_augment("mixup,jitter") == ("jitter", "mixup")
    assert parse_augment("default,mixup") == parse_augment("mixup,default") == (*DEFAULT_AUGMENT, "mixup")
    with pytest.raises(ValueError, match="'jiter' \\(did you mean 'jitter'\\?\\)"):
        parse_augment("jiter")
    x = torch.randn(4, 2, 30)
    x[1, :, 20:] = float("nan")
    for ops, kw in ((("time_warp",), {"time_sigma": 0.0}), (("window_slice",), {"window_ratio": 1.0})):
        y = SeriesAugment(ops, prob=1.0, **kw)(x)
        torch.testing.assert_close(y.nan_to_num(), x.nan_to_num(), atol=1e-5, rtol=0)
    assert torch.equal(SeriesAugment(("jitter",), prob=0.0)(x).nan_to_num(), x.nan_to_num())


def test_relative_jitter_follows_each_series_amplitude():
    """jitter_relative: the same draws as plain jitter, times each channel's observed std (a series 1000 times
    larger gets noise 1000 times larger; plain jitter gives both the same)."""
    x = torch.randn(2, 1, 50, dtype=torch.float64)  # float64: the large series' noise survives x + noise - x
    x[1] = x[0] * 1000.0
    x[:, :, 45:] = float("nan")
    noise = {rel: SeriesAugment(("jitter",), prob=1.0, jitter_relative=rel,
                                generator=torch.Generator().manual_seed(3))(x) - x for rel in (False, True)}
    std = x[:, :, :45].std(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(observed_std(x), std)
    torch.testing.assert_close(noise[True][..., :45], noise[False][..., :45] * std)
    assert torch.isnan(noise[True][..., 45:]).all()


# ---------------------------------------------------------------- pretraining
def test_step_batches_cycle_evenly():
    batches = list(StepBatches(10, 4, 7, seed=0))
    assert len(batches) == 7 and all(len(b) == 4 for b in batches)
    counts = np.bincount(np.concatenate(batches), minlength=10)
    assert counts.max() - counts.min() <= 1


def test_pretrain_series_api_on_unequal_lengths():
    rng = np.random.default_rng(0)
    series = [rng.normal(size=(2, n)) for n in (20, 32, 25, 32, 18, 30)]  # aeon's unequal-length format
    model = tiny_series_model("patchtst_jumbo", num_classes=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = pretrain_series(model, series, steps=3, batch_size=4, seed=0)
    assert result.model is model and result.steps == 3 and np.isfinite(result.loss)
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert "patch_embed.proj.weight" in changed and not any(k.startswith("head") for k in changed)
    by_name = pretrain_series("patchtst", np.stack([np.pad(s, ((0, 0), (0, 32 - s.shape[1])), constant_values=np.nan)
                                                    for s in series]), epochs=1, batch_size=4)
    assert by_name.model.config["seq_len"] == 32 and by_name.steps == 2
    with pytest.raises(ValueError, match="exactly one of steps or epochs"):
        pretrain_series(model, series, steps=2, epochs=1)
    with pytest.raises(ValueError, match="series encoder"):
        pretrain_series(jumbokit.create_model("vit_pico_cls", num_classes=0, img_size=16, patch_size=4), series,
                        steps=1)


def test_pretraining_never_reads_validation_or_test_series(tmp_path, monkeypatch):
    from jumbokit.timeseries import pretrain as ts_pretrain
    from jumbokit.timeseries.data import load_dataset

    seen = []
    original = ts_pretrain.pretrain_series
    monkeypatch.setattr(ts_pretrain, "pretrain_series", lambda model, x, **kw: seen.append(np.array(x)) or original(
        model, x, **kw))
    out = tmp_path / "pre"
    assert tstrain_main(tiny(out, "--steps", "2", "--pretrain-epochs", "1", "--batch-size", "32")) == 0
    data = load_dataset("ItalyPowerDemand")
    assert len(seen) == 1  # once per dataset, model and seed; shared by the grid
    np.testing.assert_array_equal(seen[0], data.train.x)
    for split in (data.val, data.test):
        rows = {r.tobytes() for r in split.x}
        assert not any(r.tobytes() in rows for r in seen[0])
    run = json.loads((out / "runs" / "ItalyPowerDemand" / "patchtst" / "lr0.001_do0.1.json").read_text())
    assert run["extra"] == {"pretrained": True}
    record = json.loads((out / "runs" / "ItalyPowerDemand" / "patchtst" / "pretrained_s0.json").read_text())
    assert record["steps"] == 3  # one epoch of 67 series at batch 32
    assert json.loads((out / "sweep.json").read_text())["pretrain_epochs"] == 1


# ---------------------------------------------------------------- recipes, ensembles, listing
def test_paper_protocol_is_stored_and_run_as_before(tmp_path):
    """sweep.json holds every setting with its schema; the flat record a paper sweep stored before (schema 1,
    settings added with the recipes left out at their defaults) reads as the same sweep, which resumes."""
    paper = ts_protocol.RECIPES["paper"]
    assert (paper["lrs"], paper["dropouts"], paper["batch_size"], paper["steps"]) == (
        ts_protocol.SWEEP_LRS, ts_protocol.SWEEP_DROPOUTS, 256, None)
    out = tmp_path / "paper"
    assert tstrain_main(tiny(out, "--epochs", "2")) == 0
    sweep = json.loads((out / "sweep.json").read_text())
    before = {"patches": 8, "epochs": 2, "batch_size": 256, "weight_decay": 0.02, "warmup_fraction": 0.1,
              "min_lr": 1e-8, "seed": 0, "protocol": "seed", "split_seed": 0, "mixed_precision": "no",
              "normalize": "train", "branches": 1, "min_steps": 0}
    assert list(before) == PAPER_SWEEP_KEYS
    assert sweep["schema"] == ts_protocol.SWEEP_SCHEMA and sweep["model"]["patches"] == 8
    assert sweep == ts_protocol.SweepConfig.from_record(before).identity()
    run = json.loads((out / "runs" / "ItalyPowerDemand" / "patchtst" / "lr0.001_do0.1.json").read_text())
    assert set(run) == RUN_KEYS and run["extra"] == {} and (run["epochs"], run["steps"]) == (2, 2)
    (out / "sweep.json").write_text(json.dumps(before))  # a sweep directory written before: it resumes
    assert tstrain_main(tiny(out, "--epochs", "2")) == 0
    (out / "sweep.json").write_text(json.dumps(dict(sweep, schema=ts_protocol.SWEEP_SCHEMA + 1)))
    assert tstrain_main(tiny(out, "--epochs", "2")) == 2  # a newer schema is refused, by name
    # the same sweep under the small-data recipe is another sweep
    code = tstrain_main(tiny(out, "--epochs", "2", "--recipe", "small-data"))
    assert code == 2


def test_small_data_recipe_and_ensembles(tmp_path, capsys):
    from jumbokit.timeseries.data import load_dataset

    out = tmp_path / "small"
    assert tstrain_main(tiny(out, "--recipe", "small-data", "--steps", "3", "--lr", "1e-3,3e-4", "--seeds", "1",
                         "--ensemble", "2")) == 0
    printed = capsys.readouterr().out
    assert "best/avg/ens2" in printed
    sweep = json.loads((out / "sweep.json").read_text())
    assert (sweep["recipe"], sweep["steps"], sweep["batch_size"], sweep["augment"], sweep["normalize"]) == (
        "small-data", 3, "auto", "jitter,scaling,magnitude_warp,time_warp,window_slice", "auto")
    assert sweep["model"]["max_patch_len"] is None  # not capped
    assert sweep["model"]["conv_stem"] == 32
    report = json.loads((out / "results.json").read_text())
    row = report["summary"][0]
    assert row["ens_k"] == 2 and report["ensemble"] == 2
    folder = out / "runs" / "ItalyPowerDemand" / "patchtst"
    runs = [json.loads((folder / f"{stem}.json").read_text()) for stem in ("lr0.001_do0.1", "lr0.0003_do0.1")]
    assert all(r["steps"] == 3 for r in runs)
    probas = [ts_store.load_proba(folder / f"{stem}.proba.safetensors") for stem in ("lr0.001_do0.1",
                                                                                       "lr0.0003_do0.1")]
    data = load_dataset("ItalyPowerDemand")
    mean = (probas[0]["test"].astype(np.float64) + probas[1]["test"]) / 2
    assert row["ens_test_top1"] == pytest.approx(100 * float((mean.argmax(1) == data.test.y).mean()))
    # an ensemble of one run is that run
    one = ts_results.ensemble_scores(runs, probas, 1, data.val.y, data.test.y)
    assert one["k"] == 1 and one["test_top1"] == row["test_top1"] and one["val_top1"] == row["val_top1"]
    best = one["members"][0]
    np.testing.assert_array_equal(ts_results.ensemble_proba([probas[best]["test"]]), probas[best]["test"])
    assert runs[best]["test_top1"] == row["test_top1"]


def test_auto_steps_follow_series_length():
    assert [ts_protocol.auto_steps(n) for n in (24, 361, 400, 401, 1460)] == [1000, 1000, 1000, 3000, 3000]


def test_step_scale_multiplies_the_auto_steps_and_old_sweeps_read_as_one():
    assert [ts_protocol.auto_steps(n, 0.2) for n in (24, 401)] == [200, 600]
    assert ts_protocol.auto_steps(24, 1e-6) == 1  # never zero steps
    cfg = ts_protocol.SweepConfig(steps="auto", step_scale=0.2)
    assert (cfg.steps_for(24), cfg.steps_for(1460)) == (200, 600)
    assert ts_protocol.steps_text("auto", 0.2).startswith("200 optimizer steps per run (600 for series longer")
    record = cfg.identity()
    del record["step_scale"]  # a sweep.json written before the setting existed
    assert ts_protocol.SweepConfig.from_record(record).step_scale == 1.0
    with pytest.raises(ValueError, match=r"step_scale must be in \(0, 100\] \(a factor of steps='auto'\), got 0"):
        ts_protocol.SweepConfig(steps="auto", step_scale=0)


def test_fast_recipe_is_small_data_at_a_fifth_of_the_steps_one_run_per_set():
    small, fast = ts_protocol.RECIPES["small-data"], ts_protocol.RECIPES["fast"]
    assert {k: fast[k] for k in fast if fast[k] != small[k]} == {"step_scale": 0.2, "seeds": 1, "ensemble": 1}
    settings = flags.settings_from_args(flags.build_parser().parse_args(["--recipe", "fast", "--dataset", "Trace"]))
    cfg = settings.config
    assert (cfg.steps, cfg.step_scale, cfg.seeds, settings.ensemble) == ("auto", 0.2, 1, 1)
    assert (cfg.steps_for(275), cfg.steps_for(2000)) == (200, 600)
    assert ts_protocol.RECIPES["small-data"]["steps"] == "auto"
    cfg = ts_protocol.SweepConfig(steps="auto")
    assert (cfg.steps_for(150), cfg.steps_for(427)) == (1000, 3000)
    assert ts_protocol.SweepConfig(steps=7).steps_for(1344) == 7 and ts_protocol.SweepConfig().steps_for(1344) is None
    assert "3000 for series longer than 400 steps" in ts_report.training_text(cfg)
    with pytest.raises(ValueError, match="steps must be a positive integer or 'auto', got 'many'"):
        ts_protocol.SweepConfig(steps="many")
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    series, labels = np.zeros((4, 1, 16)), np.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match="steps must be a positive integer or 'auto', got 'many'"):
        PatchTSTClassifier(steps="many").fit(series, labels)


def test_fine_tune_recipe_is_three_cycles_stopped_at_a_cycle_end_and_no_other_recipe_stops_early():
    """fine-tune = fast with a 1,500-step budget in three learning-rate cycles, scored at each cycle's end and
    stopped at the first that does not improve; off with --frozen; a way out named where it cannot run."""
    fast, tune = ts_protocol.RECIPES["fast"], ts_protocol.RECIPES["fine-tune"]
    assert {k: tune[k] for k in tune if tune[k] != fast[k]} == dict(step_scale=1.5, lr_cycles=3, early_stop=1,
                                                                     eval_every="cycle")

    def settings(*extra):
        return flags.settings_from_args(flags.build_parser().parse_args(["--dataset", "Trace", *extra]))

    chosen = settings("--recipe", "fine-tune")
    cfg = chosen.config
    assert (cfg.recipe, cfg.step_scale, cfg.seeds, chosen.ensemble) == ("fine-tune", 1.5, 1, 1)
    assert (cfg.lr_cycles, cfg.early_stop, cfg.eval_every, cfg.early_stop_metric) == (3, 1, "cycle", "loss")
    assert (cfg.steps_for(384), cfg.steps_for(2000)) == (1500, 4500)
    assert cfg.scoring(1500) == (500, 500) and cfg.scoring(4500) == (1500, 1500) and cfg.scoring(100) == (34, 34)
    assert dataclasses.replace(cfg, early_stop_from=700).scoring(1500) == (500, 700)
    assert all(settings("--recipe", name).config.early_stop == 0 for name in ts_protocol.RECIPES if name != "fine-tune")
    assert all(settings("--recipe", name).config.lr_cycles == 1 for name in ts_protocol.RECIPES if name != "fine-tune")
    fixed = settings("--recipe", "fine-tune", "--step-scale", "0.5", "--lr-cycles", "1", "--early-stop", "0").config
    assert (fixed.steps_for(384), fixed.lr_cycles, fixed.early_stop) == (500, 1, 0)  # the earlier 500 fixed steps
    assert settings("--recipe", "fine-tune", "--init", "enc", "--frozen").config.early_stop == 0
    stopped = settings("--recipe", "fine-tune", "--early-stop", "5", "--eval-every", "50", "--early-stop-from",
                       "250").config
    assert stopped.scoring(1500) == (50, 250) and stopped.early_stop == 5
    with pytest.raises(ValueError, match="pass --early-stop 0 .the whole budget of steps. or --protocol paper"):
        settings("--recipe", "fine-tune", "--protocol", "official")
    with pytest.raises(ValueError, match="pass --early-stop 0 .the whole budget of steps. or --branches 1"):
        settings("--recipe", "fine-tune", "--branches", "2")
    assert settings("--recipe", "fine-tune", "--protocol", "official", "--early-stop", "0").config.early_stop == 0
    with pytest.raises(SystemExit):
        flags.build_parser().parse_args(["--dataset", "Trace", "--eval-every", "often"])
    with pytest.raises(ValueError, match="eval_every must be an integer >= 1 or 'cycle'"):
        ts_protocol.SweepConfig(eval_every="often")


def test_lr_cycles_reach_training_and_the_first_cycle_is_the_shorter_run(tmp_path):
    """--lr-cycles 3 over 60 steps, scored at each cycle's end: the first scoring (step 20) is the validation loss of
    the 20-step run, as the first cycle is scheduled and fed as that run; the report names the restarts."""
    assert tstrain_main(tiny(tmp_path / "short", "--steps", "20")) == 0
    assert tstrain_main(tiny(tmp_path / "cycled", "--steps", "60", "--lr-cycles", "3", "--early-stop", "1",
                             "--eval-every", "20", "--early-stop-from", "20")) == 0

    def record(name):
        [path] = (tmp_path / name / "runs" / "ItalyPowerDemand" / "patchtst").glob("*.json")
        return json.loads(path.read_text())

    curve = record("cycled")["extra"]["early_stop"]["curve"]
    assert curve[0]["step"] == 20 and curve[0]["val_loss"] == pytest.approx(record("short")["val_loss"], rel=1e-6)
    assert "3 cycles over the steps" in (tmp_path / "cycled" / "report.md").read_text()
    assert json.loads((tmp_path / "cycled" / "sweep.json").read_text())["lr_cycles"] == 3
    assert tstrain_main(tiny(tmp_path / "top1", "--steps", "60", "--lr-cycles", "3", "--early-stop", "1",
                             "--eval-every", "20", "--early-stop-from", "20", "--early-stop-metric", "top1")) == 0
    stop = record("top1")["extra"]["early_stop"]
    accuracy = [point["val_top1"] for point in stop["curve"]]
    assert json.loads((tmp_path / "top1" / "sweep.json").read_text())["early_stop_metric"] == "top1"
    assert stop["rule"]["metric"] == "top1" and record("cycled")["extra"]["early_stop"]["rule"]["metric"] == "loss"
    assert accuracy[0] == pytest.approx(record("short")["val_top1"])
    best = next(i for i, a in enumerate(accuracy) if a == max(accuracy))  # the first of the highest is kept
    assert stop["best_step"] == stop["curve"][best]["step"]
    assert "without a higher validation accuracy" in (tmp_path / "top1" / "report.md").read_text()
    assert tstrain_main(tiny(tmp_path / "recipe", "--recipe", "fine-tune", "--steps", "60")) == 0  # eval_every cycle
    stop = record("recipe")["extra"]["early_stop"]
    assert [point["step"] for point in stop["curve"]][:2] == [20, 40] and stop["budget_steps"] == 60
    assert stop["rule"]["every"] == 20 and stop["rule"]["start"] == 20
    assert "scored at the end of each learning-rate cycle" in (tmp_path / "recipe" / "report.md").read_text()


def test_layer_decay_reaches_the_optimizer_and_rate_one_is_the_plain_run(tmp_path, monkeypatch):
    """--layer-decay 0.5 gives PatchTST's stem, three blocks (the last with the final norm) and head the peak rates
    1e-3 x 0.5^(4..0); --layer-decay 1 trains exactly the plain run (same groups' rates and weight decay)."""
    from jumbokit.training import loop

    rates = []

    def spy(params, cfg):
        optimizer = build(params, cfg)
        rates.append(sorted({group["base_lr"] for group in optimizer.param_groups}))
        return optimizer

    build = loop.build_optimizer
    monkeypatch.setattr(loop, "build_optimizer", spy)
    assert tstrain_main(tiny(tmp_path / "plain", "--steps", "20")) == 0
    assert tstrain_main(tiny(tmp_path / "one", "--steps", "20", "--layer-decay", "1")) == 0
    assert tstrain_main(tiny(tmp_path / "half", "--steps", "20", "--layer-decay", "0.5")) == 0
    assert rates[0] == rates[1] == [pytest.approx(1e-3)]
    assert rates[2] == pytest.approx([1e-3 * 0.5 ** k for k in range(4, -1, -1)])

    def record(name):
        [path] = (tmp_path / name / "runs" / "ItalyPowerDemand" / "patchtst").glob("*.json")
        return json.loads(path.read_text())

    assert record("one")["val_loss"] == pytest.approx(record("plain")["val_loss"], rel=1e-6)
    assert record("half")["val_loss"] != pytest.approx(record("plain")["val_loss"], rel=1e-4)
    assert json.loads((tmp_path / "half" / "sweep.json").read_text())["layer_decay"] == 0.5
    assert "Layer-wise learning-rate decay 0.5" in (tmp_path / "half" / "report.md").read_text()


def test_layer_decay_refuses_what_it_cannot_decay(tmp_path, capsys):
    """A rate outside (0, 1], a model without layers, a frozen encoder: refused before anything is written."""
    with pytest.raises(SystemExit):
        flags.build_parser().parse_args(["--dataset", "Trace", "--layer-decay", "0"])
    assert "expected a rate in (0, 1], e.g. 0.75, got '0'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--model names others without layers to decay .patchtst_jumbo_rocket."):
        flags.settings_from_args(flags.build_parser().parse_args(
            ["--dataset", "Trace", "--model", "patchtst,patchtst_jumbo_rocket", "--layer-decay", "0.75"]))
    with pytest.raises(ValueError, match="layer_decay must be None with frozen"):
        ts_protocol.SweepConfig(init="enc", frozen=True, layer_decay=0.75)
    assert tstrain_main(tiny(tmp_path / "bad", "--model", "series_cnn", "--layer-decay", "0.75")) != 0
    assert not (tmp_path / "bad").exists()


def test_auto_trunk_width_follows_series_length(tmp_path, monkeypatch):
    """trunk_width="auto": 32 filters up to 400 steps, 64 beyond, resolved per dataset for the runs' models."""
    assert [ts_protocol.auto_trunk_width(n) for n in (24, 361, 400, 401, 1460)] == [32, 32, 32, 64, 64]
    cfg = ts_protocol.SweepConfig(model=SeriesModelConfig(trunk="resnet", trunk_width="auto"))
    assert cfg.tokenizer_options(427)["trunk_width"] == 64 and cfg.tokenizer_options(251)["trunk_width"] == 32
    eight = ts_protocol.SweepConfig(model=SeriesModelConfig(trunk="resnet", trunk_width=8))
    assert eight.tokenizer_options()["trunk_width"] == 8
    with pytest.raises(ValueError, match="needs the series length"):
        cfg.tokenizer_options()
    with pytest.raises(ValueError, match="trunk_width must be a positive integer or 'auto', got 'wide'"):
        ts_protocol.SweepConfig(model=SeriesModelConfig(trunk="resnet", trunk_width="wide"))
    # ItalyPowerDemand's 24 steps count as long with the threshold at 10: its runs get the wide trunk
    monkeypatch.setattr(ts_protocol, "LONG_SERIES", 10)
    params = {}
    for width in ("auto", "64", "32"):
        out = tmp_path / width
        front = ["--model", "patchtst", "--trunk", "resnet", "--trunk-depth", "1", "--trunk-width", width,
                 "--epochs", "1"]  # the width is read from the runs' parameter counts: one epoch shows it
        assert tstrain_main(tiny(out, *front)) == 0
        params[width] = json.loads((out / "runs/ItalyPowerDemand/patchtst/lr0.001_do0.1.json").read_text())["params"]
    assert params["auto"] == params["64"] != params["32"]
    assert json.loads((tmp_path / "auto" / "sweep.json").read_text())["model"]["trunk_width"] == "auto"
    assert "width 64 for series longer than 10 steps, else 32" in (tmp_path / "auto" / "report.md").read_text()
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    series, labels = np.random.default_rng(0).normal(size=(8, 1, 16)), np.array([0, 1] * 4)
    sizes = [sum(p.numel() for p in PatchTSTClassifier(patches=4, epochs=1, trunk="resnet", trunk_depth=1,
                                                       trunk_width=w, random_state=0).fit(series, labels)
                 .network_.parameters()) for w in ("auto", 64)]
    assert sizes[0] == sizes[1]  # 16 steps > the patched threshold of 10


def test_small_data_recipe_sets_steps_from_series_length(tmp_path, monkeypatch):
    # ItalyPowerDemand's series have 24 steps: with the threshold at 10 they count as long
    monkeypatch.setattr(ts_protocol, "LONG_SERIES", 10)
    monkeypatch.setattr(ts_protocol, "LONG_SERIES_STEPS", 3)
    out = tmp_path / "auto"
    assert tstrain_main(tiny(out, "--recipe", "small-data", "--seeds", "1", "--ensemble", "1")) == 0
    assert json.loads((out / "sweep.json").read_text())["steps"] == "auto"
    run = json.loads((out / "runs" / "ItalyPowerDemand" / "patchtst" / "lr0.001_do0.1.json").read_text())
    assert run["steps"] == 3
    monkeypatch.undo()
    help_text = " ".join(flags.build_parser().format_help().split())
    assert (f"'auto' = {ts_protocol.SMALL_DATA_STEPS}, {ts_protocol.LONG_SERIES_STEPS} for series longer than "
            f"{ts_protocol.LONG_SERIES} steps") in help_text


def test_auto_batch_size():
    assert [ts_protocol.auto_batch_size(n) for n in (5, 20, 36, 67, 537)] == [5, 20, 32, 32, 32]
    assert [ts_protocol.auto_batch_size(270, c) for c in (1, 3, 6, 12, 64)] == [32, 32, 21, 10, 8]


def test_list_shows_user_datasets(tmp_path, capsys, write_ts):
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        write_ts(tmp_path, "MySensors", split, rng.normal(size=(6, 20)), ["a", "b"] * 3)
    (tmp_path / "NotADataset").mkdir()
    assert tstrain_main(["--list", "--data-dir", str(tmp_path)]) == 0
    listing = capsys.readouterr().out
    own = [line for line in listing.splitlines() if line.startswith("your own")][0]
    assert "MySensors" in own and "NotADataset" not in own and "GunPoint" not in own
    assert "GunPoint" in listing


def test_grad_clip_reaches_training_and_is_stored_only_when_set(tmp_path):
    from jumbokit.timeseries.run import train_config

    assert tstrain_main(tiny(tmp_path / "clipped", "--epochs", "1", "--grad-clip", "0.5")) == 0
    assert json.loads((tmp_path / "clipped" / "sweep.json").read_text())["grad_clip"] == 0.5
    assert "gradient norm clipped to 0.5" in (tmp_path / "clipped" / "report.md").read_text()

    clipped = ts_protocol.SweepConfig(grad_clip=0.5)
    assert train_config(clipped, 1e-3, 1).grad_clip == 0.5
    assert train_config(ts_protocol.SweepConfig(), 1e-3, 1).grad_clip is None
    assert ts_protocol.SweepConfig().identity()["grad_clip"] is None and clipped.identity()["grad_clip"] == 0.5
    with pytest.raises(ValueError, match=r"grad_clip must be None \(off\) or a norm > 0, got -1"):
        ts_protocol.SweepConfig(grad_clip=-1)


def test_early_stopping_scores_the_validation_half_and_its_steps_are_a_budget(tmp_path, capsys):
    """--early-stop reaches training: the run ends on or before its budget (the recipe's steps) at a scoring step,
    records where, and the report says so; it is refused where the validation split is the test split, with a
    frozen encoder, and for bad numbers."""
    out = tmp_path / "stop"
    assert tstrain_main(tiny(out, "--steps", "40", "--early-stop", "1", "--eval-every", "5",
                             "--early-stop-from", "10")) == 0
    sweep = json.loads((out / "sweep.json").read_text())
    assert (sweep["early_stop"], sweep["eval_every"], sweep["early_stop_from"]) == (1, 5, 10)
    [record] = [json.loads(p.read_text()) for p in (out / "runs" / "ItalyPowerDemand" / "patchtst").glob("*.json")]
    stop = record["extra"]["early_stop"]
    assert stop["budget_steps"] == 40 and record["steps"] == stop["last_step"] <= 40
    assert stop["best_step"] >= 10 and stop["best_step"] % 5 == 0
    assert stop["stopped"] == (stop["last_step"] < 40)
    assert [point["step"] for point in stop["curve"]] == list(range(10, stop["last_step"] + 1, 5))  # the curve
    assert {"val_loss", "val_top1"} <= set(stop["curve"][0])
    assert "Early stopping: the validation half scored every 5 steps from step 10" in (out / "report.md").read_text()
    [row] = json.loads((out / "results.json").read_text())["summary"]
    assert row["steps"] == record["steps"] and row["best_step"] == stop["best_step"]  # the summary says where
    assert "best_step" in (out / "results.csv").read_text().splitlines()[0]
    assert ts_protocol.SweepConfig().identity()["early_stop"] == 0
    bad = tmp_path / "bad"
    for args, message in [(["--protocol", "official", "--early-stop", "2"], "early_stop must be 0 with "
                                                                             "protocol='official'"),
                          (["--early-stop", "2", "--branches", "2"], "early_stop must be 0 with branches=2")]:
        assert tstrain_main(tiny(bad, *args)) == 2
        assert message in capsys.readouterr().err and not bad.exists()
    for args, message in [(["--early-stop", "-1"], "--early-stop: expected a non-negative integer, got -1"),
                          (["--eval-every", "0"], "--eval-every: expected a positive integer or 'cycle', got '0'")]:
        with pytest.raises(SystemExit):
            tstrain_main(tiny(bad, *args))
        assert message in capsys.readouterr().err
    with pytest.raises(ValueError, match="early_stop must be 0 with frozen"):
        ts_protocol.SweepConfig(early_stop=2, init="runs/encoder", frozen=True)


def test_label_smoothing_reaches_the_loss_and_is_stored_only_when_set(tmp_path):
    from jumbokit.timeseries.run import series_loss

    assert tstrain_main(tiny(tmp_path / "smooth", "--epochs", "1", "--label-smoothing", "0.1")) == 0
    assert json.loads((tmp_path / "smooth" / "sweep.json").read_text())["label_smoothing"] == 0.1
    assert "label smoothing 0.1" in (tmp_path / "smooth" / "report.md").read_text()
    assert ts_protocol.SweepConfig().identity()["label_smoothing"] == 0.0

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2 * 8, 3))
    x, y = torch.randn(6, 2, 8), torch.tensor([0, 1, 2, 0, 1, 2])
    logits = model(x)
    for eps in (0.0, 0.2):
        loss, _ = series_loss(ts_protocol.SweepConfig(label_smoothing=eps), 3, seed=0)(model, (x, y))
        smoothed = (1 - eps) * torch.nn.functional.cross_entropy(logits, y) - eps * logits.log_softmax(-1).mean(-1).mean()
        assert torch.allclose(loss, smoothed, atol=1e-6)
    _, soft = SeriesMixup(3, alpha=0.4, generator=torch.Generator().manual_seed(0), smoothing=0.3)(x, y)
    assert torch.allclose(soft.sum(-1), torch.ones(6)) and soft.min() >= 0.1 - 1e-6  # eps / K on every class
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\) \(0 = off\), got 1"):
        ts_protocol.SweepConfig(label_smoothing=1)


def test_jumbo_pool_sets_the_jumbo_models_feature_and_is_stored_only_when_set(tmp_path):
    """``--jumbo-pool jumbo+mean``: the Jumbo model classifies from the J*D vector and the mean patch token (a head
    of (J+1)*D inputs per channel, the encoder's own pooling), the CLS model keeps its D-wide token; the sweep
    stores the choice, and the default leaves old sweeps' identity as it was."""
    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.run import new_run_model

    data = load_dataset("GunPoint", download=False)
    cfg = ts_protocol.SweepConfig(jumbo_pool="jumbo+mean")
    jumbo, cls = (new_run_model(data, name, cfg, 0.0, seed=0) for name in ("patchtst_jumbo", "patchtst"))
    dim, j = jumbo.embed_dim, jumbo.num_global_tokens
    assert (jumbo.head.in_features, cls.head.in_features) == ((j + 1) * dim, dim)
    x = torch.as_tensor(data.val.x[:3], dtype=torch.float32)
    with torch.no_grad():
        out = jumbo.forward_features(x)
        wide = out.global_tokens.reshape(3, j * dim)
        expected = torch.cat([wide, out.patches.mean(dim=1)], dim=-1)
    assert torch.allclose(out.feature, jumbo.fc_norm(expected), atol=1e-6)
    default = new_run_model(data, "patchtst_jumbo", ts_protocol.SweepConfig(), 0.0, seed=0)
    assert default.head.in_features == dim
    assert ts_protocol.SweepConfig().identity()["jumbo_pool"] == "segments"

    assert tstrain_main(tiny(tmp_path / "pooled", "--epochs", "1", "--jumbo-pool", "jumbo+mean", "--model",
                         "patchtst,patchtst_jumbo")) == 0
    assert json.loads((tmp_path / "pooled" / "sweep.json").read_text())["jumbo_pool"] == "jumbo+mean"
    assert "Jumbo models classify from the J*D Jumbo vector and the mean patch token" in (
        tmp_path / "pooled" / "report.md").read_text()
    with pytest.raises(ValueError, match=r"jumbo_pool must be one of jumbo, jumbo\+mean, segments, got 'avg'"):
        ts_protocol.SweepConfig(jumbo_pool="avg")


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    out = tmp_path / "bad"
    for args, message in [
        (["--ensemble", "0"], "--ensemble: expected a positive integer, got 0"),
        (["--pretrain-epochs", "-1"], "--pretrain-epochs: expected a non-negative integer, got -1"),
        (["--steps", "0"], "--steps: expected a positive integer or 'auto', got '0'"),
        (["--batch-size", "big"], "--batch-size: expected a positive integer or 'auto', got 'big'"),
        (["--seeds", "0"], "--seeds: expected a positive integer, got 0"),
        (["--conv-stem", "-4"], "--conv-stem: expected a non-negative integer, got -4"),
        (["--recipe", "tiny"], "invalid choice: 'tiny'"),
        (["--grad-clip", "0"], "--grad-clip: expected a number > 0, e.g. 1.0, got '0'"),
        (["--label-smoothing", "1"], "--label-smoothing: expected a label smoothing in [0, 1) (0 = off), e.g. 0.1, got '1'"),
    ]:
        with pytest.raises(SystemExit) as exc:
            tstrain_main(tiny(out, *args))
        err = capsys.readouterr().err
        assert exc.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    for args, message in [
        (["--baseline", "minirocket,rocketx"], "unknown baseline(s) 'rocketx'"),
        (["--augment", "jiter"], "did you mean 'jitter'"),
        (["--pretrain-epochs", "1", "--pretrain-mask-ratio", "1.5"], "pretrain_mask_ratio must be in (0, 1)"),
        (["--conv-stem", "1"], "conv_stem must be 0 (none) or a width >= 2, got 1"),
    ]:
        assert tstrain_main(tiny(out, *args)) == 2
        err = capsys.readouterr().err
        assert message in err and err.startswith("error:") and len(err.strip().splitlines()) == 1, err
        assert not out.exists()
    with pytest.raises(ValueError, match="ensemble must be a positive integer"):
        ts_sweep.run_sweep(["ItalyPowerDemand"], ["patchtst"], ts_protocol.SweepConfig(), out, ensemble=0)


@pytest.mark.slow
def test_rocket_baselines_pad_unequal_lengths(tmp_path):
    from jumbokit.timeseries.data import load_dataset

    data = load_dataset("PickupGestureWiimoteZ")
    for name in ts_baselines.BASELINES:
        result = ts_baselines.rocket_baseline(name, data, seed=0)
        assert result["padded"] and 30 < result["test_top1"] <= 100, (name, result)
    assert torch.get_num_threads() == 1  # Hydra's thread setting is undone


def test_estimator_small_data_options():
    from jumbokit.timeseries.estimator import PatchTSTClassifier

    rng = np.random.default_rng(0)
    X = [rng.normal(size=(2, n)) for n in rng.integers(20, 33, size=12)]  # unequal lengths
    y = np.array(["a", "b", "c"] * 4)
    clf = PatchTSTClassifier(model="patchtst", patches=4, steps=3, batch_size="auto", augment="jitter,time_warp,mixup",
                             pretrain_epochs=1, conv_stem=8, ema_decay=0.5, random_state=0).fit(X, y)
    assert len(clf.history_) == 1 and clf.history_[-1]["step"] == 3
    assert clf.network_.config["conv_stem"] == 8
    np.testing.assert_allclose(clf.predict_proba(X).sum(1), 1, rtol=1e-5)
    with pytest.raises(ValueError, match=r"ema_decay must be in \[0, 1\) \(0 = off\), got 1.5"):
        PatchTSTClassifier(ema_decay=1.5).fit(X, y)


@pytest.mark.multiprocess
@pytest.mark.parametrize("chosen, expected", [(None, "workqueue"), ("omp", "omp")])
def test_rocket_baselines_run_numba_on_workqueue_threads(chosen, expected):
    """numba's OpenMP workers slow later torch training in the same process 2x; a user's own choice is kept."""
    import os
    import subprocess
    import sys

    script = ("import numba\n"
              "from jumbokit.timeseries.baselines import _warm_up\n"
              "_warm_up('minirocket', 1, 2)\n"  # the baselines' first fit
              "print(numba.threading_layer())\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    if chosen:
        env["NUMBA_THREADING_LAYER"] = chosen
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == expected


# ---------------------------------------------------------------- the small-data-trunk recipe
def test_small_data_trunk_recipe_is_small_data_with_the_measured_front_end(tmp_path):
    small, trunk = ts_protocol.RECIPES["small-data"], ts_protocol.RECIPES["small-data-trunk"]
    assert {k for k in trunk if trunk[k] != small[k]} == {"conv_stem", "trunk", "trunk_width", "trunk_diff",
                                                          "trunk_head", "level_scale"}
    out = tmp_path / "trunk"
    assert tstrain_main(tiny(out, "--recipe", "small-data-trunk", "--steps", "2", "--seeds", "1", "--ensemble", "1")) == 0
    sweep = json.loads((out / "sweep.json").read_text())
    model = sweep["model"]
    assert (sweep["recipe"], model["trunk"], model["trunk_width"], model["trunk_diff"], model["trunk_head"],
            model["level_scale"], sweep["normalize"], sweep["augment"]) == (
        "small-data-trunk", "resnet", "auto", True, True, "auto", "train",
        "jitter,scaling,magnitude_warp,time_warp,window_slice")
    assert model["conv_stem"] == 0  # no convolutional patch features beside the trunk
    assert "scales differ more than 100-fold, each channel normalised in the model" in (out / "report.md").read_text()


@pytest.mark.parametrize("flags, expected", [
    (("--level-scale", "off"), {"normalize": "auto", "level_scale": False, "trunk": "resnet"}),
    (("--level-scale",), {"normalize": "train", "level_scale": True}),
    (("--no-diff",), {"trunk_diff": False, "trunk": "resnet"}),
    (("--no-trunk-head",), {"trunk_head": False, "trunk_diff": True}),
    (("--trunk", "none"), {"trunk": None, "trunk_diff": False, "trunk_head": False, "trunk_width": 16,
                           "level_scale": "auto"}),
    (("--trunk-width", "8", "--conv-stem", "32"), {"trunk_width": 8, "conv_stem": 32}),
])
def test_small_data_trunk_recipe_yields_to_explicit_flags(tmp_path, flags, expected):
    out = tmp_path / "sweep"
    assert tstrain_main(tiny(out, "--recipe", "small-data-trunk", "--steps", "1", "--seeds", "1", "--ensemble", "1",
                         *flags)) == 0
    sweep = json.loads((out / "sweep.json").read_text())
    settings = {**sweep, **sweep["model"]}
    assert {k: settings[k] for k in expected} == expected


def test_small_data_trunk_recipe_refuses_per_series_normalisation(tmp_path, capsys):
    bad = tmp_path / "bad"
    assert tstrain_main(tiny(bad, "--recipe", "small-data-trunk", "--normalize", "auto")) == 2
    err = capsys.readouterr().err
    assert "--recipe small-data-trunk (--level-scale auto) reads each series' level and scale" in err
    assert "add --level-scale off" in err and not bad.exists()
    with pytest.raises(SystemExit) as exc:
        tstrain_main(tiny(bad, "--level-scale", "sometimes"))
    assert exc.value.code == 2 and "expected on, off or auto, got 'sometimes'" in capsys.readouterr().err


def test_level_scale_auto_is_decided_per_set_by_the_scale_spread():
    cfg = ts_protocol.SweepConfig(model=SeriesModelConfig(level_scale="auto"), augment="default")
    even = np.random.default_rng(0).normal(size=(40, 1, 32))
    spread = even * np.logspace(0, 4, 40)[:, None, None]  # series scales from 1 to 10^4
    off, on = cfg.for_dataset(even), cfg.for_dataset(spread)
    assert (off.model.level_scale, off.augment) == (False, cfg.augment)
    assert (on.model.level_scale, on.augment) == (True, "jitter,time_warp,window_slice")  # no amplitude augmentations
    assert cfg.level_scale_for((spread - spread.mean()) / spread.std())  # training statistics keep the spread
    explicit = ts_protocol.SweepConfig(model=SeriesModelConfig(level_scale=True))
    assert explicit.for_dataset(even).model.level_scale is True  # explicit: as given
    with pytest.raises(ValueError, match="decided per dataset"):
        cfg.tokenizer_options(32)
    with pytest.raises(ValueError, match="level_scale must be False, True or 'auto', got 'sometimes'"):
        ts_protocol.SweepConfig(model=SeriesModelConfig(level_scale="sometimes"))


def test_level_scale_auto_run_equals_the_explicit_flags_run():
    """On a set whose series' scales differ widely, level_scale="auto" trains exactly the run of level_scale=True
    without the amplitude augmentations."""
    import dataclasses

    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.run import train_run

    data = load_dataset("ItalyPowerDemand", normalize="train")
    scales = np.logspace(0, 3, len(data.train))[:, None, None].astype(np.float32)
    data = dataclasses.replace(data, train=dataclasses.replace(data.train, x=data.train.x * scales))
    front = dict(patches=4, trunk="resnet", trunk_width=4, trunk_depth=1)
    base = dict(steps=3, batch_size=8)
    auto = ts_protocol.SweepConfig(model=SeriesModelConfig(level_scale="auto", **front), augment="default", **base)
    explicit = ts_protocol.SweepConfig(model=SeriesModelConfig(level_scale=True, **front),
                                       augment="jitter,time_warp,window_slice", **base)
    runs = [train_run(data, "patchtst_jumbo", 1e-3, 0.1, cfg, cpu=True) for cfg in (auto, explicit)]
    assert runs[0].val_loss == runs[1].val_loss and runs[0].train_loss == runs[1].train_loss
    assert runs[0].params == runs[1].params


def test_sweep_settings_resolve_a_command_line_as_tstrain_does(tmp_path):
    """``flags.sweep_settings`` gives the settings tstrain stores for the same flags (the rank benchmark compares
    recorded commands by them), reads no data (an unknown set is fine) and refuses what tstrain refuses."""
    argv = ["--recipe", "small-data-trunk", "--steps", "1", "--seeds", "1", "--ensemble", "1"]
    out = tmp_path / "sweep"
    assert tstrain_main(tiny(out, *argv)) == 0
    settings = flags.sweep_settings(["--dataset", "NoSuchSet", "--lr", "1e-3", "--dropout", "0.1", *argv])
    assert settings.config.identity() == json.loads((out / "sweep.json").read_text())
    assert (settings.lrs, settings.dropouts, settings.ensemble) == ((1e-3,), (0.1,), 1)
    with pytest.raises(ValueError, match="--lr must be > 0"):
        flags.sweep_settings(["--lr", "-1"])


def test_layer_scale_starts_every_block_at_its_value_and_is_stored_only_when_set(tmp_path):
    """``--layer-scale V``: every block's attention and FFN outputs and the Jumbo FFN's are scaled by learned
    factors starting at V; the default builds the blocks without them and leaves old sweeps' identity as it was."""
    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.run import new_run_model

    data = load_dataset("GunPoint", download=False)
    scaled = new_run_model(data, "patchtst_jumbo", ts_protocol.SweepConfig(layer_scale=1e-4), 0.0, 0)
    gammas = [p for n, p in scaled.named_parameters() if "gamma" in n]
    assert len(gammas) >= 2 * len(scaled.blocks) and all(torch.all(g == 1e-4) for g in gammas)
    plain = new_run_model(data, "patchtst_jumbo", ts_protocol.SweepConfig(), 0.0, 0)
    assert not any("gamma" in n for n, _ in plain.named_parameters())
    assert ts_protocol.SweepConfig().identity()["layer_scale"] == 0.0

    assert tstrain_main(tiny(tmp_path / "scaled", "--epochs", "1", "--layer-scale", "1e-4")) == 0
    assert json.loads((tmp_path / "scaled" / "sweep.json").read_text())["layer_scale"] == 1e-4
    assert "LayerScale on every block, starting at 0.0001" in (tmp_path / "scaled" / "report.md").read_text()
    with pytest.raises(ValueError, match=r"layer_scale must be >= 0 \(0 = off\), got -1"):
        ts_protocol.SweepConfig(layer_scale=-1)


def test_pos_embed_none_reads_the_tokens_as_a_set_and_is_stored_only_when_set(tmp_path):
    """``--pos-embed none``: no absolute position table, so shuffling a series' window tokens (here: swapping
    two equal-length halves of a series whose windows do not straddle the cut) only permutes its tokens and
    leaves the Jumbo feature unchanged; the default keeps PatchTST's learned table."""
    from jumbokit.timeseries.run import encoder_options

    cfg = ts_protocol.SweepConfig(pos_embed="none")
    assert encoder_options(cfg) == {"pos_embed": "none"} and encoder_options(ts_protocol.SweepConfig()) == {}
    model = jumbokit.create_model("patchtst_jumbo", num_classes=2, in_chans=1, seq_len=32, patch_len=8, stride=8,
                                  pad_end=False, **encoder_options(cfg)).eval()
    assert model.pos_embed is None
    x = torch.randn(1, 1, 32)
    swapped = torch.cat([x[..., 16:], x[..., :16]], dim=-1)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_features(x).feature, model.forward_features(swapped).feature)
    assert ts_protocol.SweepConfig().identity()["pos_embed"] == "learn"

    assert tstrain_main(tiny(tmp_path / "set", "--epochs", "1", "--pos-embed", "none")) == 0
    assert json.loads((tmp_path / "set" / "sweep.json").read_text())["pos_embed"] == "none"
    assert "no absolute position embedding" in (tmp_path / "set" / "report.md").read_text()
    with pytest.raises(ValueError, match="pos_embed must be one of learn, sincos, none, got 'rope'"):
        ts_protocol.SweepConfig(pos_embed="rope")


def test_drop_path_rises_to_its_rate_at_the_last_block_and_is_stored_only_when_set(tmp_path, capsys):
    """``--drop-path R``: stochastic depth on every block, 0 at the first and R at the last, active in training
    only (two training passes differ, evaluation is deterministic); off by default and in old sweeps' identity."""
    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.run import encoder_options, new_run_model

    data = load_dataset("GunPoint", download=False)
    cfg = ts_protocol.SweepConfig(drop_path=0.2)
    assert encoder_options(cfg) == {"drop_path_rate": 0.2}
    model = new_run_model(data, "patchtst_jumbo", cfg, 0.0, 0)
    assert [getattr(b.drop_path1, "p", 0.0) for b in model.blocks] == pytest.approx([0.0, 0.1, 0.2])
    x = torch.from_numpy(data.train.x[:16])
    torch.manual_seed(0)
    assert not torch.allclose(model.train()(x), model(x))
    torch.testing.assert_close(model.eval()(x), model(x))
    plain = new_run_model(data, "patchtst_jumbo", ts_protocol.SweepConfig(), 0.0, 0)
    assert not any(isinstance(m, jumbokit.encoders.DropPath) for m in plain.modules())
    assert ts_protocol.SweepConfig().identity()["drop_path"] == 0.0

    assert tstrain_main(tiny(tmp_path / "dropped", "--epochs", "1", "--drop-path", "0.2")) == 0
    assert json.loads((tmp_path / "dropped" / "sweep.json").read_text())["drop_path"] == 0.2
    assert "stochastic depth up to 0.2" in (tmp_path / "dropped" / "report.md").read_text()
    with pytest.raises(ValueError, match=r"drop_path must be in \[0, 1\) \(0 = off\), got 1"):
        ts_protocol.SweepConfig(drop_path=1)
    with pytest.raises(SystemExit):
        tstrain_main(tiny(tmp_path / "refused", "--drop-path", "1"))
    assert "expected a drop rate in [0, 1) (0 = off), e.g. 0.1, got '1'" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()


def test_weight_decay_flag_reaches_the_optimizer_and_the_default_keeps_old_sweeps(tmp_path, capsys):
    """``--weight-decay WD`` sets AdamW's decay of the run (and the report's line); without it the sweep is
    defined exactly as before (0.02, the protocol's value); a negative value is refused before anything is written."""
    from jumbokit.timeseries.run import train_config

    assert flags.sweep_settings(["--recipe", "small-data-trunk"]).config.weight_decay == 0.02
    cfg = flags.sweep_settings(["--weight-decay", "0.1"]).config
    assert train_config(cfg, lr=1e-3, epochs=1).weight_decay == 0.1
    assert tstrain_main(tiny(tmp_path / "decayed", "--epochs", "1", "--weight-decay", "0.1")) == 0
    assert json.loads((tmp_path / "decayed" / "sweep.json").read_text())["weight_decay"] == 0.1
    assert "AdamW, weight decay 0.1;" in (tmp_path / "decayed" / "report.md").read_text()
    with pytest.raises(SystemExit):
        tstrain_main(tiny(tmp_path / "refused", "--weight-decay", "-1"))
    assert "expected a weight decay >= 0, e.g. 0.05, got '-1'" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    with pytest.raises(ValueError, match="weight_decay must be >= 0, got -1"):
        ts_protocol.SweepConfig(weight_decay=-1)


def test_dim_sets_the_token_width_with_its_heads_ffn_and_matching_registers(tmp_path, capsys):
    """``--dim D``: every model's token width, with heads of 8 features and an FFN of 2D, the Jumbo token J*D
    wide and the registers model FLOP-matched to it again (Proposition 1); off by default and in old sweeps'
    identity; a width that is not a multiple of 8 is refused before anything is written."""
    from jumbokit.encoders.flops import matching_registers
    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.run import encoder_options, new_run_model

    data = load_dataset("GunPoint", download=False)
    cfg = ts_protocol.SweepConfig(dim=64)
    assert encoder_options(cfg) == {"dim": 64, "num_heads": 8, "mlp_hidden": 128}
    jumbo = new_run_model(data, "patchtst_jumbo", cfg, 0.0, 0)
    assert (jumbo.blocks[0].attn.num_heads, jumbo.blocks[0].mlp.fc1.out_features) == (8, 128)
    assert tuple(jumbo.global_tokens.jumbo_token.shape) == (1, 4, 64)
    registers = new_run_model(data, "patchtst_registers", cfg, 0.0, 0)
    assert registers.config["num_registers"] == round(matching_registers(64, registers.num_patches, 4))
    trunk_alone = dataclasses.replace(cfg, model=SeriesModelConfig(trunk="resnet"))
    assert new_run_model(data, "series_cnn", trunk_alone, 0.0, 0).head.in_features == 64
    assert ts_protocol.SweepConfig().identity()["dim"] is None
    with pytest.raises(ValueError, match="dim must be None or a multiple of 8, got 12"):
        ts_protocol.SweepConfig(dim=12)
    for field in ("dim", "layers"):  # a string gets the usual line, not int()'s bare error
        with pytest.raises(ValueError, match=f"{field} must be None or .*, got 'abc'"):
            ts_protocol.SweepConfig(**{field: "abc"})

    assert tstrain_main(tiny(tmp_path / "narrow", "--epochs", "1", "--dim", "16")) == 0
    assert json.loads((tmp_path / "narrow" / "sweep.json").read_text())["dim"] == 16
    assert "token width 16" in (tmp_path / "narrow" / "report.md").read_text()
    for bad, message in (("12", "expected a multiple of 8 (heads of 8 features), e.g. 64, got 12"),
                         ("0", "expected a positive integer, got 0")):
        with pytest.raises(SystemExit):
            tstrain_main(tiny(tmp_path / "refused", "--dim", bad))
        assert message in capsys.readouterr().err
        assert not (tmp_path / "refused").exists()


def test_layers_sets_the_transformer_depth_and_series_cnn_refusals_write_nothing(tmp_path, capsys):
    """``--layers N`` builds N transformer layers (branches: N times the branch count); the trunk-alone reference
    refuses a missing trunk and transformer settings before anything is written."""
    from jumbokit.timeseries.data import load_dataset
    from jumbokit.timeseries.run import new_run_model

    data = load_dataset("GunPoint", download=False)
    one = new_run_model(data, "patchtst_jumbo", ts_protocol.SweepConfig(layers=1), 0.0, 0)
    assert len(one.blocks) == 1
    branched = new_run_model(data, "patchtst", ts_protocol.SweepConfig(layers=2, branches=2), 0.0, 0)
    branched.set_join(1.0)
    assert len(branched.blocks) == 2 and branched.reparameterize().config["depth"] == 2
    assert ts_protocol.SweepConfig().identity()["layers"] is None
    with pytest.raises(ValueError, match="layers must be None or an integer >= 1, got 0"):
        ts_protocol.SweepConfig(layers=0)
    for extra, message in [(["--model", "series_cnn"], "series_cnn is a convolutional trunk .* needs a trunk"),
                           (["--model", "series_cnn", "--trunk", "resnet", "--layers", "1"],
                            "series_cnn has no transformer layers to set")]:
        out = tmp_path / "refused"
        assert tstrain_main(tiny(out, "--epochs", "1", *extra)) == 2
        assert re.search(message, capsys.readouterr().err) and not out.exists()
