"""Mean rank of the transformer variants under one front end, from the trunk benchmark's JSON files.

The code lives in ``jumbokit.benchmarking.rank_tables``; ``--help`` describes it in full."""

import sys

from jumbokit.benchmarking import results_folder
from jumbokit.benchmarking.rank_tables import main

if __name__ == "__main__":
    sys.exit(main(results_dir=results_folder(__file__)))
