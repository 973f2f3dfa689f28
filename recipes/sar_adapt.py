"""`jumbokit sar-adapt` as a script, for `accelerate launch recipes/sar_adapt.py ...` from a checkout.

The recipe itself lives in ``jumbokit.recipes.sar_adapt``; ``jumbokit sar-adapt --help`` lists its flags.
"""
from jumbokit.recipes.sar_adapt import main
from jumbokit.training.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
