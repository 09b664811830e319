"""The concurrent cases of `gpustripe model-check`: transfers that run at once, as an MPI
exchange makes them (both directions of a Sendrecv, a ring of ranks each sending to the
next), planned together by the model (plan_concurrent) and, beside them, the direct copies
alone at once. Each case is timed as one plan is (back to back, device events) until its
last transfer ends, and compared with the model's prediction for the transfers together."""
from __future__ import annotations

DEFAULT_SIZES = "4M,64M,1G"
EMULATED_SIZES = "1M,16M"


def cases(gpus: int, src: int, dst: int) -> tuple[list[tuple[str, list[tuple[int, int]]]], dict]:
    """[(name, [(src, dst), ...])] of the node, and {name: why} of the cases it cannot run.
    A ring of n GPUs: GPU i sends to i+1 (mod n), all at once; "both ways" adds i -> i-1,
    a periodic halo exchange. On 2 GPUs the ring is the pair both ways."""
    pair = [(src, dst), (dst, src)]
    out = [("both ways" + (" (ring 2)" if {src, dst} == {0, 1} else ""), pair)]
    if {src, dst} != {0, 1}:
        out.append(("ring 2", [(0, 1), (1, 0)]))
    skipped = {}
    if gpus >= 4:
        ring = [(i, (i + 1) % 4) for i in range(4)]
        out.append(("ring 4", ring))
        out.append(("ring 4 both ways", ring + [(i, (i - 1) % 4) for i in range(4)]))
    else:
        skipped["ring 4"] = f"needs 4 GPUs, the node has {gpus}"
    return out, skipped


def timer_bytes(sizes: list[int], gpus: int, src: int, dst: int) -> int:
    """What the plan timer's buffers on each GPU must hold: every case's sends from one GPU
    (and receives into one) side by side."""
    most = 1
    for _, transfers in cases(gpus, src, dst)[0]:
        for g in range(gpus):
            most = max(most, sum(1 for s, _ in transfers if s == g), sum(1 for _, d in transfers if d == g))
    return most * max(sizes, default=0)


def run(ctx, model_at_point, timer, sizes: list[int], src: int, dst: int, warmup: int, reps: int,
        trials_for, say) -> tuple[list[dict], dict]:
    """Times every case at every size; returns (rows, {case: why skipped}).
    model_at_point() -> (model, host cost us or None): the model to predict with, just before
    a point (model-check measures the host's cost per engine call again before each).
    trials_for(predicted_us) -> trials of `reps` repetitions."""
    from ..results import human_bytes
    from .model_check import time_trials

    todo, skipped = cases(ctx.device_count, src, dst)
    say()
    say("concurrent transfers (each of the size, all at once; time until the last ends): the model's plans "
        "for them together (plan_concurrent) and the direct copies at once; GB/s per transfer")
    for name, why in skipped.items():
        say(f"  ({name}: {why})")
    say(f"{'size':>6} {'case':<22} {'kind':<10} {'measured':>9} {'predicted':>9} {'error':>7}  {'bound by':<22} plans")
    rows = []
    for size in sizes:
        for name, transfers in todo:
            measured = {}
            for kind in ("planned", "direct"):
                model, host_cost = model_at_point()
                specs = [(s, d, size) for s, d in transfers]
                if kind == "planned":
                    planned = model.plan_concurrent(specs)
                    planner_us = max(p.predicted_us for p in planned)
                else:
                    planned = [model.fixed("direct", s, d, size) for s, d, _ in specs]
                    planner_us = None
                # The prediction of the plans running together (for the planner's plans too: what
                # plan_concurrent reports with them may be its search's figure, kept as planner_us).
                plans = model.predict_concurrent(planned)
                slowest = max(plans, key=lambda p: p.predicted_us)
                predicted_us = slowest.predicted_us
                trials = trials_for(predicted_us)
                t = time_trials(_Concurrent(timer, plans), None, warmup, reps, trials, "back-to-back")
                gbps = size / (t["us"] * 1e3)
                predicted_gbps = size / (predicted_us * 1e3) if predicted_us > 0 else 0.0
                err = (predicted_gbps - gbps) / gbps
                measured[kind] = t["us"]
                rows.append({"op": "model", "method": f"concurrent {name} {kind}", "path_set": f"concurrent {kind}",
                             "case": name, "transfers": [list(x) for x in transfers], "bytes": size, "gbps": gbps,
                             "aggregate_gbps": gbps * len(transfers), "us": t["us"], "min_us": t["min_us"],
                             "max_us": t["max_us"], "host_us": t["host_us"], "timing": "back-to-back", "reps": reps,
                             "trials": trials, "rep_us": [round(x, 2) for x in t["samples_us"]],
                             "predicted_gbps": predicted_gbps, "predicted_us": predicted_us,
                             "paths": " | ".join(p.spec for p in plans), "bottleneck": slowest.bottleneck,
                             "error": err, "src": transfers[0][0], "dst": transfers[0][1],
                             "host_cost_us": host_cost, "planner_us": planner_us})
                say(f"{human_bytes(size):>6} {name:<22} {kind:<10} {gbps:9.1f} {predicted_gbps:9.1f} {100 * err:6.1f}%  "
                    f"{slowest.bottleneck:<22} {' | '.join(p.describe() for p in plans)}")
                if planner_us and abs(planner_us - predicted_us) > 0.01 * predicted_us:
                    say(f"{'':>6} {name:<22} (plan_concurrent reported {planner_us:.1f} us for these plans; "
                        f"together they are predicted {predicted_us:.1f} us)")
            ratio = measured["direct"] / measured["planned"]
            rows[-2]["vs_direct"] = ratio
            say(f"{'':>6} {name:<22} planned together: {ratio:.2f}x the direct copies at once (measured)")
    return rows, skipped


class _Concurrent:
    """time_trials' timer for a set of plans run at once (its plan argument is ignored)."""

    def __init__(self, timer, plans):
        self.timer, self.plans = timer, plans

    def time(self, _plan, warmup: int, reps: int, mode: str) -> dict:
        return self.timer.time_concurrent(self.plans, warmup=warmup, reps=reps)
