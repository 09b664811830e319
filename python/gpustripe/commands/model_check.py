"""gpustripe model-check: the model's accuracy on this node. For sizes 1 MB-1 GB and the
path sets {direct}, {direct+host}, {direct+GPU staged}, {all}, runs the model's split of
each set with the engine and prints predicted against measured with the error. Transfers
are timed as `gpustripe bench p2p` times its rows (repetitions back to back, device events,
median), so figures compare with bench p2p's at every size. Then, at 16 MB, 256 MB and 1 GB, compares the model's chosen
plan with the best of an exhaustive search (gpustripe tune's grid). Then the concurrent
cases (model_check_concurrent.py): one pair both ways and rings of 2 and 4 GPUs, planned
together against measured, beside the direct copies at once. Writes a results file (rows
op "model") and its plot."""
import math
import statistics
import sys

from . import model_check_concurrent

DEFAULT_SIZES = "1M,4M,16M,64M,256M,1G"
EMULATED_SIZES = "1M,4M,16M"
EXHAUSTIVE_SIZES = "16M,256M,1G"
SET_NAMES = ("direct", "direct+host", "direct+gpu staged", "all paths")
# How a grid point is timed: trials of REPS repetitions back to back, each trial from a
# drained stream after its warm-ups, exactly as `gpustripe bench p2p` times one row; by
# default as many trials as fill POINT_BUDGET_US of GPU time, 1 to MAX_TRIALS, and the median
# of all their repetitions. One trial of 20 repetitions of a 35-50 us plan gave medians 5-10%
# apart between processes on 4x H200, and ONE run of 400 back to back measured another regime:
# after ~5-10 ms of the host enqueueing far ahead of the GPUs, plans with staged paths ran 5-9%
# slower for the rest of the run (session 3, r2: 64M all paths 212 -> 230 us, 16M direct + GPU
# staged 76 -> 81), which no bench row (20 repetitions) ever sees.
REPS = 20
POINT_BUDGET_US = 20000.0
MAX_TRIALS = 20


def auto_trials(predicted_us: float, reps: int = REPS) -> int:
    """Trials of `reps` repetitions of a point predicted to take `predicted_us`: the time budget's worth."""
    if not predicted_us > 0:
        return 1
    return max(1, min(MAX_TRIALS, math.ceil(POINT_BUDGET_US / (reps * predicted_us))))


def time_trials(timer, plan, warmup: int, reps: int, trials: int, mode: str) -> dict:
    """`trials` timings of `reps` repetitions (each from a drained stream); the median of them all."""
    samples, host = [], []
    for _ in range(trials):
        t = timer.time(plan, warmup=warmup, reps=reps, mode=mode)
        samples += t["samples_us"]
        host.append(t["host_us"])
    return {"us": statistics.median(samples), "min_us": min(samples), "max_us": max(samples),
            "host_us": statistics.median(host), "samples_us": samples}


PROBE_BYTES = 4 << 20  # the engine's host-cost probe plan (plan_timing.hpp engine_probe_plan) fits in it


def register(sub):
    p = sub.add_parser("model-check", help="predicted vs measured on this node, and model vs exhaustive search",
                       description=__doc__)
    p.add_argument("--src", type=int, default=0)
    p.add_argument("--dst", type=int, default=1)
    p.add_argument("--sizes", help=f"comma list (default {DEFAULT_SIZES}; {EMULATED_SIZES} when emulated)")
    p.add_argument("--exhaustive-sizes", help=f"sizes of the exhaustive comparison (default {EXHAUSTIVE_SIZES}; "
                                              "'none' to skip)")
    p.add_argument("--sets", help="comma list of path sets to check (default all of: "
                                  f"{', '.join(SET_NAMES)})")
    p.add_argument("--concurrent-sizes",
                   help=f"sizes of the concurrent cases, each transfer's (default {model_check_concurrent.DEFAULT_SIZES}; "
                        f"{model_check_concurrent.EMULATED_SIZES} when emulated; 'none' to skip)")
    p.add_argument("--points", help="instead of the grid, time these plans: 'SIZE@SPEC;SIZE@SPEC' with the "
                                    "spec syntax of GPUSTRIPE_PLAN (e.g. '16M@direct:0.969,host0:0.031x1'); "
                                    "diagnostics of single points, no exhaustive comparison")
    p.add_argument("--reps", type=int, default=REPS,
                   help=f"timed repeats per trial (default {REPS}, as bench p2p; also the exhaustive search's)")
    p.add_argument("--trials", type=int, help=f"trials per point, each from a drained stream; the median of all their "
                                              f"repeats is reported (default: enough to fill {POINT_BUDGET_US / 1000:g} "
                                              f"ms per point, 1 to {MAX_TRIALS})")
    p.add_argument("--warmup", type=int, default=5, help="untimed repeats first (default 5, as bench p2p)")
    p.add_argument("--timing", choices=("back-to-back", "isolated"), default="back-to-back",
                   help="repetitions back to back as bench p2p (default), or each from an idle stream")
    p.add_argument("--host-cost", choices=("measure", "profile"), default="measure",
                   help="the engine's host cost per call: measured in this process before the grid, as calibrate "
                        "measures it (default; the host's speed varied up to 1.9x between processes on 4x H200), or "
                        "the profile's")
    p.add_argument("--quick", action="store_true", help="coarser exhaustive grid, fewer repeats")
    p.add_argument("--profile", help="calibration profile (default: GPUSTRIPE_PROFILE, the cache, else nominal)")
    p.add_argument("--out", default="bench/results", help="results directory (default bench/results)")
    p.set_defaults(func=run)


def run(args):
    from .. import Context, Model, PlanTimer, parse_size
    from .. import results
    from ..model_plots import plot_model_check
    from ..results import human_bytes
    from .simulate import path_sets
    from .tune import search

    ctx = Context()
    model = Model(profile=args.profile)
    if args.reps < 1 or (args.trials is not None and args.trials < 1):
        raise SystemExit("model-check: --reps and --trials must be at least 1")
    reps = 3 if args.quick else args.reps
    sizes = [parse_size(s) for s in (args.sizes or (EMULATED_SIZES if ctx.emulated else DEFAULT_SIZES)).split(",")]
    ex_text = args.exhaustive_sizes or (EMULATED_SIZES.split(",")[-1] if ctx.emulated else EXHAUSTIVE_SIZES)
    ex_sizes = [] if ex_text == "none" else [parse_size(s) for s in ex_text.split(",")]
    if ctx.emulated:
        print(f"no GPU visible: {ctx.device_count} emulated devices (memcpy speeds, not GPU figures; "
              "the errors say nothing about the model)", file=sys.stderr)
    src, dst = args.src, args.dst
    sets = path_sets(model.routes(src, dst))
    if args.sets:
        wanted = [w.strip() for w in args.sets.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in sets]
        if unknown:
            raise SystemExit(f"model-check: unknown path set(s) {unknown}; this pair has {list(sets)}")
        sets = {k: v for k, v in sets.items() if k in wanted}
    rows, lines, detail = [], [], []

    def say(text=""):
        print(text)
        lines.append(text)

    points = []
    for item in (args.points or "").split(";"):
        if not item.strip():
            continue
        size_text, _, spec = item.strip().partition("@")
        if not spec:
            raise SystemExit(f"model-check: point '{item}' is not SIZE@SPEC")
        points.append((parse_size(size_text), spec))
    conc_text = args.concurrent_sizes or (model_check_concurrent.EMULATED_SIZES if ctx.emulated
                                          else model_check_concurrent.DEFAULT_SIZES)
    conc_sizes = [] if conc_text == "none" else [parse_size(s) for s in conc_text.split(",")]
    if args.points:
        ex_sizes, conc_sizes = [], []
    timer = PlanTimer(ctx, max(([size for size, _ in points] if args.points else sizes + ex_sizes) + [PROBE_BYTES]
                               + [model_check_concurrent.timer_bytes(conc_sizes, ctx.device_count, src, dst)]))
    host_line, host_cost = None, {"profile_us": model.hop_params()["engine_call_us"], "used": "profile"}
    profile_model = model
    why = "host cost per engine call measured in this process before each point"

    def measured_model():
        """The model with the engine's host cost per call as the host runs now (None: not measured)."""
        cost = timer.host_cost()
        if not cost["per_call_us"] > 0:
            return None, cost
        return profile_model.with_engine_call_us(cost["per_call_us"], why), cost

    if args.host_cost == "measure":
        before = host_cost["profile_us"]
        m, cost = measured_model()
        if m is not None:
            host_cost.update(used="measured before each point", measured_us=cost["per_call_us"], points_us=[])
            model = m
            host_line = (f"host cost per engine call, measured in this process before the grid: "
                         f"{cost['per_call_us']:.2f} us ({cost['per_plan_us']:.1f} us for {cost['calls']} calls; "
                         f"the profile's: {before:.2f} us), and again before each point (the row's host_cost_us)")
    say(f"node: {ctx.device_label}; model parameters: {model.source}")
    if host_line:
        say(host_line)
    trials_text = (f"{args.trials}" if args.trials else ("1" if args.quick else
                   f"1-{MAX_TRIALS} (as many as fill {POINT_BUDGET_US / 1000:g} ms)"))
    statistic = (f"median of all repetitions of {trials_text} trials per point, each trial {args.warmup} untimed then "
                 f"{reps} {args.timing} from a drained stream")
    say(f"measured: {statistic}; GB/s")
    say(f"{'size':>6} {'path set':<20} {'measured':>9} {'predicted':>9} {'error':>7}  {'bound by':<22} plan"
        + ("" if args.timing == "back-to-back" else f"  (timing: {args.timing})"))
    if args.points:
        grid = [(size, spec, lambda m, size=size, spec=spec: m.fixed(spec, src, dst, size)) for size, spec in points]
    else:
        grid = [(size, name, lambda m, size=size, paths=paths: m.plan_paths(src, dst, size, paths))
                for size in sizes for name, paths in sets.items()]
    for size, name, make_plan in grid:
        # The host's speed drifted within one process too (r3: 1.61 us per call before a grid,
        # 1.94 during its 4 MB points, 1.23 after): the probe runs again just before each point.
        point_model, point_cost = model, None
        if "points_us" in host_cost:
            m, cost = measured_model()
            if m is not None:
                point_model, point_cost = m, cost["per_call_us"]
                host_cost["points_us"].append(point_cost)
        plan = make_plan(point_model)
        trials = args.trials or (1 if args.quick else auto_trials(plan.predicted_us, reps))
        t = time_trials(timer, plan, args.warmup, reps, trials, args.timing)
        gbps = size / (t["us"] * 1e3)
        err = (plan.predicted_gbps - gbps) / gbps
        rows.append({"op": "model", "method": f"gpustripe {name}", "path_set": name, "bytes": size, "gbps": gbps,
                     "us": t["us"], "min_us": t["min_us"], "max_us": t["max_us"],
                     "host_us": t["host_us"], "timing": args.timing, "reps": reps, "trials": trials,
                     "rep_us": [round(x, 2) for x in t["samples_us"]],
                     "predicted_gbps": plan.predicted_gbps, "predicted_us": plan.predicted_us,
                     "paths": plan.spec, "bottleneck": plan.bottleneck, "error": err, "src": src, "dst": dst,
                     "host_cost_us": point_cost})
        say(f"{human_bytes(size):>6} {name:<20} {gbps:9.1f} {plan.predicted_gbps:9.1f} {100 * err:6.1f}%  "
            f"{plan.bottleneck:<22} {plan.describe()}")
        q = sorted(t["samples_us"])
        detail.append(f"{human_bytes(size):>6} {name:<20} us median {t['us']:.1f} of {trials}x{reps} (min {t['min_us']:.1f} "
                      f"p10 {q[len(q) // 10]:.1f} p90 {q[(9 * len(q)) // 10]:.1f} max {t['max_us']:.1f}, mean "
                      f"{sum(q) / len(q):.1f}) predicted {plan.predicted_us:.1f}; host per call {t['host_us']:.1f}")
    for d in detail:  # the spread and the host's side of each point (the log only; the table stays as before)
        print(d)
    if host_cost.get("points_us"):  # how far the host's speed moved during the grid
        pts = sorted(host_cost["points_us"])
        say(f"host cost per engine call before the points: {pts[0]:.2f}-{pts[-1]:.2f} us (median "
            f"{statistics.median(pts):.2f})")
    errs = [abs(r["error"]) for r in rows]
    mean_err, max_err = sum(errs) / len(errs), max(errs)
    say(f"model error over {len(rows)} points: mean {100 * mean_err:.1f}%, max {100 * max_err:.1f}% "
        f"(target: mean <= 5%, max <= 10%)")

    exhaustive = []
    for size in ex_sizes:
        chosen = model.plan(src, dst, size)
        t = timer.time(chosen, warmup=args.warmup, reps=reps)
        found = search(model, timer, src, dst, size, reps, quick=args.quick)
        best_us, best_spec, best_pred = found[0]
        ratio = best_us / t["us"]
        exhaustive.append({"bytes": size, "model_plan": chosen.spec, "model_us": t["us"],
                           "best_plan": best_spec, "best_us": best_us, "model_vs_best": ratio,
                           "candidates": len(found)})
        say(f"{human_bytes(size):>6} model's plan {chosen.describe()}: {size / (t['us'] * 1e3):.1f} GB/s; "
              f"exhaustive best {best_spec}: {size / (best_us * 1e3):.1f} GB/s; model reaches {100 * ratio:.1f}% "
              f"of the best ({len(found)} candidates; target >= 97%)")
        rows.append({"op": "model", "method": "gpustripe model's choice", "path_set": "model's choice", "bytes": size,
                     "gbps": size / (t["us"] * 1e3), "us": t["us"], "predicted_gbps": chosen.predicted_gbps,
                     "paths": chosen.spec, "bottleneck": chosen.bottleneck, "error": (chosen.predicted_gbps - size / (t["us"] * 1e3)) /
                     (size / (t["us"] * 1e3)), "src": src, "dst": dst})
    concurrent = {}
    if conc_sizes:
        def model_at_point():
            """The model to predict a concurrent point with, the host's cost measured just before it."""
            if "points_us" in host_cost:
                m, cost = measured_model()
                if m is not None:
                    host_cost["points_us"].append(cost["per_call_us"])
                    return m, cost["per_call_us"]
            return model, None

        conc_rows, skipped = model_check_concurrent.run(
            ctx, model_at_point, timer, conc_sizes, src, dst, args.warmup, reps,
            lambda us: args.trials or (1 if args.quick else auto_trials(us, reps)), say)
        rows += conc_rows
        errs = [abs(r["error"]) for r in conc_rows]
        concurrent = {"concurrent_skipped": skipped, "concurrent_mean_abs_error": sum(errs) / len(errs),
                      "concurrent_max_abs_error": max(errs)}
        say(f"model error over {len(conc_rows)} concurrent points: mean {100 * sum(errs) / len(errs):.1f}%, "
            f"max {100 * max(errs):.1f}%")
    path = results.write("model-check", ctx.device_label, ctx.device_count, rows, out_dir=args.out, plot=False,
                         extra={"model_source": model.source, "mean_abs_error": mean_err, "max_abs_error": max_err,
                                "exhaustive": exhaustive, "emulated": ctx.emulated, "host_cost": host_cost,
                                "statistic": statistic, **concurrent})
    png = plot_model_check(rows, f"{ctx.device_label}: model check {src}->{dst} ({model.source}); |error| mean "
                                 f"{100 * mean_err:.1f}%, max {100 * max_err:.1f}%", path[:-len(".json")] + ".png")
    txt = path[:-len(".json")] + ".txt"
    say(f"wrote {path}, {png} and {txt}")
    with open(txt, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0
