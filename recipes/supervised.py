"""`jumbokit supervised` as a script, for `accelerate launch recipes/supervised.py ...` from a checkout.

The recipe itself lives in ``jumbokit.recipes.supervised``; ``jumbokit supervised --help`` lists its flags.
"""
import sys

from jumbokit.cli import run_front_door

if __name__ == "__main__":
    sys.exit(run_front_door("supervised"))
