"""`jumbokit sar-adapt` as a script, for `accelerate launch recipes/sar_adapt.py ...` from a checkout.

The recipe itself lives in ``jumbokit.recipes.sar_adapt``; ``jumbokit sar-adapt --help`` lists its flags.
"""
import sys

from jumbokit.cli import run_front_door

if __name__ == "__main__":
    sys.exit(run_front_door("sar-adapt"))
