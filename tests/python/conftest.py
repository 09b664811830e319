import os
import subprocess
import sys

import pytest


def _gpu_count() -> int:
    import gpustripe

    return gpustripe.cuda_device_count() if hasattr(gpustripe, "cuda_device_count") else 0


@pytest.fixture
def requires_gpu():
    n = _gpu_count()
    if n == 0:
        pytest.skip("GPU test skipped: no CUDA GPU visible (run scripts/gpu-check.sh on a GPU machine)")
    return n


@pytest.fixture
def four_devices():
    """For tests that name devices 0-3: the emulated node (no GPU) has 4; a machine with 1-3 GPUs
    skips them, loudly (the 4-GPU machine runs them)."""
    n = _gpu_count()
    if 0 < n < 4:
        pytest.skip(f"needs 4 devices: {n} CUDA GPUs visible (run it on the emulated node or a 4-GPU machine)")


@pytest.fixture
def cli():
    """Runs the gpustripe command line in a subprocess; returns CompletedProcess."""

    def run(*args, check=True, env=None):
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.run([sys.executable, "-m", "gpustripe.cli", *args], capture_output=True, text=True, env=e)
        if check and p.returncode != 0:
            raise AssertionError(f"gpustripe {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    return run
