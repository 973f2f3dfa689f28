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
    err = capsys.readouterr().err.strip()
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
