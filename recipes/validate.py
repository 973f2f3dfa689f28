"""`jumbokit validate` as a script, for `accelerate launch recipes/validate.py --checkpoint RUN ...` from a checkout.

The front door itself lives in ``jumbokit.recipes.validate``; ``jumbokit validate --help`` lists its flags.
"""
from jumbokit.recipes.validate import main
from jumbokit.training.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
