"""gpustripe bench mpi_coll: MPI collectives on device buffers, unmodified program, with and without gpustripe.

Runs bench/mpi's mpi_coll_bench (plain MPI + the CUDA runtime, nothing of gpustripe in it)
under mpirun at each rank count, timing MPI_Alltoall, MPI_Allgather, MPI_Reduce_scatter_block,
MPI_Allreduce and MPI_Bcast (MPI_SUM over --dtype: float32 by default; int8 is MPI_CHAR) as
nccl-tests does, and compares in one results file per rank count (and type, other than float32):
  mpi_gpustripe    mpi_coll_bench with libgpustripe_mpi.so preloaded: the interposer runs the
                   coll schedules across the ranks' processes (src/mpi/coll_team.hpp)
  mpi_gpustripe_nb the same with the nonblocking forms (MPI_I* then MPI_Wait), and how much of a
                   call hides behind a host computation as long as the call (overlap_pct); asked
                   with mpi_gpustripe, both come from one process whose batches take turns
                   (mpi_coll_bench --paired), so that the two forms meet the same machine state
  mpi_host_staged  mpi_coll_bench --staged: copy to pinned host memory, the MPI collective, copy
                   back (the GPU-unaware pattern; sizes up to --staged-max, it is slow)
  gpustripe        the native single-process communicator (gpustripe bench coll's method): its host
                   enqueues the next call while the GPUs run this one
  gpustripe_sync   the same communicator with its host waiting for each call's end before the next
                   call: blocking calls' pace on one process (the tables' mpi_gpustripe/gpustripe_sync),
                   a reference, not a bound, as that process enqueues every rank's part in turn
  nccl             NCCL through torch.distributed (gpustripe bench coll's method)
busbw uses nccl-tests' factors. A method that cannot run is reported absent with why.
--allreduce-dtypes adds MPI_Allreduce rows for each further element type (op "allreduce_<dtype>":
int8 is MPI_CHAR, the type an OSU-style suite sums by default) by every method but the host-staged
one, in the same file: the interposer's speed per type beside native gpustripe's and NCCL's.
reduce_scatter_v (MPI_Reduce_scatter, equal counts) is the MPI methods' only: the native and
NCCL figures beside it are their reduce_scatter's, the same operation.
--variants times the interposer again under other settings or team tuning (methods
mpi_gpustripe_<name>, the blocking form, a launch each right after the default one's), and
--rounds repeats those launches taking turns: a tuning A/B of the interposer in one run.
"""
from __future__ import annotations

import inspect
import json
import os
import sys
import time
from types import SimpleNamespace

from ._mpi_launch import add_launch_arguments, add_rounds_argument, built_programs

NAME = "mpi_coll"
HELP = ("MPI collectives on device buffers from an unmodified MPI program: the PMPI interposer vs host staging, "
        "native gpustripe and NCCL (busbw)")
OPS = ("alltoall", "allgather", "reduce_scatter", "allreduce", "bcast")
MPI_ONLY_OPS = {"reduce_scatter_v": "reduce_scatter"}  # op -> the native / NCCL op it is
DTYPES = ("float32", "float64", "int32", "int64", "int8", "uint8")
METHODS = ("mpi_gpustripe", "mpi_gpustripe_nb", "mpi_host_staged", "gpustripe", "gpustripe_sync", "nccl")


def add_arguments(p):
    p.add_argument("--ranks", default="2,4", help="rank counts, comma separated (default 2,4)")
    p.add_argument("--sizes", default="1M:1G", help="sizes per rank LO:HI, powers of two (default 1M:1G)")
    p.add_argument("--staged-max", default="1G", help="largest size of the host-staged method (default 1G)")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma list (default {','.join(OPS)})")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma list of {', '.join(METHODS)}")
    p.add_argument("--dtype", default="float32", help=f"element type, one of {', '.join(DTYPES)} (default float32)")
    p.add_argument("--allreduce-dtypes", default="float32,float64,int64,int8",
                   help="element types that get allreduce rows of their own (op allreduce_<dtype>), beside --dtype's; "
                        "empty: none (default float32,float64,int64,int8)")
    p.add_argument("--iters", type=int, default=0, help="calls per timed batch (0: by size, 2-20)")
    p.add_argument("--trials", type=int, default=5, help="timed batches per size; the median is reported")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls first")
    p.add_argument("--variants", default="",
                   help="also time the interposer under other settings or team tuning, as methods "
                        "mpi_gpustripe_<name> (the blocking form, a launch each right after the default one's): "
                        "'NAME[@OP+OP]:KEY=VALUE,KEY=VALUE;NAME:...', each KEY a GPUSTRIPE_ setting or a field of "
                        "the interposer teams' tuning (coll::Tuning, passed as GPUSTRIPE_TEST=coll.KEY=VALUE), e.g. "
                        "'copies@allreduce:ar_copy_min=128M;plain@allreduce:push_max=64M'; @ limits the ops; "
                        "for tuning, never for results")
    add_rounds_argument(p, "each size keeps the round with the median busbw (rounds_busbw_gbps)",
                        "the interposer's rows (its default and each variant)")
    add_launch_arguments(p, "bench/mpi/ and src/mpi/")


def _paths(build: str) -> dict:
    return built_programs("mpi_coll", build,
                          {"bench": "bench/mpi/mpi_coll_bench", "interposer": "src/mpi/libgpustripe_mpi.so"})


def _run_rows(cmd: list[str], timeout: int, absent: dict, key: str) -> list[dict]:
    from .coll import _progress
    from .mpi import _run_bounded

    print("  $ " + " ".join(cmd), flush=True)
    t0 = time.time()
    out, rc = _run_bounded(cmd, timeout)  # past the limit mpirun gets SIGTERM and stops its ranks
    rows = []
    for line in out.splitlines():
        if line.startswith("ROW "):
            row = json.loads(line[4:])
            rows.append(row)
            _progress(row)
    if rc != 0:
        tail = out.strip().splitlines()[-12:]
        absent[key] = f"exit {rc} after {time.time() - t0:.0f}s: " + " | ".join(tail[-3:])[:400]
        print(f"    FAILED ({absent[key]}); last output:\n      " + "\n      ".join(tail), flush=True)
    return rows


def _run_native(ctx, n, ops, sizes, cargs, rows, absent, methods, gpus) -> bool:
    """The native communicator's methods asked for: back to back (gpustripe) and with the host waiting
    for each call (gpustripe_sync). Returns whether any ran."""
    from . import coll

    ran = False
    for method, wait_each in (("gpustripe", False), ("gpustripe_sync", True)):
        if method in methods and n <= gpus:
            coll._run_gpustripe(ctx, n, ops, sizes, cargs, rows, absent, method=method, wait_each=wait_each)
            ran = True
    return ran


def _allreduce_rows(args, paths, ctx, n, dtype, sizes, common, mem, methods, emulated, gpus, rows, absent):
    """MPI_Allreduce of `dtype` by each method but the host-staged one, as op allreduce_<dtype>."""
    from . import coll
    from .mpi import _mpirun

    op = f"allreduce_{dtype}"
    mine: list[dict] = []
    if "mpi_gpustripe" in methods:
        bench_args = list(common)
        bench_args[bench_args.index("--ops") + 1] = "allreduce"
        bench_args[bench_args.index("--dtype") + 1] = dtype
        cmd = _mpirun(args, n, {"LD_PRELOAD": paths["interposer"]}) + [
            paths["bench"], "--min", str(sizes[0]), "--max", str(sizes[-1]), *bench_args, *mem,
            "--method", "mpi_gpustripe"]
        mine += _run_rows(cmd, args.timeout, absent, f"mpi_gpustripe/{op}/{n}")
    cargs = SimpleNamespace(dtype=dtype, iters=args.iters or 10, trials=args.trials, warmup=args.warmup,
                            timeout=args.timeout)
    _run_native(ctx, n, ["allreduce"], sizes, cargs, mine, absent, methods, gpus)
    if "nccl" in methods and not emulated:
        if "method" in inspect.signature(coll._run_nccl).parameters:
            coll._run_nccl("nccl", n, ["allreduce"], sizes, cargs, mine, absent)
        else:
            coll._run_nccl(n, ["allreduce"], sizes, cargs, mine, absent)
    rows += [dict(r, op=op, dtype=dtype) for r in mine if r["op"] == "allreduce"]


def variant_env(keys: dict) -> dict:
    """A variant's environment for the ranks: its GPUSTRIPE_ settings as they are, its tuning fields as
    GPUSTRIPE_TEST's coll.NAME items (after any the caller's own GPUSTRIPE_TEST holds)."""
    env = {k: v for k, v in keys.items() if k.startswith("GPUSTRIPE_")}
    tuning = [f"coll.{k}={v}" for k, v in keys.items() if not k.startswith("GPUSTRIPE_")]
    if tuning:
        env["GPUSTRIPE_TEST"] = ",".join([x for x in [env.get("GPUSTRIPE_TEST", os.environ.get("GPUSTRIPE_TEST", ""))]
                                          if x] + tuning)
    return env


def run(args) -> int:
    from .. import results
    from ..copy import default_context
    from . import coll
    from ._p2p_common import parse_sizes
    from .mpi import _mpirun, _size_arg

    paths = _paths(args.build)
    ctx = default_context()
    device, gpus, emulated = ctx.device_label, ctx.device_count, ctx.emulated
    ops = [o for o in args.ops.split(",") if o]
    methods = [m for m in args.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS] + [o for o in ops if o not in OPS and o not in MPI_ONLY_OPS]
    per_type = [d for d in args.allreduce_dtypes.split(",") if d and d != args.dtype and "allreduce" in ops]
    bad += [d for d in [args.dtype, *per_type] if d not in DTYPES]
    variants = coll.parse_variants(args.variants, "gpustripe bench mpi_coll: --variants")
    bad += [f"--variants op {o} (not in --ops)" for _, _, only in variants for o in only if o not in ops]
    if bad:
        raise SystemExit(f"gpustripe bench mpi_coll: unknown {bad}; methods {METHODS}, ops {OPS + tuple(MPI_ONLY_OPS)}, "
                         f"dtypes {DTYPES}")
    native_ops = list(dict.fromkeys(MPI_ONLY_OPS.get(o, o) for o in ops))  # what gpustripe / NCCL time
    lo, hi = _size_arg(args.sizes)
    sizes = parse_sizes(f"{lo}:{hi}")
    staged_hi = min(parse_sizes(args.staged_max)[-1], sizes[-1])
    common = ["--ops", ",".join(ops), "--trials", str(args.trials), "--warmup", str(args.warmup), "--dtype", args.dtype]
    if args.iters:
        common += ["--iters", str(args.iters)]
    # Emulated devices are not CUDA memory the client could allocate: host buffers then
    # (they pass through the interposer untouched: a smoke run, not a GPU figure).
    mem = ["--mem", "host"] if emulated else []
    print(f"gpustripe bench mpi_coll: {device}, {gpus} GPUs, ranks {args.ranks}, methods {methods}", flush=True)
    if emulated:
        print("  NOTE: no GPU visible: host buffers; figures are not GPU figures.")

    written, absent = [], {}
    for n in [int(r) for r in args.ranks.split(",") if r]:
        if n > gpus and not emulated:
            absent[f"all/{n}"] = f"the node has {gpus} GPUs"
            continue
        print(f"== {n} ranks", flush=True)
        rows: list[dict] = []

        def save(final: bool = False):
            """Writes the rows so far: a run cut off later (a time limit) still leaves its file."""
            for r in rows:
                r.setdefault("ranks", n)
                r["emulated"] = emulated
            if not rows or args.no_write:
                return None
            name = f"mpi-coll-{n}gpu" if args.dtype == "float32" else f"mpi-coll-{args.dtype}-{n}gpu"
            path = results.write(name, device, n, rows, out_dir=args.out, plot=final,
                                 extra={"absent": absent, "dtype": args.dtype, "backend": ctx.backend_name,
                                        "emulated": emulated, "complete": final},
                                 command=" ".join(["gpustripe", "bench", "mpi_coll", *sys.argv[3:]]))
            return path

        # The interposer's rows: both forms from one process whose batches take turns (compared in
        # the same state of the machine), or the one asked for.
        forms = {"mpi_gpustripe": [], "mpi_gpustripe_nb": ["--overlap"]}
        asked = [m for m in forms if m in methods]
        launches = []  # (the rows' key in `absent`, the ranks' environment, mpi_coll_bench's arguments)
        if asked:
            flags = ["--paired", "--overlap"] if len(asked) == 2 else forms[asked[0]]
            launches.append((f"{'+'.join(asked)}/{n}", {}, [*common, *flags, "--method", asked[0]]))
        for name, keys, only in variants:
            bench_args = list(common)
            bench_args[bench_args.index("--ops") + 1] = ",".join(o for o in ops if not only or o in only)
            launches.append((f"mpi_gpustripe_{name}/{n}", variant_env(keys),
                             [*bench_args, "--method", f"mpi_gpustripe_{name}"]))
        rounds = [[] for _ in range(args.rounds)]
        for k, (key, env, bench_args) in results.in_turns(launches, args.rounds):
            cmd = _mpirun(args, n, {"LD_PRELOAD": paths["interposer"], **env}) + [
                paths["bench"], "--min", str(sizes[0]), "--max", str(sizes[-1]), *bench_args, *mem]
            rounds[k] += _run_rows(cmd, args.timeout, absent, key)
        if launches:
            rows += results.median_rounds(rounds, ("method", "op", "bytes"), "busbw_gbps")
            save()
        if "mpi_host_staged" in methods:
            if emulated:
                absent["mpi_host_staged"] = "emulated devices: no GPU buffers to stage"
            else:
                cmd = _mpirun(args, n, {}) + [paths["bench"], "--staged", "--min", str(sizes[0]), "--max",
                                              str(staged_hi), *common]
                rows += _run_rows(cmd, args.timeout, absent, f"mpi_host_staged/{n}")
                save()
        cargs = SimpleNamespace(dtype=args.dtype, iters=args.iters or 10, trials=args.trials, warmup=args.warmup,
                                timeout=args.timeout)
        if _run_native(ctx, n, native_ops, sizes, cargs, rows, absent, methods, gpus):
            save()
        if "nccl" in methods:
            if emulated:
                absent["nccl"] = "emulated devices: no GPU for NCCL"
            else:
                # gpustripe bench coll's worker (its signature changed once: take either).
                if "method" in inspect.signature(coll._run_nccl).parameters:
                    coll._run_nccl("nccl", n, native_ops, sizes, cargs, rows, absent)
                else:
                    coll._run_nccl(n, native_ops, sizes, cargs, rows, absent)
        for dt in per_type:
            _allreduce_rows(args, paths, ctx, n, dt, sizes, common, mem, methods, emulated, gpus, rows, absent)
            save()
        for op, same in MPI_ONLY_OPS.items():
            if op in ops:
                rows += [dict(r, op=op, same_as=same) for r in rows
                         if r["op"] == same and r.get("method") in ("gpustripe", "gpustripe_sync", "nccl")]
        if not rows:
            continue
        for op in [*ops, *(f"allreduce_{dt}" for dt in per_type)]:
            if any(r["op"] == op for r in rows):
                print(f"\n[{n} ranks] " + results.ratio_table(rows, op, ours="mpi_gpustripe", value="busbw_gbps"))
        nb = [r for r in rows if r.get("method") == "mpi_gpustripe_nb" and "overlap_pct" in r]
        if nb:
            print(f"\n[{n} ranks] nonblocking: the call hidden behind as long a computation (overlap_pct)")
            for r in sorted(nb, key=lambda r: (r["op"], r["bytes"])):
                print(f"  {r['op']:>16} {results.human_bytes(r['bytes']):>8} {r['overlap_pct']:6.1f} %")
        path = save(final=True)
        if path:
            written.append(path)
            print(f"wrote {path} (+ .png)")
    if absent:
        print("\nabsent:")
        for k, v in sorted(absent.items()):
            print(f"  {k}: {v}")
    return 0 if written or args.no_write else 1
