"""`jumbokit mae-pretrain` as a script, for `accelerate launch recipes/mae_pretrain.py ...` from a checkout.

The recipe itself lives in ``jumbokit.recipes.mae_pretrain``; ``jumbokit mae-pretrain --help`` lists its flags.
"""
from jumbokit.recipes.mae_pretrain import main
from jumbokit.training.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
