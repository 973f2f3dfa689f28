"""`jumbokit linear-probe` as a script, for `accelerate launch recipes/linear_probe.py ...` from a checkout.

The recipe itself lives in ``jumbokit.recipes.linear_probe``; ``jumbokit linear-probe --help`` lists its flags.
"""
import sys

from jumbokit.cli import run_front_door

if __name__ == "__main__":
    sys.exit(run_front_door("linear-probe"))
