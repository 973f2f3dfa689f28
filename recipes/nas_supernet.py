"""`jumbokit nas-supernet` as a script, for `accelerate launch recipes/nas_supernet.py ...` from a checkout.

The recipe itself lives in ``jumbokit.recipes.nas_supernet``; ``jumbokit nas-supernet --help`` lists its flags.
"""
from jumbokit.recipes.nas_supernet import main
from jumbokit.training.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
