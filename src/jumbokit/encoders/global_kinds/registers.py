"""The ``registers`` kind: R register tokens (timm ``reg_token``) after an optional CLS token."""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from .cls import class_token_table
from .registry import GlobalTokenKind, GlobalTokens, TokenTable, first_tokens, masked_mean, register_global_tokens

__all__ = ["Registers", "RegistersKind"]


class Registers(GlobalTokens):
    """R register tokens (timm ``reg_token``), after an optional CLS token; registers are discarded at pooling.

    Without a CLS token the feature is the mean of the patch tokens (timm's ``reg*_gap`` models).
    """

    kind = "registers"

    def __init__(self, dim: int, num_registers: int, class_token: bool = True, learn_tokens: bool = True) -> None:
        super().__init__(dim)
        if num_registers < 1:
            raise ValueError(f"registers need num_registers >= 1, got {num_registers}")
        self.num_registers = num_registers
        self.class_token = class_token
        self.num_tokens = num_registers + int(class_token)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if class_token and learn_tokens else None
        self.reg_token = nn.Parameter(torch.zeros(1, num_registers, dim)) if learn_tokens else None
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)
        if self.reg_token is not None:
            nn.init.normal_(self.reg_token, std=1e-6)

    def tokens(self) -> torch.Tensor:
        if self.cls_token is None:
            return self.reg_token
        return torch.cat([self.cls_token, self.reg_token], dim=1)

    def pool(self, global_tokens, patches, pad_mask):
        if self.class_token:
            return global_tokens[:, 0]
        return masked_mean(patches, pad_mask)


class RegistersKind(GlobalTokenKind):
    """Registers: ``num_registers`` tokens after a CLS token (``class_token``); pooled as the CLS token, or the mean
    patch token without one. timm: ``reg_tokens=R``; the search gene "reg<R>" (CLS + R registers)."""

    options = {"num_registers": 0, "class_token": True}
    token_params = ("cls_token", "reg_token")
    gene_help = "'reg<R>'"

    def build(self, cfg, dim, depth, learn_tokens=True):
        return Registers(dim, self.option(cfg, "num_registers"), class_token=self.option(cfg, "class_token"),
                         learn_tokens=learn_tokens)

    def num_tokens(self, cfg):
        return self.option(cfg, "num_registers") + int(self.option(cfg, "class_token"))

    def timm_args(self, cfg):
        return {"class_token": bool(self.option(cfg, "class_token")), "reg_tokens": self.option(cfg, "num_registers")}

    def timm_prefix(self, cfg):
        lead = [("cls_token", "cls_token", 1)] if self.option(cfg, "class_token") else []
        return lead + [("reg_token", "reg_token", self.option(cfg, "num_registers"))]

    def from_timm(self, class_token, reg_tokens, global_pool):
        return {"num_registers": reg_tokens, "class_token": class_token} if reg_tokens else None

    def parse_gene(self, gene: str) -> dict[str, Any] | None:
        match = re.fullmatch(r"reg(\d+)", gene)
        if not match:
            return None
        if int(match.group(1)) < 1:
            raise ValueError(f"unknown global-token gene {gene!r}: a register gene 'reg<R>' needs R >= 1")
        return {"num_registers": int(match.group(1))}

    def supernet_tokens(self, genes):
        tables = [class_token_table()] if any(self.option(g, "class_token") for g in genes) else []
        most = max(self.option(g, "num_registers") for g in genes)
        return tables + [TokenTable("reg_token", most, lambda count, width: torch.randn(1, count, width) * 1e-6)]

    def supernet_join(self, net, opts):
        lead = [net.cls_token] if self.option(opts, "class_token") else []
        return lead + [first_tokens(net.reg_token, self.option(opts, "num_registers"))]

    def supernet_feature(self, h, num_global, opts):
        return h[:, 0] if self.option(opts, "class_token") else super().supernet_feature(h, num_global, opts)

    def supernet_extract(self, net, model, opts, dims, kept):
        plugin = model.stages[0].global_tokens
        if self.option(opts, "class_token"):
            plugin.cls_token.copy_(first_tokens(net.cls_token, 1, dims[0]))
        plugin.reg_token.copy_(first_tokens(net.reg_token, self.option(opts, "num_registers"), dims[0]))
        super().supernet_extract(net, model, opts, dims, kept)


register_global_tokens("registers", RegistersKind())
