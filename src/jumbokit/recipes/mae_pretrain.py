"""Masked-autoencoder (MAE) pretraining of any plain image encoder of the zoo (CLS, registers, Jumbo, none).

    jumbokit mae-pretrain                                           # digits, 32 px, patch 4, CPU-friendly
    jumbokit mae-pretrain --dataset digits --model vit_tiny_jumbo --epochs 100 --out runs/mae
    accelerate launch --multi_gpu -m jumbokit mae-pretrain --dataset folder:/data/imagenet \\
        --model vit_base_jumbo --img-size 224 --patch-size 16 --batch-size 256 --epochs 800 --warmup-epochs 40 \\
        --decoder-dim 512 --decoder-depth 8 --decoder-heads 16 --mixed-precision bf16

MAE's recipe: AdamW betas (0.9, 0.95), weight decay 0.05, lr = blr * effective batch / 256 (blr 1.5e-4),
linear warm-up then cosine, mask ratio 0.75, per-patch normalised pixel targets. The run directory gets
config.json, metrics.jsonl, checkpoints/ (continue with --out DIR --resume), model.safetensors +
model_config.json (the ENCODER, for jumbokit.load and the linear probe), mae.safetensors (encoder + decoder),
reconstructions.png, report.md, results.csv and summary.json.
"""
from __future__ import annotations

import argparse
import logging
from typing import Any

import torch

RECIPE = "mae_pretrain"
MAE_BASE_LR = 1.5e-4
# digits: 20 epochs of batch 64 are ~380 steps, where MAE's base lr leaves the encoder nearly untrained
DIGITS_BASE_LR = 1.5e-3

logger = logging.getLogger("jumbokit.recipes.mae_pretrain")


def build_parser() -> argparse.ArgumentParser:
    from jumbokit.cli.training import add_common_args

    parser = argparse.ArgumentParser(
        description="MAE pretraining of a plain zoo encoder; writes a run directory with the encoder "
                    "(model.safetensors), metrics, checkpoints and reconstruction PNGs.")
    add_common_args(parser, dataset="digits", model="vit_pico_jumbo", epochs=20, batch_size=64, lr=None,
                    weight_decay=0.05, warmup_epochs=1.0, optimizer="adamw", betas=(0.9, 0.95))
    parser.set_defaults(min_lr=0.0)
    mae = parser.add_argument_group("MAE")
    mae.add_argument("--blr", type=float, default=None,
                     help="base learning rate: lr = blr * effective batch / 256 unless --lr is given "
                          f"(default: MAE's {MAE_BASE_LR:g}; {DIGITS_BASE_LR:g} for digits)")
    mae.add_argument("--mask-ratio", type=float, default=0.75,
                     help="fraction of patches hidden from the encoder (default: %(default)s)")
    mae.add_argument("--norm-pix-loss", action=argparse.BooleanOptionalAction, default=True,
                     help="regress per-patch normalised pixels (default: on)")
    mae.add_argument("--decoder-dim", type=int, default=128, help="decoder width (default: %(default)s; MAE: 512)")
    mae.add_argument("--decoder-depth", type=int, default=2, help="decoder blocks (default: %(default)s; MAE: 8)")
    mae.add_argument("--decoder-heads", type=int, default=4,
                     help="decoder attention heads (default: %(default)s; MAE: 16)")
    mae.add_argument("--decoder-mlp-ratio", type=float, default=4.0,
                     help="decoder MLP hidden / width (default: %(default)s)")
    mae.add_argument("--vis-every", type=int, default=5,
                     help="epochs between reconstruction PNGs, 0 = only at the end (default: %(default)s)")
    mae.add_argument("--vis-images", type=int, default=8,
                     help="images shown in reconstruction PNGs (default: %(default)s)")
    mae.add_argument("--val-samples", type=int, default=256,
                     help="validation images of the per-epoch masked reconstruction loss, 0 = off "
                          "(default: %(default)s)")
    model = parser.add_argument_group("encoder overrides of the zoo config of --model")
    model.add_argument("--patch-size", type=int, default=None,
                       help="patch side (default: 4 for digits and fashion-mnist, else the model's)")
    model.add_argument("--depth", type=int, default=None, help="encoder blocks (default: the model's)")
    model.add_argument("--pos-embed", default="sincos", choices=("sincos", "learn"),
                       help="encoder position embedding (default: %(default)s, as MAE)")
    model.add_argument("--drop-path", type=float, default=0.0,
                       help="encoder stochastic depth rate (default: %(default)s)")
    parser.add_argument("--debug", action="store_true", help="print full tracebacks of errors (default: off)")
    return parser


def resolve_recipe_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill ``--blr`` left out with the base lr of the dataset. ``--scale`` / ``--hflip`` left out take the
    dataset's MAE augmentation when the data is built (MAE's crops 0.2-1 and flips; digits 0.5-1, no flip)."""
    if getattr(args, "blr", None) is None:
        args.blr = DIGITS_BASE_LR if args.dataset == "digits" else MAE_BASE_LR
    return args


def check_flags(args: argparse.Namespace) -> None:
    """One-line errors for flags MAE cannot use, before any work or file."""
    from jumbokit.ssl import require_plain_encoder
    from jumbokit.cli.training import check_count_flags

    check_count_flags(args)
    require_plain_encoder(args.model)
    if args.blr is not None and args.blr <= 0:
        raise ValueError(f"--blr must be > 0, got {args.blr}")
    if args.vis_images < 1:
        raise ValueError(f"--vis-images must be >= 1, got {args.vis_images}")


def first_images(dataset, count: int) -> torch.Tensor | None:
    """The first ``count`` images of ``dataset`` as one (M, C, H, W) tensor; None for 0."""
    count = min(count, len(dataset))
    return torch.stack([dataset[i][0] for i in range(count)]) if count else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from jumbokit import ssl
    from jumbokit.data import make_loader, parse_dataset_spec
    from jumbokit.data import SplitNotFoundError
    from jumbokit.data.defaults import BUILTIN_KINDS
    from jumbokit.data.loader import fit_batch_size
    from jumbokit.logs import configure_logging
    from jumbokit.cli.data import data_settings_from_args
    from jumbokit.cli.errors import one_line
    from jumbokit.cli.resume import parse_run_args
    from jumbokit.cli.training import default_out_dir, prepare_out_dir, setup_threads, train_config_from_args
    from jumbokit.training import RunDir, atomic_write_json, fit, launch_state, make_accelerator

    configure_logging()
    parsed = parse_run_args(build_parser(), argv, lambda a: default_out_dir(RECIPE, a.model, a.dataset))
    args, out = parsed.args, parsed.out
    check_flags(args)
    setup_threads(args)
    flags = dict(vars(args))  # config.json "args": the flags as given, before the recipe fills in defaults
    resolve_recipe_defaults(args)
    processes = launch_state(args.cpu).num_processes
    data = data_settings_from_args(args)
    train = data.build("train", "mae", seed=args.seed)
    torch.manual_seed(args.seed)  # the encoder and decoder initialisation
    patch = args.patch_size or (4 if parse_dataset_spec(args.dataset).kind in BUILTIN_KINDS else None)
    model = ssl.build_image_mae(args.model, train.img_size, train.in_chans, patch_size=patch, depth=args.depth,
                                pos_embed=args.pos_embed, drop_path=args.drop_path, decoder_dim=args.decoder_dim,
                                decoder_depth=args.decoder_depth, decoder_heads=args.decoder_heads,
                                decoder_mlp_ratio=args.decoder_mlp_ratio, mask_ratio=args.mask_ratio,
                                norm_pix_loss=args.norm_pix_loss)
    args.batch_size = fit_batch_size(args.batch_size, len(train), "batch_size" in parsed.given, processes)
    prepare_out_dir(out, args.resume, args.overwrite)
    effective_batch = args.batch_size * args.grad_accum * processes  # the lr follows the effective batch
    lr = args.lr if args.lr is not None else args.blr * effective_batch / 256
    cfg = train_config_from_args(args, lr=lr, save_model=False)
    accelerator = make_accelerator(cfg, out)
    loader = make_loader(train, args.batch_size, seed=args.seed, num_workers=args.num_workers, world_size=processes)
    try:
        val = data.build("val", "eval", like=train)
    except SplitNotFoundError as err:  # a plain class folder: no val loss (it would be a training loss)
        logger.info(f"no val split ({one_line(err)}): no val loss; reconstructions drawn from training images")
        val = data.build("train", "eval", like=train)
        args.val_samples = 0
    vis_images, val_images = first_images(val, args.vis_images), first_images(val, args.val_samples)
    encoder, patches = model.encoder, model.encoder.num_patches
    logger.info(f"MAE {args.model}: encoder {sum(p.numel() for p in encoder.parameters()) / 1e6:.2f}M params, "
                f"{patches} patches of {tuple(model.patch_size)} px, mask ratio {args.mask_ratio} (encoder sees "
                f"{patches - int(round(patches * args.mask_ratio))}), data {train}")
    logger.info(f"effective batch {effective_batch} ({args.batch_size} x {args.grad_accum} accum x {processes} "
                f"processes), lr {lr:.3g}" + ("" if args.lr is not None else
                                              f" (= blr {args.blr:g} x {effective_batch} / 256)"))

    def eval_fn(net) -> dict[str, float]:
        return {"val_loss": ssl.masked_val_loss(net, val_images, seed=args.seed)}

    def on_epoch_end(epoch: int, net, record: dict) -> None:
        if args.vis_every and (epoch + 1) % args.vis_every == 0 and epoch + 1 < cfg.epochs:
            ssl.save_reconstructions(net, vis_images, train.mean, train.std, out / "vis" / f"epoch_{epoch + 1:04d}.png",
                                     f"{args.model} MAE, epoch {epoch + 1}", seed=args.seed)

    run_config = {"recipe": RECIPE, "args": flags, "data": {**train.info(), "crop_pct": val.crop_pct},
                  "mae": {k: v for k, v in model.config.items() if k != "encoder"}, "encoder": args.model,
                  "effective_batch": effective_batch, "lr": lr}
    result = fit(model, loader, lambda net, batch: (net(batch[0]).loss, {}), cfg, out_dir=out,
                 eval_fn=eval_fn if val_images is not None else None, accelerator=accelerator, run_config=run_config,
                 on_epoch_end=on_epoch_end, resume_record=parsed.resume_record)
    summary: dict[str, Any] = {}
    if accelerator.is_main_process:
        trained, final = result.model, result.final
        ssl.save_mae(trained, out)
        png = ssl.save_reconstructions(trained, vis_images, train.mean, train.std, out / "reconstructions.png",
                                       f"{args.model} MAE, {cfg.epochs} epochs, mask {args.mask_ratio}", seed=args.seed)
        summary = {"model": args.model, "dataset": args.dataset, "epochs": cfg.epochs, "mask_ratio": args.mask_ratio,
                   "effective_batch": effective_batch, "lr": lr, "processes": processes,
                   "train_loss": final.get("train_loss"), "val_loss": final.get("val_loss"),
                   "train_time_s": round(sum(r.get("epoch_time_s", 0.0) for r in result.history), 1),
                   "encoder_params_m": round(sum(p.numel() for p in trained.encoder.parameters()) / 1e6, 3)}
        rows = [{k: r.get(k) for k in ("epoch", "train_loss", "val_loss", "lr", "epoch_time_s")}
                for r in RunDir(out).read_metrics() if r.get("kind") == "epoch"]
        atomic_write_json(out / "summary.json", summary)
        RunDir(out).write_report(ssl.mae_report(f"MAE pretraining: {args.model} on {args.dataset}", summary, rows,
                                                args.norm_pix_loss, png.name, out))
        RunDir(out).write_results_csv(rows)
        val_text = f", val loss {summary['val_loss']:.4f}" if summary["val_loss"] is not None else ""
        print(f"MAE {args.model} on {args.dataset}: {cfg.epochs} epochs, train loss {summary['train_loss']:.4f}"
              f"{val_text}\nwrote {out}/model.safetensors (encoder), mae.safetensors, reconstructions.png, "
              "report.md, metrics.jsonl")
    accelerator.wait_for_everyone()
    return summary
