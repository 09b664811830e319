"""gpustripe bench plans: times fixed plans (GPUSTRIPE_PLAN specs) and engine settings against
the plain copy, in one process, to tune the planner's table and the engine's defaults."""
from __future__ import annotations

import itertools

from ._env import scoped_env
from ._p2p_common import parse_pairs, parse_sizes

NAME = "plans"
HELP = ("tuning: time fixed plan specs (e.g. 'direct,host0:0.095x8') x engine settings against "
        "cudaMemcpyPeerAsync for one pair")


def add_arguments(p):
    p.add_argument("--specs", default="direct;direct,host0:0.08x8;direct,host0:0.10x16",
                   help="';'-separated GPUSTRIPE_PLAN specs (see `gpustripe plan --help`); 'model' = the planner")
    p.add_argument("--sizes", default="64M,256M,1G", help="sizes: a range LO:HI or a list")
    p.add_argument("--pair", default="0-1", help="SRC-DST")
    p.add_argument("--bidirectional", action="store_true", help="both directions at once")
    p.add_argument("--set", action="append", default=[], metavar="VAR=V1,V2",
                   help="also sweep a setting, e.g. --set GPUSTRIPE_HOST_STAGING=64M,128M")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)


def run(args):
    from .. import _core, results

    pair = parse_pairs(args.pair, 64)
    sizes = parse_sizes(args.sizes)
    specs = [s.strip() for s in args.specs.split(";") if s.strip()]
    sweeps = []
    for item in args.set:
        var, _, values = item.partition("=")
        sweeps.append([(var, v) for v in values.split(",")])
    combos = list(itertools.product(*sweeps)) if sweeps else [()]
    rows = []
    base_ctx = _core.Context()
    base = {r["bytes"]: r for r in base_ctx.bench_p2p(pair, sizes, [], ["cudaMemcpyPeerAsync"], args.bidirectional,
                                                      args.warmup, args.reps, 1)}
    del base_ctx
    print(f"{'size':>6} {'plain GB/s':>10}  {'GB/s':>8} {'ratio':>6}  settings / plan")
    for combo in combos:
        for spec in specs:
            with scoped_env({"GPUSTRIPE_PLAN": spec, **dict(combo)}):
                ctx = _core.Context()
                got = ctx.bench_p2p(pair, sizes, [], ["gpustripe"], args.bidirectional, args.warmup, args.reps, 1)
                del ctx
            label = " ".join(f"{v}={x}" for v, x in combo)
            for r in got:
                b = base[r["bytes"]]
                r["setting"] = label
                r["spec"] = spec
                rows.append(r)
                print(f"{results.human_bytes(r['bytes']):>6} {b['gbps']:10.1f}  {r['gbps']:8.1f} "
                      f"{r['gbps'] / b['gbps']:6.3f}  {label} [{spec}] {r.get('plan', '')}", flush=True)
    return 0
