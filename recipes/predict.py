"""`jumbokit predict` as a script, for `python recipes/predict.py --checkpoint RUN IMAGES...` from a checkout.

The front door itself lives in ``jumbokit.recipes.predict``; ``jumbokit predict --help`` lists its flags.
"""
import sys

from jumbokit.cli import run_front_door

if __name__ == "__main__":
    sys.exit(run_front_door("predict"))
