"""`jumbokit series-pretrain` as a script, for `accelerate launch recipes/series_pretrain.py ...` from a checkout.

The front door itself lives in ``jumbokit.recipes.series_pretrain``; ``jumbokit series-pretrain --help`` lists its
flags.
"""
import sys

from jumbokit.cli import run_front_door

if __name__ == "__main__":
    sys.exit(run_front_door("series-pretrain"))
