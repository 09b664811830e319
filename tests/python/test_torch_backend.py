"""The torch.distributed backend `gpustripe` (gpustripe.torch). With torch: CPU tensors through
it (torch_backend_cpu.py), to gloo inside the backend, and on the native path staged through
the emulated devices (every op, the worker thread, the fallbacks, DDP and FSDP training). With
torch and 2 GPUs:
under torchrun, every collective equal to NCCL's result on the same inputs
(torch_backend_ops.py); with torch and a GPU, two ranks sharing it (torch_shared_gpu.py). Skipped
(with the reason) elsewhere: CI installs no torch (the wheel with the CUDA libraries it pulls is
2.8 GB: docs/torch.md)."""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "torch_backend_ops.py")
CPU_SCRIPT = os.path.join(os.path.dirname(__file__), "torch_backend_cpu.py")
SHARED_SCRIPT = os.path.join(os.path.dirname(__file__), "torch_shared_gpu.py")


@pytest.mark.parametrize("mode", ["gloo", "emulated"])
def test_backend_on_cpu_tensors(mode):
    pytest.importorskip("torch", reason="torch is not installed (CI runs without it)")
    import gpustripe

    if mode == "emulated" and gpustripe.cuda_device_count() > 0:
        pytest.skip("the emulated mode needs the emulated backend (no GPU visible)")
    port = 29800 + os.getpid() % 100 + (50 if mode == "emulated" else 0)
    p = subprocess.run([sys.executable, CPU_SCRIPT, str(port), mode], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    reports = [json.loads(ln[len("TORCHCPU "):]) for ln in p.stdout.splitlines() if ln.startswith("TORCHCPU ")]
    assert sorted(r["rank"] for r in reports) == [0, 1], out[-4000:]
    for r in reports:
        assert r["mode"] == mode
        assert not r["failed"], r
        assert r["checks"] > 25
        # emulated: every call but int8's (no kernel: gloo) ran natively; gloo: none did
        assert (r["native_calls"] > 25) if mode == "emulated" else (r["native_calls"] == 0), r["native_calls"]


@pytest.fixture
def torch_2gpus(requires_gpu):
    if requires_gpu < 2:
        pytest.skip("needs 2 GPUs")
    torch = pytest.importorskip("torch", reason="torch is not installed (CI runs without it)")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA")


def torchrun_reports(script: str, tag: str, timeout: int) -> list[dict]:
    """`script` under torchrun on 2 processes: each rank's report (its line starting with `tag`),
    every process having exited with 0."""
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", PYTHONUNBUFFERED="1",
               GPUSTRIPE_TIMEOUT=os.environ.get("GPUSTRIPE_TIMEOUT", "60"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", script]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    reports = [json.loads(ln[len(tag):]) for ln in p.stdout.splitlines() if ln.startswith(tag)]
    assert sorted(r["rank"] for r in reports) == [0, 1], out[-6000:]
    return reports


def test_backend_matches_nccl_on_every_collective(torch_2gpus):
    for r in torchrun_reports(SCRIPT, "TORCHOPS ", 600):
        assert "gpustripe" in r["backend"]
        assert not r["failed"], (r["rank"], r["failed"])
        assert r["checks"] > 80
        assert r["native_calls"] > 100, r["native_calls"]  # most calls ran on gpustripe, not its NCCL fallback


def test_two_ranks_sharing_one_gpu_serve_uneven_all_to_all_natively(requires_gpu):
    torch = pytest.importorskip("torch", reason="torch is not installed (CI runs without it)")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA")
    for r in torchrun_reports(SHARED_SCRIPT, "TORCHSHARED ", 300):
        assert r["checks"] == 8
        assert not r["failed"], (r["rank"], r["failed"])
