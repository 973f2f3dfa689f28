"""`jumbokit export` as a script, for `python recipes/export.py RUN_DIR --out model.onnx` from a checkout.

The front door itself lives in ``jumbokit.recipes.export``; ``jumbokit export --help`` lists its flags.
"""
import sys

from jumbokit.cli import run_front_door

if __name__ == "__main__":
    sys.exit(run_front_door("export"))
