"""Architecture search for multi-stage ViT-Res encoders (the ViT-ResNAS paper): search spaces, the weight-sharing
supernet with multi-architecture batches, and evolutionary search under a FLOPs budget.

    from jumbokit import nas
    space = nas.search_space("digits")
    arch = space.sample(random.Random(0))
    supernet = nas.Supernet(space, num_classes=10, img_size=32, in_chans=1)
    logits = supernet(x, arch); model = supernet.extract(arch)
    result = nas.evolutionary_search(space, fitness, flops_budget, seed=0)
"""

from .budget import parse_flops, zoo_flops
from .space import ARCH_KEYS, SPACES, SearchSpace, arch_key, search_space, token_gene_config
from .search import InfeasibleWindowError, SearchResult, evolutionary_search, load_history, random_search
from .supernet import MultiArchSampler, Supernet, SupernetLoss, load_supernet, masked_layer_norm, supernet_accelerator

__all__ = ["ARCH_KEYS", "SPACES", "SearchSpace", "arch_key", "search_space", "token_gene_config", "parse_flops",
           "zoo_flops", "MultiArchSampler", "Supernet", "SupernetLoss", "load_supernet", "masked_layer_norm", "supernet_accelerator",
           "InfeasibleWindowError", "SearchResult", "evolutionary_search", "load_history", "random_search"]
