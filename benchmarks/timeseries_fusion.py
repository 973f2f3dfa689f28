"""Late fusion of two sets of finished runs: every run of the first model on a dataset paired with every run of

The code lives in ``jumbokit.benchmarking.fusion``; ``--help`` describes it in full."""

import sys

from jumbokit.benchmarking.fusion import main

if __name__ == "__main__":
    sys.exit(main())
