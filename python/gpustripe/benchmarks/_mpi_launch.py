"""What the MPI benchmarks (mpi, mpi_coll, mpi_rma, halo) share: the arguments that say how
their programs are launched and where results go, the rounds of launches and the interposer's
variants timed in turns, and the built programs they need."""
from __future__ import annotations

import argparse
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


def _at_least_one(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"at least 1, got '{text}'")
    return n


def add_rounds_argument(p, kept: str, launches: str = "every method") -> None:
    """--rounds: the launches of `launches` this many times, taking turns (results.in_turns); `kept`
    says what each row keeps of them (results.median_rounds)."""
    p.add_argument("--rounds", type=_at_least_one, default=1,
                   help=f"launches of {launches}, taking turns, this many times, every other round in reverse "
                        f"order; {kept}, every round's beside it: machines drift by as much between launches as the "
                        "small messages' methods differ (default 1)")


def add_interposer_variants_argument(p, flag: str) -> None:
    """`flag`: the interposer again under other settings or from another build (interposer_variants)."""
    p.add_argument(flag, default="",
                   help="also time the interposer under other settings or from another build, as methods "
                        "mpi_gpustripe_<name> taking turns with the others: 'NAME:KEY=VALUE,KEY=VALUE;NAME:...', "
                        "each KEY a GPUSTRIPE_ setting (e.g. 'slots:GPUSTRIPE_TEST=offers=no') or interposer=PATH "
                        "(another tree's libgpustripe_mpi.so: an A/B of two trees on one machine); for tuning, "
                        "never for results")


def interposer_variants(text: str, command: str, flag: str) -> dict:
    """`flag`'s interposer variants: {mpi_gpustripe_NAME: the ranks' environment}: its GPUSTRIPE_ settings
    as they are, and interposer=PATH as the library preloaded instead of the build's."""
    from .coll import parse_variants

    out = {}
    for name, keys, only in parse_variants(text, f"{command}: {flag}"):
        if only:
            raise SystemExit(f"{command}: {flag}: '{name}@...': the ops of a variant are bench coll's")
        env = {}
        for k, v in keys.items():
            if k == "interposer":
                if not os.path.exists(v):
                    raise SystemExit(f"{command}: {flag}: {name}'s interposer {v} does not exist")
                env["LD_PRELOAD"] = os.path.abspath(v)
            elif k.startswith("GPUSTRIPE_"):
                env[k] = v
            else:
                raise SystemExit(f"{command}: {flag}: '{k}' in {name}: a GPUSTRIPE_ setting or interposer=PATH")
        out[f"mpi_gpustripe_{name}"] = env
    return out
