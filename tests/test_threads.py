"""The CPU thread policy of recipes and tstrain (``jumbokit.training.threads``)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from jumbokit.training.threads import choose_threads, launcher_forced_one_thread

LAUNCHED = {"OMP_NUM_THREADS": "1", "ACCELERATE_DYNAMO_BACKEND": "NO"}


@pytest.fixture
def parent():
    """Start a stand-in launcher process with a given environment; returns its pid."""
    procs = []

    def start(env: dict[str, str], args: tuple[str, ...] = ()) -> int:
        code = "import time; print('ready', flush=True); time.sleep(60)"
        proc = subprocess.Popen([sys.executable, "-c", code, *args], env={"PATH": os.environ.get("PATH", ""), **env},
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "ready"  # exec'd: /proc/<pid>/environ is its own environment now
        return proc.pid

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_launcher_forced_one_thread_is_replaced_by_the_cores(parent):
    pid = parent({})  # the user's environment had no OMP_NUM_THREADS
    assert launcher_forced_one_thread(LAUNCHED, ppid=pid)
    choice = choose_threads(env=LAUNCHED, ppid=pid, cores=8)
    assert choice.threads == 8 and "launcher" in choice.reason
    two_procs = {**LAUNCHED, "LOCAL_WORLD_SIZE": "2"}
    assert choose_threads(env=two_procs, ppid=pid, cores=8).threads == 4
    assert choose_threads(env={**LAUNCHED, "LOCAL_WORLD_SIZE": "16"}, ppid=pid, cores=8).threads == 1


def test_a_users_choice_is_kept(parent):
    user_env = parent({"OMP_NUM_THREADS": "1"})
    assert not launcher_forced_one_thread(LAUNCHED, ppid=user_env)
    user_flag = parent({}, ("--num_cpu_threads_per_process", "1"))
    assert not launcher_forced_one_thread(LAUNCHED, ppid=user_flag)
    assert choose_threads(env=LAUNCHED, ppid=user_env, cores=8).threads == torch.get_num_threads()
    assert not launcher_forced_one_thread({"OMP_NUM_THREADS": "1"})  # no launcher: plain python
    assert choose_threads(3, env=LAUNCHED, ppid=user_env).threads == 3
    with pytest.raises(ValueError, match="--threads must be an integer >= 1"):
        choose_threads(0)


@pytest.mark.multiprocess
def test_accelerate_launch_single_cpu_process_uses_the_cores(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent("""
        import os, torch
        from jumbokit.training import configure_threads
        choice = configure_threads()
        print("OMP", os.environ.get("OMP_NUM_THREADS"), "THREADS", torch.get_num_threads(), choice.reason)
    """))
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    out = subprocess.run([accelerate, "launch", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("OMP"))
    cores = len(os.sched_getaffinity(0))
    assert line.startswith(f"OMP 1 THREADS {cores} "), line
    if cores > 1:
        assert "launcher" in line


def test_tf32_policy_leaves_cpu_math_exact():
    from jumbokit.training import TrainConfig, configure_tf32, make_accelerator

    before = torch.get_float32_matmul_precision()
    assert configure_tf32(True, "cpu") is False
    make_accelerator(TrainConfig(cpu=True, tf32=True))
    assert torch.get_float32_matmul_precision() == before == "highest"
