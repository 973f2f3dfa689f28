"""The ``cls`` kind: one CLS token (timm ``cls_token``); the feature is its output. The default kind."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .registry import GlobalTokenKind, GlobalTokens, TokenTable, first_tokens, register_global_tokens

__all__ = ["ClsToken", "ClsKind", "class_token_table"]


class ClsToken(GlobalTokens):
    """One CLS token (timm ``cls_token``); the feature is its output.

    learn_tokens=False builds the plug-in without its token (a later stage of a multi-stage encoder,
    whose global tokens arrive from the stage before).
    """

    kind = "cls"
    num_tokens = 1

    def __init__(self, dim: int, learn_tokens: bool = True) -> None:
        super().__init__(dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if learn_tokens else None
        if learn_tokens:
            nn.init.normal_(self.cls_token, std=1e-6)

    def tokens(self) -> torch.Tensor:
        return self.cls_token

    def pool(self, global_tokens, patches, pad_mask):
        return global_tokens[:, 0]


def class_token_table() -> TokenTable:
    """The supernet's CLS token (shared by every kind that leads with one)."""
    return TokenTable("cls_token", 1, lambda count, width: torch.randn(1, count, width) * 1e-6)


class ClsKind(GlobalTokenKind):
    """CLS: one token, pooled as itself; timm's ``class_token=True``; the search gene "cls"."""

    token_params = ("cls_token",)
    gene_help = "'cls'"

    def build(self, cfg, dim, depth, learn_tokens=True):
        return ClsToken(dim, learn_tokens=learn_tokens)

    def num_tokens(self, cfg):
        return 1

    def timm_args(self, cfg):
        return {"class_token": True, "reg_tokens": 0}

    def timm_prefix(self, cfg):
        return [("cls_token", "cls_token", 1)]

    def from_timm(self, class_token, reg_tokens, global_pool):
        return {} if class_token and not reg_tokens else None

    def parse_gene(self, gene: str) -> dict[str, Any] | None:
        return {} if gene == self.name else None

    def supernet_tokens(self, genes):
        return [class_token_table()]

    def supernet_join(self, net, opts):
        return [net.cls_token]

    def supernet_feature(self, h, num_global, opts):
        return h[:, 0]

    def supernet_extract(self, net, model, opts, dims, kept):
        model.stages[0].global_tokens.cls_token.copy_(first_tokens(net.cls_token, 1, dims[0]))
        super().supernet_extract(net, model, opts, dims, kept)


register_global_tokens("cls", ClsKind(), default=True)
