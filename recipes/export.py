"""`jumbokit export` as a script, for `python recipes/export.py RUN_DIR --out model.onnx` from a checkout.

The front door itself lives in ``jumbokit.recipes.export``; ``jumbokit export --help`` lists its flags.
"""
from jumbokit.recipes.export import main
from jumbokit.training.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
