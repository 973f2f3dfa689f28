"""Mean rank of the transformer variants pooled over seed draws: each set of each rank table counts once.

The code lives in ``jumbokit.benchmarking.rank_pool``; ``--help`` describes it in full."""

import sys

from jumbokit.benchmarking import results_folder
from jumbokit.benchmarking.rank_pool import main

if __name__ == "__main__":
    sys.exit(main(results_dir=results_folder(__file__)))
