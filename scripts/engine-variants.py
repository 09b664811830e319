#!/usr/bin/env python3
"""Engine variants side by side, in one process: for each variant (engine settings and/or a
fixed GPUSTRIPE_PLAN) a fresh Context runs the p2p benchmark of gpustripe and the plain copy
at the same sizes, so every ratio compares like with like. Variants are run in the given
order and then again in reverse, so drift of the machine shows as a difference between the
two passes. Prints one line per (variant, size) and writes the rows as JSON (--json).

  scripts/engine-variants.py --sizes 64M,256M,1G \\
      --variant default= --variant staging64=GPUSTRIPE_HOST_STAGING=64M \\
      --variant plan10x8=GPUSTRIPE_PLAN=direct,host0:0.10x8
A variant is NAME=VAR=VALUE[;VAR=VALUE...] (empty after NAME= keeps the defaults).
This is a tuning tool for the lead's device rounds; results files come from `gpustripe bench`."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def parse_variant(text: str):
    name, _, rest = text.partition("=")
    settings = {}
    for item in filter(None, rest.split(";")):
        var, _, val = item.partition("=")
        settings[var.strip()] = val.strip()
    return name, settings


def main() -> int:
    from gpustripe import _core, parse_size
    from gpustripe.benchmarks._env import scoped_env

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="64M,256M,1G")
    p.add_argument("--pair", default="0-1")
    p.add_argument("--bidirectional", action="store_true")
    p.add_argument("--variant", action="append", default=[], help="NAME=VAR=VALUE[;VAR=VALUE...]")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--passes", type=int, default=2, help="1: once; 2: also in reverse order")
    p.add_argument("--json", default="", help="write the rows here")
    args = p.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    a, _, b = args.pair.partition("-")
    pair = [(int(a), int(b))]
    variants = [parse_variant(v) for v in args.variant] or [("default", {})]
    order = list(variants) + (list(reversed(variants)) if args.passes > 1 else [])
    rows = []
    op = "bibw" if args.bidirectional else "p2p"
    for npass, (name, settings) in enumerate(order):
        t0 = time.time()
        try:
            with scoped_env(settings):
                ctx = _core.Context()
                got = ctx.bench_p2p(pair, sizes, [], ["gpustripe", "cudaMemcpyPeerAsync"], args.bidirectional,
                                    args.warmup, args.reps, 1)
                stats = ctx.stats()
                del ctx
        except Exception as e:  # one broken variant must not lose the others' figures
            print(f"{name}: FAILED: {e}", flush=True)
            continue
        base = {r["bytes"]: r for r in got if r["method"] != "gpustripe"}
        for r in got:
            if r["method"] != "gpustripe":
                continue
            plain = base[r["bytes"]]
            ratio = r["gbps"] / plain["gbps"]
            rows.append({"variant": name, "settings": settings, "pass": 0 if npass < len(variants) else 1,
                         "op": op, "bytes": r["bytes"], "gbps": r["gbps"], "plain_gbps": plain["gbps"],
                         "ratio": ratio, "us": r["us"], "min_us": r["min_us"], "max_us": r["max_us"],
                         "plan": r.get("plan", ""), "stats": stats})
            print(f"{op} {name:>16} {r['bytes'] >> 20:6d}M {r['gbps']:8.1f} GB/s plain {plain['gbps']:7.1f} "
                  f"{ratio:6.3f}  [{r.get('plan', '')}]", flush=True)
        print(f"   ({name}: {time.time() - t0:.1f} s, graphs {stats['graphs']}, captures {stats['graph_captures']}, "
              f"launches {stats['graph_launches']}, schedules {stats['schedules']})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
