"""gpustripe bench coll: collectives over 2 and 4 GPUs, nccl-tests style, in one run.

Methods, each timed as nccl-tests does (a batch of back-to-back calls, one synchronisation,
time / calls; the median of several batches):
  gpustripe        gpustripe.Comm in this process (copy-engine schedules, host share, kernels)
  nccl             NCCL's default algorithms through torch.distributed, one process per GPU
  nccl_ce          NCCL's copy-engine mode (2.28): NCCL_CTA_POLICY=2 and buffers from
                   ncclMemAlloc in symmetric windows, through gpustripe's NCCL loader in one
                   process per run (ncclCommInitAll; torch's MemPool cannot make symmetric
                   windows); absent, with the reason, when NCCL cannot set that up
  mpi_host_staged  the GPU-unaware host pattern: copy to host, MPI collective, copy back
                   (mpirun + mpi4py + torch)
A method that cannot run here is reported as absent with why, never estimated.
Sizes are per rank as nccl-tests reports them; busbw uses nccl-tests' factors.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from ._env import scoped_env

NAME = "coll"
HELP = ("collectives (alltoall, allgather, reduce_scatter, allreduce, bcast) on 2 and 4 GPUs, 1M-1G per rank: "
        "gpustripe vs NCCL (default and copy-engine mode) vs MPI through host memory, algbw/busbw")
OPS = ("alltoall", "allgather", "reduce_scatter", "allreduce", "bcast")
METHODS = ("gpustripe", "nccl", "nccl_ce", "mpi_host_staged")
BUSBW = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
         "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
         "bcast": lambda n: 1.0, "reduce": lambda n: 1.0}
TORCH_DTYPES = {"float32": "float32", "float64": "float64", "float16": "float16", "bfloat16": "bfloat16",
                "int32": "int32", "int64": "int64"}


def add_arguments(p):
    p.add_argument("--sizes", help="sizes per rank: LO:HI (powers of two) or a list (default 1M:1G; --quick: "
                                   "1M,16M,64M,256M)")
    p.add_argument("--gpus", default="2,4", help="rank counts, comma separated (default 2,4)")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma list (default {','.join(OPS)})")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma list (default {','.join(METHODS)})")
    p.add_argument("--dtype", default="float32", help="element type (default float32)")
    p.add_argument("--iters", type=int, default=10, help="calls per timed batch (default 10)")
    p.add_argument("--trials", type=int, default=5, help="timed batches per size; the median is reported")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    p.add_argument("--quick", action="store_true", help="fewer repetitions, and sizes 1M,16M,64M,256M unless --sizes")
    p.add_argument("--out", default="bench/results", help="directory of the JSON + PNG results")
    p.add_argument("--no-write", action="store_true", help="print the tables only")
    p.add_argument("--timeout", type=int, default=900, help="seconds allowed to each NCCL/MPI worker run")
    p.add_argument("--host-shares", default="",
                   help="also time gpustripe alltoall/allgather with these host-path shares (comma list, e.g. "
                        "0,0.03,0.06), as methods gpustripe_host<percent>: for checking the automatic share")
    p.add_argument("--variants", default="",
                   help="also time gpustripe under other settings or collective tuning, as methods "
                        "gpustripe_<name>: 'NAME[@OP+OP]:KEY=VALUE,KEY=VALUE;NAME:...', each KEY a GPUSTRIPE_ "
                        "setting or a field of the communicator's tuning (coll::Tuning, e.g. "
                        "'copies@allreduce+reduce_scatter:ar_copy_min=0,rs_copy_min=0'; @ limits the ops); "
                        "for tuning, never for results")


def _sizes(args) -> list[int]:
    from ._p2p_common import parse_sizes

    return parse_sizes(args.sizes or ("1M,16M,64M,256M" if args.quick else "1M:1G"))


def _row(op, method, nbytes, us, ranks, dtype, **extra) -> dict:
    """One result row; the element type is part of it, as rows of one op and size compare by their type."""
    gbps = nbytes / (us * 1e3) if us > 0 else 0.0
    row = {"op": op, "method": method, "bytes": int(nbytes), "gbps": gbps, "busbw_gbps": gbps * BUSBW[op](ranks),
           "us": us, "ranks": ranks, "dtype": dtype}
    row.update(extra)
    return row


def _progress(row):
    extra = f"  enq {row['enqueue_us']:6.1f} us" if "enqueue_us" in row else ""
    extra += f"  [{row['schedule']}]" if row.get("schedule") else ""
    print(f"  {row['op']:>14} {row['method']:>16} n={row['ranks']} {row['bytes']:>11} B "
          f"{row['us']:>10.1f} us  algbw {row['gbps']:7.1f}  busbw {row['busbw_gbps']:7.1f} GB/s{extra}", flush=True)


# ---------------------------------------------------------------- gpustripe

def _run_gpustripe(ctx, ranks, ops, sizes, args, rows, absent, method="gpustripe", tuning=None, wait_each=False):
    """wait_each: the host waits for each call's end before it issues the next one (blocking calls' pace on one process)."""
    from .. import Comm, Error, coll_time, dtype_size

    comm = Comm(ctx, list(range(ranks)), tuning=tuning or {})
    esz = dtype_size(args.dtype)
    for op in ops:
        for size in sizes:
            unit = esz * (ranks if op in ("alltoall", "allgather", "reduce_scatter") else 1)
            if size % unit:
                continue
            try:
                t = coll_time(comm, op, size, args.dtype, "sum", args.warmup, args.iters, args.trials,
                              wait_each=wait_each)
            except Error as e:
                absent.setdefault(f"{method}/{op}/{ranks}", str(e))
                print(f"  {method} {op} {size}: {e}", file=sys.stderr)
                continue
            row = _row(op, method, size, t["us"], ranks, args.dtype, schedule=t["schedule"], min_us=t["min_us"],
                       max_us=t["max_us"], enqueue_us=t["enqueue_us"])
            rows.append(row)
            _progress(row)


def parse_variants(text: str, where: str = "gpustripe bench coll: --variants") -> list[tuple[str, dict, list]]:
    """'NAME[@OP+OP]:KEY=VALUE,KEY=VALUE;NAME:...' -> [(NAME, {KEY: VALUE}, [OP...] or [])]; a KEY is a
    GPUSTRIPE_ setting or a tuning field (lower case). `where` (command and flag) begins the errors."""
    out = []
    for item in (x.strip() for x in text.split(";")):
        if not item:
            continue
        head, sep, body = item.partition(":")
        name, _, only = head.partition("@")
        only_ops = [o for o in only.split("+") if o]
        for o in only_ops:
            if o not in BUSBW:
                raise SystemExit(f"{where}: unknown op '{o}' in '{item}'")
        env = {}
        for kv in (x.strip() for x in body.split(",")):
            var, eq, val = kv.partition("=")
            if not eq or not (var.startswith("GPUSTRIPE_") or (var.isidentifier() and var.islower())):
                raise SystemExit(f"{where}: '{kv}' in '{item}' is not "
                                 "GPUSTRIPE_...=VALUE or tuning_field=VALUE")
            env[var] = val
        if not sep or not name.strip() or not env:
            raise SystemExit(f"{where}: '{item}' is not NAME:VAR=VALUE[,VAR=VALUE]")
        out.append((name.strip(), env, only_ops))
    return out


def _variant_sweep(ctx, ranks, ops, sizes, args, rows, absent):
    """One communicator per variant: its tuning is the communicator's; its settings are read at every call."""
    variants = parse_variants(args.variants)
    shares = [float(x) for x in args.host_shares.split(",") if x.strip()]
    exch = [o for o in ops if o in ("alltoall", "allgather")]
    runs = [(name, env, [o for o in ops if not only or o in only]) for name, env, only in variants]
    runs += [(f"host{f * 100:g}", {"host_share": repr(f)}, exch) for f in shares if exch]
    for name, keys, run_ops in runs:
        if not run_ops:
            continue
        env = {k: v for k, v in keys.items() if k.startswith("GPUSTRIPE_")}
        tuning = {k: v for k, v in keys.items() if not k.startswith("GPUSTRIPE_")}
        with scoped_env(env):
            _run_gpustripe(ctx, ranks, run_ops, sizes, args, rows, absent, method=f"gpustripe_{name}", tuning=tuning)


# ---------------------------------------------------------------- NCCL through torch.distributed

def _nccl_worker(rank, world, cfg, out_path):
    """One process per GPU (torch.multiprocessing.spawn). Rank 0 writes the rows."""
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(cfg["port"])
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    dtype = getattr(torch, cfg["dtype"])
    esz = torch.tensor([], dtype=dtype).element_size()

    def bench(fn):
        for _ in range(cfg["warmup"]):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(cfg["trials"]):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(cfg["iters"]):
                fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / cfg["iters"] * 1e6)
        # Every rank's median; the slowest rank's is the collective's time.
        t = torch.tensor([statistics.median(times)], device=dev, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    # The largest buffers once; each size uses their leading part.
    top = max(cfg["sizes"]) // esz
    xf = torch.ones(top, dtype=dtype, device=dev)
    yf = torch.empty_like(xf)
    rows = []
    for size in cfg["sizes"]:
        per = size // esz
        if per % world:
            continue
        x, y, s = xf[:per], yf[:per], yf[:per // world]
        fns = {"allreduce": lambda: dist.all_reduce(x),
               "alltoall": lambda: dist.all_to_all_single(y, x),
               "allgather": lambda: dist.all_gather_into_tensor(y, x[:per // world]),
               "reduce_scatter": lambda: dist.reduce_scatter_tensor(s, x),
               "bcast": lambda: dist.broadcast(x, 0)}
        for op in cfg["ops"]:
            us = bench(fns[op])
            if rank == 0:
                rows.append({"op": op, "bytes": size, "us": us})
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"rows": rows, "nccl": ".".join(map(str, torch.cuda.nccl.version()))}, f)
    dist.destroy_process_group()


def _run_nccl(ranks, ops, sizes, args, rows, absent):
    method = "nccl"
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        absent[method] = f"torch not importable: {e}"
        return
    if not torch.cuda.is_available() or torch.cuda.device_count() < ranks:
        absent[f"{method}/{ranks}"] = f"torch sees {torch.cuda.device_count() if torch.cuda.is_available() else 0} GPUs"
        return
    cfg = {"sizes": sizes, "ops": ops, "dtype": args.dtype, "iters": args.iters, "trials": args.trials,
           "warmup": args.warmup, "port": 29600 + ranks}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        try:
            procs = mp.spawn(_nccl_worker, args=(ranks, cfg, out), nprocs=ranks, join=False)
            deadline = time.monotonic() + args.timeout
            while not procs.join(timeout=5):
                if time.monotonic() > deadline:
                    for proc in procs.processes:  # the workers this run started
                        proc.kill()
                    raise TimeoutError(f"workers did not finish in {args.timeout} s")
        except Exception as e:  # a worker's failure: NCCL or torch could not run this mode
            absent[f"{method}/{ranks}"] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"
            print(f"  {method} on {ranks} GPUs: absent ({absent[f'{method}/{ranks}']})", flush=True)
            return
        with open(out) as f:
            got = json.load(f)
    for r in got["rows"]:
        row = _row(r["op"], method, r["bytes"], r["us"], ranks, args.dtype, nccl_version=got["nccl"])
        rows.append(row)
        _progress(row)


def _run_worker(cmd: list[str], cfg: dict, key: str, args, absent: dict, env: dict | None = None) -> dict | None:
    """Runs a worker that reads `cfg` from the file named by its last argument and writes its
    rows to cfg["out"] (both in a temporary folder); returns what it wrote, or None with the
    reason in absent[key] (the time limit, or the exit status and the output's last lines)."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = dict(cfg, out=os.path.join(tmp, "rows.json"))
        cfg_path = os.path.join(tmp, "cfg.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        try:
            p = subprocess.run(cmd + [cfg_path], capture_output=True, text=True, timeout=args.timeout, env=env)
        except subprocess.TimeoutExpired:
            absent[key] = f"timed out after {args.timeout} s"
            return None
        if p.returncode != 0 or not os.path.exists(cfg["out"]):
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            absent[key] = f"exited {p.returncode}: {' | '.join(tail)[:400]}"
            print(f"  {key}: absent ({absent[key]})", flush=True)
            return None
        with open(cfg["out"]) as f:
            return json.load(f)


# ---------------------------------------------------------------- NCCL copy-engine mode, one process

def _nccl_ce_worker(cfg_path):
    """Runs in a process of its own (NCCL reads NCCL_CTA_POLICY once per process): NCCL's
    collectives over symmetric windows through gpustripe's NCCL loader; writes the rows."""
    from .. import NcclCollBench

    with open(cfg_path) as f:
        cfg = json.load(f)
    rows = []
    bench = NcclCollBench(cfg["ranks"], max(cfg["sizes"]), symmetric=True)
    for op in cfg["ops"]:
        for size in cfg["sizes"]:
            if size % (cfg["esz"] * cfg["ranks"]):
                continue
            t = bench.time(op, size, cfg["dtype"], cfg["warmup"], cfg["iters"], cfg["trials"])
            rows.append({"op": op, "bytes": size, "us": t["us"], "min_us": t["min_us"], "max_us": t["max_us"]})
    with open(cfg["out"], "w") as f:
        json.dump({"rows": rows, "note": bench.describe()}, f)
    # NCCL 2.28 crashed tearing down several communicators of one process whose buffers were
    # registered (SIGSEGV in the IPC deregistration after Destroy of the first):
    # the rows are written, the process ends here without it.
    sys.stdout.flush()
    os._exit(0)


def _run_nccl_ce(ranks, ops, sizes, args, rows, absent):
    from ._p2p_common import _locate_nccl

    method = "nccl_ce"
    _locate_nccl()
    ce_ops = [o for o in ops if o != "reduce"]
    from .. import dtype_size

    esz = dtype_size(args.dtype)
    cfg = {"ranks": ranks, "sizes": sizes, "ops": ce_ops, "dtype": args.dtype, "esz": esz, "iters": args.iters,
           "trials": args.trials, "warmup": args.warmup}
    cmd = [sys.executable, "-m", "gpustripe.benchmarks.coll", "--nccl-ce-worker"]
    got = _run_worker(cmd, cfg, f"{method}/{ranks}", args, absent, env=dict(os.environ, NCCL_CTA_POLICY="2"))
    if got is None:
        return
    for r in got["rows"]:
        row = _row(r["op"], method, r["bytes"], r["us"], ranks, args.dtype, note=got["note"], min_us=r["min_us"],
                   max_us=r["max_us"])
        rows.append(row)
        _progress(row)


# ---------------------------------------------------------------- MPI through host memory

def _mpi_worker(cfg_path):
    """Runs under mpirun: device buffers (torch), each call copies to pinned host memory,
    runs the MPI collective there, and copies back (what a GPU-unaware MPI program does)."""
    import numpy as np
    import torch
    from mpi4py import MPI

    with open(cfg_path) as f:
        cfg = json.load(f)
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
    dtype = getattr(torch, cfg["dtype"])
    rows = []
    for size in cfg["sizes"]:
        esz = torch.tensor([], dtype=dtype).element_size()
        per = size // esz
        if per % world:
            continue
        x = torch.ones(per, dtype=dtype, device=dev)
        y = torch.empty_like(x)
        s = torch.empty(per // world, dtype=dtype, device=dev)
        hx = torch.empty(per, dtype=dtype, pin_memory=True)
        hy = torch.empty(per, dtype=dtype, pin_memory=True)
        hs = torch.empty(per // world, dtype=dtype, pin_memory=True)
        npv = lambda t: t.numpy()  # noqa: E731

        def staged(dev_in, host_in, host_out, dev_out, call):
            host_in.copy_(dev_in)
            call(npv(host_in), npv(host_out))
            dev_out.copy_(host_out)

        fns = {"allreduce": lambda: staged(x, hx, hy, y, lambda a, b: comm.Allreduce(a, b, op=MPI.SUM)),
               "alltoall": lambda: staged(x, hx, hy, y, lambda a, b: comm.Alltoall(a, b)),
               "allgather": lambda: staged(s, hs, hy, y, lambda a, b: comm.Allgather(a, b)),
               "reduce_scatter": lambda: staged(x, hx, hs, s, lambda a, b: comm.Reduce_scatter_block(a, b, op=MPI.SUM)),
               "bcast": lambda: staged(x, hx, hx, x, lambda a, b: comm.Bcast(a, root=0))}
        for op in cfg["ops"]:
            fn = fns[op]
            # Host-staged calls take up to ~2 s at 1G: one untimed call sizes the batches to
            # about 0.1 s each (every rank agrees on the slowest rank's count).
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            once = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            iters = max(1, min(cfg["iters"], int(0.1 / max(once, 1e-6))))
            for _ in range(min(cfg["warmup"], iters) - 1):
                fn()
            times = []
            # Calls of half a second and more (1G reduce-scatter: ~2 s) vary little: one batch.
            for _ in range(cfg["trials"] if once < 0.5 else 1):
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) / iters * 1e6)
            us = comm.allreduce(statistics.median(times), op=MPI.MAX)
            if rank == 0:
                rows.append({"op": op, "bytes": size, "us": us})
    if rank == 0:
        with open(cfg["out"], "w") as f:
            json.dump({"rows": rows, "mpi": MPI.Get_library_version().splitlines()[0]}, f)


def _run_mpi(ranks, ops, sizes, args, rows, absent):
    mpirun = shutil.which("mpirun")
    if not mpirun:
        absent["mpi_host_staged"] = "mpirun not found"
        return
    for mod in ("mpi4py", "torch"):
        try:
            __import__(mod)
        except ImportError as e:
            absent["mpi_host_staged"] = f"{mod} not importable: {e}"
            return
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < ranks:
        absent[f"mpi_host_staged/{ranks}"] = "torch sees too few GPUs"
        return
    if args.dtype == "bfloat16":
        absent["mpi_host_staged"] = "MPI has no bfloat16 reduction"
        return
    # Host-staged calls are 10-100x slower than the others and vary little: 3 batches at most.
    cfg = {"sizes": sizes, "ops": ops, "dtype": args.dtype, "iters": args.iters, "trials": min(args.trials, 3),
           "warmup": args.warmup}
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), sys.executable, "-m",
           "gpustripe.benchmarks.coll", "--mpi-worker"]
    got = _run_worker(cmd, cfg, f"mpi_host_staged/{ranks}", args, absent)
    if got is None:
        return
    for r in got["rows"]:
        row = _row(r["op"], "mpi_host_staged", r["bytes"], r["us"], ranks, args.dtype, mpi=got["mpi"])
        rows.append(row)
        _progress(row)


# ---------------------------------------------------------------- the run

@contextlib.contextmanager
def _took(method, ranks):
    """Prints how long a method's runs took: device time is budgeted per request (--timeout per worker)."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        print(f"  ({method} on {ranks} ranks: {time.monotonic() - t0:.1f} s)", flush=True)


def run(args):
    from .. import Context, results

    ctx = Context()
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for o in ops:
        if o not in BUSBW:
            raise SystemExit(f"gpustripe bench coll: unknown op '{o}' ({', '.join(OPS)})")
    for m in methods:
        if m not in METHODS:
            raise SystemExit(f"gpustripe bench coll: unknown method '{m}' ({', '.join(METHODS)})")
    if args.quick:
        args.iters, args.trials, args.warmup = min(args.iters, 5), min(args.trials, 3), min(args.warmup, 2)
    sizes = _sizes(args)
    rank_counts = [int(g) for g in args.gpus.split(",") if g.strip()]
    print(f"gpustripe bench coll on {ctx.device_label} ({ctx.backend_name}, {ctx.device_count} devices): "
          f"ops {','.join(ops)}, sizes {sizes[0]}..{sizes[-1]} B per rank, ranks {rank_counts}", flush=True)

    rows, absent = [], {}
    for ranks in rank_counts:
        if ranks > ctx.device_count:
            absent[f"all/{ranks}"] = f"the node has {ctx.device_count} GPUs"
            print(f"== {ranks} ranks: skipped, the node has {ctx.device_count} GPUs", flush=True)
            continue
        print(f"== {ranks} ranks", flush=True)
        if "gpustripe" in methods:
            with _took("gpustripe", ranks):
                _run_gpustripe(ctx, ranks, ops, sizes, args, rows, absent)
                _variant_sweep(ctx, ranks, ops, sizes, args, rows, absent)
        for m, fn in (("nccl", _run_nccl), ("nccl_ce", _run_nccl_ce)):
            if m not in methods:
                continue
            if ctx.emulated:
                absent[m] = "emulated devices: no GPU for NCCL"
                continue
            with _took(m, ranks):
                fn(ranks, ops, sizes, args, rows, absent)
        if "mpi_host_staged" in methods:
            if ctx.emulated:
                absent["mpi_host_staged"] = "emulated devices: no GPU buffers to stage"
            else:
                with _took("mpi_host_staged", ranks):
                    _run_mpi(ranks, ops, sizes, args, rows, absent)

    for ranks in rank_counts:
        sub = [r for r in rows if r["ranks"] == ranks]
        for op in ops:
            if any(r["op"] == op for r in sub):
                print(f"\n[{ranks} ranks] " + results.ratio_table(sub, op, value="busbw_gbps"))
    if absent:
        print("\nabsent:")
        for k, v in sorted(absent.items()):
            print(f"  {k}: {v}")
    if args.no_write or not rows:
        return 0 if rows else 1
    # One file (and plot) per rank count: a plot line is one method on one communicator size.
    for ranks in sorted({r["ranks"] for r in rows}):
        path = results.write(f"coll-{ranks}gpu", ctx.device_label, ranks, [r for r in rows if r["ranks"] == ranks],
                             out_dir=args.out, extra={"absent": absent, "dtype": args.dtype, "iters": args.iters,
                                                      "trials": args.trials})
        print(f"wrote {path} (+ .png)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--mpi-worker":
        _mpi_worker(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "--nccl-ce-worker":
        _nccl_ce_worker(sys.argv[2])
    else:
        raise SystemExit("usage: python -m gpustripe.benchmarks.coll --mpi-worker|--nccl-ce-worker CONFIG "
                         "(run by gpustripe bench coll)")
