"""The ``none`` kind: no global token; the feature is the mean of the patch tokens."""

from __future__ import annotations

from typing import Any

from .registry import GlobalTokenKind, GlobalTokens, masked_mean, register_global_tokens

__all__ = ["NoGlobalTokens", "NoneKind"]


class NoGlobalTokens(GlobalTokens):
    """No global token; the feature is the mean of the patch tokens."""

    kind = "none"

    def pool(self, global_tokens, patches, pad_mask):
        return masked_mean(patches, pad_mask)


class NoneKind(GlobalTokenKind):
    """No token to build, count, export or slice: every default of :class:`GlobalTokenKind`. timm: a model without
    prefix tokens, pooled by the mean patch token (``global_pool="avg"``)."""

    gene_help = "'none'"

    def build(self, cfg, dim, depth, learn_tokens=True):
        return NoGlobalTokens(dim)

    def timm_args(self, cfg):
        return {"class_token": False, "reg_tokens": 0}

    def from_timm(self, class_token, reg_tokens, global_pool):
        if class_token or reg_tokens:
            return None
        if global_pool != "avg":
            raise ValueError("a timm model without class token must use global_pool='avg'")
        return {}

    def parse_gene(self, gene: str) -> dict[str, Any] | None:
        return {} if gene == self.name else None


register_global_tokens("none", NoneKind())
