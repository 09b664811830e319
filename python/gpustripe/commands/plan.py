"""gpustripe plan: the model's plan for a transfer (paths, bytes, chunks, predicted time
and GB/s, the bottleneck resource, and where the model's figures come from)."""
import json


def register(sub):
    p = sub.add_parser("plan", help="print the model's plan for a transfer",
                       description="Plans src -> dst of --size bytes the way the library does "
                                   "(GPUSTRIPE_PLAN=model), on this node or a topology file.")
    p.add_argument("--src", type=int, default=0)
    p.add_argument("--dst", type=int, default=1)
    p.add_argument("--size", default="256M", help="bytes, with K/M/G suffix (default 256M)")
    p.add_argument("--topology", help="shipped topology name or .json path (default: this node)")
    p.add_argument("--profile", help="calibration profile (default: GPUSTRIPE_PROFILE, the cache, else nominal)")
    p.add_argument("--concurrent", help="transfers running at once, e.g. '0>1,1>0' (each of --size); "
                                        "plans them together instead of --src/--dst")
    p.add_argument("--spec", help="predict this fixed split instead of planning, e.g. 'direct,host0:0.095x8'")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def parse_pairs(text: str):
    pairs = []
    for item in text.split(","):
        a, sep, b = item.strip().partition(">")
        if not sep or not a.strip().isdigit() or not b.strip().isdigit():
            raise SystemExit(f"gpustripe plan: --concurrent item {item!r}: expected SRC>DST, e.g. '0>1,1>0'")
        pairs.append((int(a), int(b)))
    return pairs


def plan_dict(plan) -> dict:
    return {
        "src": plan.src, "dst": plan.dst, "bytes": plan.bytes, "source": plan.source,
        "predicted_us": plan.predicted_us, "predicted_gbps": plan.predicted_gbps,
        "bottleneck": plan.bottleneck, "spec": plan.spec,
        "paths": [{"path": p.name, "offset": p.offset, "bytes": p.bytes, "chunks": p.chunks,
                   "predicted_us": p.predicted_us} for p in plan.paths],
    }


def print_plan(plan, direct=None):
    from ..results import human_bytes

    print(f"transfer {plan.src}->{plan.dst} {human_bytes(plan.bytes)} ({plan.bytes} bytes): {plan.describe()}")
    print(f"  {'path':<8} {'offset':>12} {'bytes':>12} {'share':>7} {'chunks':>6} {'finish_us':>10}")
    for p in plan.paths:
        print(f"  {p.name:<8} {p.offset:>12} {p.bytes:>12} {100.0 * p.bytes / plan.bytes:>6.2f}% {p.chunks:>6} "
              f"{p.predicted_us:>10.1f}")
    line = f"  predicted: {plan.predicted_us:.1f} us, {plan.predicted_gbps:.1f} GB/s"
    if direct is not None and direct.predicted_us > 0:
        line += (f" (direct alone: {direct.predicted_us:.1f} us, {direct.predicted_gbps:.1f} GB/s; "
                 f"{direct.predicted_us / plan.predicted_us:.2f}x)")
    print(line)
    print(f"  bottleneck: {plan.bottleneck}    plan source: {plan.source}    spec: {plan.spec}")


def run(args):
    from .. import Model, parse_size

    model = Model(topology=args.topology, profile=args.profile)
    size = parse_size(args.size)
    if args.concurrent:
        transfers = [(a, b, size) for a, b in parse_pairs(args.concurrent)]
        plans = model.plan_concurrent(transfers)
        directs = model.predict_concurrent([model.fixed("direct", a, b, s) for a, b, s in transfers])
    elif args.spec:
        plans = [model.fixed(args.spec, args.src, args.dst, size)]
        directs = [model.fixed("direct", args.src, args.dst, size)]
    else:
        plans = [model.plan(args.src, args.dst, size)]
        directs = [model.fixed("direct", args.src, args.dst, size)]
    if args.json:
        print(json.dumps({"node": model.topology_name, "fingerprint": model.fingerprint,
                          "parameters": model.source, "plans": [plan_dict(p) for p in plans]}, indent=1))
        return 0
    print(f"node: {model.topology_name}")
    note = "" if "profile" in model.source else "  (no calibration profile for this node: run `gpustripe calibrate`)"
    print(f"model parameters: {model.source}{note}")
    for plan, direct in zip(plans, directs):
        print_plan(plan, direct)
    if len(plans) > 1:
        print(f"all done after {max(p.predicted_us for p in plans):.1f} us (direct copies at once: "
              f"{max(d.predicted_us for d in directs):.1f} us)")
    return 0
