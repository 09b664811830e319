"""Where a blocking collective's host time goes, op by op, on the GPUs: a gpustripe group that
serves every call natively (no calibration) against NCCL's own group, at the sizes where the host
paces the calls (1-8 MB).

Why: through torch.distributed, the native reduce_scatter_tensor held its caller 3-4 us longer
than NCCL's at 1-8 MB, while the native all_gather_into_tensor held it 7-8 us less; inside the
backend the team's reduce-scatter call took ~5 us more than its all-gather. This probe splits a
call into its layers, each timed alone, `--calls` calls back to back (median host us per call;
each layer's mean host us and pace, to the GPUs' end, printed below it):

  dist       torch.distributed's call (async_op=False), torch's wrapper and c10d's dispatch included
  dist_sub   the same on a second always-native gpustripe group (dist.new_group): the default
             group's wrapper path against a subgroup's, and a second team
  dist_cal   the same on a third gpustripe group, calibrated against NCCL as a training job's is
             (its choice printed: the always-native groups' form only where it chose that)
  backend    the gpustripe group's method called directly from Python (no wrapper, no dispatch)
  team       the team's C++ call alone (NodeTeam, joined on the caller's stream: what the
             backend's blocking call makes)
  (each rank's: a blocking call's pace on every rank is the slowest rank's host)
  phases     the team's phases per call (NodeTeam.phase_times) and the backend's split of its call
             (trace(): before, in and after the team call)
  pieces     the backend's steps before its call reaches _run (the checks, the kind, the
             reduction's type and op), each timed alone on the host (timeit, best of 5)
  api        the CUDA runtime and driver calls one dist call makes, from torch.profiler (CUPTI):
             count and host us per call of each

One process per GPU:

    torchrun --nproc-per-node 2 bench/probes/torch_call_phases.py [--sizes 1M,4M] [--calls 200]
"""
import argparse
import json
import os
import statistics
import time
import timeit

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions, AllreduceOptions, ReduceScatterOptions
from torch.profiler import ProfilerActivity, profile

import gpustripe.torch as gt
from gpustripe.benchmarks._p2p_common import parse_sizes

OPS = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce")


def _buffers(op: str, nbytes: int, world: int, dev) -> tuple:
    n = nbytes // 4
    if op == "all_gather_into_tensor":
        return torch.ones(n, device=dev), torch.empty(n * world, device=dev)
    if op == "reduce_scatter_tensor":
        return torch.ones(n * world, device=dev), torch.empty(n, device=dev)
    x = torch.ones(n, device=dev)
    return x, x


def _dist_call(op, group, inp, out):
    if op == "all_gather_into_tensor":
        return lambda: dist.all_gather_into_tensor(out, inp, group=group)
    if op == "reduce_scatter_tensor":
        return lambda: dist.reduce_scatter_tensor(out, inp, group=group)
    return lambda: dist.all_reduce(inp, group=group)


def _backend_call(op, pg, inp, out):
    """The group's own method, as c10d calls it for a blocking call."""
    if op == "all_gather_into_tensor":
        o = AllgatherOptions()
        o.asyncOp = False
        return lambda: pg._allgather_base(out, inp, o)
    if op == "reduce_scatter_tensor":
        o = ReduceScatterOptions()
        o.asyncOp = False
        return lambda: pg._reduce_scatter_base(out, inp, o)
    o = AllreduceOptions()
    o.asyncOp = False
    return lambda: pg.allreduce([inp], o)


def _team_call(op, pg, inp, out):
    """The team's C++ call alone, joined on the caller's stream (the backend's blocking call)."""
    team = pg._team()
    s = torch.cuda.current_stream(inp.device).cuda_stream
    i, o = inp.data_ptr(), out.data_ptr()
    if op == "all_gather_into_tensor":
        return lambda: team.allgather(i, o, inp.nbytes, stream=s, joined=True)
    if op == "reduce_scatter_tensor":
        return lambda: team.reduce_scatter(i, o, out.numel(), "float32", "sum", stream=s, joined=True)
    return lambda: team.allreduce(i, o, inp.numel(), "float32", "sum", stream=s, joined=True)


def _pieces(op, pg, inp, out) -> dict:
    """Host us of each step of the backend's method before _run, timed alone (best of 5 runs of
    2000): where a reduction's preamble differs from an all-gather's."""
    kind = gt._kind(op, inp, inp.nbytes)
    opts = (AllgatherOptions if op == "all_gather_into_tensor" else
            ReduceScatterOptions if op == "reduce_scatter_tensor" else AllreduceOptions)()
    steps = {"kind": lambda: gt._kind(op, inp, inp.nbytes),
             "delegated_to": lambda: pg._delegated_to(kind, inp),
             "native_side": lambda: pg._native_side(inp),
             "native_ok": lambda: pg._native_ok([out, inp], op),
             "capturing": torch.cuda.is_current_stream_capturing,
             "options": type(opts),
             "blocking": lambda: gt._blocking(opts),
             "ptrs": lambda: pg._mem.ptrs([inp, out]),
             "stream": lambda: pg._mem.stream(inp),
             "numel": inp.numel,
             "dtype_eq": lambda: out.dtype == inp.dtype,
             "perf_counter": time.perf_counter}
    if op != "all_gather_into_tensor":
        steps.update({"reduction": lambda: pg._reduction(opts, inp, op),
                      "redop": lambda: gt._redop(opts),
                      "reduceOp": lambda: opts.reduceOp,
                      "reduceOp.op": lambda: opts.reduceOp.op,
                      "dtype_name": lambda: pg._dtype(inp, op)})
    return {k: round(min(timeit.repeat(f, number=2000, repeat=5)) / 2000 * 1e6, 3) for k, f in steps.items()}


def _timed(f, calls: int, barrier) -> tuple:
    """(median host us, mean host us, pace us) of `calls` calls of f back to back, the GPUs waited
    for before and after: the pace from the first call to this rank's GPUs' end of the last, per
    call, as `gpustripe bench torch` times its rows (a few long calls move the mean and the pace,
    not the median)."""
    torch.cuda.synchronize()
    barrier()
    host = []
    t0 = time.perf_counter()
    for _ in range(calls):
        a = time.perf_counter()
        f()
        host.append(time.perf_counter() - a)
    torch.cuda.synchronize()
    pace = (time.perf_counter() - t0) / calls
    barrier()
    return 1e6 * statistics.median(host), 1e6 * statistics.fmean(host), 1e6 * pace


def _host_us(f, calls: int, barrier) -> float:
    """Median host us of `calls` calls of f back to back (_timed)."""
    return _timed(f, calls, barrier)[0]


def _api(f, calls: int, barrier) -> dict:
    """CUDA runtime and driver calls per call of f: {name: [count, host us]}."""
    torch.cuda.synchronize()
    barrier()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            f()
        torch.cuda.synchronize()
    barrier()
    out = {}
    for e in prof.key_averages():
        if e.key.startswith(("cu", "nccl")):
            out[e.key] = [round(e.count / calls, 2), round(e.cpu_time_total / calls, 2)]
    return dict(sorted(out.items(), key=lambda kv: -kv[1][1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1M,4M")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--trials", type=int, default=3, help="rounds of every layer, medians printed")
    args = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("cuda:gpustripe,cpu:gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    print(f"rank {rank}: pid {os.getpid()}, {len(os.sched_getaffinity(0))} CPUs allowed", flush=True)
    pg = dist.group.WORLD
    gt._test_always_native(pg)
    sub, cal = dist.new_group(backend="gpustripe"), dist.new_group(backend="gpustripe")
    gt._test_always_native(sub)
    nccl = dist.new_group(backend="nccl")
    barrier = lambda: dist.barrier(group=nccl)  # noqa: E731
    rows = []
    for op in args.ops.split(","):
        for size in parse_sizes(args.sizes):
            inp, out = _buffers(op, size, world, dev)
            layers = {"nccl_dist": _dist_call(op, nccl, inp, out), "dist": _dist_call(op, pg, inp, out),
                      "dist_sub": _dist_call(op, sub, inp, out), "dist_cal": _dist_call(op, cal, inp, out),
                      "backend": _backend_call(op, pg, inp, out), "team": _team_call(op, pg, inp, out)}
            # Warm-up: NCCL's setup, the team's mappings and programs, the calibrated group's batches
            # and its review of the kind's first real calls (REVIEW_CALLS, twice for a met form's).
            for f in layers.values():
                _host_us(f, 3 * gt._Calibration.REVIEW_CALLS, barrier)
            got = {k: [] for k in layers}
            for trial in range(args.trials):
                for k, f in (layers.items() if trial % 2 == 0 else reversed(layers.items())):
                    got[k].append(_timed(f, args.calls, barrier))
            # The backend's split and the team's phases over a batch of dist calls alone.
            pg.trace(reset=True)
            _host_us(layers["dist"], args.calls, barrier)
            tr = pg.trace(reset=True)
            split = {k: round(v, 2) for k, v in tr["host_us"].get(op, {}).items() if k.startswith("recent")}
            phases = {k: round(v, 2) if isinstance(v, float) else v for k, v in tr["team"].items()}
            cls = f"<{1 << max(inp.nbytes, out.nbytes).bit_length()}B"  # the kind's size class (gt._kind)
            chose = next((f"{c['use']} {c.get('form', '')}".strip() for k, c in cal.trace()["choices"].items()
                          if k.startswith(op + " ") and k.endswith(cls)), "?")
            mine = {"rank": rank, **{k: round(statistics.median(t[0] for t in v), 2) for k, v in got.items()},
                    "mean": {k: round(statistics.median(t[1] for t in v), 2) for k, v in got.items()},
                    "pace": {k: round(statistics.median(t[2] for t in v), 2) for k, v in got.items()}, "cal_chose": chose,
                    "split": split, "phases": phases, "pieces": _pieces(op, pg, inp, out),
                    "api": _api(layers["dist"], 20, barrier), "nccl_api": _api(layers["nccl_dist"], 20, barrier)}
            # Every rank's: the slowest rank's host paces blocking calls on every rank.
            ranks = [None] * world
            dist.all_gather_object(ranks, mine, group=nccl)
            rows.append({"op": op, "bytes": size, "ranks": ranks})
            if rank == 0:
                for m in ranks:
                    print(f"{op:24s} {size >> 20:4d}M rank {m['rank']} " + "  ".join(f"{k} {m[k]:6.1f}" for k in layers)
                          + f"  (dist_cal: {m['cal_chose']})"
                          + f"\n    mean {m['mean']}\n    pace {m['pace']}"
                          + f"\n    split {m['split']}\n    pieces {m['pieces']}\n    phases {m['phases']}\n    api {m['api']}"
                          + f"\n    nccl api {m['nccl_api']}", flush=True)
    if rank == 0:
        print("CALLPHASES " + json.dumps({"calls": args.calls, "trials": args.trials, "rows": rows}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
