"""What the MPI benchmarks (mpi, mpi_coll, mpi_rma, halo) share: the arguments that say how
their programs are launched and where results go, and the built programs they need."""
from __future__ import annotations

import os


def add_launch_arguments(p, holds: str, timeout: int = 600) -> None:
    """--timeout, --build (the build directory holding `holds`), --mpirun, --out, --no-write."""
    p.add_argument("--timeout", type=int, default=timeout, help="seconds one mpirun may take")
    p.add_argument("--build", default=os.environ.get("GPUSTRIPE_BUILD_DIR", "build/dev"),
                   help=f"build directory holding {holds} (default $GPUSTRIPE_BUILD_DIR or build/dev)")
    p.add_argument("--mpirun", default=os.environ.get("MPIRUN", "mpirun"), help="mpirun command")
    p.add_argument("--out", default="bench/results", help="directory of the JSON + PNG results")
    p.add_argument("--no-write", action="store_true", help="print the tables only")


def built_programs(command: str, build: str, required: dict, optional: dict | None = None) -> dict:
    """Absolute paths of `required` (name -> path under `build`), and of those of `optional`
    that were built (clients of a library the build did not find). Exits naming what is missing
    of `required`."""
    paths = {k: os.path.join(build, v) for k, v in required.items()}
    missing = [p for p in paths.values() if not os.path.exists(p)]
    if missing:
        raise SystemExit(f"gpustripe bench {command}: not built: {', '.join(missing)} (build the tree with MPI found)")
    paths = {k: os.path.abspath(v) for k, v in paths.items()}
    for name, rel in (optional or {}).items():
        p = os.path.join(build, rel)
        if os.path.exists(p):
            paths[name] = os.path.abspath(p)
    return paths
