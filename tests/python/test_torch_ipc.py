"""A tensor of PyTorch's expandable segments (several cuMemCreate allocations in one reserved
range) sent through the MPI interposer with mpi4py, on the GPUs: data exact, and the path the
IPC counters show is the one the driver's answers call for (a multi-allocation mapping when the
allocations export POSIX file descriptors, else the stream path). Runs
tests/python/torch_expandable_mpi.py under mpirun; skipped without GPUs, torch, mpi4py or the
interposer."""
import json
import os
import shutil
import subprocess
import sys

import pytest

BUILD = os.environ.get("GPUSTRIPE_BUILD_DIR", "build/dev")
SCRIPT = os.path.join(os.path.dirname(__file__), "torch_expandable_mpi.py")


def run_torch_mpi(alloc_conf: str, sizes: str, iters: int, timeout: int = 90) -> tuple[int, str, list[dict]]:
    lib = os.path.abspath(os.path.join(BUILD, "src/mpi/libgpustripe_mpi.so"))
    # A wait inside gpustripe ends with a message naming what it waited for well before the
    # subprocess timeout (GPUSTRIPE_TIMEOUT, 300 s by default, shortened here).
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", f"LD_PRELOAD={lib}",
           "-x", f"PYTORCH_CUDA_ALLOC_CONF={alloc_conf}", "-x", "NCCL_NVLS_ENABLE=0", "-x", "PYTHONUNBUFFERED=1",
           "-x", f"GPUSTRIPE_TIMEOUT={os.environ.get('GPUSTRIPE_TIMEOUT', '30')}"]
    for k in ("PYTHONPATH", "GPUSTRIPE_TOPOLOGY_DIR", "GPUSTRIPE_LOG_LEVEL", "CUDA_VISIBLE_DEVICES"):
        if k in os.environ:
            cmd += ["-x", k]
    cmd += [sys.executable, SCRIPT, "--sizes", sizes, "--iters", str(iters)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    reports = [json.loads(line[len("TORCHIPC "):]) for line in p.stdout.splitlines() if line.startswith("TORCHIPC ")]
    return p.returncode, p.stdout + p.stderr, reports


@pytest.fixture
def torch_mpi(requires_gpu):
    if requires_gpu < 2:
        pytest.skip("needs 2 GPUs")
    pytest.importorskip("torch")
    pytest.importorskip("mpi4py")
    if not shutil.which("mpirun") or not os.path.exists(os.path.join(BUILD, "src/mpi/libgpustripe_mpi.so")):
        pytest.skip("no mpirun or the interposer is not built")


def test_expandable_segments_tensor_through_the_interposer(torch_mpi):
    code, out, reports = run_torch_mpi("expandable_segments:True", "64M,256M", 2)
    assert code == 0, out
    assert [r["bytes"] for r in reports] == [64 << 20, 256 << 20], out
    for r in reports:
        assert r["data_ok"] and r["ok"], r
        assert r["path"] == r["expect"]
        if r["path"] == "mapped-multi":  # one mapping of every piece, from one message
            assert r["receiver"]["multi_opens"] >= 1 and r["receiver"]["pieces_mapped"] == r["pieces"]
    big = reports[-1]
    assert big["pieces"] >= 2  # 256 MB spans several of the segment's allocations
