"""The weight-sharing ViT-Res super-network (the ViT-ResNAS paper, Sec. 2.3): masked elastic layers, masked LayerNorm,
multi-architecture batches, extraction to ordinary zoo encoders, and importance re-sorting.

Every layer is built at the largest size of the search space. A sub-network uses the first ``k`` channels of
each elastic dimension (stage width, attention heads, FFN hidden units); the others are zeroed by per-sample
masks, so sub-batches with different architectures share one forward / backward pass (channel masking,
"ordered dropout"). LayerNorm statistics are taken over the active channels only (masked LayerNorm), which
makes the masked supernet compute exactly what the extracted sub-network computes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..encoders import load_config, load_state_dict_checked
from ..encoders.blocks import Block, Mlp, masked_layer_norm
from ..encoders.stages import ConvStem, MultiStageEncoder, ResidualSpatialReduction, stage_grids
from ..encoders.zoo import resolve_model_file
from ..encoders.tokenizers import ImagePatchTokenizer, resample_pos_embed
from .space import SearchSpace, token_gene_config

__all__ = ["Supernet", "masked_layer_norm", "MultiArchSampler", "SupernetLoss", "load_supernet", "supernet_accelerator"]


def _prefix_mask(sizes: torch.Tensor, width: int) -> torch.Tensor:
    """(B,) active sizes -> (B, 1, width) float mask with the first ``size`` channels set."""
    return (torch.arange(width, device=sizes.device)[None, :] < sizes[:, None]).float().unsqueeze(1)


class Supernet(nn.Module):
    """The largest network of a :class:`SearchSpace`; ``supernet(x, arch)`` evaluates it as ``arch``.

    ``arch`` may be one architecture or a list of N_a architectures: the batch is split into N_a sub-batches
    (``torch.tensor_split``), each computed as its own architecture, in one pass per global-token gene.
    ``extract(arch)`` returns a standalone :class:`~jumbokit.encoders.MultiStageEncoder` with the inherited
    weights.
    """

    def __init__(self, space: SearchSpace, num_classes: int = 1000, img_size: int | None = None,
                 in_chans: int = 3) -> None:
        super().__init__()
        self.space = space
        self.num_classes = int(num_classes)
        self.img_size = int(img_size or space.img_size)
        self.in_chans = int(in_chans)
        if self.num_classes < 1:
            raise ValueError(f"a supernet needs num_classes >= 1, got {num_classes}")
        patch = space.patch_size(self.img_size)
        self.grids = stage_grids(self.img_size, patch, space.num_stages, space.stem)
        self.max_dims = [c[0] for c in space.dims]
        genes = [token_gene_config(g) for g in space.global_tokens]
        self.max_registers = max([g.get("num_registers", 0) for g in genes] + [0])
        self.max_jumbo = max([g.get("jumbo_multiplier", 0) for g in genes] + [0])
        uses_cls = any(g["global_tokens"] in ("cls", "registers") for g in genes)
        d0 = self.max_dims[0]

        if space.stem == "conv":
            self.patch_embed: ImagePatchTokenizer = ConvStem(self.img_size, patch, in_chans, d0, space.stem_chans)
        else:
            self.patch_embed = ImagePatchTokenizer(self.img_size, patch, in_chans, d0)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches, d0))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d0) * 1e-6) if uses_cls else None
        self.reg_token = nn.Parameter(torch.randn(1, self.max_registers, d0) * 1e-6) if self.max_registers else None
        self.jumbo_token = None
        if self.max_jumbo:
            self.jumbo_token = nn.Parameter(torch.zeros(1, self.max_jumbo, d0))
            nn.init.trunc_normal_(self.jumbo_token, std=0.02)

        self.stages = nn.ModuleList()
        for s, dim in enumerate(self.max_dims):
            stage = nn.Module()
            stage.downsample = (ResidualSpatialReduction(self.max_dims[s - 1], dim, self.grids[s]) if s else None)
            inner = space.heads[s][0] * space.head_dims[s]
            stage.blocks = nn.ModuleList(
                Block(dim, space.heads[s][0], space.mlp_hidden[s][0], qk_dim=inner, v_dim=inner, layer_idx=i)
                for i in range(space.depths[s]))
            if self.max_jumbo:
                width = self.max_jumbo * dim
                stage.jumbo_norms = nn.ModuleList(nn.LayerNorm(width, eps=1e-6) for _ in range(space.depths[s]))
                stage.jumbo_mlp = Mlp(width, int(round(space.jumbo_mlp_ratio * width)))
            self.stages.append(stage)
        self.norm = nn.LayerNorm(self.max_dims[-1], eps=1e-6)
        self.head = nn.Linear(self.max_dims[-1], self.num_classes)
        self.jumbo_head = nn.Linear(self.max_jumbo * self.max_dims[-1], self.num_classes) if self.max_jumbo else None
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    # ----------------------------------------------------------------- i/o
    def saved_config(self) -> dict[str, Any]:
        return {"encoder": "supernet", "space": self.space.to_dict(), "num_classes": self.num_classes,
                "img_size": self.img_size, "in_chans": self.in_chans}

    def no_weight_decay(self) -> set[str]:
        names = {"pos_embed", "cls_token", "reg_token", "jumbo_token"}
        return names | {f"stages.{s}.downsample.pos_embed" for s in range(1, len(self.stages))}

    # ------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor, arch: dict[str, Any] | list[dict[str, Any]]) -> torch.Tensor:
        """Images (B, C, H, W) -> logits (B, num_classes); sub-batch i is computed as ``arch[i]``."""
        archs = [arch] if isinstance(arch, dict) else list(arch)
        if not archs or len(archs) > x.shape[0]:
            raise ValueError(f"need 1 to {x.shape[0]} architectures for a batch of {x.shape[0]}, got {len(archs)}")
        for a in archs:
            self.space.validate(a)
        sizes = [len(c) for c in torch.arange(x.shape[0]).tensor_split(len(archs))]
        owner = torch.repeat_interleave(torch.arange(len(archs)), torch.tensor(sizes))
        logits = x.new_empty(x.shape[0], self.num_classes)
        for gene in dict.fromkeys(a["global_tokens"] for a in archs):
            members = [i for i, a in enumerate(archs) if a["global_tokens"] == gene]
            rows = torch.cat([torch.nonzero(owner == i).flatten() for i in members]).to(x.device)
            group_sizes = [sizes[i] for i in members]
            out = self._forward_group(x.index_select(0, rows), [archs[i] for i in members], group_sizes, gene)
            logits = logits.index_copy(0, rows, out)
        return logits

    def _per_sample(self, values: list[int], sizes: list[int], device) -> torch.Tensor:
        return torch.repeat_interleave(torch.tensor(values, device=device), torch.tensor(sizes, device=device))

    def _forward_group(self, x: torch.Tensor, archs: list[dict], sizes: list[int], gene: str) -> torch.Tensor:
        space, device = self.space, x.device
        opts = token_gene_config(gene)
        kind = opts["global_tokens"]
        jumbo = opts.get("jumbo_multiplier", 0)
        tok = self.patch_embed(x)
        tokens, grid = tok.tokens, tuple(tok.grid)
        tokens = tokens + resample_pos_embed(self.pos_embed, self.patch_embed.grid_size, grid)
        batch = tokens.shape[0]
        parts = []
        if kind in ("cls", "registers"):
            parts.append(self.cls_token)
        if kind == "registers":
            parts.append(self.reg_token[:, : opts["num_registers"]])
        if kind == "jumbo":
            parts.append(self.jumbo_token[:, :jumbo])
        num_global = sum(p.shape[1] for p in parts)
        if parts:
            tokens = torch.cat([torch.cat(parts, 1).expand(batch, -1, -1), tokens], dim=1)

        dims = [self._per_sample([a["dims"][s] for a in archs], sizes, device) for s in range(space.num_stages)]
        h = tokens
        for s, stage in enumerate(self.stages):
            width = self.max_dims[s]
            mask, count = _prefix_mask(dims[s], width), dims[s].view(-1, 1, 1).float()
            if stage.downsample is None:
                h = h * mask
            else:
                prev = self.max_dims[s - 1]
                h, grid = stage.downsample(h, grid, num_global, in_mask=_prefix_mask(dims[s - 1], prev),
                                           in_count=dims[s - 1].view(-1, 1, 1).float(), out_mask=mask)
            for i, block in enumerate(stage.blocks):
                heads = self._per_sample([a["heads"][s][i] for a in archs], sizes, device)
                hidden = self._per_sample([a["mlp_hidden"][s][i] for a in archs], sizes, device)
                h = self._block(stage, i, block, h, mask, count, heads, hidden, num_global, jumbo)
        width = self.max_dims[-1]
        mask, count = _prefix_mask(dims[-1], width), dims[-1].view(-1, 1, 1).float()
        h = masked_layer_norm(h, mask, count, self.norm.weight, self.norm.bias)
        if kind == "jumbo":
            feature = h[:, :jumbo].reshape(batch, jumbo * width)
            return F.linear(feature, self.jumbo_head.weight[:, : jumbo * width], self.jumbo_head.bias)
        feature = h[:, 0] if kind in ("cls", "registers") else h[:, num_global:].mean(dim=1)
        return self.head(feature)

    def _block(self, stage, index: int, block: Block, x, mask, count, heads, hidden, num_global, jumbo):
        batch, length, width = x.shape
        keep = (heads > 0).float().view(-1, 1, 1)
        attn = block.attn
        y = masked_layer_norm(x, mask, count, block.norm1.weight, block.norm1.bias)
        q, k, v = attn.qkv(y).reshape(batch, length, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, length, attn.v_dim)
        a = a * _prefix_mask(heads * attn.head_dim, attn.v_dim)
        x = x + attn.proj(a) * mask * keep
        hidden_mask = _prefix_mask(hidden, block.mlp.fc1.out_features)
        if not jumbo:
            return x + self._ffn(block, x, mask, count, hidden_mask) * keep
        g, p = x[:, :num_global], x[:, num_global:]
        p = p + self._ffn(block, p, mask, count, hidden_mask) * keep
        wide_mask = mask.expand(-1, jumbo, -1).reshape(batch, 1, jumbo * width)
        wide = g.reshape(batch, 1, jumbo * width)
        norm, mlp = stage.jumbo_norms[index], stage.jumbo_mlp
        n = jumbo * width
        z = masked_layer_norm(wide, wide_mask, count * jumbo, norm.weight[:n], norm.bias[:n])
        z = F.gelu(F.linear(z, mlp.fc1.weight[:, :n], mlp.fc1.bias))
        units = torch.round(self.space.jumbo_mlp_ratio * jumbo * (count.view(-1))).long()
        z = z * _prefix_mask(units, mlp.fc1.out_features)
        wide = wide + F.linear(z, mlp.fc2.weight[:n], mlp.fc2.bias[:n]) * wide_mask * keep
        return torch.cat([wide.reshape(batch, jumbo, width), p], dim=1)

    @staticmethod
    def _ffn(block: Block, x, mask, count, hidden_mask):
        y = masked_layer_norm(x, mask, count, block.norm2.weight, block.norm2.bias)
        z = block.mlp.act(block.mlp.fc1(y)) * hidden_mask
        return block.mlp.fc2(z) * mask

    # ---------------------------------------------------------- extraction
    @torch.no_grad()
    def extract(self, arch: dict[str, Any]) -> MultiStageEncoder:
        """A standalone MultiStageEncoder of ``arch`` with every tensor sliced from the supernet, built on the
        supernet's device."""
        space = self.space
        config = space.config(arch, self.img_size, self.in_chans, self.num_classes)
        with torch.device(self.pos_embed.device):
            model = MultiStageEncoder(**config)
        opts = token_gene_config(arch["global_tokens"])
        dims = list(arch["dims"])
        src_stem, dst_stem = self.patch_embed, model.patch_embed
        dst_stem.load_state_dict({k: v for k, v in src_stem.state_dict().items() if not k.startswith("proj.")},
                                 strict=False)
        dst_stem.proj.weight.copy_(src_stem.proj.weight[: dims[0]])
        dst_stem.proj.bias.copy_(src_stem.proj.bias[: dims[0]])
        model.pos_embed.copy_(self.pos_embed[..., : dims[0]])
        plugin = model.stages[0].global_tokens
        if opts["global_tokens"] in ("cls", "registers"):
            plugin.cls_token.copy_(self.cls_token[..., : dims[0]])
        if opts["global_tokens"] == "registers":
            plugin.reg_token.copy_(self.reg_token[:, : opts["num_registers"], : dims[0]])
        jumbo = opts.get("jumbo_multiplier", 0)
        if jumbo:
            plugin.jumbo_token.copy_(self.jumbo_token[:, :jumbo, : dims[0]])
        for s, (src, dst) in enumerate(zip(self.stages, model.stages)):
            d = dims[s]
            if src.downsample is not None:
                d_in, a, b = dims[s - 1], src.downsample, dst.downsample
                b.norm.weight.copy_(a.norm.weight[:d_in])
                b.norm.bias.copy_(a.norm.bias[:d_in])
                b.conv.weight.copy_(a.conv.weight[:d, :d_in])
                b.conv.bias.copy_(a.conv.bias[:d])
                b.token_proj.weight.copy_(a.token_proj.weight[:d, :d_in])
                b.token_proj.bias.copy_(a.token_proj.bias[:d])
                b.pos_embed.copy_(a.pos_embed[..., :d])
            kept = [i for i, h in enumerate(arch["heads"][s]) if h]
            for k, i in enumerate(kept):
                _copy_block(src.blocks[i], dst.blocks[k], d, arch["heads"][s][i], arch["mlp_hidden"][s][i])
            if jumbo:
                seg = _segment_index(jumbo, self.max_dims[s], d)
                units = dst.global_tokens.hidden
                for k, i in enumerate(kept):
                    dst.global_tokens.jumbo_norms[k].weight.copy_(src.jumbo_norms[i].weight[seg])
                    dst.global_tokens.jumbo_norms[k].bias.copy_(src.jumbo_norms[i].bias[seg])
                mlp = dst.global_tokens.jumbo_mlp
                mlp.fc1.weight.copy_(src.jumbo_mlp.fc1.weight[:units][:, seg])
                mlp.fc1.bias.copy_(src.jumbo_mlp.fc1.bias[:units])
                mlp.fc2.weight.copy_(src.jumbo_mlp.fc2.weight[seg][:, :units])
                mlp.fc2.bias.copy_(src.jumbo_mlp.fc2.bias[seg])
        d = dims[-1]
        model.norm.weight.copy_(self.norm.weight[:d])
        model.norm.bias.copy_(self.norm.bias[:d])
        if jumbo:
            model.head.weight.copy_(self.jumbo_head.weight[:, _segment_index(jumbo, self.max_dims[-1], d)])
            model.head.bias.copy_(self.jumbo_head.bias)
        else:
            model.head.weight.copy_(self.head.weight[:, :d])
            model.head.bias.copy_(self.head.bias)
        return model.train(self.training)

    # ------------------------------------------------------- re-sorting
    @torch.no_grad()
    def resort_(self, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Re-order attention heads and FFN hidden units of every block by importance (L1 norm of the weights
        that read and write them), so the first-k channels are the most important; the optimizer's
        per-parameter state (momentum, Adam moments) is permuted with the weights."""
        for stage in self.stages:
            for block in stage.blocks:
                attn, mlp = block.attn, block.mlp
                heads, hd = attn.num_heads, attn.head_dim
                score = attn.qkv.weight.abs().sum(1).view(3, heads, hd).sum((0, 2))
                score = score + attn.qkv.bias.abs().view(3, heads, hd).sum((0, 2))
                score = score + attn.proj.weight.abs().sum(0).view(heads, hd).sum(1)
                order = torch.argsort(score, descending=True, stable=True)
                rows = (torch.arange(3 * heads * hd, device=order.device).view(3, heads, hd)[:, order]).reshape(-1)
                cols = torch.arange(heads * hd, device=order.device).view(heads, hd)[order].reshape(-1)
                _permute(attn.qkv.weight, rows, 0, optimizer)
                _permute(attn.qkv.bias, rows, 0, optimizer)
                _permute(attn.proj.weight, cols, 1, optimizer)
                score = mlp.fc1.weight.abs().sum(1) + mlp.fc1.bias.abs() + mlp.fc2.weight.abs().sum(0)
                order = torch.argsort(score, descending=True, stable=True)
                _permute(mlp.fc1.weight, order, 0, optimizer)
                _permute(mlp.fc1.bias, order, 0, optimizer)
                _permute(mlp.fc2.weight, order, 1, optimizer)


def _segment_index(segments: int, width: int, active: int) -> torch.Tensor:
    """Indices of the first ``active`` channels of each of ``segments`` blocks of ``width`` channels."""
    return (torch.arange(segments)[:, None] * width + torch.arange(active)[None, :]).reshape(-1)


def _copy_block(src: Block, dst: Block, dim: int, heads: int, hidden: int) -> None:
    hd = src.attn.head_dim
    inner, full = heads * hd, src.attn.num_heads * hd
    rows = torch.cat([torch.arange(c * full, c * full + inner) for c in range(3)])
    for a, b in ((src.norm1, dst.norm1), (src.norm2, dst.norm2)):
        b.weight.copy_(a.weight[:dim])
        b.bias.copy_(a.bias[:dim])
    dst.attn.qkv.weight.copy_(src.attn.qkv.weight[rows][:, :dim])
    dst.attn.qkv.bias.copy_(src.attn.qkv.bias[rows])
    dst.attn.proj.weight.copy_(src.attn.proj.weight[:dim, :inner])
    dst.attn.proj.bias.copy_(src.attn.proj.bias[:dim])
    dst.mlp.fc1.weight.copy_(src.mlp.fc1.weight[:hidden, :dim])
    dst.mlp.fc1.bias.copy_(src.mlp.fc1.bias[:hidden])
    dst.mlp.fc2.weight.copy_(src.mlp.fc2.weight[:dim, :hidden])
    dst.mlp.fc2.bias.copy_(src.mlp.fc2.bias[:dim])


def _permute(param: nn.Parameter, index: torch.Tensor, dim: int, optimizer: torch.optim.Optimizer | None) -> None:
    param.data = param.data.index_select(dim, index)
    if optimizer is None or param not in optimizer.state:
        return
    for key, value in optimizer.state[param].items():
        if torch.is_tensor(value) and value.shape == param.shape:
            optimizer.state[param][key] = value.index_select(dim, index)


class MultiArchSampler:
    """Samples the N_a architectures of each training step, with the paper's width warm-up: only the largest
    network at step 0, every choice open after ``warmup`` (fraction of training; the paper: 25%)."""

    def __init__(self, space: SearchSpace, num_archs: int = 16, warmup: float = 0.25, seed: int = 0) -> None:
        if num_archs < 1:
            raise ValueError(f"num_archs must be >= 1, got {num_archs}")
        if not 0.0 <= warmup <= 1.0:
            raise ValueError(f"warmup must be a fraction of training in [0, 1], got {warmup}")
        self.space, self.num_archs, self.warmup, self.seed = space, num_archs, warmup, seed

    def progress(self, step: int, total_steps: int) -> float:
        if self.warmup == 0:
            return 1.0
        return min(1.0, step / max(1.0, self.warmup * total_steps))

    def sample(self, step: int, total_steps: int) -> list[dict[str, Any]]:
        """The architectures of ``step`` (deterministic in (seed, step), so a resumed run samples the same)."""
        rng = random.Random(self.seed * 1_000_003 + step)
        progress = self.progress(step, total_steps)
        return [self.space.sample(rng, progress) for _ in range(self.num_archs)]


class SupernetLoss:
    """``loss_fn`` of ``fit`` for a supernet: cross-entropy with this step's N_a sampled architectures, one per
    sub-batch; ``fit`` calls ``on_step`` before every optimizer step."""

    def __init__(self, sampler: MultiArchSampler, label_smoothing: float = 0.0) -> None:
        from jumbokit.training import classification_loss

        self.sampler = sampler
        self.archs = [sampler.space.largest()]
        self.inner = classification_loss(nn.CrossEntropyLoss(label_smoothing=label_smoothing), forward=self.forward)

    def on_step(self, step: int, total_steps: int) -> None:
        self.archs = self.sampler.sample(step, total_steps)

    def forward(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """Logits (B, num_classes) of ``x`` (B, C, H, W), split into sub-batches over this step's architectures."""
        return model(x, self.archs[: x.shape[0]])

    def __call__(self, model: nn.Module, batch):
        return self.inner(model, batch)


def supernet_accelerator(cfg, out_dir=None):
    """The ``Accelerator`` of supernet training: ``make_accelerator(cfg, out_dir)`` whose DDP wrapper (several
    processes only) finds unused parameters.

    A step's N_a architectures may all miss a global-token gene (its token, head, Jumbo norms and FFN then take
    no part in the graph), which plain DDP refuses. With ``find_unused_parameters`` a parameter unused on every
    rank keeps ``grad = None``, exactly as in one process, so the optimizer skips it (no weight decay, no moment
    update) in both; a zero-weighted ``0 * p.sum()`` term would instead give it a zero gradient and let AdamW
    decay and move it, changing even one-process training. One process is not wrapped at all."""
    from accelerate.utils import DistributedDataParallelKwargs

    from jumbokit.training import make_accelerator

    accelerator = make_accelerator(cfg, out_dir)
    if accelerator.num_processes > 1:  # the handler Accelerator(kwargs_handlers=[...]) would set
        accelerator.ddp_handler = DistributedDataParallelKwargs(find_unused_parameters=True)
    return accelerator


def load_supernet(path, map_location: str = "cpu") -> Supernet:
    """Rebuild a supernet saved with ``jumbokit.save`` (a run directory or .safetensors file)."""
    from safetensors.torch import load_file

    target = resolve_model_file(Path(path))
    config = load_config(target)
    if config.get("encoder") != "supernet":
        raise ValueError(f"{target} holds a {config.get('encoder', 'plain')!r} encoder, not a supernet; "
                         "train one with `jumbokit nas-supernet`")
    net = Supernet(SearchSpace.from_dict(config["space"]), config["num_classes"], config["img_size"],
                   config["in_chans"])
    load_state_dict_checked(net, load_file(str(target), device=str(map_location)), source=str(target))
    return net

