"""`jumbokit tstrain` (= `tstrain`) as a script, for `accelerate launch recipes/tstrain.py ...` from a checkout.

The front door itself lives in ``jumbokit.recipes.tstrain``; ``tstrain --help`` lists its flags.
"""
import sys

from jumbokit.cli import run_front_door

if __name__ == "__main__":
    sys.exit(run_front_door("tstrain"))
