"""`jumbokit supervised` as a script, for `accelerate launch recipes/supervised.py ...` from a checkout.

The recipe itself lives in ``jumbokit.recipes.supervised``; ``jumbokit supervised --help`` lists its flags.
"""
from jumbokit.recipes.supervised import main
from jumbokit.training.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
