"""`jumbokit nas-search` as a script, for `accelerate launch recipes/nas_search.py ...` from a checkout.

The recipe itself lives in ``jumbokit.recipes.nas_search``; ``jumbokit nas-search --help`` lists its flags.
"""
import sys

from jumbokit.cli import run_front_door

if __name__ == "__main__":
    sys.exit(run_front_door("nas-search"))
