"""gpustripe bench mpi_rma: one-sided MPI (puts, gets, accumulates) on device windows, unmodified program.

Runs bench/mpi's mpi_rma_bench (plain MPI + the CUDA runtime, nothing of gpustripe in it) under
mpirun on 2 ranks (one GPU each) with libgpustripe_mpi.so preloaded (docs/mpi.md, one-sided
communication), and in the same run mpi_bench (send/recv through the interposer) over the same
sizes, so one results file compares, per size:
  put / get              bandwidth of a window of --window operations per epoch, one method per
                         synchronization: mpi_gpustripe_lock (lock once, MPI_Win_flush per epoch),
                         _fence, _pscw; mpi_gpustripe_sendrecv: a window of as many Isend/Irecv
  put_latency / get_latency  one operation per epoch (us), same methods; sendrecv: half a round trip
  accumulate / fetch_and_op  MPI_Accumulate rate (mops) and MPI_Fetch_and_op latency, lock/flush
  mpi_cuda_aware         the same client's puts and gets (lock/flush) without the interposer, through
                         Open MPI made CUDA-aware by the libucx-cu13 wheel (osc ucx), what a user of
                         the node would run instead; where that MPI cannot make the window, the
                         results' `absent` says so with the MPI's reason, and the tables show "-"
  bound_engine, bound_peer_copy, model_engine, model_direct
                         one pair's one-way bound at the bandwidth sizes, in this process and run
                         (puts GPU 0 -> 1, gets 1 -> 0): the engine's copy (its plan over every path,
                         the most a split put or get reaches) and one path (cudaMemcpyPeerAsync, what
                         UCX's cuda_ipc copies are) measured, and the model's predicted times of its
                         plan and of the direct path alone; the "bound" table sets the RMA rows' ratio
                         against the ratio these allow
The latency rows of lock/flush also carry op_call_us and flush_us: the origin's time per epoch in
MPI_Put/MPI_Get (the host's work before the data moves) and in MPI_Win_flush.
Emulated devices (no GPU) run host windows, which the MPI serves: a smoke run, not a GPU figure.
"""
from __future__ import annotations

import sys

from ._mpi_launch import add_launch_arguments, built_programs

NAME = "mpi_rma"
HELP = "One-sided MPI on device windows from an unmodified program: puts, gets, accumulates vs send/recv"
SYNCS = ("lock", "fence", "pscw")


def add_arguments(p):
    p.add_argument("--sizes", default="1M:256M", help="bandwidth sizes LO:HI (powers of two; default 1M:256M)")
    p.add_argument("--latency-sizes", default="8:64K", help="latency sizes LO:HI (default 8:64K; '' for none)")
    p.add_argument("--window", type=int, default=16, help="operations per epoch of the bandwidth runs (default 16)")
    p.add_argument("--syncs", default=",".join(SYNCS), help=f"comma list of {', '.join(SYNCS)}")
    p.add_argument("--iters", type=int, default=0, help="epochs per size (0: by size)")
    p.add_argument("--bound-reps", type=int, default=10, help="timed copies per size of the in-process bound rows "
                   "(0: none)")
    add_launch_arguments(p, "bench/mpi/ and src/mpi/")
    p.add_argument("--ucx-dir", default="", help="the unpacked libucx-cu13 wheel of mpi_cuda_aware (default: "
                   ".deps/ucx of the source tree)")


def _paths(build: str) -> dict:
    return built_programs("mpi_rma", build, {"rma": "bench/mpi/mpi_rma_bench", "p2p": "bench/mpi/mpi_bench",
                                             "interposer": "src/mpi/libgpustripe_mpi.so"})


# The client's test -> the results' op
_OPS = {"put_bw": "put", "get_bw": "get", "put_lat": "put_latency", "get_lat": "get_latency",
        "acc_rate": "accumulate", "fop_lat": "fetch_and_op"}


def run(args) -> int:
    from .. import results
    from ..copy import default_context
    from . import _cuda_aware_mpi
    from .mpi import _mpirun, _size_arg

    paths = _paths(args.build)
    ctx = default_context()
    device, emulated = ctx.device_label, ctx.emulated
    syncs = [s for s in args.syncs.split(",") if s]
    if any(s not in SYNCS for s in syncs):
        raise SystemExit(f"gpustripe bench mpi_rma: --syncs from {SYNCS}")
    mem = ["--mem", "host"] if emulated else ["--mem", "device"]
    if not emulated and ctx.device_count < 2:
        raise SystemExit("gpustripe bench mpi_rma: needs 2 GPUs")
    lo, hi = _size_arg(args.sizes)
    llo, lhi = _size_arg(args.latency_sizes) if args.latency_sizes else ("", "")
    iters = ["--iters", str(args.iters)] if args.iters else []
    env = {"LD_PRELOAD": paths["interposer"]}
    print(f"gpustripe bench mpi_rma: {device}, 2 ranks, syncs {syncs}", flush=True)
    if emulated:
        print("  NOTE: no GPU visible: host windows (the MPI's); figures are not GPU figures.")
    rows, absent = [], {}

    def client(test: str, sync: str, extra: list[str]):
        cmd = _mpirun(args, 2, env) + [paths["rma"], "--test", test, "--sync", sync, *mem, *iters, *extra,
                                       "--method", f"mpi_gpustripe_{sync}"]
        for r in _rows(cmd, args.timeout, absent, f"{test}/{sync}"):
            r["op"] = _OPS[test]
            rows.append(r)

    def _rows(cmd, timeout, absent_, key):
        from .mpi import _run_bounded
        import json

        print("  $ " + " ".join(cmd), flush=True)
        out, rc = _run_bounded(cmd, timeout)
        got = [json.loads(line[4:]) for line in out.splitlines() if line.startswith("ROW ")]
        for r in got:
            split = (f"  (op call {r['op_call_us']:.2f} us, flush {r['flush_us']:.2f} us)"
                     if r.get("flush_us") and r["op"] in ("put_lat", "get_lat") else "")
            print(f"  {r['op']:>8} {r['method']:>22} {r['bytes']:>11} B {r['us']:>10.2f} us {r['gbps']:8.2f} GB/s "
                  f"{r.get('mops', 0):8.3f} Mops{split}", flush=True)
        if rc != 0:
            absent_[key] = f"exit {rc}: " + " | ".join(out.strip().splitlines()[-3:])[:400]
            print(f"    FAILED ({absent_[key]})", flush=True)
        return got

    def ours(sync: str):
        client("put_bw", sync, ["--window", str(args.window), "--min", lo, "--max", hi])
        client("get_bw", sync, ["--window", str(args.window), "--min", lo, "--max", hi])
        if llo:
            client("put_lat", sync, ["--min", llo, "--max", lhi])
            client("get_lat", sync, ["--min", llo, "--max", lhi])

    # lock/flush first, then the CUDA-aware MPI's rows it is compared with, then the other syncs:
    # the comparison runs before the rest.
    if "lock" in syncs:
        ours("lock")
    # The CUDA-aware MPI's own one-sided path over the same sizes (device windows only).
    ucx = _cuda_aware_mpi.ucx_dir(args.build, args.ucx_dir)
    why_not = "no GPU: host windows are the MPI's either way" if emulated else _cuda_aware_mpi.absent(ucx)
    if why_not:
        print(f"  mpi_cuda_aware: not run ({why_not})", flush=True)
        if not emulated:
            absent["mpi_cuda_aware"] = why_not
    else:
        ca = _mpirun(args, 2, _cuda_aware_mpi.env(ucx), _cuda_aware_mpi.RMA_MCA_ARGS)
        for test, a, b, extra in (("put_bw", lo, hi, ["--window", str(args.window)]),
                                  ("get_bw", lo, hi, ["--window", str(args.window)]),
                                  ("put_lat", llo, lhi, []), ("get_lat", llo, lhi, [])):
            if not a:
                continue
            cmd = ca + [paths["rma"], "--test", test, "--sync", "lock", *mem, *iters, "--min", a, "--max", b, *extra,
                        "--method", "mpi_cuda_aware"]
            for r in _rows(cmd, args.timeout, absent, f"mpi_cuda_aware/{test}"):
                r["op"] = _OPS[test]
                rows.append(r)
    for sync in syncs:
        if sync != "lock":
            ours(sync)
    if "lock" in syncs:
        client("acc_rate", "lock", ["--window", "64"])
        client("fop_lat", "lock", [])
    # Send/recv through the interposer over the same sizes: the same data moved two-sided.
    p2p_mem = ["--mem", "host"] if emulated else []
    for test, ops, a, b in (("bw", ("put", "get"), lo, hi), ("latency", ("put_latency", "get_latency"), llo, lhi)):
        if not a:
            continue
        cmd = _mpirun(args, 2, env) + [paths["p2p"], "--test", test, "--window", str(args.window), "--min", a,
                                       "--max", b, *p2p_mem, "--method", "mpi_gpustripe_sendrecv"]
        for r in _rows(cmd, args.timeout, absent, f"sendrecv/{test}"):
            for op in ops:
                rows.append(dict(r, op=op))
    if args.bound_reps > 0 and (emulated or ctx.device_count >= 2):
        rows += bound_rows(ctx, _sizes(lo, hi), args.bound_reps)
    for r in rows:
        r["emulated"] = emulated
    mpi_rows = [r for r in rows if not r["method"].startswith(("bound_", "model_"))]
    for op in ("put", "get", "put_latency", "get_latency"):
        if any(r["op"] == op for r in mpi_rows):
            value = "us" if op.endswith("latency") else "gbps"
            print(f"\n[{op}, {value}] " + results.ratio_table(mpi_rows, op, ours="mpi_gpustripe_lock", value=value))
    if any(r["method"] == "bound_engine" for r in rows):
        print("\n" + bound_table(rows))
    if absent:
        print("\nabsent:")
        for k, v in sorted(absent.items()):
            print(f"  {k}: {v}")
    if args.no_write or not rows:
        return 0 if rows else 1
    path = results.write("mpi-rma-2gpu", device, 2, rows, out_dir=args.out,
                         extra={"absent": absent, "backend": ctx.backend_name, "emulated": emulated,
                                "window": args.window},
                         command=" ".join(["gpustripe", "bench", "mpi_rma", *sys.argv[3:]]))
    print(f"wrote {path} (+ .png)")
    return 0


def _sizes(lo: str, hi: str) -> list[int]:
    from ._p2p_common import parse_sizes

    return parse_sizes(f"{lo}:{hi}")


# The bound rows' methods: measured in this process (the p2p benchmark's methods), and predicted.
_BOUND_METHODS = {"gpustripe": "bound_engine", "cudaMemcpyPeerAsync": "bound_peer_copy"}


def bound_rows(ctx, sizes: list[int], reps: int) -> list[dict]:
    """One pair's one-way copy at `sizes` in this process, the direction of the RMA rows (puts GPU
    0 -> 1, gets 1 -> 0): the engine's copy and cudaMemcpyPeerAsync measured (median of `reps`),
    and the model's predictions of its plan and of the direct path alone. A split put or get moves
    the same bytes over the same paths, so the engine's in-process copy is what it can reach, and
    one path is what a copy-engine transport (UCX's cuda_ipc) gets."""
    from .. import _core

    have, _ = ctx.bench_methods()
    methods = [m for m in _BOUND_METHODS if m in have]
    model = _core.Model()
    out = []
    for op, (src, dst) in (("put", (0, 1)), ("get", (1, 0))):
        got = ctx.bench_p2p([(src, dst)], sizes, [], methods, False, 2, reps, 1) if methods else []
        for r in got:
            if r["op"] != "p2p":
                continue
            out.append({"op": op, "method": _BOUND_METHODS[r["method"]], "bytes": r["bytes"], "gbps": r["gbps"],
                        "us": r["us"], "src": src, "dst": dst, "plan": r.get("plan", "")})
        for n in sizes:
            plan, direct = model.plan(src, dst, n), model.fixed("direct", src, dst, n)
            for method, p in (("model_engine", plan), ("model_direct", direct)):
                out.append({"op": op, "method": method, "bytes": n, "gbps": p.predicted_gbps, "us": p.predicted_us,
                            "src": src, "dst": dst, "plan": p.describe(), "model": model.source})
    for r in out:
        print(f"  {r['op']:>8} {r['method']:>22} {r['bytes']:>11} B {r['us']:>10.2f} us {r['gbps']:8.2f} GB/s"
              f"  [{r['plan']}]", flush=True)
    return out


def bound_table(rows: list[dict]) -> str:
    """Per op and size: what the node allows one pair over one path (the model's plan over its
    direct path; the engine's copy over cudaMemcpyPeerAsync, measured), and what the lock/flush
    rows reach against the CUDA-aware MPI and against the in-process single path."""
    from .. import results

    by = {(r["op"], r["bytes"], r["method"]): r["gbps"] for r in rows}
    cols = (("model plan/direct", "model_engine", "model_direct"),
            ("engine/peer copy", "bound_engine", "bound_peer_copy"),
            ("lock/cuda_aware", "mpi_gpustripe_lock", "mpi_cuda_aware"),
            ("lock/peer copy", "mpi_gpustripe_lock", "bound_peer_copy"),
            ("cuda_aware/peer copy", "mpi_cuda_aware", "bound_peer_copy"))
    lines = ["bound: one pair one way; ratios of GB/s (the first two: what splitting allows)",
             f"{'op':>4} {'size':>8} " + " ".join(f"{c[0]:>20}" for c in cols)]
    for op in ("put", "get"):
        for n in sorted({r["bytes"] for r in rows if r["op"] == op and r["method"] == "model_engine"}):
            cells = []
            for _, a, b in cols:
                x, y = by.get((op, n, a)), by.get((op, n, b))
                cells.append(f"{x / y:20.3f}" if x and y else f"{'-':>20}")
            lines.append(f"{op:>4} {results.human_bytes(n):>8} " + " ".join(cells))
    return "\n".join(lines)
