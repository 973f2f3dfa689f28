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
