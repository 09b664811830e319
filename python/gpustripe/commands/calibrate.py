"""gpustripe calibrate: measures the model's parameters on this node (alpha/beta per hop
kind, shared capacities from concurrent copies, the staging synchronization) and writes
the profile the library then loads (GPUSTRIPE_PROFILE, else the user's cache)."""
import json
import sys
import time


def register(sub):
    p = sub.add_parser("calibrate", help="measure the model's parameters on this node and write the profile",
                       description=__doc__)
    p.add_argument("--out", help="profile path (default: GPUSTRIPE_PROFILE, else the cache directory)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    p.add_argument("--reps", type=int, default=0, help="timed repeats per point (default 3 quick, 7 full)")
    p.add_argument("--show", metavar="PROFILE", nargs="?", const="", default=None,
                   help="print a profile (default: this node's) instead of measuring")
    p.set_defaults(func=run)


class ProgressBar:
    """One line on stderr, redrawn in place: [#####.....] 42% step."""

    def __init__(self, width: int = 30, stream=sys.stderr):
        self.width, self.stream, self.t0 = width, stream, time.monotonic()

    def __call__(self, fraction: float, step: str) -> None:
        n = int(round(fraction * self.width))
        bar = "#" * n + "." * (self.width - n)
        self.stream.write(f"\r[{bar}] {100 * fraction:3.0f}% {time.monotonic() - self.t0:5.1f}s {step[:40]:<40}")
        self.stream.flush()
        if fraction >= 1.0:
            self.stream.write("\n")


def summarize(doc: dict) -> str:
    lines = [f"profile of {doc.get('topology', '?')} ({doc.get('fingerprint')}), backend {doc.get('backend')}, "
             f"driver {doc.get('driver') or '-'}, {doc.get('created')}"]
    lines.append(f"  {'hop':<8} {'alpha_us':>9} {'beta_GB/s':>10}")
    for kind, h in doc["hops"].items():
        lines.append(f"  {kind:<8} {h['alpha_us']:>9.2f} {h['beta_gbps']:>10.1f}")
    lines.append(f"  cross-stream event wait (staging, fork/join) epsilon: {doc['epsilon_us']:.2f} us")
    if "host_call_us" in doc:
        lines.append(f"  host cost per enqueue call: {doc['host_call_us']:.2f} us")
    if doc.get("engine_call_us", 0) > 0:
        lines.append(f"  host cost per call of the engine's schedule (with its bookkeeping): "
                     f"{doc['engine_call_us']:.2f} us")
    if "graph_launch_us" in doc:
        lines.append(f"  host cost of a graph launch: {doc['graph_launch_us']:.2f} us + "
                     f"{doc['graph_node_us']:.3f} us per copy node")
    if "graph_start_us" in doc:
        eps = doc.get("graph_epsilon_us", -1)
        lines.append(f"  on the GPUs, a replayed graph: start {doc['graph_start_us']:.2f} us, cross-device "
                     f"dependency {eps if eps >= 0 else doc['epsilon_us']:.2f} us")
    lines.append("  shared capacities (GB/s):")
    for name, v in sorted(doc["capacities"].items()):
        lines.append(f"    {name:<28} {v:8.1f}")
    meas = doc.get("measurements", {})
    for key, what in (("copy_engine_mixes_gpu0", "copies issued by gpu0 at once"),
                      ("copy_engine_mixes_into_gpu1", "peer copies into gpu1 + H2D issued by gpu1")):
        if meas.get(key):
            lines.append(f"  {what} (measured / lossless sharing):")
            for m in meas[key]:
                kinds = ", ".join(f"{m[k]} {k}" for k in ("peers", "d2h", "h2d") if k in m)
                lines.append(f"    {kinds:<22} {m['us']:9.1f} us / {m['lossless_us']:9.1f} us = "
                             f"{m['us'] / m['lossless_us']:.3f}")
    if meas.get("staging_mix"):
        m = meas["staging_mix"]
        lines.append(f"  GPU staging mix, {m['copies']} copies at once (0->1, 0->g, g->1): {m['us']:.1f} us / "
                     f"{m['lossless_us']:.1f} us lossless = {m['us'] / m['lossless_us']:.3f}")
    if meas.get("graph_replay"):
        g = meas["graph_replay"]
        lines.append(f"  graph replay of 1 MB: D2H {g['d2h_graph_us']:.1f} us (enqueued {g['d2h_us']:.1f}), relay "
                     f"{g['relay_graph_us']:.1f} us (H2D {g['h2d_us']:.1f})")
    if meas.get("join"):
        j = meas["join"]
        lines.append(f"  peer copy of {j['bytes'] >> 20} MB on the caller's stream: alone {j['alone_us']:.1f} us, joined "
                     f"with 1 lane {j['join1_us']:.1f}, 3 lanes {j['join3_us']:.1f}, beside a 512 KB D2H "
                     f"{j['d2h_beside_us']:.1f}"
                     + (f"; replayed alone {j['graph_alone_us']:.1f}, joined {j['graph_join1_us']:.1f}"
                        if "graph_join1_us" in j else ""))
    if "join_us" in doc:
        g = doc.get("graph_join_us", -1)
        lines.append(f"  the caller's wait on a lane already done: {doc['join_us']:.2f} us"
                     + (f" (replayed: {g:.2f} us)" if g >= 0 else ""))
    if "lane_jitter_us" in doc:
        g = doc.get("graph_lane_jitter_us", -1)
        lines.append(f"  spread of a lane's finish (1 MB relay, standard deviation of the middle 90%): "
                     f"{doc['lane_jitter_us']:.2f} us" + (f" (replayed: {g:.2f} us)" if g >= 0 else ""))
    for key, what in (("lane_spread_us", "relay"), ("graph_lane_spread_us", "relay replayed")):
        if meas.get(key):
            q = meas[key]
            lines.append(f"    {what}: {q['reps']} repetitions, min {q['min']:.1f} p25 {q['p25']:.1f} median "
                         f"{q['p50']:.1f} p75 {q['p75']:.1f} max {q['max']:.1f} us")
    if meas.get("engine_call", {}).get("calls"):
        e = meas["engine_call"]
        lines.append(f"  engine schedule of {e['plan']}: {e['us']:.1f} us on the host for {e['calls']} calls")
    note = meas.get("note")
    if note:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def run(args):
    from .. import Context, calibrate, default_profile_path

    if args.show is not None:
        path = args.show or default_profile_path(emulated=Context().emulated)
        with open(path) as f:
            print(summarize(json.load(f)))
        return 0
    ctx = Context()
    if ctx.emulated:
        print(f"no GPU visible: calibrating {ctx.device_count} emulated devices of {ctx.topology_name} "
              "(the figures are this host's memcpy speeds, not GPU figures)", file=sys.stderr)
    path, text = calibrate(ctx, quick=args.quick, reps=args.reps, out=args.out, progress=ProgressBar())
    print(summarize(json.loads(text)))
    print(f"wrote {path}")
    return 0
