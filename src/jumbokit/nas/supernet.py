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
from ..encoders.blocks import Block, masked_layer_norm
from ..encoders.global_kinds import global_token_kind, global_token_kinds
from ..encoders.global_kinds import prefix_mask as _prefix_mask
from ..encoders.stages import ConvStem, MultiStageEncoder, ResidualSpatialReduction, stage_grids
from ..encoders.zoo import resolve_model_file
from ..encoders.tokenizers import ImagePatchTokenizer, resample_pos_embed
from .space import SearchSpace, token_gene_config

__all__ = ["Supernet", "masked_layer_norm", "MultiArchSampler", "SupernetLoss", "load_supernet", "supernet_accelerator"]


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
        d0 = self.max_dims[0]
        # the global-token kinds of the space's genes, in registration order, each with the options of its genes
        genes = [token_gene_config(g) for g in space.global_tokens]
        self._kinds = {name: [g for g in genes if g["global_tokens"] == name] for name in global_token_kinds()
                       if any(g["global_tokens"] == name for g in genes)}

        if space.stem == "conv":
            self.patch_embed: ImagePatchTokenizer = ConvStem(self.img_size, patch, in_chans, d0, space.stem_chans)
        else:
            self.patch_embed = ImagePatchTokenizer(self.img_size, patch, in_chans, d0)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches, d0))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        tables: dict[str, Any] = {}  # the kinds' token tables; kinds asking for one name share it (largest count)
        for name, kind_genes in self._kinds.items():
            for table in global_token_kind(name).supernet_tokens(kind_genes):
                if table.name not in tables or table.count > tables[table.name].count:
                    tables[table.name] = table
        self._token_tables = tuple(tables)
        for table in tables.values():
            setattr(self, table.name, nn.Parameter(table.init(table.count, d0)))

        self.stages = nn.ModuleList()
        for s, dim in enumerate(self.max_dims):
            stage = nn.Module()
            stage.downsample = (ResidualSpatialReduction(self.max_dims[s - 1], dim, self.grids[s]) if s else None)
            inner = space.heads[s][0] * space.head_dims[s]
            stage.blocks = nn.ModuleList(
                Block(dim, space.heads[s][0], space.mlp_hidden[s][0], qk_dim=inner, v_dim=inner, layer_idx=i)
                for i in range(space.depths[s]))
            for name, kind_genes in self._kinds.items():
                global_token_kind(name).supernet_stage(self, stage, dim, space.depths[s], kind_genes)
            self.stages.append(stage)
        self.norm = nn.LayerNorm(self.max_dims[-1], eps=1e-6)
        self.head = nn.Linear(self.max_dims[-1], self.num_classes)
        for name, kind_genes in self._kinds.items():
            global_token_kind(name).supernet_heads(self, kind_genes)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    # ----------------------------------------------------------------- i/o
    def saved_config(self) -> dict[str, Any]:
        return {"encoder": "supernet", "space": self.space.to_dict(), "num_classes": self.num_classes,
                "img_size": self.img_size, "in_chans": self.in_chans}

    def no_weight_decay(self) -> set[str]:
        names = {"pos_embed", *self._token_tables}
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
        kind = global_token_kind(opts["global_tokens"])
        tok = self.patch_embed(x)
        tokens, grid = tok.tokens, tuple(tok.grid)
        tokens = tokens + resample_pos_embed(self.pos_embed, self.patch_embed.grid_size, grid)
        batch = tokens.shape[0]
        parts = kind.supernet_join(self, opts)
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
                h = self._block(stage, i, block, h, mask, count, heads, hidden, num_global, kind, opts)
        width = self.max_dims[-1]
        mask, count = _prefix_mask(dims[-1], width), dims[-1].view(-1, 1, 1).float()
        h = masked_layer_norm(h, mask, count, self.norm.weight, self.norm.bias)
        return kind.supernet_logits(self, h, num_global, opts)

    def _block(self, stage, index: int, block: Block, x, mask, count, heads, hidden, num_global, kind, opts):
        batch, length, width = x.shape
        keep = (heads > 0).float().view(-1, 1, 1)
        attn = block.attn
        y = masked_layer_norm(x, mask, count, block.norm1.weight, block.norm1.bias)
        q, k, v = attn.qkv(y).reshape(batch, length, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, length, attn.v_dim)
        a = a * _prefix_mask(heads * attn.head_dim, attn.v_dim)
        x = x + attn.proj(a) * mask * keep
        hidden_mask = _prefix_mask(hidden, block.mlp.fc1.out_features)
        if not kind.has_own_ffn:
            return x + self._ffn(block, x, mask, count, hidden_mask) * keep
        g, p = x[:, :num_global], x[:, num_global:]  # the global tokens go through the kind's own FFN
        p = p + self._ffn(block, p, mask, count, hidden_mask) * keep
        g = kind.supernet_ffn(self, stage, index, g, mask, count, keep, opts)
        return torch.cat([g, p], dim=1)

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
        kept = []
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
            kept.append([i for i, h in enumerate(arch["heads"][s]) if h])
            for k, i in enumerate(kept[s]):
                _copy_block(src.blocks[i], dst.blocks[k], d, arch["heads"][s][i], arch["mlp_hidden"][s][i])
        d = dims[-1]
        model.norm.weight.copy_(self.norm.weight[:d])
        model.norm.bias.copy_(self.norm.bias[:d])
        global_token_kind(opts["global_tokens"]).supernet_extract(self, model, opts, dims, kept)  # tokens, parts, head
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

