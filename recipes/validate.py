"""`jumbokit validate` as a script, for `accelerate launch recipes/validate.py --checkpoint RUN ...` from a checkout.

The front door itself lives in ``jumbokit.recipes.validate``; ``jumbokit validate --help`` lists its flags.
"""
import sys

from jumbokit.cli import run_front_door

if __name__ == "__main__":
    sys.exit(run_front_door("validate"))
