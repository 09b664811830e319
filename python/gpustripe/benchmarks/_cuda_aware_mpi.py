"""The CUDA-aware MPI a user of the node would run instead of gpustripe: the system Open MPI
(Debian 4.1, built without CUDA) with its pml ucx over the libucx-cu13 wheel's UCX, found
first on LD_LIBRARY_PATH, and the wheel's CUDA modules through UCX_MODULE_DIR; nothing
rebuilt. Open MPI's pml ucx hands UCX the pointers of contiguous types unchanged, and the
wheel's UCX moves device memory (cuda_ipc between GPUs, cuda_copy to host).

Shared by `gpustripe bench mpi` (method mpi_cuda_aware) and `gpustripe bench halo`."""
from __future__ import annotations

import os
import re

# pml_ucx_tls/devices "any": Open MPI 4.1 enables pml ucx only where UCX has one of its
# listed network transports or cuda_ipc, so a node without them (CI) would end in an
# error; on a GPU node (cuda_ipc) it changes nothing. btl uct and osc ucx stay off: btl
# uct uses UCX's uct API, which is not ABI-stable across UCX versions, and the system
# Open MPI was built against another UCX.
MCA_ARGS = ["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any",
            "--mca", "btl", "^uct", "--mca", "osc", "^ucx"]

# One-sided communication (gpustripe bench mpi_rma): the same, with Open MPI's osc ucx, which
# drives UCX through its ucp API as pml ucx does (the ABI concern above is btl uct's alone).
RMA_MCA_ARGS = MCA_ARGS[:-3] + ["--mca", "osc", "ucx"]


def source_dir(build: str) -> str:
    """The source tree a CMake build folder was configured from ('' when unknown)."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                m = re.match(r"CMAKE_HOME_DIRECTORY:INTERNAL=(.*)", line.strip())
                if m:
                    return m.group(1)
    except OSError:
        pass
    return ""


def ucx_dir(build: str, override: str = "") -> str:
    """The unpacked wheel: `override`, else .deps/ucx of the build's source tree, else of the
    current directory."""
    if override:
        return os.path.abspath(override)
    for root in (source_dir(build), os.getcwd()):
        if root and os.path.isdir(os.path.join(root, ".deps", "ucx")):
            return os.path.join(root, ".deps", "ucx")
    return os.path.join(source_dir(build) or os.getcwd(), ".deps", "ucx")


def absent(ucx: str) -> str:
    """Why the CUDA-aware MPI cannot run from `ucx` ('' when it can)."""
    lib = os.path.join(ucx, "libucx", "lib")
    need = [os.path.join(lib, n) for n in ("libucp.so.0", "libuct.so.0", "libucs.so.0", "libucm.so.0")]
    need.append(os.path.join(lib, "ucx", "libuct_cuda.so.0"))
    missing = [p for p in need if not os.path.exists(p)]
    if missing:
        return (f"no CUDA-enabled UCX at {ucx} (scripts/stage-deps.sh stages the libucx-cu13 wheel): "
                f"missing {', '.join(os.path.relpath(p, ucx) for p in missing)}")
    return ""


def env(ucx: str) -> dict:
    """What the ranks' environment needs: the wheel's libraries before the system UCX."""
    lib = os.path.join(ucx, "libucx", "lib")
    path = os.environ.get("LD_LIBRARY_PATH", "")
    return {"LD_LIBRARY_PATH": lib + (":" + path if path else ""),
            "UCX_MODULE_DIR": os.path.join(lib, "ucx"),
            "UCX_WARN_UNUSED_ENV_VARS": "n"}
