"""`jumbokit linear-probe` as a script, for `accelerate launch recipes/linear_probe.py ...` from a checkout.

The recipe itself lives in ``jumbokit.recipes.linear_probe``; ``jumbokit linear-probe --help`` lists its flags.
"""
from jumbokit.recipes.linear_probe import main
from jumbokit.training.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
