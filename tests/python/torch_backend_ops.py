"""Every collective through torch.distributed on backend gpustripe, checked against the
same call on an NCCL group (gloo for CPU tensors), one process per GPU under torchrun:

    torchrun --nproc-per-node 2 tests/python/torch_backend_ops.py

Prints `TORCHOPS {json}` per rank: the number of checks, the failed ones, and how many
calls the backend served natively. Run by test_torch_backend.py on a machine with 2+ GPUs."""
import collections
import json
import os

import torch
import torch.distributed as dist

import gpustripe.torch  # registers the backend
from counting_backend import Counting

R = dist.ReduceOp


def delegated(rank, n, nccl, dev, check, checks) -> None:
    """Kinds of call decided for NCCL (_test_verdict) are handed to the group's NCCL backend
    directly: past each kind's first call, one NCCL call per call, no event of ours, nothing
    of the native path (_run); results as the NCCL group's. Then a group with kinds of both
    ways: a native call's output read by a call handed to NCCL right after (async, no wait)."""
    g = dist.new_group(backend="gpustripe")
    gpustripe.torch._test_verdict(g, False)
    to = g._nccl = Counting(g._nccl)
    runs = collections.Counter()
    run = g._run
    g._run = lambda what, *a, **k: (runs.update([what]), run(what, *a, **k))[1]
    events = [0]

    class CountedEvent(torch.cuda.Event):
        def __new__(cls, *a, **k):
            events[0] += 1
            return super().__new__(cls, *a, **k)

    x = torch.arange(1 << 16, dtype=torch.float32, device=dev) + rank
    y, s = torch.empty(n << 16, device=dev), torch.empty((1 << 16) // n, device=dev)

    def calls(group):
        a = x.clone()
        dist.all_reduce(a, group=group)
        dist.all_gather_into_tensor(y, x, group=group)
        dist.reduce_scatter_tensor(s, x, group=group)
        b = x.clone()
        dist.broadcast(b, 1, group=group)
        c = torch.empty_like(x)
        dist.all_to_all_single(c, x, group=group)
        return [a, y.clone(), s.clone(), b, c]

    calls(g)  # each kind decided here
    plain = torch.cuda.Event
    torch.cuda.Event = CountedEvent
    try:
        got = [calls(g) for _ in range(3)]
    finally:
        torch.cuda.Event = plain
    want = calls(nccl)
    for i, name in enumerate(("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast",
                              "all_to_all_single")):
        check(f"delegated {name}", [r[i] for r in got], [want[i]] * 3)
    checks.append({"check": "delegated: the full path once per kind", "ok": sum(runs.values()) == 5})
    checks.append({"check": "delegated: no event of the backend's", "ok": events[0] == 0})
    checks.append({"check": "delegated: one NCCL call per call", "ok": all(
        to.calls[m] == 4 for m in ("allreduce", "_allgather_base", "_reduce_scatter_base", "broadcast",
                                   "alltoall_base"))})
    checks.append({"check": "delegated: nothing native", "ok": g.native_calls == 0})
    # both ways in one group: 64K floats decided for NCCL above, 1M native
    gpustripe.torch._test_verdict(g, True)
    big = torch.ones(1 << 20, device=dev)
    w = dist.all_reduce(big, group=g, async_op=True)  # native, ends on the team's stream; not waited for
    dist.all_reduce(big[:1 << 16], group=g)  # NCCL: after the native call (the caller's stream joined it)
    w.wait()
    want = torch.full((1 << 20,), float(n), device=dev)
    want[:1 << 16] = n * n
    check("native then delegated on its output", big, want)
    checks.append({"check": "native and delegated kinds in one group", "ok": g.native_calls == 1})


def async_ends(pg, nccl, data, check, checks) -> None:
    """Asynchronous native calls back to back, each tensor dropped right after its wait() (held by
    the backend until the GPUs are past the call, the caching allocator handing its block to the
    next one): results as NCCL's, no torch event made by the backend, the team's end events
    reused (far fewer than the calls). Then a future asked for, as DDP's reducer does, waited on."""
    plain, made = torch.cuda.Event, [0]

    class CountedEvent(plain):
        def __new__(cls, *a, **k):
            made[0] += 1
            return super().__new__(cls, *a, **k)

    team = pg._team_obj
    before = team.marks_stats()["events_created"]
    queued_before, ready_before = team.queue_stats()["queued"], team.queue_stats()["events_created"]
    staged_before = team.phase_times()["staged"]
    got = []
    torch.cuda.Event = CountedEvent
    try:
        for i in range(40):
            t = data((1 << 18,), torch.float32, 200 + i)
            dist.all_reduce(t, async_op=True).wait()
            got.append(t.sum())
            del t
    finally:
        torch.cuda.Event = plain
    want = []
    for i in range(40):
        t = data((1 << 18,), torch.float32, 200 + i)
        dist.all_reduce(t, group=nccl)
        want.append(t.sum())
    check("async native calls, tensors dropped after wait", got, want, 1e-4)
    checks.append({"check": "async native calls: no torch event of the backend's", "ok": made[0] == 0})
    created = team.marks_stats()["events_created"] - before
    # staged calls reach the GPUs faster than their marks pass: fewer made than calls (how many
    # fewer is the GPUs' pace against the host's)
    checks.append({"check": f"async native calls: end events reused ({created} made for 40 calls)", "ok": created < 40})
    queued = team.queue_stats()["queued"] - queued_before
    staged = team.phase_times()["staged"] - staged_before
    # 1 MiB each: staged through the team's slots on the caller's thread (no meeting for the worker)
    checks.append({"check": f"async native calls: staged, none through the team's worker ({staged} staged, {queued} "
                   "queued of 40)", "ok": staged == 40 and queued == 0})
    ready = team.queue_stats()["events_created"] - ready_before
    checks.append({"check": f"async native calls: start events reused ({ready} made for 40 calls)", "ok": ready < 20})
    a = data((1 << 20,), torch.float32, 240)
    b = a.clone()
    fut = dist.all_reduce(a, async_op=True).get_future()
    fut.wait()
    c = a * 2
    dist.all_reduce(b, group=nccl)
    check("all_reduce async_op future then use", c, b * 2, 1e-5)


def freed_and_reallocated(pg, nccl, dev, rank, n, data, check, checks) -> bool:
    """A tensor's segment given back to the driver (empty_cache) and a new tensor at its address:
    the peers' mapping of the old segment is not used again (the new one's values are gathered,
    not the freed one's), and where every rank's new tensor landed at its freed one's address, the
    peers mapped it anew. An all-gather in place (FSDP's form), 64 MB a rank: past the team's
    slots, the peers write or read the one tensor where it lies."""
    count = 16 << 20
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    # Each made before its values (data()'s temporaries): the first segment the driver hands out.
    old = torch.empty(n * count, device=dev)
    old[rank * count:(rank + 1) * count] = data((count,), torch.float32, 41)
    dist.all_gather_into_tensor(old, old[rank * count:(rank + 1) * count])  # the peers map its segment
    addr = old.data_ptr()
    del old
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    new = torch.empty(n * count, device=dev)
    new[rank * count:(rank + 1) * count] = data((count,), torch.float32, 42)
    reused = torch.tensor([int(new.data_ptr() == addr)], device=dev)
    dist.all_reduce(reused, op=R.MIN, group=nccl)
    want = torch.empty_like(new)
    dist.all_gather_into_tensor(want, new[rank * count:(rank + 1) * count].clone(), group=nccl)
    before = pg.mapping_stats()["stale_evictions"]
    dist.all_gather_into_tensor(new, new[rank * count:(rank + 1) * count])
    check("all_gather in place into a tensor at a freed segment's address", new, want)
    if reused.item():
        checks.append({"check": "a segment at a freed one's address mapped anew (its old mapping evicted as stale)",
                       "ok": pg.mapping_stats()["stale_evictions"] > before})
    return bool(reused.item())


def forms(nccl, dev, check, checks) -> None:
    """A calibrated group times a stageable kind's met form only where the kind's first call is
    asynchronous: a blocking one takes the staged form (gpustripe.torch._native_way). Results as
    NCCL's either way."""
    g = dist.new_group(backend="gpustripe")
    x = torch.ones(1 << 18, device=dev)  # 1 MB: a blocking kind
    y = torch.ones(1 << 20, device=dev)  # 4 MB: an asynchronous kind
    a, b = x.clone(), y.clone()
    dist.all_reduce(a, group=g)
    dist.all_reduce(b, group=g, async_op=True).wait()
    want_a, want_b = x.clone(), y.clone()
    dist.all_reduce(want_a, group=nccl)
    dist.all_reduce(want_b, group=nccl)
    check("calibrated blocking all_reduce", a, want_a)
    check("calibrated asynchronous all_reduce", b, want_b)
    sides = {k.split(" <")[1]: set(c["paces"]) for k, c in g.trace()["choices"].items() if k.startswith("all_reduce ")}
    checks.append({"check": "a blocking stageable kind is timed staged and NCCL only",
                   "ok": sides.get(f"{1 << (x.nbytes.bit_length())}B") == {"gpustripe", "nccl"}})
    checks.append({"check": "an asynchronous stageable kind is timed in its met form too",
                   "ok": sides.get(f"{1 << (y.nbytes.bit_length())}B") == {"gpustripe", "met", "nccl"}})


def main() -> None:
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("cuda:gpustripe,cpu:gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    gpustripe.torch._test_always_native(pg)  # this checks the native path (not which way is faster)
    nccl = dist.new_group(backend="nccl")
    dev = torch.device("cuda", local)
    checks = []

    def check(name, got, want, tol=0.0):
        got, want = [got] if torch.is_tensor(got) else got, [want] if torch.is_tensor(want) else want
        ok = len(got) == len(want) and all(
            g.shape == w.shape and g.dtype == w.dtype and (
                torch.equal(g, w) if tol == 0 else torch.allclose(g.float(), w.float(), rtol=tol, atol=tol))
            for g, w in zip(got, want))
        checks.append({"check": name, "ok": bool(ok)})

    def data(shape, dtype, salt):
        g = torch.Generator(device=dev).manual_seed(1000 * salt + rank)
        if dtype.is_floating_point:
            return (torch.rand(shape, generator=g, device=dev) + 0.5).to(dtype)
        low = 0 if dtype == torch.uint8 else -3
        return torch.randint(low, 4, shape, generator=g, device=dev, dtype=dtype)

    tol = {torch.float32: 1e-5, torch.float64: 1e-9, torch.float16: 1e-2, torch.bfloat16: 3e-2}
    salt = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
                  torch.int8, torch.uint8):
        for op in (R.SUM, R.AVG, R.MIN, R.MAX, R.PRODUCT):
            if op == R.AVG and not dtype.is_floating_point:
                continue
            for count in (7, 1 << 20):
                salt += 1
                x = data((count,), dtype, salt)
                a, b = x.clone(), x.clone()
                dist.all_reduce(a, op=op)
                dist.all_reduce(b, op=op, group=nccl)
                check(f"all_reduce {dtype} {op} {count}", a, b, tol.get(dtype, 0.0))
                if op == R.AVG:  # asynchronous: its division on the team's stream
                    a = x.clone()
                    dist.all_reduce(a, op=op, async_op=True).wait()
                    check(f"all_reduce {dtype} {op} {count} async", a, b, tol.get(dtype, 0.0))
    for dtype in (torch.float32, torch.bfloat16):
        for count in (3, 1 << 18):
            salt += 1
            x = data((count * n,), dtype, salt)
            a, b = torch.empty(count, dtype=dtype, device=dev), torch.empty(count, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(a, x)
            dist.reduce_scatter_tensor(b, x, group=nccl)
            check(f"reduce_scatter_tensor {dtype} {count}", a, b, tol[dtype])
            a2 = torch.empty_like(a)
            dist.reduce_scatter_tensor(a2, x, op=R.AVG)
            dist.reduce_scatter_tensor(b, x, op=R.AVG, group=nccl)
            check(f"reduce_scatter_tensor avg {dtype} {count}", a2, b, tol[dtype])
            dist.reduce_scatter_tensor(a2, x, op=R.AVG, async_op=True).wait()
            check(f"reduce_scatter_tensor avg {dtype} {count} async", a2, b, tol[dtype])
            y = data((count,), dtype, salt)
            a, b = torch.empty(count * n, dtype=dtype, device=dev), torch.empty(count * n, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(a, y)
            dist.all_gather_into_tensor(b, y, group=nccl)
            check(f"all_gather_into_tensor {dtype} {count}", a, b)
            # in place (FSDP's form): the input is this rank's slice of the output
            a = torch.zeros(count * n, dtype=dtype, device=dev)
            a[rank * count:(rank + 1) * count].copy_(y)
            dist.all_gather_into_tensor(a, a[rank * count:(rank + 1) * count])
            check(f"all_gather_into_tensor in place {dtype} {count}", a, b)
            la = [torch.empty(count, dtype=dtype, device=dev) for _ in range(n)]
            lb = [torch.empty(count, dtype=dtype, device=dev) for _ in range(n)]
            dist.all_gather(la, y)
            dist.all_gather(lb, y, group=nccl)
            check(f"all_gather list {dtype} {count}", la, lb)
            z = data((count * n, 2), dtype, salt)
            a, b = torch.empty_like(z), torch.empty_like(z)
            dist.all_to_all_single(a, z)
            dist.all_to_all_single(b, z, group=nccl)
            check(f"all_to_all_single {dtype} {count}", a, b)
            for root in range(n):
                a = data((count,), dtype, salt + root)
                b = a.clone()
                dist.broadcast(a, src=root)
                dist.broadcast(b, src=root, group=nccl)
                check(f"broadcast root {root} {dtype} {count}", a, b)
                a = data((count,), dtype, salt + 9)
                b = a.clone()
                dist.reduce(a, dst=root, op=R.MAX)
                dist.reduce(b, dst=root, op=R.MAX, group=nccl)
                if rank == root:
                    check(f"reduce root {root} {dtype} {count}", a, b)
    # uneven splits, rows of 3, some empty, blocking and asynchronous: served natively
    def split(i, j):
        return (i + 2 * j) % 3 * (j + 1)  # rows rank i sends rank j

    ins = [split(rank, j) for j in range(n)]
    outs = [split(i, rank) for i in range(n)]
    z = data((sum(ins), 3), torch.float32, 77)
    b = torch.empty(sum(outs), 3, device=dev)
    dist.all_to_all_single(b, z, outs, ins, group=nccl)
    before = pg.native_calls
    a = torch.empty_like(b)
    dist.all_to_all_single(a, z, outs, ins)
    check("all_to_all_single uneven splits", a, b)
    a = torch.empty_like(b)
    dist.all_to_all_single(a, z, outs, ins, async_op=True).wait()
    check("all_to_all_single uneven splits async", a, b)
    checks.append({"check": "all_to_all_single uneven splits native", "ok": pg.native_calls == before + 2})
    # async: the work's wait orders the current stream
    x = data((1 << 22,), torch.float32, 88)
    a, b = x.clone(), x.clone()
    w = dist.all_reduce(a, async_op=True)
    w.wait()
    c = a * 2
    dist.all_reduce(b, group=nccl)
    check("all_reduce async_op then use", c, b * 2, 1e-5)
    async_ends(pg, nccl, data, check, checks)
    # send/recv around a ring
    x = data((1000,), torch.float32, 99)
    got = torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x, (rank + 1) % n), dist.P2POp(dist.irecv, got, (rank - 1) % n)]
    reqs = dist.batch_isend_irecv(ops if rank % 2 == 0 else ops[::-1])  # a send meets a posted receive
    for q in reqs:
        q.wait()
    g = torch.Generator(device=dev).manual_seed(1000 * 99 + (rank - 1) % n)
    check("send/recv ring", got, torch.rand((1000,), generator=g, device=dev) + 0.5)
    # CPU tensors go to gloo
    c = torch.full((5,), float(rank + 1))
    dist.all_reduce(c)
    check("cpu all_reduce (gloo)", c, torch.full((5,), float(n * (n + 1) // 2)))
    dist.barrier()
    # the same buffers again and again: mapped once, the program reused (a call like the last one
    # does not even ask the mapping cache)
    x = data((1 << 20,), torch.float32, 5)
    for i in range(20):
        if i == 3:  # the allocator's blocks for these clones exist by now
            before = pg.mapping_stats()
        a = x.clone()
        dist.all_reduce(a)
    after = pg.mapping_stats()
    checks.append({"check": "repeated all_reduce maps nothing new", "ok": after["misses"] == before["misses"]})
    b = x.clone()
    dist.all_reduce(b, group=nccl)
    check("all_reduce repeated on cached segments", a, b, 1e-5)
    reused = freed_and_reallocated(pg, nccl, dev, rank, n, data, check, checks)
    delegated(rank, n, nccl, dev, check, checks)
    forms(nccl, dev, check, checks)
    torch.cuda.synchronize()
    report = {"rank": rank, "backend": dist.get_backend(), "native_calls": getattr(pg, "native_calls", -1),
              "freed_address_reused": reused,
              "checks": len(checks), "failed": [c["check"] for c in checks if not c["ok"]]}
    os.write(1, ("TORCHOPS " + json.dumps(report) + "\n").encode())  # one write: the ranks share the pipe
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
