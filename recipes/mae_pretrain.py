"""`jumbokit mae-pretrain` as a script, for `accelerate launch recipes/mae_pretrain.py ...` from a checkout.

The recipe itself lives in ``jumbokit.recipes.mae_pretrain``; ``jumbokit mae-pretrain --help`` lists its flags.
"""
import sys

from jumbokit.cli import run_front_door

if __name__ == "__main__":
    sys.exit(run_front_door("mae-pretrain"))
