"""Image encoders trace into one graph (no host syncs, no data-dependent Python branches), so ``torch.compile`` and
CUDA graphs capture a whole forward; checked with dynamo's tracer only (no compilation)."""
from __future__ import annotations

import pytest
import torch

import jumbokit


@pytest.mark.parametrize("name", ["vit_pico_jumbo", "vit_pico_reg16", "vit_pico_cls", "vit_res_pico_jumbo"])
def test_image_encoder_forward_is_one_graph(name):
    torch._dynamo.reset()
    model = jumbokit.create_model(name, img_size=32, patch_size=4, in_chans=1, num_classes=10).eval()
    explained = torch._dynamo.explain(model)(torch.randn(2, 1, 32, 32))
    torch._dynamo.reset()
    assert explained.graph_break_count == 0, [str(b.reason)[:200] for b in explained.break_reasons]
    assert explained.graph_count == 1
