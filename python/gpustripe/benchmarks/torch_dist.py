"""gpustripe bench torch: collectives through torch.distributed, backend gpustripe vs nccl.

One process per GPU (torch.multiprocessing.spawn); the default group runs on backend
``gpustripe`` (gpustripe.torch), a second group of the same ranks on ``nccl``, and each
size times them as nccl-tests does (a batch of back-to-back calls with async_op=False, one
synchronisation, time / calls; the median of several batches; the slowest rank's median;
beside it the host's part, the time to issue the batch per call: where it equals the call's
time, the host sets the pace). The methods' batches take turns, which goes first rotating
from batch to batch (the host's drift over a size reaches each alike), and every batch has
at least --iters calls and lasts at least MIN_BATCH_US at the slowest method's pace (a batch
of a few 1 MB calls is mostly its synchronisation), and each method gets at least --trials
batches and MIN_TIMED_US of them in all (where the host sets a short call's pace, a batch's
time moves by several percent from one batch to the next: a few batches' median would move as
much). Methods ``torch_gpustripe`` (the backend as a training job gets it: each op and size
class served by gpustripe or NCCL as its calibration found faster, timed once its review of
the kind's first calls is over: a training job's later steps), ``torch_gpustripe_native`` (a
third group whose every call is native: the native path's own time) and ``torch_nccl``; busbw
uses nccl-tests' factors; sizes per rank. The results file's rows also say how many of the
gpustripe calls the backend served natively. --trace prints, per op and size, where a native
call's host time goes (the backend's call, the team's phases), how each method's timed calls
held the host one by one (median, mean, longest, the garbage collector's part), and what the
calibration chose, from what paces (each side's best batch).
"""
from __future__ import annotations

import gc
import json
import math
import os
import statistics
import sys
import tempfile
import time

NAME = "torch"
HELP = ("collectives through torch.distributed (all_reduce, all_gather_into_tensor, reduce_scatter_tensor, "
        "all_to_all_single, broadcast): backend gpustripe vs nccl, busbw, 1M-1G")
OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "bcast")
METHODS = ("torch_gpustripe", "torch_gpustripe_native", "torch_nccl")
MIN_BATCH_US = 2000.0
MIN_TIMED_US = 60000.0
# Warm-up calls at most while the backend still reviews a kind (settle()): a met form's review,
# then its staged form's, of gpustripe.torch's REVIEW_CALLS calls each.
SETTLE_CALLS = 64
SETTLE_RUN = 8


def calls_per_batch(paces_us, least: int, min_batch_us: float = MIN_BATCH_US) -> int:
    """Calls in each timed batch: at least `least`, and enough for the batch to last
    `min_batch_us` at the slowest of `paces_us` (us per call, from the warm-up)."""
    slowest = max(paces_us)
    return max(least, math.ceil(min_batch_us / slowest)) if slowest > 0 else least


def trials_for(calls: int, paces_us, least: int, min_timed_us: float = MIN_TIMED_US) -> int:
    """Timed batches of each method: at least `least`, and enough for a method's batches of
    `calls` calls to last `min_timed_us` in all at the slowest of `paces_us` (us per call)."""
    slowest = max(paces_us)
    return max(least, math.ceil(min_timed_us / (calls * slowest))) if slowest > 0 and calls > 0 else least


def turns(methods, batch: int) -> list:
    """The order the methods' `batch`-th batches run in: rotating, each first in turn."""
    k = batch % len(methods)
    return list(methods[k:]) + list(methods[:k])


def add_arguments(p):
    p.add_argument("--sizes", default="1M:1G", help="sizes per rank: LO:HI (powers of two) or a list (default 1M:1G)")
    p.add_argument("--gpus", type=int, default=2, help="processes, one per GPU (default 2)")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma list (default {','.join(OPS)})")
    p.add_argument("--dtype", default="float32", help="element type (default float32)")
    p.add_argument("--iters", type=int, default=10,
                   help="calls per timed batch at least (default 10; more where a batch would last under "
                        f"{MIN_BATCH_US / 1000:g} ms)")
    p.add_argument("--trials", type=int, default=5,
                   help="timed batches per size and method at least (default 5; more where they would last "
                        f"under {MIN_TIMED_US / 1000:g} ms in all); the median is reported")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    p.add_argument("--timeout", type=int, default=900, help="seconds the workers may take")
    p.add_argument("--trace", action="store_true",
                   help="print where each native call's host time goes and the calibration's choices")
    p.add_argument("--profile", action="store_true",
                   help="after each gpustripe method's timed batches, one more batch profiled on rank 0 "
                        "(cProfile): the Python functions the host's time per call goes to, torch's wrapper included")
    p.add_argument("--out", default="bench/results", help="directory of the JSON + PNG results")
    p.add_argument("--no-write", action="store_true", help="print the tables only")


def _profiled(fn, calls: int) -> str:
    """The functions `calls` calls of fn() spend the host's time in (cProfile, top 12 by own time)."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(12)
    return text.getvalue()


def _worker(rank, world, cfg, out_path):
    """One process per GPU. Rank 0 writes the rows."""
    import torch
    import torch.distributed as dist

    import gpustripe.torch  # registers the backend

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(cfg["port"])
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("cuda:gpustripe,cpu:gloo", rank=rank, world_size=world)
    groups = {"torch_gpustripe": dist.group.WORLD, "torch_gpustripe_native": dist.new_group(backend="gpustripe"),
              "torch_nccl": dist.new_group(backend="nccl")}
    gpustripe.torch._test_always_native(groups["torch_gpustripe_native"])
    dtype = getattr(torch, cfg["dtype"])
    esz = torch.tensor([], dtype=dtype).element_size()

    gc_s = [0.0, None]  # seconds the garbage collector ran, and when the running pass started

    def gc_timed(phase, _info):
        if phase == "start":
            gc_s[1] = time.perf_counter()
        elif gc_s[1] is not None:
            gc_s[0] += time.perf_counter() - gc_s[1]
            gc_s[1] = None

    gc.callbacks.append(gc_timed)
    # Each timed call's own host time, and the collector's, per method (--trace: _spread_line).
    issued_us = {m: [] for m in groups}
    gc_us = dict.fromkeys(groups, 0.0)

    def batch(fn, group, calls: int, method: str | None = None) -> tuple:
        """(us per call to the GPUs' end, us per call to issue them) of `calls` calls back to back;
        with a `method`, each call's host time is kept for it (_spread_line)."""
        dist.barrier(group=groups["torch_nccl"])
        torch.cuda.synchronize()
        each = issued_us[method] if method else []
        gc0 = gc_s[0]
        t0 = time.perf_counter()
        for _ in range(calls):
            t = time.perf_counter()
            fn(group)
            each.append((time.perf_counter() - t) * 1e6)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        if method:
            gc_us[method] += (gc_s[0] - gc0) * 1e6
        return (time.perf_counter() - t0) / calls * 1e6, (t1 - t0) / calls * 1e6

    def slowest(values) -> list:
        """Each of `values` as the slowest rank has it."""
        t = torch.tensor(values, device=dev, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=groups["torch_nccl"])
        return t.tolist()

    def settle(fn, group) -> int:
        """Calls fn(group) until the backend has reviewed the kind's first real calls (its count of
        calibration events stops growing on every rank), at most SETTLE_CALLS; returns the calls.
        A review weighs the kind's first calls once (a training job's first steps), and the calls
        it counts carry timing events: the batches time the kind as the job's later steps get it."""
        if not hasattr(group, "calibration_events"):
            return 0
        # In runs of back-to-back calls, as the batches make them: a review weighs how much of a
        # call's host time its GPUs waited for, which a synchronisation after every call would make all.
        for n in range(SETTLE_RUN, SETTLE_CALLS + 1, SETTLE_RUN):
            before = group.calibration_events()
            for _ in range(SETTLE_RUN):
                fn(group)
            if not slowest([float(group.calibration_events() != before)])[0]:
                return n
        return SETTLE_CALLS

    def bench(fn) -> dict:
        """Every method's (median us per call, median issue us per call), the slowest rank's; the
        methods' batches taking turns."""
        warm = []
        for g in groups.values():
            for _ in range(cfg["warmup"]):  # the first call of a kind calibrates it (gpustripe.torch)
                fn(g)
            settle(fn, g)
            warm.append(batch(fn, g, max(cfg["warmup"], 1))[0])  # the pace the batches are sized from
        paces = slowest(warm)
        calls = calls_per_batch(paces, cfg["iters"])  # every rank the same count: collectives
        trials = trials_for(calls, paces, cfg["trials"])
        got = {m: [] for m in groups}
        for m in groups:
            issued_us[m].clear()
            gc_us[m] = 0.0
        for trial in range(trials):
            for m in turns(list(groups), trial):
                got[m].append(batch(fn, groups[m], calls, m))
        med = [statistics.median(v[i] for v in got[m]) for m in groups for i in (0, 1)]
        worst = slowest(med)
        return {m: (worst[2 * k], worst[2 * k + 1]) for k, m in enumerate(groups)}

    top = max(cfg["sizes"]) // esz
    xf = torch.ones(top, dtype=dtype, device=dev)
    yf = torch.empty_like(xf)
    rows = []
    for size in cfg["sizes"]:
        per = size // esz
        if per % world:
            continue
        x, y, s = xf[:per], yf[:per], yf[:per // world]
        fns = {"allreduce": lambda g: dist.all_reduce(x, group=g),
               "alltoall": lambda g: dist.all_to_all_single(y, x, group=g),
               "allgather": lambda g: dist.all_gather_into_tensor(y, x[:per // world], group=g),
               "reduce_scatter": lambda g: dist.reduce_scatter_tensor(s, x, group=g),
               "bcast": lambda g: dist.broadcast(x, 0, group=g)}
        for op in cfg["ops"]:
            before = {m: getattr(g, "native_calls", 0) for m, g in groups.items()}
            for m, g in groups.items():
                if m != "torch_nccl":
                    g.trace(reset=True)
            timed = bench(fns[op])
            for method, g in groups.items():
                ours = method != "torch_nccl"
                us, host = timed[method]
                native = getattr(g, "native_calls", 0) - before[method]
                # The calibrated group's side for this kind of call (where it has one to choose).
                chose = _chosen(g.trace(), op, cfg["dtype"], size) if method == "torch_gpustripe" else None
                # Every rank's spread: a row is the slowest rank's, which need not be rank 0.
                spreads = [None] * world
                if cfg["trace"]:
                    dist.all_gather_object(spreads, _spread_line(issued_us[method], gc_us[method]),
                                           group=groups["torch_nccl"])
                if rank == 0:
                    rows.append({"op": op, "method": method, "bytes": size, "us": us, "host_us": host,
                                 **({"native_calls": native} if ours else {}), **({"chose": chose} if chose else {})})
                    print(f"  {op:>14} {method:>22} {size:>11} B {us:10.1f} us (host {host:.1f})"
                          + (f" [{chose}]" if chose else ""), flush=True)
                    for r, line in enumerate(spreads if cfg["trace"] else []):
                        print(f"{'':>18}rank {r}: {line}", flush=True)
                    if ours and cfg["trace"]:
                        _print_trace(g.trace(reset=True), _kind_key(op, cfg["dtype"], size))
                elif ours:
                    g.trace(reset=True)
                if ours and cfg["profile"]:
                    # Every rank makes the calls (collectives); rank 0 prints where its time went.
                    report = _profiled(lambda: fns[op](g), cfg["iters"] * 10)
                    torch.cuda.synchronize()
                    g.trace(reset=True)
                    if rank == 0:
                        print(f"  profile of {op} {method} {size} B, {cfg['iters'] * 10} calls:\n{report}", flush=True)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"rows": rows, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                       "torch": torch.__version__}, f)
    dist.destroy_process_group()


# The torch.distributed names of the ops, as the backend's trace names their calibrated kinds.
_TORCH_OPS = {"allreduce": "all_reduce", "allgather": "all_gather_into_tensor",
              "reduce_scatter": "reduce_scatter_tensor", "alltoall": "all_to_all_single", "bcast": "broadcast"}


def _kind_key(op: str, dtype: str, size: int) -> str:
    """The key of the backend's trace()["choices"] for `op` of `size` bytes (every op's largest
    buffer here: its size class)."""
    return f"{_TORCH_OPS[op]} {dtype} <{1 << size.bit_length()}B"


def _chosen(t: dict, op: str, dtype: str, size: int) -> str | None:
    """The side ("gpustripe", "gpustripe met" for the met form of a kind the team can stage, or
    "nccl") the calibration chose for `op` of `size` bytes, from the group's trace; None where it
    chose nothing."""
    c = t.get("choices", {}).get(_kind_key(op, dtype, size))
    if not c:
        return None
    return "gpustripe met" if c["use"] == "gpustripe" and c.get("form") == "met" else c["use"]


def _spread_line(calls_us: list, gc_us: float) -> str:
    """--trace: how one rank's timed calls of a method held the host, call by call: a pace set by a
    few long calls (a mean far above the median) or by every call; and the garbage collector's
    part (`gc_us` in all)."""
    each = sorted(calls_us)
    if not each:
        return "no timed calls"
    med = statistics.median(each)
    return (f"timed calls: {len(each)}, median {med:.1f} us, mean {statistics.fmean(each):.1f}, "
            f"90th percentile {each[int(0.9 * (len(each) - 1))]:.1f}, longest {each[-1]:.1f}, "
            f"{sum(c > 4 * med for c in each)} over 4x the median; garbage collection "
            f"{gc_us / len(each):.1f} us per call")


def _print_trace(t: dict, kind: str | None = None) -> None:
    """One native call's host time by phase (us per call), and the calibration's choice for the
    row's `kind` (_kind_key; every choice so far where None)."""
    host = ", ".join(f"{op} {v['us']:.1f} (team call {v['team_us']:.1f}, end {v['end_us']:.1f}; {v['calls']} calls; "
                     f"the last {v['recent_calls']}: {v['recent_us']:.1f}, mean {v['recent_mean_us']:.1f}, "
                     f"longest {v['recent_max_us']:.1f}; team call {v['recent_team_us']:.1f}, "
                     f"mean {v['recent_team_mean_us']:.1f}, longest {v['recent_team_max_us']:.1f}; "
                     f"mean before it {v['recent_before_mean_us']:.1f}, after it {v['recent_after_mean_us']:.1f})"
                     for op, v in t["host_us"].items())
    team = t["team"]
    phases = ", ".join(f"{k} {team[k]:.1f}" for k in ("lookup", "prepare", "exchange", "map", "enqueue", "drain",
                                                      "barrier") if k in team)
    print(f"{'':>18}trace: backend call {host or '-'}; team ({team.get('calls', 0)} calls, "
          f"{team.get('ordered', 0)} stream-ordered, {team.get('built', 0)} built their Program): {phases or '-'}",
          flush=True)
    for k, c in t["choices"].items():
        if kind is None or k == kind:
            print(f"{'':>18}{_choice_line(k, c)}", flush=True)


def _choice_line(kind: str, c: dict) -> str:
    """The calibration's choice for one kind: the paces it decided by (each side's best batch), and this rank's batches."""
    paces = "; ".join(f"{side} " + " ".join(f"{p:.1f}" for p in ps) for side, ps in c.get("paces", {}).items())
    met = f", met {c['met']:.1f} us" if "met" in c else ""
    form = f" ({c['form']})" if "form" in c and c["use"] == "gpustripe" else ""
    return (f"chose {c['use']}{form} for {kind}: gpustripe {c['gpustripe']:.1f} us{met}, nccl {c['nccl']:.1f} us "
            "(calibration: best of the back-to-back batches, us per call, slowest rank)"
            + (f"; this rank's batches, in order: {paces}" if paces else "")
            + ("; issue us per call: " + ", ".join(f"{k} {v:.1f}" for k, v in c["issue_us"].items())
               if "issue_us" in c else "")
            + (f"; met form reviewed: held {c['met_held_us']:.1f} us, to the staged form" if "met_held_us" in c else "")
            + (f"; reviewed: held {c['held_us']:.1f} us (slowest rank's median), this rank's calls "
               + " ".join(f"{h:.0f}" for h in c.get("held_calls", [])) if "held_us" in c else ""))


def run(args) -> int:
    from .. import results
    from ..copy import default_context
    from ._p2p_common import parse_sizes
    from .coll import _row

    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        raise SystemExit(f"gpustripe bench torch: needs torch ({e})")
    ctx = default_context()
    ops = [o for o in args.ops.split(",") if o]
    bad = [o for o in ops if o not in OPS]
    if bad:
        raise SystemExit(f"gpustripe bench torch: unknown ops {bad} ({', '.join(OPS)})")
    n = args.gpus
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have < n:
        raise SystemExit(f"gpustripe bench torch: {n} processes need {n} GPUs; torch sees {have}")
    sizes = parse_sizes(args.sizes)
    cfg = {"sizes": sizes, "ops": ops, "dtype": args.dtype, "iters": args.iters, "trials": args.trials,
           "warmup": args.warmup, "port": 29700 + n, "trace": args.trace, "profile": args.profile}
    print(f"gpustripe bench torch on {ctx.device_label}: {n} processes, ops {','.join(ops)}, sizes "
          f"{sizes[0]}..{sizes[-1]} B per rank", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        procs = mp.spawn(_worker, args=(n, cfg, out), nprocs=n, join=False)
        deadline = time.monotonic() + args.timeout
        while not procs.join(timeout=5):
            if time.monotonic() > deadline:
                for proc in procs.processes:  # the workers this run started
                    proc.kill()
                raise SystemExit(f"gpustripe bench torch: workers did not finish in {args.timeout} s")
        with open(out) as f:
            got = json.load(f)
    rows = []
    for r in got["rows"]:
        extra = {k: r[k] for k in ("native_calls", "host_us", "chose") if k in r}
        rows.append(_row(r["op"], r["method"], r["bytes"], r["us"], n, args.dtype, nccl_version=got["nccl"],
                         torch_version=got["torch"], **extra))
    for op in ops:
        if any(r["op"] == op for r in rows):
            print(f"\n[{n} ranks] " + results.ratio_table(rows, op, ours="torch_gpustripe", value="busbw_gbps",
                                                                 base="torch_nccl"))
    if args.no_write or not rows:
        return 0 if rows else 1
    path = results.write(f"torch-dist-{n}gpu", ctx.device_label, n, rows, out_dir=args.out,
                         extra={"dtype": args.dtype, "iters": args.iters, "trials": args.trials},
                         command=" ".join(["gpustripe", "bench", "torch", *sys.argv[3:]]))
    print(f"wrote {path} (+ .png)")
    return 0
