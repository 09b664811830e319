"""The backend with CPU tensors, 2 processes through torch.multiprocessing, on a machine
without GPUs too: init_process_group("cuda:gpustripe,cpu:gloo") gives a gpustripe group, and
collectives called through torch.distributed, and DDP, reach it. Mode `gloo`: CPU tensors go
to gloo inside the backend. Mode `emulated` (gpustripe.torch._test_emulate_cpu): they take the
native path instead (the store-met team, its stream-ordered calls, the fallbacks), staged through
the emulated devices' memory, and the results are checked against local references. Prints
`TORCHCPU {json}` per rank (the number of checks and the failed ones). Run by test_torch_backend.py where torch is installed."""
import collections
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from counting_backend import Counting

R = dist.ReduceOp


def worker(rank: int, world: int, port: int, mode: str) -> None:
    import gpustripe.torch as gt

    if mode == "emulated":
        gt._test_emulate_cpu()
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("cuda:gpustripe,cpu:gloo", rank=rank, world_size=world)
    checks = {}
    pg = dist.group.WORLD
    checks["group is gpustripe"] = isinstance(pg, gt.ProcessGroupGpustripe) and "gpustripe" in dist.get_backend()

    def data(n, dtype, salt, r=rank):
        g = torch.Generator().manual_seed(1000 * salt + r)
        if dtype.is_floating_point:
            return (torch.rand(n, generator=g) + 0.5).to(dtype)
        return torch.randint(-3, 4, (n,), generator=g, dtype=dtype)

    ref = {R.SUM: lambda xs: torch.stack(xs).sum(0), R.AVG: lambda xs: torch.stack(xs).sum(0) / world,
           R.MAX: lambda xs: torch.stack(xs).amax(0), R.MIN: lambda xs: torch.stack(xs).amin(0),
           R.PRODUCT: lambda xs: torch.stack(xs).prod(0)}
    salt = 0
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.int8):
        for op in ref:
            if op == R.AVG and not dtype.is_floating_point:
                continue
            salt += 1
            x = data(1003, dtype, salt)
            want = ref[op]([data(1003, dtype, salt, r) for r in range(world)]).to(dtype)
            dist.all_reduce(x, op=op)
            checks[f"all_reduce {dtype} {op}"] = torch.allclose(x.double(), want.double(), rtol=1e-5)
    x = data(8 * world, torch.float32, 50)
    out = torch.empty(8)
    dist.reduce_scatter_tensor(out, x, op=R.AVG)
    want = torch.stack([data(8 * world, torch.float32, 50, r) for r in range(world)]).sum(0)[rank * 8:rank * 8 + 8]
    checks["reduce_scatter_tensor avg"] = torch.allclose(out, want / world)
    # asynchronous averages: their division on the team's stream; the reduce-scatter's input as it was
    x = data(8 * world, torch.float32, 51)
    x_before = x.clone()
    out = torch.empty(8)
    dist.reduce_scatter_tensor(out, x, op=R.AVG, async_op=True).wait()
    want = torch.stack([data(8 * world, torch.float32, 51, r) for r in range(world)]).sum(0)[rank * 8:rank * 8 + 8]
    checks["reduce_scatter_tensor avg async"] = torch.allclose(out, want / world) and torch.equal(x, x_before)
    x = data(1003, torch.float32, 52)
    dist.all_reduce(x, op=R.AVG, async_op=True).wait()
    want = torch.stack([data(1003, torch.float32, 52, r) for r in range(world)]).sum(0) / world
    checks["all_reduce avg async"] = torch.allclose(x, want, rtol=1e-6)
    out = torch.empty(2 * world)
    dist.all_gather_into_tensor(out, torch.full((2,), float(rank)))
    checks["all_gather_into_tensor"] = torch.equal(out, torch.arange(world).repeat_interleave(2).float())
    out = torch.zeros(3 * world)
    out[3 * rank:3 * rank + 3] = rank + 7
    dist.all_gather_into_tensor(out, out[3 * rank:3 * rank + 3])
    checks["all_gather_into_tensor in place"] = torch.equal(out, (torch.arange(world) + 7).repeat_interleave(3).float())
    outs = [torch.empty(4, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(outs, torch.full((4,), rank, dtype=torch.int64))
    checks["all_gather list"] = all(torch.equal(o, torch.full((4,), r, dtype=torch.int64)) for r, o in enumerate(outs))
    src = torch.arange(world * 3, dtype=torch.float32) + 100 * rank
    got = torch.empty_like(src)
    dist.all_to_all_single(got, src)
    checks["all_to_all_single"] = torch.equal(
        got, torch.cat([torch.arange(rank * 3, rank * 3 + 3, dtype=torch.float32) + 100 * r for r in range(world)]))
    ins, outs = [(rank + 2 * j) % 3 for j in range(world)], [(i + 2 * rank) % 3 for i in range(world)]
    src = torch.cat([torch.full((k, 2), float(10 * rank + j)) for j, k in enumerate(ins)])
    got = torch.empty(sum(outs), 2)
    dist.all_to_all_single(got, src, outs, ins)  # uneven, some blocks empty
    checks["all_to_all_single uneven"] = torch.equal(
        got, torch.cat([torch.full((k, 2), float(10 * i + rank)) for i, k in enumerate(outs)]))
    for root in range(world):
        b = torch.full((3,), float(rank))
        dist.broadcast(b, src=root)
        checks[f"broadcast root {root}"] = torch.equal(b, torch.full((3,), float(root)))
        v = torch.full((5,), float(rank + 1))
        dist.reduce(v, dst=root, op=R.MAX)
        if rank == root:
            checks[f"reduce root {root}"] = torch.equal(v, torch.full((5,), float(world)))
    w = dist.all_reduce(a := torch.ones(6), async_op=True)
    w.wait()
    checks["async work"] = torch.equal(a, torch.full((6,), float(world)))
    w = dist.all_reduce(torch.full((5,), float(rank + 1)), async_op=True)
    chained = w.get_future().then(lambda f: f.value()[0] * 2)  # as DDP's reducer chains a bucket's end
    checks["future then"] = torch.equal(chained.wait(), torch.full((5,), float(world * (world + 1))))
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 8) + rank).sum().backward()
        opt.step()
    ws = [torch.empty_like(model.module.weight) for _ in range(world)]
    dist.all_gather(ws, model.module.weight.detach())
    checks["ddp weights equal on every rank"] = all(torch.equal(ws[0], v) for v in ws)
    # FSDP (fully_shard over the group) against one process training on every rank's batch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ref.load_state_dict(m.state_dict())
    fully_shard(m, mesh=DeviceMesh.from_group(pg, "cpu"))
    opt, ropt = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(10 * step + r)) for r in range(world)]
        opt.zero_grad()
        m(xs[rank]).sum().backward()
        opt.step()
        ropt.zero_grad()
        (sum(ref(x).sum() for x in xs) / world).backward()
        ropt.step()
    checks["fsdp matches one process"] = all(
        torch.allclose(m[i].weight.full_tensor(), ref[i].weight, atol=1e-6) for i in (0, 2))
    dist.barrier()
    if mode == "emulated":
        traced = pg.trace()
        team = traced["team"]
        checks["native calls stream-ordered"] = team["ordered"] == team["calls"] > 0
        # the last calls of each op apart from the means (which hold the calibration's calls)
        checks["recent calls traced"] = bool(traced["host_us"]) and all(
            0 < v["recent_calls"] <= min(v["calls"], pg.RECENT_CALLS)
            and v["recent_team_us"] <= v["recent_us"] <= v["recent_max_us"]
            and v["recent_us"] / 2 <= v["recent_mean_us"] <= v["recent_max_us"]
            and v["recent_team_us"] / 2 <= v["recent_team_mean_us"] <= v["recent_team_max_us"] <= v["recent_max_us"]
            and 0 <= v["recent_before_mean_us"] + v["recent_team_mean_us"] + v["recent_after_mean_us"]
            <= v["recent_mean_us"] * 1.001 for v in traced["host_us"].values())
        checks.update(delegated(rank, world, gt))
        checks.update(calibrated(rank, world, gt))
        checks.update(blocking(rank, world))
        checks.update(ddp_step(rank, world))
    failed = [k for k, ok in checks.items() if not ok]
    report = {"rank": rank, "mode": mode, "native_calls": pg.native_calls, "checks": len(checks), "failed": failed}
    os.write(1, ("TORCHCPU " + json.dumps(report) + "\n").encode())  # one write: the ranks share the pipe
    dist.destroy_process_group()


def delegated(rank: int, world: int, gt) -> dict:
    """Kinds of call decided for the other backend (gloo here, NCCL on GPUs) are handed to it
    directly: past each kind's first call (where it is decided), a call reaches the other
    backend once and nothing of the native path (_run: calibration, events, bookkeeping)."""
    g = dist.new_group(backend="gpustripe")
    gt._test_verdict(g, False)
    other = g._gloo = Counting(g._gloo)
    runs = collections.Counter()
    run = g._run
    g._run = lambda what, *a, **k: (runs.update([what]), run(what, *a, **k))[1]
    checks = {}
    for _ in range(3):
        x = torch.full((100,), float(rank + 1))
        dist.all_reduce(x, group=g)
        checks["delegated all_reduce"] = checks.get("delegated all_reduce", True) and torch.equal(
            x, torch.full((100,), float(world * (world + 1) // 2)))
        out = torch.empty(4 * world)
        dist.all_gather_into_tensor(out, torch.full((4,), float(rank)), group=g)
        checks["delegated all_gather_into_tensor"] = checks.get("delegated all_gather_into_tensor", True) and (
            torch.equal(out, torch.arange(world).repeat_interleave(4).float()))
        s = torch.empty(4)
        dist.reduce_scatter_tensor(s, torch.ones(4 * world), group=g)
        checks["delegated reduce_scatter_tensor"] = checks.get("delegated reduce_scatter_tensor", True) and (
            torch.equal(s, torch.full((4,), float(world))))
        b = torch.full((3,), float(rank))
        dist.broadcast(b, src=1, group=g)
        checks["delegated broadcast"] = checks.get("delegated broadcast", True) and torch.equal(
            b, torch.full((3,), 1.0))
        src = torch.arange(world * 2, dtype=torch.float32) + 10 * rank
        got = torch.empty_like(src)
        dist.all_to_all_single(got, src, group=g)
        checks["delegated all_to_all_single"] = checks.get("delegated all_to_all_single", True) and torch.equal(
            got, torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 10 * r
                            for r in range(world)]))
    kinds = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "all_to_all_single")
    checks["delegated: the full path once per kind"] = all(runs[k] == 1 for k in kinds) and len(runs) == len(kinds)
    checks["delegated: one call of the other backend per call"] = all(
        other.calls[m] == 3 for m in ("allreduce", "_allgather_base", "_reduce_scatter_base", "broadcast",
                                      "alltoall_base"))
    checks["delegated: nothing native"] = g.native_calls == 0
    # a group with kinds of both ways: a native call, then one handed over, then native again
    gt._test_verdict(g, True)
    x = torch.full((1 << 12,), float(rank + 1))
    dist.all_reduce(x, group=g)
    y = torch.full((100,), 2.0)
    dist.all_reduce(y, group=g)  # decided for gloo above
    dist.all_reduce(x, group=g)
    checks["native and delegated kinds in one group"] = (
        g.native_calls == 2 and runs["all_reduce"] == 3 and torch.equal(y, torch.full((100,), 2.0 * world))
        and torch.equal(x, torch.full((1 << 12,), float(world * world * (world + 1) // 2))))
    return checks


class Joins:
    """The team, counting its join() calls and recording whether each all_reduce ran on the
    caller's stream itself (joined: a blocking call's end there, no join needed)."""

    def __init__(self, team):
        self.team, self.joins, self.joined = team, 0, []

    def join(self, *args):
        self.joins += 1
        return self.team.join(*args)

    def allreduce(self, *args, **kwargs):
        self.joined.append(kwargs.get("joined", False))
        return self.team.allreduce(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.team, name)


def blocking(rank: int, world: int) -> dict:
    """A call whose caller asked for no work (async_op=False: opts.asyncOp) runs on the caller's
    stream itself (joined: no join after it), and the group's method returns None, which torch's
    wrappers take as a call that synchronised itself; an asynchronous one returns a work and
    does not join. The asynchronous one goes through the team's worker (or, where the team stages
    calls of its size through its slots, meets no other host and is enqueued by the caller's
    thread: CollTeam::stageable), the blocking ones not."""
    from torch._C._distributed_c10d import AllreduceOptions

    g = dist.new_group(backend="gpustripe")
    team = g._team
    counted = []

    def counting():
        if not counted:
            counted.append(Joins(team()))
        return counted[0]
    g._team = counting
    want = torch.full((64,), float(world * (world + 1) // 2))
    opts = AllreduceOptions()
    if not hasattr(opts, "asyncOp"):
        return {}  # a torch without the field: every call is asynchronous
    opts.asyncOp = False
    x = torch.full((64,), float(rank + 1))
    got = g.allreduce([x], opts)
    queued = lambda: counted[0].queue_stats()["queued"]  # noqa: E731
    staged = lambda: counted[0].phase_times()["staged"]  # noqa: E731
    checks = {"blocking call: no work, run on the caller's stream, no join": (
        got is None and counted[0].joined == [True] and counted[0].joins == 0 and torch.equal(x, want)),
              "blocking call: made on the caller's thread": queued() == 0}
    opts.asyncOp = True
    y = torch.full((64,), float(rank + 1))
    before = staged()
    work = g.allreduce([y], opts)
    ok = work is not None and work.wait() is not False
    checks["asynchronous call: a work, not on the caller's stream, no join"] = (
        ok and counted[0].joined == [True, False] and counted[0].joins == 0 and torch.equal(y, want))
    checks["asynchronous call: handed to the team's worker, or staged by the caller's thread"] = (
        queued() + staged() - before == 1)
    async_queued = queued()
    x = torch.full((64,), float(rank + 1))
    dist.all_reduce(x, group=g)  # torch's wrapper, async_op=False: takes the None
    checks["blocking call through torch's wrapper"] = (
        counted[0].joined == [True, False, True] and counted[0].joins == 0 and torch.equal(x, want)
        and queued() == async_queued)
    return checks


def ddp_step(rank: int, world: int) -> dict:
    """What a DDP training step asks of the backend once warm, per step: the buckets' all_reduces
    (each with the future DDP's reducer asks for, completed by the completer thread) and one
    broadcast per element type of the module's buffers (BatchNorm: float32 statistics, an int64
    counter; waited for, no future), every one queued to the team's worker or staged by the caller's
    thread (no meeting of the hosts either way); no access to the
    store (the team met through it once), no event created (the start and end events pooled)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    g = dist.new_group(backend="gpustripe")
    store = g._store = Counting(g._store)
    runs = collections.Counter()
    run = g._run
    g._run = lambda what, *a, **k: (runs.update([what]), run(what, *a, **k))[1]
    torch.manual_seed(0)
    width, blocks = 16, 3
    layers = []
    for _ in range(blocks):
        layers += [torch.nn.Linear(width, width), torch.nn.BatchNorm1d(width), torch.nn.ReLU()]
    # buckets of about one Linear's gradients each
    model = DDP(torch.nn.Sequential(*layers), process_group=g, bucket_cap_mb=(width * width + width) * 4 / 2**20)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    futures = [0]

    def step(i):
        x = torch.randn(8, width, generator=torch.Generator().manual_seed(world * i + rank))
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    for i in range(3):  # the buckets are rebuilt after the first step
        step(i)
    team = g._team_obj
    future = g._mem.future

    def counted(*a, **k):
        futures[0] += 1
        return future(*a, **k)
    g._mem.future = counted
    before = (dict(runs), team.queue_stats(), team.marks_stats()["events_created"], sum(store.calls.values()),
              team.phase_times()["staged"])
    per_step = []
    for i in range(3, 6):
        seen = dict(runs), futures[0]
        step(i)
        per_step.append(({k: v - seen[0].get(k, 0) for k, v in runs.items() if v != seen[0].get(k, 0)},
                         futures[0] - seen[1]))
    q = team.queue_stats()
    calls, fut = per_step[0]
    reduces = calls.get("all_reduce", 0)
    checks = {
        "ddp step: the same calls every step": all(p == per_step[0] for p in per_step),
        "ddp step: one all_reduce per bucket, two buffer broadcasts": (
            reduces >= blocks and calls.get("broadcast") == 2 and set(calls) == {"all_reduce", "broadcast"}),
        "ddp step: a future per bucket, none per broadcast": fut == reduces,
        "ddp step: every call queued to the worker or staged": (
            q["queued"] - before[1]["queued"] + team.phase_times()["staged"] - before[4] == 3 * (reduces + 2)),
        "ddp step: no event created": (q["events_created"] == before[1]["events_created"]
                                       and team.marks_stats()["events_created"] == before[2]),
        "ddp step: no store access": sum(store.calls.values()) == before[3] and before[3] > 0,
    }
    g.shutdown()
    return checks


def calibrated(rank: int, world: int, gt) -> dict:
    """The calibration times batches of back-to-back calls of each side at a kind's first call,
    on buffers of its own: the side made slower by a known time per call loses the kind, the
    caller's calls (the first one included) all take the other, with the results of one call
    each (the calibration's calls leave the caller's tensors alone)."""
    cal = gt._Calibration  # the class the group uses (gpustripe._torch_calibration)
    # Every batch C.CALLS long, so that the calls are counted here (test_torch_calibration.py
    # checks the batches that grow to MIN_BATCH_US).
    saved, cal.MIN_BATCH_US = cal.MIN_BATCH_US, 0.0
    mine = cal.ROUNDS * (cal.WARMUP + cal.CALLS)  # the calibration's calls of each side
    calls = 3
    slow = 0.02  # s per call: far above either side's own host time here
    want = torch.full((1 << 10,), float(world * (world + 1) // 2))

    def calibrate(slow_native: bool, slow_start: int = 0):
        """A group calibrating all_reduce against gloo, one side slowed: the other backend's
        stand-in (Counting), whether the caller's results held, the choice. slow_start: only the
        first native calls are slow (by `slow`), the other backend's all slower (by slow / 2)."""
        g = dist.new_group(backend="gpustripe")
        gt._test_calibrate_emulated(g)
        other = g._gloo = Counting(g._gloo, delay=0.0 if slow_native else slow / 2 if slow_start else slow)
        if slow_native or slow_start:  # the native calls' team lookup delayed
            team, native = g._team, [0]

            def delayed():
                native[0] += 1
                if slow_native or native[0] <= slow_start:
                    time.sleep(slow)
                return team()
            g._team = delayed
        runs = collections.Counter()
        run = g._run
        g._run = lambda what, *a, **k: (runs.update([what]), run(what, *a, **k))[1]
        ok = True
        for _ in range(calls):
            x = torch.full((1 << 10,), float(rank + 1))
            dist.all_reduce(x, group=g)
            ok = ok and torch.equal(x, want)
        (choice,) = g.trace()["choices"].values()
        g.runs = runs
        return g, other, ok, choice

    checks = {}
    g, _, ok, choice = calibrate(slow_native=False)
    checks["calibration: a slower other backend loses"] = (
        ok and choice["use"] == "gpustripe" and choice["nccl"] >= slow * 1e6 and g.native_calls == mine + calls)
    # Native slow in its first three calls (a kind's first calls set up), faster after them: the
    # steady state decides.
    g, _, ok, choice = calibrate(slow_native=False, slow_start=3)
    checks["calibration: a slow start does not lose"] = (
        ok and choice["use"] == "gpustripe" and choice["nccl"] >= slow / 2 * 1e6
        and choice["gpustripe"] < slow / 2 * 1e6 and g.native_calls == mine + calls)
    g, other, ok, choice = calibrate(slow_native=True)
    # the other backend's calls: the calibration's, the caller's, the ranks' agreement on each
    # round's paces and the decision's own maximum over the ranks (through gloo too); the
    # calibration's calls of the other side are handed to
    # it directly, as a decided kind's are (none takes the native path's _run), and so are the
    # caller's from the second on
    checks["calibration: a slower native side loses"] = (
        ok and choice["use"] == "nccl" and choice["gpustripe"] >= slow * 1e6
        and g.native_calls == mine and other.calls["allreduce"] == mine + calls + cal.ROUNDS + 1
        and g.runs["all_reduce"] == mine + 1)
    # The review of a kind given to gpustripe: its real calls hold their callers longer than the
    # other backend's calls take (the team's lookup delayed once the batches are over, as a
    # meeting waiting for a slower rank's host would): at the REVIEW_CALLS-th call every rank
    # hands the kind over, and the calls after it go to the other backend, with their results.
    # (The first real call, made right after the batches, is not held: the early review, at the
    # EARLY_CALLS-th call, cannot yet tell.)
    g = dist.new_group(backend="gpustripe")
    gt._test_calibrate_emulated(g)
    other = g._gloo = Counting(g._gloo, delay=slow)
    team, held = g._team, [False]

    class Holding:
        """The team, its collective calls returning 2 * slow late once `held`."""

        def __init__(self, t):
            self.t = t

        def __getattr__(self, name):
            f = getattr(self.t, name)

            def call(*args, **kwargs):
                if held[0]:
                    time.sleep(2 * slow)
                return f(*args, **kwargs)
            return call
    g._team = lambda: Holding(team())
    ok, after = True, 2
    for i in range(cal.REVIEW_CALLS + after):
        x = torch.full((1 << 10,), float(rank + 1))
        dist.all_reduce(x, group=g)
        ok = ok and torch.equal(x, want)
        held[0] = True  # the first call's batches were timed as they are
    (choice,) = g.trace()["choices"].values()
    checks["calibration: a kind whose calls hold their callers goes to the other backend at its review"] = (
        ok and choice["use"] == "nccl" and choice["held_us"] >= 2 * slow * 1e6 and choice["nccl"] >= slow * 1e6
        and g.native_calls == mine + cal.REVIEW_CALLS)
    # Asynchronous calls handed to the team's worker return at once; the worker then meets the
    # other ranks, late where their hosts run apart (a launch-bound step), and the caller's wait()
    # (a DDP backward's end) waits for that. Here the team stands in for a worker whose meetings
    # each took 4 * slow (queue_posted() counting each asynchronous call as a job, and
    # queue_latency_us() of each run job 4 * slow), beyond the other backend's slow: the review
    # counts the meeting too, and the kind goes to the other backend, at the early review (the
    # call after its first EARLY_CALLS): every call it counted met late.
    g = dist.new_group(backend="gpustripe")
    gt._test_calibrate_emulated(g)
    g._gloo = Counting(g._gloo, delay=slow)
    team, posted = g._team, [0]

    class Meeting:
        """The team, each asynchronous call a job of the worker's that met 4 * slow late."""

        def __init__(self, t):
            self.t = t

        def __getattr__(self, name):
            return getattr(self.t, name)

        def allreduce(self, *args, **kwargs):
            posted[0] += bool(kwargs.get("queued"))
            return self.t.allreduce(*args, **kwargs)

        @staticmethod
        def queue_posted():
            return posted[0]

        @staticmethod
        def queue_latency_us(job):
            return 4 * slow * 1e6 if 0 < job <= posted[0] else -1.0
    g._team = lambda: Meeting(team())
    ok = True
    for i in range(cal.REVIEW_CALLS + after):
        x = torch.full((1 << 10,), float(rank + 1))
        dist.all_reduce(x, group=g, async_op=True).wait()
        ok = ok and torch.equal(x, want)
    (choice,) = g.trace()["choices"].values()
    checks["calibration: a kind whose queued calls meet the other ranks late goes to the other backend at its review"] = (
        ok and choice["use"] == "nccl" and choice.get("held_us", 0) >= 4 * slow * 1e6
        and g.native_calls == mine + cal.EARLY_CALLS + 1)
    cal.MIN_BATCH_US = saved
    # Batches sized from the paces (to last 50 ms here, where emulated calls take milliseconds:
    # tens of calls), native slower on rank 0 than on rank 1: every rank makes the same calls
    # (collectives: the ranks' waits would otherwise end at the timeout), with the caller's results.
    saved, cal.MIN_BATCH_US = cal.MIN_BATCH_US, 50000.0
    g = dist.new_group(backend="gpustripe")
    gt._test_calibrate_emulated(g)
    if rank == 0:
        team = g._team

        def slowed():
            time.sleep(0.002)
            return team()
        g._team = slowed
    ok = True
    for _ in range(calls):
        x = torch.full((1 << 10,), float(rank + 1))
        dist.all_reduce(x, group=g)
        ok = ok and torch.equal(x, want)
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(counts, torch.tensor([g.native_calls]), group=g._gloo)
    checks["calibration: ranks of different paces make the same calls"] = (
        ok and len({int(c) for c in counts}) == 1 and g.native_calls > mine + calls)
    cal.MIN_BATCH_US = saved
    return checks


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 29811
    mode = sys.argv[2] if len(sys.argv) > 2 else "gloo"
    mp.spawn(worker, args=(2, port, mode), nprocs=2)
