"""Every recipe and benchmark script imports cleanly and explains itself with ``--help``."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for d in ("recipes", "benchmarks") for p in (ROOT / d).glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_help(script):
    proc = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:"), proc.stdout[:200]
    assert len(proc.stdout.splitlines()) > 5


def _recipe(name: str):
    import importlib

    return importlib.import_module(f"jumbokit.recipes.{name}")


@pytest.mark.parametrize("recipe", ["supervised", "mae_pretrain", "linear_probe", "sar_adapt"])
def test_zero_batch_size_is_named_in_one_line(recipe, capsys):
    from jumbokit.training.cli import run_cli

    main = _recipe(recipe).main
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: main(["--batch-size", "0"]))
    err = capsys.readouterr().err.strip().splitlines()[-1]  # the CPU-thread log line may come first
    assert exit_info.value.code == 2
    assert err == "error: --batch-size must be an integer >= 1 (the per-process batch), got 0"


def test_mae_recipe_imports_no_heavy_optional_packages():
    """The main job starts without the time-series, plotting and corruption packages (seconds of imports)."""
    code = ("import sys; import jumbokit.recipes.mae_pretrain as mae_pretrain; mae_pretrain.build_parser(); "
            "import jumbokit.data, jumbokit.ssl, jumbokit.training; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'aeon', 'sktime', 'matplotlib', 'imagecorruptions', 'numba', 'timm'}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _front_door_parsers():
    """``jumbokit COMMAND`` -> its argparse parser, for every image command and tstrain."""
    import importlib

    from jumbokit.recipes import COMMANDS

    parsers = {cmd: importlib.import_module(f"jumbokit.recipes.{mod}").build_parser for cmd, mod in COMMANDS.items()}
    parsers["tstrain"] = importlib.import_module("jumbokit.timeseries.cli").build_parser
    return parsers


@pytest.mark.parametrize("command", sorted(_front_door_parsers()))
def test_front_door_help_has_one_default_per_flag(command):
    """Every flag of ``jumbokit COMMAND --help`` has a help line, which names its default at most once (the help
    text is expanded as argparse prints it, ArgumentDefaultsHelpFormatter's addition included)."""
    import argparse
    import re

    parser = _front_door_parsers()[command]()
    formatter = parser._get_formatter()  # argparse has no public way to expand one action's help
    missing, repeated = [], []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help" or action.help == argparse.SUPPRESS:
            continue
        if not (action.help or "").strip():
            missing.append(action.option_strings[0])
            continue
        text = formatter._expand_help(action)
        if len(re.findall(r"default", text, flags=re.IGNORECASE)) > 1:
            repeated.append(f"{action.option_strings[0]}: {text}")
    assert not missing, f"flags without help: {missing}"
    assert not repeated, "help naming a default more than once:\n" + "\n".join(repeated)
