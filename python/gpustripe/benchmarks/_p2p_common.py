"""What `gpustripe bench p2p` and `gpustripe bench bibw` share: arguments, the run through the
C++ benchmark library (src/bench), the tables and the results files."""
from __future__ import annotations

import os
import sys

QUICK_SIZES = "4K,64K,1M,16M,64M"
QUICK_SIZES_GPU = "4K,64K,1M,16M,256M,1G"


def add_common_arguments(p, default_sizes: str, latency: bool):
    p.add_argument("--sizes", default=default_sizes,
                   help=f"sizes: a range LO:HI (powers of two) or a list (default {default_sizes})")
    if latency:
        p.add_argument("--latency-sizes", default="8:64K",
                       help="sizes of the latency rows, timed end to end on the host (default 8:64K; '' for none)")
    p.add_argument("--pairs", default="0-1", help="GPU pairs SRC-DST, comma separated, or 'all' (default 0-1)")
    p.add_argument("--methods", default="", help="comma list (default: every available one)")
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per size (median reported)")
    p.add_argument("--warmup", type=int, default=5, help="untimed repetitions first")
    p.add_argument("--latency-reps", type=int, default=200, help="timed calls per latency size")
    p.add_argument("--quick", action="store_true", help="a few sizes and repetitions (the main job's check)")
    p.add_argument("--out", default="bench/results", help="directory of the JSON + PNG results")
    p.add_argument("--no-write", action="store_true", help="print the tables only")


def parse_sizes(text: str) -> list[int]:
    from .. import parse_size

    text = text.strip()
    if not text:
        return []
    if ":" in text:
        lo, hi = (parse_size(t) for t in text.split(":", 1))
        out, s = [], max(1, lo)
        while s <= hi:
            out.append(s)
            s *= 2
        return out
    return [parse_size(t) for t in text.split(",") if t.strip()]


def parse_pairs(text: str, n: int) -> list[tuple[int, int]]:
    if text == "all":
        return [(a, b) for a in range(n) for b in range(n) if a != b]
    pairs = []
    for item in text.split(","):
        a, _, b = item.partition("-")
        try:
            pairs.append((int(a), int(b)))
        except ValueError:
            raise SystemExit(f"gpustripe bench: --pairs: '{item}' is not SRC-DST (e.g. 0-1)")
    return pairs


def _locate_nccl():
    """Points GPUSTRIPE_NCCL_LIBRARY at the NCCL of the nvidia-nccl wheel (torch's) when unset."""
    if os.environ.get("GPUSTRIPE_NCCL_LIBRARY"):
        return
    try:
        import nvidia.nccl

        for base in nvidia.nccl.__path__:
            lib = os.path.join(base, "lib", "libnccl.so.2")
            if os.path.exists(lib):
                os.environ["GPUSTRIPE_NCCL_LIBRARY"] = lib
                return
    except ImportError:
        pass


def run_benchmark(args, op: str, bidirectional: bool) -> int:
    from .. import results
    from ..copy import default_context

    _locate_nccl()
    ctx = default_context()
    emulated = ctx.emulated
    sizes = parse_sizes(args.sizes)
    lat = parse_sizes(getattr(args, "latency_sizes", "") or "")
    reps, warmup, lat_reps = args.reps, args.warmup, args.latency_reps
    if args.quick:
        sizes = parse_sizes(QUICK_SIZES if emulated else QUICK_SIZES_GPU) if args.sizes == args.default_sizes else sizes
        lat = lat[::4] if lat else lat
        reps, warmup, lat_reps = min(reps, 5), min(warmup, 2), min(lat_reps, 20)
    pairs = parse_pairs(args.pairs, ctx.device_count)
    have, missing = ctx.bench_methods()
    methods = [m for m in args.methods.split(",") if m] or have
    device = ctx.device_label
    print(f"gpustripe bench {op}: {device}, {ctx.device_count} GPUs, pairs {pairs}, methods {methods}")
    for m in missing:
        print(f"  (absent: {m})")
    if emulated:
        print("  NOTE: no GPU visible: this runs on emulated devices; the figures are host memcpy speed, "
              "not GPU figures.")

    def progress(row):
        plan = f"  [{row['plan']}]" if row.get("plan") else ""
        print(f"  {row['op']:>7} {row['src']}->{row['dst']} {results.human_bytes(row['bytes']):>6} "
              f"{row['method']:>20} {row['us']:12.2f} us {row['gbps']:9.2f} GB/s{plan}", flush=True)

    rows = ctx.bench_p2p(pairs, sizes, lat if not bidirectional else [], methods, bidirectional,
                         warmup, reps, lat_reps, progress)
    for r in rows:
        if emulated:
            r["emulated"] = True
    print()
    for pair in pairs:
        sel = [r for r in rows if (r["src"], r["dst"]) == pair]
        print(f"pair {pair[0]}->{pair[1]}")
        print(results.ratio_table(sel, op))
        if any(r["op"] == "latency" for r in sel):
            print(results.ratio_table(sel, "latency", value="us"))
            print("(latency: microseconds per call, lower is better; the ratio column is gpustripe/method)")
        print()
    if not args.no_write:
        extra = {"pairs": [list(p) for p in pairs], "emulated": emulated,
                 "backend": ctx.backend_name, "methods_absent": missing}
        path = results.write(op, device, ctx.device_count, rows, out_dir=args.out, extra=extra)
        print(f"wrote {path} and its plot")
    return 0
