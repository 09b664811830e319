"""gpustripe bench halo: a halo-exchange application (apps/halo: 2-D Jacobi over MPI, row
slabs, one GPU per rank) timed four ways in one run, every shape and exchange variant:
  mpi_host_staged  the GPU-unaware pattern: halos copied to pinned host memory around MPI
  mpi_cuda_aware   device pointers to Open MPI made CUDA-aware by the staged UCX wheel (pml
                   ucx, as `gpustripe bench mpi`'s baseline): what a user runs instead of us
  mpi_gpustripe    device pointers to MPI with libgpustripe_mpi.so preloaded
  nccl             ncclSend/ncclRecv, grouped, on the compute stream (torch's NCCL wheel)
The same binary serves all four (nothing of gpustripe in its source). Shapes: square
domains and the ExHET'24 shape, 8 rows of 2^22-2^26 doubles (halos of 32-512 MB). Each run
is checked against the same iterations on the whole domain in one process.

Prints, per rank count and variant, the time per iteration (exchange + step) and of the
exchange alone per method, with every method's speed relative to mpi_cuda_aware and to
nccl (their time over its: above 1 is faster); writes one schema-1 results file per rank
count and variant (rows op "halo": bytes = one halo, us per iteration, us_exchange, gbps
of halo traffic, vs_mpi_cuda_aware and vs_nccl) and its plot. A method that cannot run is
skipped with its reason ("methods_absent").

The sendrecv variant carries a bound (`bound_us_exchange` on its rows): MPI_Sendrecv up,
then down, moves the halos one direction after the other (a rank's second send cannot
start before its first receive has completed), so no MPI can exchange faster than the best
one-way time 1->0 plus 0->1. The bench measures those in one process with every copy
method it has (the engine's multi-path included) and takes the fastest of each direction.
NCCL's grouped send/recv moves both directions at once, so below that bound it runs a
different program, not a faster MPI."""
from __future__ import annotations

import json
import os
import signal
import sys
import time

from . import _cuda_aware_mpi
from ._mpi_launch import (add_interposer_variants_argument, add_launch_arguments, add_rounds_argument,
                          interposer_variants)

NAME = "halo"
HELP = "a 2-D Jacobi halo exchange on device buffers: GPU-unaware MPI, CUDA-aware MPI, the interposer and NCCL"

METHODS = ("mpi_host_staged", "mpi_cuda_aware", "mpi_gpustripe", "nccl")
BASES = ("mpi_cuda_aware", "nccl")
SHORT = {"mpi_host_staged": "staged", "mpi_cuda_aware": "cuda_aware", "mpi_gpustripe": "gpustripe", "nccl": "nccl"}
VARIANTS = ("sendrecv", "isend")
SHAPES = "4096x4096,16384x16384,8x4M,8x16M,8x64M"
QUICK_SHAPES = "4096x4096,8x4M"
# Host steps on emulated devices: small domains (the figures are not GPU figures).
EMULATED_SHAPES = "64x8K,8x256K"


def add_arguments(p):
    p.add_argument("--ranks", default="2", help="rank counts, comma separated (default 2)")
    p.add_argument("--shapes", default="",
                   help=f"domains ROWSxCOLS of doubles, comma separated (default {SHAPES}; {EMULATED_SHAPES} on "
                        "emulated devices); K/M/G multiply by 1024s")
    p.add_argument("--variants", default=",".join(VARIANTS), help="sendrecv (MPI_Sendrecv up then down), isend "
                                                                  "(Isend/Irecv both, one Waitall); default both")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma list of {', '.join(METHODS)}")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per shape, at least (default 20)")
    p.add_argument("--min-ms", type=float, default=20.0,
                   help="more iterations where --iters would take less than this many ms at the pace of a few "
                        "untimed ones: a small domain's 20 iterations last a millisecond or two, which times the "
                        "launch's first moments more than the iterations (default 20; 0: --iters exactly)")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations first (default 3)")
    add_rounds_argument(p, "each shape keeps the round with the median time per iteration (rounds_us)")
    add_interposer_variants_argument(p, "--interposers")  # --variants names the exchange forms
    p.add_argument("--no-check", action="store_true", help="skip the check against one process")
    p.add_argument("--quick", action="store_true", help=f"shapes {QUICK_SHAPES}, 5 iterations (no --min-ms)")
    add_launch_arguments(p, "apps/halo/ and src/mpi/")
    p.add_argument("--ucx-dir", default="", help="the unpacked libucx-cu13 wheel of mpi_cuda_aware (default: "
                                                 ".deps/ucx of the build's source tree)")


def parse_shapes(text: str) -> list[tuple[int, int]]:
    from .. import parse_size

    out = []
    for item in text.split(","):
        r, x, c = item.strip().lower().partition("x")
        if not x:
            raise SystemExit(f"gpustripe bench halo: shape '{item}' is not ROWSxCOLS (e.g. 8x4M)")
        try:
            rows, cols = parse_size(r.upper()), parse_size(c.upper())
        except Exception:  # gpustripe.Error: not a size
            raise SystemExit(f"gpustripe bench halo: shape '{item}' is not ROWSxCOLS (e.g. 8x4M)")
        if rows < 1 or cols < 3:
            raise SystemExit(f"gpustripe bench halo: shape '{item}': at least 1 row and 3 columns")
        out.append((rows, cols))
    return out


def _absent(method: str, emulated: bool, ucx: str) -> str:
    if method == "mpi_cuda_aware":
        return _cuda_aware_mpi.absent(ucx)
    if method == "nccl":
        if emulated:
            return "needs GPUs"
        from ._p2p_common import _locate_nccl

        _locate_nccl()
        lib = os.environ.get("GPUSTRIPE_NCCL_LIBRARY", "")
        if not lib or not os.path.exists(lib):
            return "no NCCL library (the nvidia-nccl wheel PyTorch installs, or GPUSTRIPE_NCCL_LIBRARY as a path)"
    return ""


def command(args, method: str, n: int, app: str, interposer: str, ucx: str, shapes, variants,
            emulated: bool, settings: dict | None = None) -> list[str]:
    """The mpirun line of one method: every shape and variant in one launch. `settings`: the
    environment of an interposer's variant (--interposers), whose method it is."""
    from .mpi import _mpirun

    env, mca = {}, None
    if method == "mpi_gpustripe" or settings is not None:
        env = {"LD_PRELOAD": interposer, **(settings or {})}
    elif method == "mpi_cuda_aware":
        env, mca = _cuda_aware_mpi.env(ucx), _cuda_aware_mpi.MCA_ARGS
    way = {"mpi_host_staged": "unaware", "nccl": "nccl"}.get(method, "aware")
    cmd = _mpirun(args, n, env, mca) + [app, "--way", way, "--method", method, "--exchange", ",".join(variants),
                                        "--iters", str(args.iters), "--warmup", str(args.warmup),
                                        "--min-ms", f"{args.min_ms:g}"]
    for rows, cols in shapes:
        cmd += ["--shape", f"{rows}x{cols}"]
    if not args.no_check:
        cmd.append("--check")
    if emulated:
        # The host steps; the interposer's halos are its emulated devices' memory.
        cmd += ["--compute", "host", "--mem", "hook" if method.startswith("mpi_gpustripe") else "host"]
    if method == "nccl":
        cmd += ["--nccl-lib", os.environ["GPUSTRIPE_NCCL_LIBRARY"]]
    return cmd


def series_bound(ctx, halo_bytes: list[int], reps: int) -> dict[int, float]:
    """Per halo size: the fastest one-way time 1->0 plus the fastest 0->1 (us), over the
    copy methods this node has, timed in this process (the module docstring says why)."""
    if ctx.device_count < 2 or not halo_bytes:
        return {}
    have, _ = ctx.bench_methods()
    rows = ctx.bench_p2p([(1, 0), (0, 1)], sorted(set(halo_bytes)), [], list(have), False, 2, reps, 1)
    best: dict[tuple[int, int], float] = {}
    for r in rows:
        if r["op"] == "p2p" and r["us"] > 0:
            k = (r["src"], r["bytes"])
            best[k] = min(best.get(k, float("inf")), r["us"])
    return {b: best[(1, b)] + best[(0, b)] for b in halo_bytes if (1, b) in best and (0, b) in best}


def add_ratios(rows: list[dict]) -> None:
    """vs_<base>: the base method's time per iteration over the row's (same ranks, variant,
    shape): above 1 the row's method is faster."""
    for base in BASES:
        ref = {(r["ranks"], r["variant"], r["shape"]): r["us"] for r in rows if r["method"] == base}
        for r in rows:
            t = ref.get((r["ranks"], r["variant"], r["shape"]))
            if t and r["us"] > 0:
                r[f"vs_{base}"] = round(t / r["us"], 4)


def _methods_of(rows: list[dict]) -> list[str]:
    """The methods of `rows`: the known ones in their order, then the interposer's variants."""
    known = [m for m in METHODS if any(r["method"] == m for r in rows)]
    return known + list(dict.fromkeys(r["method"] for r in rows if r["method"] not in METHODS))


def _short(m: str) -> str:
    return SHORT.get(m) or m.replace("mpi_gpustripe_", "gpustripe_")


def table(rows: list[dict], value: str) -> str:
    """One line per shape: `value` (us) per method, then each method's speed vs each base."""
    methods = _methods_of(rows)
    bases = [b for b in BASES if b in methods]
    shapes = []
    for r in rows:
        if r["shape"] not in shapes:
            shapes.append(r["shape"])
    by = {(r["shape"], r["method"]): r[value] for r in rows if value in r}
    head = f"{'shape':>14} {'halo':>7} " + " ".join(f"{m:>16}" for m in methods)
    for b in bases:
        head += "   " + " ".join(f"{_short(m) + ' vs ' + _short(b):>22}" for m in methods if m != b)
    lines = [head]
    from ..results import human_bytes

    for s in shapes:
        halo = next(r["bytes"] for r in rows if r["shape"] == s)
        line = f"{s:>14} {human_bytes(halo):>7} " + " ".join(
            f"{by[(s, m)]:16.1f}" if (s, m) in by else f"{'-':>16}" for m in methods)
        for b in bases:
            line += "   " + " ".join(
                f"{by[(s, b)] / by[(s, m)]:22.3f}" if (s, m) in by and (s, b) in by and by[(s, m)] > 0 else f"{'-':>22}"
                for m in methods if m != b)
        lines.append(line)
    return "\n".join(lines)


def plot(rows: list[dict], title: str, png: str) -> str:
    """Time per iteration and exchange GB/s per shape, one bar per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = _methods_of(rows)
    shapes = []
    for r in rows:
        if r["shape"] not in shapes:
            shapes.append(r["shape"])
    by = {(r["shape"], r["method"]): r for r in rows}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    width = 0.8 / max(1, len(methods))
    for ax, key, label in ((axes[0], "us", "us per iteration (exchange + step), lower is better"),
                           (axes[1], "gbps", "halo exchange GB/s, higher is better")):
        for i, m in enumerate(methods):
            xs = [j + i * width for j, s in enumerate(shapes) if (s, m) in by]
            ys = [by[(s, m)][key] for s in shapes if (s, m) in by]
            ax.bar(xs, ys, width, label=m)
        ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(shapes))], shapes, fontsize=7)
        ax.set_yscale("log")
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def run(args) -> int:
    from .. import results
    from ..copy import default_context
    from .mpi import _on_sigterm, _run_bounded, _Stopped

    app = os.path.join(args.build, "apps/halo/halo")
    interposer = os.path.join(args.build, "src/mpi/libgpustripe_mpi.so")
    missing = [p for p in (app, interposer) if not os.path.exists(p)]
    if missing:
        raise SystemExit(f"gpustripe bench halo: not built: {', '.join(missing)} (build the tree with MPI found)")
    app, interposer = os.path.abspath(app), os.path.abspath(interposer)
    ctx = default_context()
    emulated = ctx.emulated
    methods = [m for m in args.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise SystemExit(f"gpustripe bench halo: unknown methods {bad}; known: {', '.join(METHODS)}")
    variants = [v for v in args.variants.split(",") if v]
    if not variants or any(v not in VARIANTS for v in variants):
        raise SystemExit(f"gpustripe bench halo: --variants: {', '.join(VARIANTS)}")
    if args.iters < 1 or args.warmup < 0 or not args.min_ms >= 0:
        raise SystemExit("gpustripe bench halo: --iters must be at least 1, --warmup and --min-ms at least 0")
    if args.quick:
        args.iters, args.min_ms = min(args.iters, 5), 0.0
    settings = interposer_variants(args.interposers, "gpustripe bench halo", "--interposers")
    shapes = parse_shapes(args.shapes or (EMULATED_SHAPES if emulated else QUICK_SHAPES if args.quick else SHAPES))
    ranks = [int(r) for r in args.ranks.split(",") if r]
    ucx = _cuda_aware_mpi.ucx_dir(args.build, args.ucx_dir)
    absent = {m: why for m in methods if (why := _absent(m, emulated, ucx))}
    methods = [m for m in methods if m not in absent]
    print(f"gpustripe bench halo: {ctx.device_label}, ranks {ranks}, methods {methods}, variants {variants}, "
          f"shapes {[f'{r}x{c}' for r, c in shapes]}")
    for m, why in absent.items():
        print(f"  (skipped: {m}: {why})")
    if emulated:
        print("  NOTE: no GPU visible: the host steps on host memory (the interposer's on its emulated devices); "
              "figures are not GPU figures.")
    signal.signal(signal.SIGTERM, _on_sigterm)
    written, failed, stopped = [], [], False
    for n in ranks:
        rounds = [[] for _ in range(args.rounds)]
        try:
            for k, m in results.in_turns(methods + list(settings), args.rounds):
                cmd = command(args, m, n, app, interposer, ucx, shapes, variants, emulated, settings.get(m))
                print("  $ " + " ".join(cmd), flush=True)
                t0 = time.time()
                out, rc = _run_bounded(cmd, args.timeout)
                got = [json.loads(line[4:]) for line in out.splitlines() if line.startswith("ROW ")]
                for r in got:
                    r["emulated"] = emulated
                    print(f"    {r['method']:>16} {r['variant']:>8} {r['shape']:>14} {r['us']:12.1f} us/iter "
                          f"exchange {r['us_exchange']:10.1f} us {r['gbps']:8.2f} GB/s err {r['max_abs_err']}",
                          flush=True)
                rounds[k] += got
                bad_check = [line for line in out.splitlines() if "check FAILED" in line]
                if rc != 0 or bad_check:
                    failed.append(f"{m} np{n}: exit {rc}")
                    print(f"    FAILED ({rc}, {time.time() - t0:.0f}s); last output:\n" + "\n".join(out.splitlines()[-15:]))
        except _Stopped:
            stopped = True
            print(f"STOPPED (SIGTERM) during {n} ranks: writing what was measured")
        rows = results.median_rounds(rounds, ("method", "variant", "shape"), "us")
        add_ratios(rows)
        if "sendrecv" in variants and rows:
            bound = series_bound(ctx, [r["bytes"] for r in rows if r["variant"] == "sendrecv"], 5 if args.quick else 10)
            for r in rows:
                if r["variant"] == "sendrecv" and r["bytes"] in bound:
                    r["bound_us_exchange"] = round(bound[r["bytes"]], 3)
        for v in variants:
            sel = [r for r in rows if r["variant"] == v]
            if not sel:
                continue
            print()
            print(f"{n} ranks, {v}: time per iteration (us), and each method's speed vs {' and '.join(BASES)} "
                  f"(X vs B: B's time / X's, above 1 X is faster)")
            print(table(sel, "us"))
            print(f"{n} ranks, {v}: the exchange alone (us)")
            print(table(sel, "us_exchange"))
            print(f"{n} ranks, {v}: inside an iteration, the MPI ways' wait for the step before the exchange (us)")
            print(table(sel, "us_wait_step"))
            print(f"{n} ranks, {v}: inside an iteration, the exchange after that wait (us)")
            print(table(sel, "us_exchange_in_iter"))
            bounds = {r["shape"]: r["bound_us_exchange"] for r in sel if "bound_us_exchange" in r}
            if bounds:
                print("the least exchange time of MPI_Sendrecv up then down (the best one-way time 1->0 plus 0->1, "
                      "measured in this process): " + ", ".join(f"{s_} {b:.1f} us" for s_, b in bounds.items()))
            if not args.no_write:
                extra = {"ranks": n, "variant": v, "emulated": emulated, "backend": ctx.backend_name,
                         "methods_absent": absent, "bases": list(BASES), "iters": args.iters, "min_ms": args.min_ms,
                         "warmup": args.warmup}
                path = results.write(f"halo-np{n}-{v}", ctx.device_label, ctx.device_count, sel, out_dir=args.out,
                                     extra=extra, plot=False,
                                     command=" ".join(["gpustripe", "bench", "halo", *sys.argv[3:]]))
                plot(sel, f"{ctx.device_label}: halo exchange, {n} ranks, {v}", path[:-len(".json")] + ".png")
                written.append(path)
                print(f"wrote {path} and its plot")
        if stopped:
            break
    if failed:
        print("FAILED: " + "; ".join(failed))
        return 1
    return 0 if written or args.no_write else 1
