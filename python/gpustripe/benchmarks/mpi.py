"""gpustripe bench mpi: unmodified MPI programs with device buffers, with and without gpustripe.

Runs the OSU-style clients of bench/mpi under mpirun at each rank count (pairs r <-> r^1,
all pairs at once; one GPU per rank) and compares, in one results file per (ranks, window):
  mpi_gpustripe    mpi_bench with libgpustripe_mpi.so preloaded (the interposer)
  mpi_cuda_aware   mpi_bench through the same Open MPI made CUDA-aware by the libucx-cu13
                   wheel's UCX (pml ucx, the wheel's libraries first on LD_LIBRARY_PATH;
                   no rebuild): what a user of the node runs instead of us. Every table
                   and row gets the ratio to it.
  mpi_host_staged  mpi_bench in the GPU-unaware pattern: copy to host, MPI, copy back
  gpustripe        gs_p2p_bench: the same loop over gpustripe's native p2p layer
  nccl             nccl_bench: NCCL send/recv between the ranks (a window = one group)
  ucx              ucx_bench: UCX ucp tag send/recv, UCX_TLS=cuda_ipc,cuda_copy,sm,self
                   (the libucx-cu13 wheel staged by scripts/stage-deps.sh)
The tests are OSU's (osu_latency, osu_bw, osu_bibw: see bench/mpi/osu_loop.hpp).
A method that cannot run here is skipped and its reason kept in the results
("methods_absent"). It also runs mpi_bench with device buffers WITHOUT the interposer, to
show what a non-CUDA-aware MPI does with them (expected: a crash or an error; recorded,
never fatal).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from . import _cuda_aware_mpi
from ._mpi_launch import (add_interposer_variants_argument, add_launch_arguments, add_rounds_argument,
                          built_programs, interposer_variants)

NAME = "mpi"
HELP = "MPI point-to-point with device buffers: the PMPI interposer vs host staging, native p2p, NCCL and UCX"

METHODS = ("mpi_gpustripe", "mpi_cuda_aware", "mpi_host_staged", "gpustripe", "nccl", "ucx")
# The method every other is compared with.
BASELINE = "mpi_cuda_aware"
# UCX over CUDA IPC within the node; Open MPI's own UCX components stay off, as the
# system MPI may be linked against another libucp than the client's.
UCX_TLS_DEVICE = "cuda_ipc,cuda_copy,sm,self"
UCX_TLS_HOST = "sm,self"
UCX_MPI_ARGS = ["--mca", "pml", "ob1", "--mca", "osc", "^ucx", "--mca", "btl", "^uct"]


def add_arguments(p):
    p.add_argument("--ranks", default="2,4", help="rank counts, comma separated (even; default 2,4)")
    p.add_argument("--sizes", default="1:1G", help="bandwidth sizes LO:HI (powers of two; default 1:1G)")
    p.add_argument("--latency-sizes", default="1:4M", help="latency sizes LO:HI (default 1:4M; '' for none)")
    p.add_argument("--staged-max", default="64M",
                   help="largest size of mpi_host_staged in windows > 1 and bibw (default 64M: the pattern "
                        "runs at PCIe speed, a window of 64 x 1 GB through host memory takes minutes)")
    p.add_argument("--windows", default="1,16,64", help="bandwidth window sizes (default 1,16,64)")
    p.add_argument("--bibw-window", type=int, default=64, help="window of the bidirectional runs (default 64)")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma list of {', '.join(METHODS)}")
    p.add_argument("--iters", type=int, default=0, help="timed iterations per size (0: by size)")
    p.add_argument("--alloc", default="plain", choices=["plain", "vmm", "pool", "async", "vmm_multi"],
                   help="allocator of the device buffers of mpi_gpustripe, mpi_cuda_aware, mpi_host_staged and gpustripe: plain "
                        "(cudaMalloc), vmm (cuMemCreate, POSIX-fd handles), pool (cudaMallocAsync pool with POSIX-fd "
                        "handles), async (the default pool: no IPC handle), vmm_multi (several cuMemCreate "
                        "allocations in one reservation, as PyTorch's expandable segments); results file mpi-np*-w*-<alloc> "
                        "unless plain")
    add_launch_arguments(p, "bench/mpi/ and src/mpi/", timeout=900)
    p.add_argument("--ucx-dir", default="",
                   help="the unpacked libucx-cu13 wheel of mpi_cuda_aware (default: .deps/ucx of the source "
                        "tree the build came from, as scripts/stage-deps.sh stages it)")
    p.add_argument("--quick", action="store_true", help="few sizes and iterations (a smoke run)")
    add_rounds_argument(p, "each size keeps the round with the median time (rounds_us)")
    add_interposer_variants_argument(p, "--variants")


def _paths(build: str) -> dict:
    return built_programs("mpi", build,
                          {"mpi_bench": "bench/mpi/mpi_bench", "gs_p2p_bench": "bench/mpi/gs_p2p_bench",
                           "interposer": "src/mpi/libgpustripe_mpi.so"},
                          {"nccl_bench": "bench/mpi/nccl_bench", "ucx_bench": "bench/mpi/ucx_bench"})


def _absent(method: str, paths: dict, emulated: bool, ucx: str) -> str:
    """Why a method cannot run here ('' when it can)."""
    if method == "mpi_cuda_aware":
        return _cuda_aware_mpi.absent(ucx)
    if method == "mpi_host_staged" and emulated:
        return "needs a GPU (copy to host, MPI, copy back)"
    if method == "nccl":
        if emulated:
            return "needs GPUs"
        if "nccl_bench" not in paths:
            return "nccl_bench not built (a CUDA build builds it)"
        from ._p2p_common import _locate_nccl

        _locate_nccl()
        if not os.environ.get("GPUSTRIPE_NCCL_LIBRARY"):
            import ctypes.util

            if not ctypes.util.find_library("nccl"):
                return "no NCCL library (nvidia-nccl wheel or GPUSTRIPE_NCCL_LIBRARY)"
    if method == "ucx" and "ucx_bench" not in paths:
        return "ucx_bench not built: UCX headers not found (scripts/stage-deps.sh stages the libucx-cu13 wheel)"
    return ""


def _size_arg(text: str) -> tuple[str, str]:
    lo, _, hi = text.partition(":")
    return lo or "1", hi or lo or "1"


def _mpirun(args, n: int, env: dict, mca: list[str] | None = None) -> list[str]:
    cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(n), *(mca or []),
           "-x", "NCCL_NVLS_ENABLE=0"]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    # The planner's settings too: the ranks' processes plan (a 2-rank broadcast's host share).
    for k in ("GPUSTRIPE_TOPOLOGY_DIR", "GPUSTRIPE_TOPOLOGY", "GPUSTRIPE_BACKEND", "GPUSTRIPE_TIMEOUT",
              "GPUSTRIPE_LOG_LEVEL", "GPUSTRIPE_NCCL_LIBRARY", "GPUSTRIPE_PLAN", "GPUSTRIPE_PROFILE",
              "GPUSTRIPE_HOST_PATH", "CUDA_VISIBLE_DEVICES"):
        if k in os.environ:
            cmd += ["-x", k]
    return cmd


class _Stopped(Exception):
    """SIGTERM (e.g. an outer `timeout`): what was measured so far is still written."""


def _on_sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the results are being written
    raise _Stopped()


def _run_bounded(cmd: list[str], timeout: int) -> tuple[str, int | str]:
    """Output and exit status of cmd; past `timeout` mpirun gets SIGTERM, which it passes on
    to its ranks (a SIGKILL would leave them running on the GPUs), and what it printed
    until then is kept: the sizes measured before the limit still count."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return out, p.returncode
    except _Stopped:
        p.terminate()
        p.wait(timeout=10)
        raise
    except subprocess.TimeoutExpired:
        p.terminate()
        try:
            out, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        return out or "", f"timeout after {timeout}s"


def _run_rows(cmd: list[str], timeout: int, extra: dict) -> list[dict]:
    print("  $ " + " ".join(cmd), flush=True)
    t0 = time.time()
    out, rc = _run_bounded(cmd, timeout)
    rows = []
    for line in out.splitlines():
        if line.startswith("ROW "):
            row = json.loads(line[4:])
            row.update(extra)
            rows.append(row)
            print(f"    {row['op']:>7} {row['method']:>16} w{row['window']:<3} {row['bytes']:>11} B "
                  f"{row['us']:12.2f} us {row['gbps']:9.2f} GB/s (all pairs {row['agg_gbps']:.2f})", flush=True)
    if rc != 0:
        print(f"    FAILED ({rc}, {time.time() - t0:.0f}s); last output:\n" + "\n".join(out.splitlines()[-15:]))
    else:
        print(f"    ({len(rows)} rows in {time.time() - t0:.1f} s)", flush=True)
    return rows


def _without_interposer(args, paths: dict, n: int) -> dict:
    """Device buffers through the bare MPI: a non-CUDA-aware MPI crashes or errors."""
    cmd = _mpirun(args, n, {}) + [paths["mpi_bench"], "--test", "bw", "--window", "1", "--min", "1M",
                                  "--max", "1M", "--iters", "1", "--method", "mpi_plain"]
    print("  $ " + " ".join(cmd) + "   (expected to fail: the MPI is not CUDA-aware)", flush=True)
    out, rc = _run_bounded(cmd, min(args.timeout, 60))
    failed = rc != 0
    print(f"    without the interposer: exit {rc} -> {'fails, as expected' if failed else 'RAN (CUDA-aware MPI?)'}")
    return {"ranks": n, "exit": rc, "failed": failed, "tail": out.splitlines()[-8:]}


def run(args) -> int:
    from .. import parse_size, results
    from ..copy import default_context

    paths = _paths(args.build)
    ctx = default_context()
    device, gpus = ctx.device_label, ctx.device_count
    methods = [m for m in args.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise SystemExit(f"gpustripe bench mpi: unknown methods {bad}; known: {', '.join(METHODS)}")
    variants = interposer_variants(args.variants, "gpustripe bench mpi", "--variants")
    emulated = ctx.emulated
    ucx = _cuda_aware_mpi.ucx_dir(args.build, args.ucx_dir)
    absent = {m: why for m in methods if (why := _absent(m, paths, emulated, ucx))}
    methods = [m for m in methods if m not in absent]
    ranks = [int(r) for r in args.ranks.split(",") if r]
    windows = [int(w) for w in args.windows.split(",") if w]
    sizes, lat_sizes, iters = args.sizes, args.latency_sizes, args.iters
    if args.quick:
        sizes, lat_sizes, iters = "4K:16M", "8:8", iters or 5
    lo, hi = _size_arg(sizes)
    mem = ["--mem", "host"] if emulated else []  # the clients' device buffers need a GPU
    print(f"gpustripe bench mpi: {device}, {gpus} GPUs, ranks {ranks}, methods {methods}")
    for m, why in absent.items():
        print(f"  (skipped: {m}: {why})")
    if emulated:
        print("  NOTE: no GPU visible: host buffers on emulated devices; figures are not GPU figures.")

    def sweeps(method: str) -> list[str]:
        """Every sweep of one method at one rank count, for one launch (start-up paid once)."""
        top = hi
        if method == "mpi_host_staged":  # PCIe speed: a window of 64 x 1 GB would take minutes
            top = str(min(parse_size(hi), parse_size(args.staged_max)))
        out = [f"bw:{w}:{lo}:{hi if w == 1 else top}" for w in windows if parse_size(hi if w == 1 else top) >= parse_size(lo)]
        if args.bibw_window in windows and parse_size(top) >= parse_size(lo):
            out.append(f"bibw:{args.bibw_window}:{lo}:{top}")
        if lat_sizes:
            llo, lhi = _size_arg(lat_sizes)
            out.append(f"latency:1:{llo}:{lhi}")
        return [a for sw in out for a in ("--sweep", sw)]

    def client(method: str, n: int) -> list[str] | None:
        common = sweeps(method) + (["--iters", str(iters)] if iters else [])
        if args.alloc != "plain" and (method in ("mpi_cuda_aware", "mpi_host_staged", "gpustripe") or
                                      method.startswith("mpi_gpustripe")):
            common += ["--alloc", args.alloc]
        if method == "mpi_gpustripe" or method in variants:
            env = {"LD_PRELOAD": paths["interposer"], **variants.get(method, {})}
            return _mpirun(args, n, env) + [paths["mpi_bench"], *common, *mem, "--method", method]
        if method == "mpi_cuda_aware":
            return _mpirun(args, n, _cuda_aware_mpi.env(ucx), _cuda_aware_mpi.MCA_ARGS) + [
                paths["mpi_bench"], *common, *mem, "--method", method]
        if method == "mpi_host_staged":
            return _mpirun(args, n, {}) + [paths["mpi_bench"], *common, "--staged"]
        if method == "gpustripe":
            return _mpirun(args, n, {}) + [paths["gs_p2p_bench"], *common, *mem]
        if method == "nccl":
            return _mpirun(args, n, {}) + [paths["nccl_bench"], *common]
        if method == "ucx":
            env = {"UCX_TLS": UCX_TLS_HOST if mem else UCX_TLS_DEVICE, "UCX_WARN_UNUSED_ENV_VARS": "n"}
            return _mpirun(args, n, env, UCX_MPI_ARGS) + [paths["ucx_bench"], *common, *mem]
        return None

    def file_window(row: dict) -> int:
        """Which results file a row goes to: bandwidth rows by their window, the
        bidirectional ones to --bibw-window's, latency to the last window's."""
        if row["op"] == "latency":
            return windows[-1]
        return row["window"]

    written = []
    unaware = []
    stopped = False
    signal.signal(signal.SIGTERM, _on_sigterm)
    for n in ranks:
        done = []  # methods with a launch finished
        rounds = [[] for _ in range(args.rounds)]
        try:
            if not emulated:
                unaware.append(_without_interposer(args, paths, n))
            for k, method in results.in_turns(methods + list(variants), args.rounds):
                cmd = client(method, n)
                if cmd:
                    rounds[k] += _run_rows(cmd, args.timeout, {"emulated": emulated})
                if method not in done:
                    done.append(method)
        except _Stopped:
            stopped = True
            print(f"STOPPED (SIGTERM) during {n} ranks: writing what was measured; not measured: "
                  f"{[m for m in methods + list(variants) if m not in done]}")
        rows_n = results.median_rounds(rounds, ("method", "op", "window", "bytes"), "us")
        for w in windows:
            rows = [r for r in rows_n if file_window(r) == w]
            if not rows:
                continue
            print()
            print(f"{n} ranks, window {w}")
            results.add_ratios(rows, BASELINE)
            print(results.ratio_table(rows, "p2p", ours="mpi_gpustripe", base=BASELINE))
            if any(r["op"] == "bibw" for r in rows):
                print(results.ratio_table(rows, "bibw", ours="mpi_gpustripe", base=BASELINE))
            if any(r["op"] == "latency" for r in rows):
                print(results.ratio_table(rows, "latency", ours="mpi_gpustripe", value="us", base=BASELINE))
                print(f"(latency: microseconds, lower is better; ratios = mpi_gpustripe/method and "
                      f"method/{BASELINE}, in time)")
            print()
            if not args.no_write:
                extra = {"ranks": n, "window": w, "emulated": emulated, "backend": ctx.backend_name,
                         "baseline": BASELINE,
                         "without_interposer": [u for u in unaware if u["ranks"] == n], "methods_absent": absent}
                if stopped:
                    extra["stopped_before"] = [m for m in methods + list(variants) if m not in done]
                what = f"mpi-np{n}-w{w}" + ("" if args.alloc == "plain" else f"-{args.alloc}")
                if args.alloc != "plain":
                    extra["alloc"] = args.alloc
                path = results.write(what, device, gpus, rows, out_dir=args.out, extra=extra,
                                     command=" ".join(["gpustripe", "bench", "mpi", *sys.argv[3:]]))
                written.append(path)
                print(f"wrote {path} and its plot")
        if stopped:
            break
    ok = all(u["failed"] for u in unaware)
    if unaware and not ok:
        print("NOTE: device buffers ran through the bare MPI: it may be CUDA-aware after all")
    return 0 if written or args.no_write else 1
