"""`jumbokit predict` as a script, for `python recipes/predict.py --checkpoint RUN IMAGES...` from a checkout.

The front door itself lives in ``jumbokit.recipes.predict``; ``jumbokit predict --help`` lists its flags.
"""
from jumbokit.recipes.predict import main
from jumbokit.training.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
