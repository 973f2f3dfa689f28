"""Masked-autoencoder (MAE) pretraining of any image encoder of the zoo (CLS, registers, Jumbo, none).

    accelerate launch recipes/mae_pretrain.py                      # digits, 32 px, patch 4, CPU-friendly
    accelerate launch recipes/mae_pretrain.py --dataset digits --model vit_tiny_jumbo --epochs 100 --out runs/mae
    accelerate launch --multi_gpu recipes/mae_pretrain.py --dataset folder:/data/imagenet \
        --model vit_base_jumbo --img-size 224 --patch-size 16 --batch-size 256 --epochs 800 --warmup-epochs 40 \
        --decoder-dim 512 --decoder-depth 8 --decoder-heads 16 --mixed-precision bf16

MAE's recipe: AdamW betas (0.9, 0.95), weight decay 0.05, lr = blr * effective batch / 256 (blr 1.5e-4),
linear warm-up then cosine, mask ratio 0.75, per-patch normalised pixel targets. The run directory gets
config.json, metrics.jsonl, checkpoints/ (resume with --resume), model.safetensors + model_config.json (the
ENCODER, loadable with jumbokit.load and used by recipes/linear_probe.py), mae.safetensors (encoder +
decoder), reconstructions.png (original / masked / reconstruction / reconstruction with visible patches)
and report.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

RECIPE = "mae_pretrain"
MAE_BASE_LR = 1.5e-4
# digits: 20 epochs of batch 64 are ~380 steps, where MAE's base lr leaves the encoder nearly untrained
DIGITS_BASE_LR = 1.5e-3


def build_parser() -> argparse.ArgumentParser:
    from jumbokit.training import add_common_args

    parser = argparse.ArgumentParser(
        description="MAE pretraining of a zoo encoder; writes a run directory with the encoder "
                    "(model.safetensors), metrics, checkpoints and reconstruction PNGs.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_common_args(parser, dataset="digits", model="vit_pico_jumbo", epochs=20, batch_size=64, lr=None,
                    weight_decay=0.05, warmup_epochs=1.0, optimizer="adamw", betas=(0.9, 0.95))
    parser.set_defaults(min_lr=0.0)
    mae = parser.add_argument_group("MAE")
    mae.add_argument("--blr", type=float, default=argparse.SUPPRESS,
                     help="base learning rate: lr = blr * effective batch / 256 unless --lr is given "
                          f"(default: MAE's {MAE_BASE_LR:g}; {DIGITS_BASE_LR:g} for digits)")
    mae.add_argument("--mask-ratio", type=float, default=0.75, help="fraction of patches hidden from the encoder")
    mae.add_argument("--norm-pix-loss", action=argparse.BooleanOptionalAction, default=True,
                     help="regress per-patch normalised pixels")
    mae.add_argument("--decoder-dim", type=int, default=128, help="decoder width (ImageNet MAE: 512)")
    mae.add_argument("--decoder-depth", type=int, default=2, help="decoder blocks (ImageNet MAE: 8)")
    mae.add_argument("--decoder-heads", type=int, default=4, help="decoder attention heads (ImageNet MAE: 16)")
    mae.add_argument("--decoder-mlp-ratio", type=float, default=4.0, help="decoder MLP hidden / width")
    mae.add_argument("--crop-scale", type=float, nargs=2, default=argparse.SUPPRESS,
                     help="RandomResizedCrop area range of the pretraining augmentation (default: MAE's 0.2 1.0; "
                          "0.5 1.0 for digits)")
    mae.add_argument("--hflip", type=float, default=argparse.SUPPRESS,
                     help="horizontal flip probability (default: MAE's 0.5; 0 for digits)")
    mae.add_argument("--vis-every", type=int, default=5,
                     help="epochs between reconstruction PNGs (0 = only at the end)")
    mae.add_argument("--vis-images", type=int, default=8, help="images shown in reconstruction PNGs")
    mae.add_argument("--val-samples", type=int, default=256,
                     help="validation images for the per-epoch masked reconstruction loss (0 = off)")
    model = parser.add_argument_group("encoder overrides (default: the zoo config of --model)")
    model.add_argument("--patch-size", type=int, default=None, help="patch side (default: 4 for digits, else the model's)")
    model.add_argument("--depth", type=int, default=None, help="encoder blocks")
    model.add_argument("--pos-embed", default="sincos", choices=("sincos", "learn"),
                       help="encoder position embedding (MAE: fixed sin-cos)")
    model.add_argument("--drop-path", type=float, default=0.0, help="encoder stochastic depth rate")
    parser.add_argument("--debug", action="store_true", help="print tracebacks of errors")
    return parser


def resolve_recipe_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill ``--blr``, ``--crop-scale`` and ``--hflip`` left out: the base lr per dataset, the augmentation
    from the dataset's defaults (``jumbokit.data.dataset_defaults``)."""
    from jumbokit.data import dataset_defaults

    data = dataset_defaults(args.dataset)
    defaults = {"blr": DIGITS_BASE_LR if args.dataset == "digits" else MAE_BASE_LR,
                "crop_scale": data.crop_scale_for("mae"), "hflip": data.hflip}
    for key, value in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return args


def check_resume_config(out: Path, current: dict[str, Any]) -> None:
    """Refuse, before anything is written, to resume a run of ``out`` trained with another model config."""
    from jumbokit.training import config_differences

    config_file = out / "config.json"
    saved = json.loads(config_file.read_text()).get("model_config") if config_file.exists() else None
    differences = config_differences(saved, current) if saved else []
    if differences:
        raise ValueError(f"cannot resume {out}: it was trained with a different model config "
                         f"({'; '.join(differences)}); pass the same model flags, or use a new --out")


def build_mae(args: argparse.Namespace, in_chans: int, img_size: int):
    import jumbokit
    from jumbokit.ssl import MaskedAutoencoder

    overrides: dict[str, Any] = dict(img_size=img_size, in_chans=in_chans, num_classes=0, pos_embed=args.pos_embed,
                                     drop_path_rate=args.drop_path)
    if args.patch_size is not None:
        overrides["patch_size"] = args.patch_size
    elif args.dataset == "digits":
        overrides["patch_size"] = 4
    if args.depth is not None:
        overrides["depth"] = args.depth
    encoder = jumbokit.create_model(args.model, **overrides)
    return MaskedAutoencoder(encoder, decoder_dim=args.decoder_dim, decoder_depth=args.decoder_depth,
                             decoder_num_heads=args.decoder_heads, decoder_mlp_ratio=args.decoder_mlp_ratio,
                             mask_ratio=args.mask_ratio, norm_pix_loss=args.norm_pix_loss)


def save_reconstructions(model, images: torch.Tensor, mean, std, path: Path, title: str, seed: int = 0) -> Path:
    """PNG grid: rows original / masked / reconstruction / reconstruction + visible, one column per image."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jumbokit.data import denormalize
    from jumbokit.training import atomic_save_figure

    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    pics = model.reconstruct(images.to(device), generator=generator)
    rows = [("original", "original"), ("masked", "masked"), ("reconstruction", "reconstruction"),
            ("pasted", "reconstruction + visible")]
    count = images.shape[0]
    fig, axes = plt.subplots(len(rows), count, figsize=(1.3 * count, 1.45 * len(rows)), squeeze=False)
    for r, (key, label) in enumerate(rows):
        batch = denormalize(pics[key].cpu(), mean, std).clamp(0, 1)
        for c in range(count):
            ax = axes[r][c]
            img = batch[c]
            if img.shape[0] == 1:
                ax.imshow(img[0].numpy(), cmap="gray", vmin=0, vmax=1)
            else:
                ax.imshow(img.permute(1, 2, 0).numpy())
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(label, fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    atomic_save_figure(path, fig, dpi=110)
    return path


@torch.no_grad()
def masked_val_loss(model, images: torch.Tensor, batch_size: int = 128, seed: int = 0) -> float:
    """Mean masked-patch loss over fixed validation images with a fixed masking seed."""
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    total, count = 0.0, 0
    for start in range(0, len(images), batch_size):
        chunk = images[start:start + batch_size].to(device)
        total += model(chunk, generator=generator).loss.float().item() * len(chunk)
        count += len(chunk)
    return total / max(count, 1)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from accelerate import PartialState

    import jumbokit
    from jumbokit.data import build_dataset, make_loader
    from jumbokit.training import (
        RunDir,
        check_count_flags,
        default_out_dir,
        fit,
        make_accelerator,
        markdown_table,
        prepare_out_dir,
        setup_threads,
        train_config_from_args,
    )

    args = build_parser().parse_args(argv)
    setup_threads(args)
    check_count_flags(args)
    lr_given = args.lr is not None
    resolve_recipe_defaults(args)
    if args.blr <= 0:
        raise ValueError(f"--blr must be > 0, got {args.blr}")
    if args.vis_images < 1:
        raise ValueError(f"--vis-images must be >= 1, got {args.vis_images}")
    out = Path(args.out) if args.out else default_out_dir(RECIPE, args.model, args.dataset)

    train = build_dataset(args.dataset, "train", task="mae", img_size=args.img_size, in_chans=args.in_chans,
                          crop_scale=tuple(args.crop_scale), hflip=args.hflip, skip_corrupt=args.skip_corrupt,
                          max_samples=args.max_train_samples, seed=args.seed)
    torch.manual_seed(args.seed)  # the encoder and decoder initialisation
    model = build_mae(args, train.in_chans, train.img_size)
    if args.resume is not None:
        check_resume_config(out, model.config)
    prepare_out_dir(out, args.resume, args.overwrite)

    # the learning rate follows the effective batch (per-process batch x accumulation x processes)
    effective_batch = args.batch_size * args.grad_accum * PartialState().num_processes
    lr = args.lr if args.lr is not None else args.blr * effective_batch / 256
    args.lr = lr
    cfg = train_config_from_args(args, save_model=False)
    accelerator = make_accelerator(cfg, out)
    loader = make_loader(train, args.batch_size, seed=args.seed, num_workers=args.num_workers,
                         world_size=accelerator.num_processes)

    val = build_dataset(args.dataset, "val", task="eval", img_size=train.img_size, in_chans=train.in_chans,
                        mean=train.mean, std=train.std, skip_corrupt=args.skip_corrupt)
    vis_count = min(args.vis_images, len(val))
    vis_images = torch.stack([val[i][0] for i in range(vis_count)])
    val_count = min(args.val_samples, len(val))
    val_images = torch.stack([val[i][0] for i in range(val_count)]) if val_count else None

    main_process = accelerator.is_main_process
    encoder = model.encoder
    if main_process and cfg.progress:
        params = sum(p.numel() for p in encoder.parameters()) / 1e6
        dec = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("encoder.")) / 1e6
        print(f"MAE {args.model}: encoder {params:.2f}M params, decoder {dec:.2f}M, {encoder.num_patches} patches "
              f"of {tuple(model.patch_size)} px, mask ratio {args.mask_ratio} (encoder sees "
              f"{encoder.num_patches - int(round(encoder.num_patches * args.mask_ratio))}), data {train}")
        print(f"effective batch {effective_batch} ({args.batch_size} x {args.grad_accum} accum x "
              f"{accelerator.num_processes} processes), lr {lr:.3g}"
              + ("" if lr_given else f" (= blr {args.blr:g} x {effective_batch} / 256)"))

    def loss_fn(net, batch):
        images = batch[0]
        return net(images).loss, {}

    def eval_fn(net) -> dict[str, float]:
        return {"val_loss": masked_val_loss(net, val_images, seed=args.seed)} if val_images is not None else {}

    def on_epoch_end(epoch: int, net, record: dict) -> None:
        if args.vis_every and (epoch + 1) % args.vis_every == 0 and epoch + 1 < args.epochs:
            save_reconstructions(net, vis_images, train.mean, train.std, out / "vis" / f"epoch_{epoch + 1:04d}.png",
                                 f"{args.model} MAE, epoch {epoch + 1}", seed=args.seed)

    run_config = {
        "recipe": RECIPE,
        "args": {k: v for k, v in vars(args).items()},
        "data": {**train.info(), "crop_pct": val.crop_pct},
        "mae": {k: v for k, v in model.config.items() if k != "encoder"},
        "encoder": args.model,
        "effective_batch": effective_batch,
    }
    started = time.time()
    result = fit(model, loader, loss_fn, cfg, out_dir=out, eval_fn=eval_fn if val_images is not None else None,
                 accelerator=accelerator, run_config=run_config, on_epoch_end=on_epoch_end)
    elapsed = time.time() - started

    summary: dict[str, Any] = {}
    if main_process:
        from safetensors.torch import save_file

        trained = result.model
        jumbokit.save(trained.encoder, out)  # model.safetensors + model_config.json: the encoder alone
        tensors = {k: v.detach().contiguous().cpu() for k, v in trained.state_dict().items()}
        tmp = out / ".mae.safetensors.tmp"
        save_file(tensors, str(tmp), metadata={"mae_config": json.dumps(trained.config)})
        tmp.replace(out / "mae.safetensors")
        png = save_reconstructions(trained, vis_images, train.mean, train.std, out / "reconstructions.png",
                                   f"{args.model} MAE, {cfg.epochs} epochs, mask {args.mask_ratio}", seed=args.seed)
        epochs = [r for r in RunDir(out).read_metrics() if r.get("kind") == "epoch"]
        final = result.final
        summary = {
            "model": args.model, "dataset": args.dataset, "epochs": cfg.epochs, "mask_ratio": args.mask_ratio,
            "effective_batch": effective_batch, "lr": lr, "processes": accelerator.num_processes,
            "final_train_loss": final.get("train_loss"), "final_val_loss": final.get("val_loss"),
            "train_time_s": round(elapsed, 1),
            "encoder_params_m": round(sum(p.numel() for p in trained.encoder.parameters()) / 1e6, 3),
        }
        rows = [{"epoch": r["epoch"], "train_loss": r.get("train_loss"), "val_loss": r.get("val_loss"),
                 "lr": r.get("lr"), "epoch_time_s": r.get("epoch_time_s")} for r in epochs]
        report = [
            f"# MAE pretraining: {args.model} on {args.dataset}", "",
            markdown_table([summary], digits=4), "",
            "## Loss per epoch (masked patches only" + (", normalised pixels" if args.norm_pix_loss else "") + ")",
            "", markdown_table(rows, digits=4), "",
            f"![reconstructions]({png.name})", "",
            f"Encoder: `jumbokit.load('{out}')`; linear probe: "
            f"`python recipes/linear_probe.py --checkpoint {out}`.", "",
        ]
        RunDir(out).update_config(summary=summary)
        RunDir(out).write_report("\n".join(report))
        RunDir(out).write_results_csv(rows)
        print(f"\nMAE {args.model} on {args.dataset}: {cfg.epochs} epochs in {elapsed / 60:.1f} min, "
              f"train loss {summary['final_train_loss']:.4f}"
              + (f", val loss {summary['final_val_loss']:.4f}" if summary["final_val_loss"] is not None else ""))
        print(f"wrote {out}/model.safetensors (encoder), mae.safetensors, reconstructions.png, report.md, "
              f"metrics.jsonl")
    accelerator.wait_for_everyone()
    return summary
