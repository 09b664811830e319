"""The torch.distributed backend `gpustripe` (gpustripe.torch). With torch: its plumbing on CPU
tensors (gloo inside the backend, DDP through it: torch_backend_cpu.py). With torch and 2 GPUs:
under torchrun, every collective equal to NCCL's result on the same inputs
(torch_backend_ops.py). Skipped (with the reason) elsewhere: CI installs no torch (the wheel
with the CUDA libraries it pulls is 2.8 GB: docs/torch.md)."""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "torch_backend_ops.py")
CPU_SCRIPT = os.path.join(os.path.dirname(__file__), "torch_backend_cpu.py")


def test_backend_plumbing_on_cpu_tensors():
    pytest.importorskip("torch", reason="torch is not installed (CI runs without it)")
    p = subprocess.run([sys.executable, CPU_SCRIPT, str(29800 + os.getpid() % 100)], capture_output=True, text=True,
                       timeout=180, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    reports = [json.loads(ln[len("TORCHCPU "):]) for ln in p.stdout.splitlines() if ln.startswith("TORCHCPU ")]
    assert sorted(r["rank"] for r in reports) == [0, 1], out[-4000:]
    for r in reports:
        assert all(r["checks"].values()), r


@pytest.fixture
def torch_2gpus(requires_gpu):
    if requires_gpu < 2:
        pytest.skip("needs 2 GPUs")
    torch = pytest.importorskip("torch", reason="torch is not installed (CI runs without it)")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA")


def test_backend_matches_nccl_on_every_collective(torch_2gpus):
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", PYTHONUNBUFFERED="1",
               GPUSTRIPE_TIMEOUT=os.environ.get("GPUSTRIPE_TIMEOUT", "60"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", SCRIPT]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    reports = [json.loads(ln[len("TORCHOPS "):]) for ln in p.stdout.splitlines() if ln.startswith("TORCHOPS ")]
    assert sorted(r["rank"] for r in reports) == [0, 1], out[-6000:]
    for r in reports:
        assert "gpustripe" in r["backend"]
        bad = [c["check"] for c in r["checks"] if not c["ok"]]
        assert not bad, (r["rank"], bad)
        assert len(r["checks"]) > 80
        assert r["native_calls"] > 100, r["native_calls"]  # most calls ran on gpustripe, not its NCCL fallback
