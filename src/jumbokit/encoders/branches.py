"""Progressive-join multi-branch blocks and their exact collapse into a plain Encoder.

An L-layer configuration is trained as L/n blocks of n parallel branches. Each block has one shared
(non-affine) pre-attention normalisation and one shared pre-FFN normalisation; every branch keeps
its own LayerNorm affine (gamma_b, beta_b), which is folded into that branch's projections on collapse.
Branch outputs are summed into the residual stream.

Joining, with lambda in [0, 1] and rescale r = sqrt(1 + (n - 1) lambda^2):

* attention logits, per head:  A'_b = (A_b + lambda * sum_{c != b} A_c) / (r sqrt(d_k)),
  A_b = Q_b K_b^T (biases included);
* value activations (route "b", default): V'_b = (V_b + lambda * sum_{c != b} V_c) / r;
* pre-GELU FFN activations:    h'_b = (h_b + lambda * sum_{c != b} h_c) / r.

At lambda = 1 every branch sees the same softmax S = softmax(sum_b Q_b K_b^T / sqrt(n d_k)), the same
values sum_b V_b / sqrt(n) and the same GELU input, so the block collapses EXACTLY into one plain
block:

* q/k per head: concatenation [Q_1 .. Q_n], [K_1 .. K_n] (width n * d_k per head; the default
  1/sqrt(n d_k) softmax scale of that width is exactly the joined scale). When n * d_k > dim the
  "product" form is narrower: q_h = x G_h + u_h, k_h = x with G_h = sum_b Wq_b Wk_b^T, which is exact
  because the dropped terms depend on the query only and cancel in the softmax;
* values: sum_b Wv_b / sqrt(n) (one branch wide); output projection: sum_b Wo_b;
* FFN: fc1 = sum_b W1_b / sqrt(n), fc2 = sum_b W2_b;
* LayerScale gammas are folded into the branch output projections.

Route "a" (``join_values=False``) joins only the logits and keeps each branch's values: the collapsed
value heads are n times wider (values and output projections concatenated per head).
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
import torch.nn as nn

from .branch_blocks import BranchedAttention, BranchedBlock, BranchedMlp
from .branch_layers import BranchAffine, BranchLinear, BranchScale
from .collapse import check_joined, collapsed_config, fold_layernorm_into_linear
from .encoder import Encoder, full_config
from .io import load_state_dict_checked
from .join import JOIN_SCHEDULES, join_lambda_at, join_schedule_value, resolve_schedule

__all__ = [
    "JOIN_SCHEDULES",
    "join_schedule_value",
    "join_lambda_at",
    "BranchLinear",
    "BranchAffine",
    "BranchScale",
    "BranchedAttention",
    "BranchedMlp",
    "BranchedBlock",
    "BranchedEncoder",
    "build_branched_encoder",
    "reparameterize",
    "fold_layernorm_into_linear",
    "collapsed_config",
]


class BranchedEncoder(Encoder):
    """Training form of an L-layer config: L/n blocks of n progressively joined branches.

    Same tokenizer, global tokens, norm, head and ``forward_features`` / ``forward_head`` / ``forward``
    API as ``Encoder``. ``config`` is the L-layer config; ``reparameterize()`` returns the plain
    L/n-layer ``Encoder`` once lambda = 1.
    """

    def __init__(
        self,
        config: dict,
        branches: int,
        join_schedule: str | Callable[[float], float] = "linear",
        join_warmup_steps: int = 10_000,
        join_start_step: int = 0,
        diversity_weight: float = 0.0,
        join_values: bool = True,
        join_rescale: bool = True,
        join_lambda: float = 0.0,
    ) -> None:
        cfg = full_config(config)
        depth = int(cfg["depth"])
        if isinstance(branches, bool) or not isinstance(branches, int) or branches < 2:
            raise ValueError(f"branches must be an integer >= 2, got {branches!r}")
        if depth % branches:
            divisors = [k for k in range(2, depth + 1) if depth % k == 0]
            raise ValueError(f"branches={branches} does not divide depth={depth}; "
                             f"choose one of {divisors} (depth / branches blocks are built)")
        resolve_schedule(join_schedule)
        if join_warmup_steps < 0 or join_start_step < 0:
            raise ValueError(f"join_warmup_steps and join_start_step must be >= 0, "
                             f"got {join_warmup_steps} and {join_start_step}")
        if diversity_weight < 0:
            raise ValueError(f"diversity_weight must be >= 0, got {diversity_weight}")
        if cfg.get("rel_pos_bias"):
            raise ValueError("rel_pos_bias is not supported with progressive-join branches (the joined logits would "
                             "scale the bias); train the plain model with it, or branches without it")
        super().__init__(**{**config, "depth": depth // branches})
        self.config = cfg  # the L-layer config
        self.layers, self.branches = depth, branches
        self.join_schedule = join_schedule
        self.join_warmup_steps, self.join_start_step = int(join_warmup_steps), int(join_start_step)
        self.diversity_weight = float(diversity_weight)
        self.join_values, self.join_rescale = bool(join_values), bool(join_rescale)
        self.aux_loss: torch.Tensor | None = None

        dim = int(cfg["dim"])
        mlp_hidden = int(cfg["mlp_hidden"] or round(cfg["mlp_ratio"] * dim))
        rates = torch.linspace(0, cfg["drop_path_rate"], depth).tolist()
        eps = self.blocks[0].norm1.eps if len(self.blocks) else 1e-6
        self.blocks = nn.ModuleList(
            BranchedBlock(
                dim, cfg["num_heads"], mlp_hidden, branches, qkv_bias=cfg["qkv_bias"], drop=cfg["drop_rate"],
                attn_drop=cfg["attn_drop_rate"], drop_path=rates[i * branches:(i + 1) * branches],
                init_values=cfg["init_values"], layer_idx=i, join_values=join_values, rescale=join_rescale,
                norm_eps=eps,
            )
            for i in range(depth // branches)
        )
        self.set_join(join_lambda)

    # ------------------------------------------------------------ joining
    @property
    def join_lambda(self) -> float:
        """Current lambda (0 = independent branches, 1 = fully joined, collapsible)."""
        for block in self.blocks:
            if isinstance(block, BranchedBlock):
                return float(block.join_lambda)
        return 1.0

    def set_join(self, lambda_value: float) -> None:
        """Set lambda in [0, 1] on every block."""
        value = float(lambda_value)
        if not 0.0 <= value <= 1.0 or math.isnan(value):
            raise ValueError(f"join lambda must be in [0, 1], got {lambda_value}")
        for block in self.blocks:
            if isinstance(block, BranchedBlock):
                block.join_lambda.fill_(value)

    def update_join(self, step: int) -> float:
        """Set lambda from the schedule at a training step (call once per step); returns it."""
        value = join_lambda_at(step, self.join_warmup_steps, self.join_schedule, self.join_start_step)
        self.set_join(value)
        return value

    # ------------------------------------------------------------ forward
    def forward_features(self, x, keep=None, pad_mask=None, layer=None):
        """As ``Encoder.forward_features``; also sets ``aux_loss`` (weighted diversity term or None)."""
        collect = self.diversity_weight > 0 and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            if isinstance(block, BranchedBlock):
                block.collect_diversity, block.diversity = collect, []
        try:
            out = super().forward_features(x, keep=keep, pad_mask=pad_mask, layer=layer)
        finally:
            terms = []
            for block in self.blocks:
                if isinstance(block, BranchedBlock):
                    terms.extend(block.diversity)
                    block.collect_diversity, block.diversity = False, []
        self.aux_loss = self.diversity_weight * torch.stack(terms).mean() if terms else None
        return out

    def no_weight_decay(self) -> set[str]:
        """Tokens, position embeddings, and the per-branch norm affines, LayerScales and biases."""
        names = set(super().no_weight_decay())
        for name, param in self.named_parameters():
            if name.startswith("blocks.") and (
                name.endswith(".bias") or ".norm." in name or name.endswith(".gamma")
            ):
                names.add(name)
        return names

    # ------------------------------------------------------------ save / load / collapse
    def branch_options(self) -> dict:
        schedule = self.join_schedule
        if callable(schedule):
            schedule = getattr(schedule, "__name__", "custom")
        return {
            "branches": self.branches, "join_schedule": schedule,
            "join_warmup_steps": self.join_warmup_steps, "join_start_step": self.join_start_step,
            "diversity_weight": self.diversity_weight, "join_values": self.join_values,
            "join_rescale": self.join_rescale,
        }

    def saved_config(self) -> dict:
        """JSON-able config that ``jumbokit.load`` rebuilds this training form from."""
        if callable(self.join_schedule):
            raise ValueError("a model with a custom (callable) join_schedule cannot be saved by name; "
                             "use one of " + ", ".join(sorted(JOIN_SCHEDULES)))
        return {**copy.deepcopy(self.config), "branched": self.branch_options()}

    def plain_config(self) -> dict:
        return copy.deepcopy(self.config)

    def collapsed_config(self, qk_form: str = "auto") -> dict:
        """Config of the plain L/n-layer encoder ``reparameterize`` returns."""
        return collapsed_config(self.config, self.branches, self.join_values, qk_form)

    def reparameterize(self, qk_form: str = "auto") -> nn.Module:
        """The plain L/n-layer ``Encoder`` equal to this model at lambda = 1 (this model is unchanged).

        qk_form: "concat" (q/k heads n*d_k wide), "product" (q/k heads D wide, k = x), or "auto"
        (the narrower). Raises ``ValueError`` while lambda < 1.
        """
        for block in self.blocks:
            if isinstance(block, BranchedBlock):
                check_joined(block)
        config = self.collapsed_config(qk_form)
        plain = Encoder(**config)
        state = {k: v for k, v in self.state_dict().items() if not k.startswith("blocks.")}
        for i, block in enumerate(self.blocks):
            if isinstance(block, BranchedBlock):
                block_state = block.collapsed_state(qk_form, check=False)
            else:  # already fused in place (timm reparameterize_model)
                block_state = block.state_dict()
            state.update({f"blocks.{i}.{k}": v for k, v in block_state.items()})
        load_state_dict_checked(plain, state, source="collapsed branched encoder")
        device = self.patch_embed.proj.weight.device
        return plain.to(device).train(self.training)


def build_branched_encoder(config: dict, branches: int = 2, **join_options) -> nn.Module:
    """Progressive-join training form of an L-layer encoder config: L/``branches`` blocks of ``branches``.

    join_schedule: "linear" | "cosine" | "exp" | "sqrt" or a callable t -> lambda over t in [0, 1];
    lambda rises over ``join_warmup_steps`` steps from ``join_start_step`` (the progressive-reparameterization
    paper's default: 10k) and stays 1.
    diversity_weight: weight of the mean squared cosine similarity between branch outputs (the paper uses
    0.05); the weighted term is left in ``model.aux_loss`` after each training forward.
    join_values: route (b), join the value activations too (default; values stay one branch wide after the
    collapse); False = route (a), only logits joined, collapsed value heads n times wider.
    The options and their defaults are those of :class:`BranchedEncoder`.
    """
    return BranchedEncoder(dict(config), branches, **join_options)


def reparameterize(model: nn.Module, qk_form: str = "auto") -> nn.Module:
    """Collapse a lambda = 1 branched encoder into its plain L/n-layer ``Encoder``; a plain one is returned as is."""
    if isinstance(model, BranchedEncoder):
        return model.reparameterize(qk_form)
    if isinstance(model, Encoder):
        return model
    raise TypeError(f"expected a jumbokit Encoder or BranchedEncoder, got {type(model).__name__}")
