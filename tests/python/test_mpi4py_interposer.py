"""mpi4py programs through the MPI interposer: its pickled send/recv (MPI_Mprobe/MPI_Mrecv
underneath) and a device buffer after a matched probe, on the emulated node in CI and on the
GPUs. Skipped without mpi4py, mpirun or the interposer."""
import os
import shutil
import subprocess
import sys

import pytest

BUILD = os.environ.get("GPUSTRIPE_BUILD_DIR", "build/dev")
SCRIPT = os.path.join(os.path.dirname(__file__), "mpi4py_pickled.py")


def test_mpi4py_pickled_messages_and_matched_probe_through_the_interposer():
    pytest.importorskip("mpi4py")
    lib = os.path.abspath(os.path.join(BUILD, "src/mpi/libgpustripe_mpi.so"))
    if not shutil.which("mpirun") or not os.path.exists(lib):
        pytest.skip("no mpirun or the interposer is not built")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", f"LD_PRELOAD={lib}",
           "-x", "GPUSTRIPE_TIMEOUT=30", "-x", "NCCL_NVLS_ENABLE=0"]
    for k in ("PYTHONPATH", "GPUSTRIPE_TOPOLOGY_DIR", "GPUSTRIPE_BACKEND", "CUDA_VISIBLE_DEVICES"):
        if k in os.environ:
            cmd += ["-x", k]
    p = subprocess.run(cmd + [sys.executable, SCRIPT], capture_output=True, text=True, timeout=90)
    assert p.returncode == 0 and "mpi4py_pickled: all checks passed" in p.stdout, p.stdout + p.stderr
