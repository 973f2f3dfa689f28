"""The launch helper of the multi-process tests: a hang fails (never skips) and leaves no process behind."""
from __future__ import annotations

import re
import sys

import psutil
import pytest

from launch import launch

# prints its pid, starts a child in a session of its own (as torchrun starts its workers), then waits forever
HANGS_WITH_A_CHILD = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
print("started pid", child.pid, flush=True)
time.sleep(600)
"""


def test_a_launch_that_outlives_its_timeout_fails_naming_command_timeout_and_output():
    with pytest.raises(pytest.fail.Exception) as failed:
        launch([sys.executable, "-c", HANGS_WITH_A_CHILD], timeout=1)
    message = str(failed.value)
    assert "hang" in message and "1 s timeout" in message and "time.sleep(600)" in message
    child = int(re.search(r"started pid (\d+)", message).group(1))  # the output's tail is in the message
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_a_failing_launch_fails_with_its_exit_status_and_output():
    with pytest.raises(pytest.fail.Exception, match=r"(?s)exit status 3.*went wrong"):
        launch([sys.executable, "-c", "print('went wrong'); raise SystemExit(3)"], timeout=60)


def test_a_missing_launcher_skips_with_its_reason(tmp_path):
    with pytest.raises(pytest.skip.Exception, match="is not installed here"):
        launch([str(tmp_path / "no_such_launcher")], timeout=60)


def test_a_launch_returns_its_output_and_sets_one_thread():
    done = launch([sys.executable, "-c", "import os; print(os.environ['OMP_NUM_THREADS'], os.environ['EXTRA'])"],
                  timeout=60, EXTRA="x")
    assert done.returncode == 0 and done.stdout.split() == ["1", "x"]
