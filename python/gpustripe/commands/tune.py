"""gpustripe tune --exhaustive: measures path sets x shares x chunks per size on this node
with the engine (forced plans) and writes the static table GPUSTRIPE_PLAN=table uses,
as the seeds' "static path distribution" did."""
import itertools
import sys

DEFAULT_SIZES = "1M,4M,16M,64M,256M,1G"
EMULATED_SIZES = "1M,4M,16M"


def register(sub):
    p = sub.add_parser("tune", help="exhaustive search of splits on this node; writes the plan table",
                       description=__doc__)
    p.add_argument("--exhaustive", action="store_true", required=True,
                   help="search path sets x shares x chunks (the only mode)")
    p.add_argument("--pairs", default="0>1", help="'0>1,1>0' or 'all' (default 0>1)")
    p.add_argument("--sizes", help=f"comma list (default {DEFAULT_SIZES}; {EMULATED_SIZES} when emulated)")
    p.add_argument("--reps", type=int, default=5, help="timed repeats per candidate (median)")
    p.add_argument("--quick", action="store_true", help="a coarser grid")
    p.add_argument("--profile", help="calibration profile the candidates start from")
    p.add_argument("--out", help="table path (default: GPUSTRIPE_PLAN_TABLE, else the cache directory)")
    p.set_defaults(func=run)


def candidate_specs(model, src, dst, size, quick=False):
    """Path sets (direct plus any subset of the staged paths, at most 16 sets), each with its
    model split scaled by several factors and its chunk counts halved and doubled."""
    routes = model.routes(src, dst)
    extra = [r for r in routes if r.startswith("gpu")] + [r for r in routes if r.startswith("host")][:1]
    subsets = [()]
    for k in range(1, len(extra) + 1):
        subsets += list(itertools.combinations(extra, k))
    if len(subsets) > 16:
        subsets = [s for s in subsets if len(s) <= 2] + [tuple(extra)]
    factors = (0.75, 1.0, 1.25) if quick else (0.5, 0.75, 0.9, 1.0, 1.1, 1.25)
    chunk_scales = (1.0,) if quick else (0.5, 1.0, 2.0)
    specs = ["direct"]
    for subset in subsets[1:]:
        base = model.plan_paths(src, dst, size, ["direct", *subset])
        others = [p for p in base.paths if p.kind != "direct"]
        if not others or len(base.paths) != len(subset) + 1:
            continue  # the model drops a path of this set at this size: a smaller set covers it
        for f, cs in itertools.product(factors, chunk_scales):
            terms = [(p.name, f * p.bytes / size, max(1, int(round(p.chunks * cs)))) for p in others]
            if sum(t[1] for t in terms) >= 0.98:
                continue
            specs.append("direct," + ",".join(f"{n}:{s:.4f}x{c}" for n, s, c in terms))
    return list(dict.fromkeys(specs))


def search(model, timer, src, dst, size, reps, quick=False, progress=None):
    """Measures every candidate; returns [(measured_us, spec, predicted_us)] sorted fastest first."""
    out = []
    specs = candidate_specs(model, src, dst, size, quick)
    for i, spec in enumerate(specs):
        plan = model.fixed(spec, src, dst, size)
        t = timer.time(plan, warmup=1, reps=reps)
        out.append((t["us"], spec, plan.predicted_us))
        if progress:
            progress((i + 1) / len(specs), f"{src}->{dst} {size}: {len(specs)} candidates")
    out.sort()
    return out


def parse_pairs(text, n):
    if text == "all":
        return [(a, b) for a in range(n) for b in range(n) if a != b]
    from .plan import parse_pairs as pp

    return pp(text)


def run(args):
    from .. import Context, Model, default_table_path, parse_size, write_plan_table
    from ..results import human_bytes
    from .calibrate import ProgressBar

    ctx = Context()
    model = Model(profile=args.profile)
    sizes = [parse_size(s) for s in (args.sizes or (EMULATED_SIZES if ctx.emulated else DEFAULT_SIZES)).split(",")]
    if ctx.emulated:
        print(f"no GPU visible: tuning {ctx.device_count} emulated devices (memcpy speeds, not GPU figures)",
              file=sys.stderr)
    timer = __import__("gpustripe").PlanTimer(ctx, max(sizes))
    entries = []
    for src, dst in parse_pairs(args.pairs, ctx.device_count):
        for size in sizes:
            bar = ProgressBar()
            found = search(model, timer, src, dst, size, args.reps, args.quick, bar)
            best_us, best_spec, _ = found[0]
            direct_us = next(us for us, spec, _ in found if spec == "direct")
            gbps = size / (best_us * 1e3)
            print(f"{src}->{dst} {human_bytes(size):>5}: best {best_spec} {gbps:.1f} GB/s "
                  f"({direct_us / best_us:.2f}x direct; {len(found)} candidates)")
            entries.append((src, dst, size, best_spec, gbps))
    path = args.out or default_table_path()
    write_plan_table(path, model.fingerprint, entries)
    print(f"wrote {path} (use it with GPUSTRIPE_PLAN=table"
          + (f" GPUSTRIPE_PLAN_TABLE={path}" if args.out else "") + ")")
    return 0
