"""`jumbokit nas-search` as a script, for `accelerate launch recipes/nas_search.py ...` from a checkout.

The recipe itself lives in ``jumbokit.recipes.nas_search``; ``jumbokit nas-search --help`` lists its flags.
"""
from jumbokit.recipes.nas_search import main
from jumbokit.training.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
