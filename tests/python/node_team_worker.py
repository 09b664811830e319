"""One member of a gpustripe.team.node_team met through a FileStore (no MPI, no torch): runs
every collective on device buffers of device `rank` and checks the results against numpy.
Prints one line `NODETEAM {json}`. Run by test_node_team.py, one process per rank; a 4th
argument `ordered` gives every call a stream (stream-ordered calls), a 5th `shared` puts every
rank's buffers on device 0."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, __import__("os").path.dirname(__file__))
from file_store import FileStore  # noqa: E402

from gpustripe.team import node_team  # noqa: E402

NP = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int32": np.int32, "int64": np.int64}
RTOL = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-3}
REDUCE = {"sum": np.add.reduce, "prod": np.multiply.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce}


def data(r: int, n: int, dtype: str, salt: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * salt + r)
    if dtype.startswith("int"):
        return rng.integers(-3, 4, n).astype(NP[dtype])
    return rng.uniform(0.5, 1.5, n).astype(NP[dtype])


class StreamOrdered:
    """The team with every collective given a stream: enqueued behind it, not waited for (the
    results are read after team.settle())."""

    COLLECTIVES = {"allreduce", "reduce_scatter", "allgather", "alltoall", "alltoallv", "bcast", "reduce"}

    def __init__(self, team, stream: int):
        self._team, self._stream = team, stream

    def __getattr__(self, name):
        f = getattr(self._team, name)
        if name in self.COLLECTIVES:
            return lambda *a, **k: f(*a, stream=self._stream, **k)
        return f


def staging_segments() -> tuple[int, list[str]]:
    """The shared host staging this process maps (/proc/self/maps), and the names of it that this
    process made and that are still in /dev/shm."""
    import glob
    import os
    with open("/proc/self/maps") as f:
        mapped = sum("gpustripe-collhost-" in line for line in f)
    return mapped, glob.glob(f"/dev/shm/gpustripe-collhost-{os.getpid()}-*")


def bcast_host(store_dir: str, rank: int, size: int) -> None:
    """Broadcasts through the team's shared host staging (the test sets a host share), host- and
    stream-ordered, every root, sizes that split unevenly into chunks; the team made and closed
    twice: its staging is mapped while it lives and gone with it."""
    import gc
    checks = []
    for k in range(2):
        team = node_team(FileStore(store_dir), rank, size, prefix=f"gpustripe/bcast{k}")
        ctx, dev = team.context, rank
        for nbytes in (4099, 65537, 300001):
            for root in range(size):
                for stream in (None, team.stream(dev)):
                    want = data(root, nbytes, "int32", 17 * k + root).astype(np.uint8)
                    b = ctx.alloc_device(dev, nbytes)
                    ctx.upload(b, dev, (want if rank == root else np.zeros(nbytes, np.uint8)).tobytes())
                    served = team.bcast(b, nbytes, root, **({} if stream is None else {"stream": stream}))
                    team.settle()
                    got = np.frombuffer(ctx.download(b, dev, nbytes), np.uint8)
                    ctx.free_device(b)
                    checks.append({"op": f"team {k} bcast {nbytes} root {root} {'ordered' if stream else 'host'}",
                                   "served": bool(served), "ok": bool(served) and np.array_equal(got, want)})
        mapped, _ = staging_segments()
        checks.append({"op": f"team {k} maps its shared host staging", "served": True, "ok": mapped > 0})
        del ctx, team
        gc.collect()
        mapped, named = staging_segments()
        checks.append({"op": f"team {k} closed: no staging mapped or named", "served": True,
                       "ok": mapped == 0 and not named, "left": [mapped, named]})
    print("NODETEAM " + json.dumps({"rank": rank, "checks": checks}), flush=True)


def alltoallv(team, put, get, rank: int, size: int, n: int, salt: int, dev: int, skew: bool = False, quiet=(),
              deaf=()):
    """An all-to-all of uneven int32 blocks (some empty), laid out with gaps: rank i sends rank j
    `count(i, j)` elements, its blocks in reverse rank order with 3 elements between them, and
    receives them in rank order with 1 between (the gaps keep -1). `skew`: rank 0 expects one
    element more from the last rank than it sends (the call is declined on every rank). The ranks
    in `quiet` send nothing, those in `deaf` receive nothing: their empty side's pointer is 0.
    (the call's answer, a function reading the result, what it should be)."""
    def count(i, j):
        return 0 if i in quiet or j in deaf else ((3 * i + 5 * j + n) % 4) * n

    sends = [data(i, sum(count(i, j) for j in range(size)), "int32", salt + 3) for i in range(size)]
    part = [np.split(sends[i], np.cumsum([count(i, j) for j in range(size)])[:-1]) for i in range(size)]
    send_at, at = [0] * size, 0
    for j in reversed(range(size)):
        send_at[j], at = at, at + count(rank, j) + 3
    buf = np.full(at, -1, np.int32)
    for j in range(size):
        buf[send_at[j]:send_at[j] + count(rank, j)] = part[rank][j]
    recv_at, want = [], []
    for i in range(size):
        recv_at.append(sum(len(w) for w in want))
        want += [part[i][rank], np.full(1, -1, np.int32)]
    want = np.concatenate(want)
    recv_len = [count(i, rank) * 4 for i in range(size)]
    if skew and rank == 0:
        recv_len[-1] += 4
    s, r = put(buf), put(np.full(len(want) + 1, -1, np.int32))
    if rank in quiet:
        s = 0
    if rank in deaf:
        r = 0
    served = team.alltoallv(s, r, [a * 4 for a in send_at], [count(rank, j) * 4 for j in range(size)],
                            [a * 4 for a in recv_at], recv_len, device=dev)
    return served, (lambda: want) if rank in deaf else (lambda: get(r, len(want), "int32")), want


def main() -> None:
    store_dir, rank, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if len(sys.argv) > 4 and sys.argv[4] == "bcast_host":
        bcast_host(store_dir, rank, size)
        return
    ordered = len(sys.argv) > 4 and sys.argv[4] == "ordered"
    team = node_team(FileStore(store_dir), rank, size)
    ctx, dev = team.context, 0 if sys.argv[5:6] == ["shared"] else rank
    if ordered:
        team = StreamOrdered(team, team.stream(dev))
    held = []

    def dbuf(nbytes: int) -> int:
        p = ctx.alloc_device(dev, nbytes)
        held.append(p)
        return p

    def put(a: np.ndarray) -> int:
        p = dbuf(a.nbytes)
        ctx.upload(p, dev, a.tobytes())
        return p

    def get(p: int, n: int, dtype: str) -> np.ndarray:
        team.settle()
        return np.frombuffer(ctx.download(p, dev, n * np.dtype(NP[dtype]).itemsize), dtype=NP[dtype])

    checks, salt = [], 0

    def check(name: str, served: bool, got, want: np.ndarray) -> None:
        """served: the call's answer; got: reads the result (after the call, hence a function)."""
        got = got()
        ok = served and got.shape == want.shape and (
            np.array_equal(got, want) if got.dtype.kind == "i" else np.allclose(got, want, rtol=RTOL[got.dtype.name]))
        checks.append({"op": name, "ok": bool(ok), "served": bool(served)})

    for dtype in ("float32", "int32", "float64", "int64", "float16"):
        for op in ("sum", "prod", "max", "min"):
            for n in (1, 1000, 4099):
                salt += 1
                ins = [data(r, n, dtype, salt) for r in range(size)]
                want = REDUCE[op](np.stack(ins).astype(np.float64 if dtype == "float16" else NP[dtype]), axis=0)
                want = want.astype(NP[dtype])
                s = put(ins[rank])
                r = dbuf(ins[rank].nbytes)
                check(f"allreduce {dtype} {op} {n}", team.allreduce(s, r, n, dtype, op), lambda: get(r, n, dtype),
                      want)
                # in place, and the same buffers again (the mappings and program are reused)
                for _ in range(2):
                    ctx.upload(s, dev, ins[rank].tobytes())
                    served = team.allreduce(s, s, n, dtype, op)
                    check(f"allreduce in place {dtype} {op} {n}", served, lambda: get(s, n, dtype), want)
    for n in (1, 777):
        salt += 1
        ins = [data(r, n * size, "float32", salt) for r in range(size)]
        want = np.add.reduce(np.stack(ins), axis=0)[rank * n:(rank + 1) * n]
        s, r = put(ins[rank]), dbuf(n * 4)
        check(f"reduce_scatter {n}", team.reduce_scatter(s, r, n, "float32", "sum"), lambda: get(r, n, "float32"),
              want)
        blocks = [data(r, n, "int32", salt) for r in range(size)]
        s, r = put(blocks[rank]), dbuf(n * 4 * size)
        check(f"allgather {n}", team.allgather(s, r, n * 4), lambda: get(r, n * size, "int32"), np.concatenate(blocks))
        # in place: this rank's block already in the output
        r = put(np.zeros(n * size, np.int32))
        ctx.upload(r + rank * n * 4, dev, blocks[rank].tobytes())
        check(f"allgather in place {n}", team.allgather(r + rank * n * 4, r, n * 4),
              lambda: get(r, n * size, "int32"), np.concatenate(blocks))
        sends = [data(r, n * size, "int64", salt) for r in range(size)]
        s, r = put(sends[rank]), dbuf(n * 8 * size)
        want = np.concatenate([sends[j][rank * n:(rank + 1) * n] for j in range(size)])
        check(f"alltoall {n}", team.alltoall(s, r, n * 8), lambda: get(r, n * size, "int64"), want)
        check(f"alltoallv {n}", *alltoallv(team, put, get, rank, size, n, salt, dev))
        # a rank that sends nothing, one that receives nothing, and with 3 ranks one that does neither
        check(f"alltoallv {n} quiet and deaf ranks",
              *alltoallv(team, put, get, rank, size, n, salt, dev, quiet={0, size - 1} - {1}, deaf={0, 1} - {size - 1}))
        served, _, _ = alltoallv(team, put, get, rank, size, n, salt, dev, skew=True)
        checks.append({"op": f"alltoallv {n} sizes differ: declined on every rank", "ok": not served,
                       "served": bool(served), "declined": True})
        for root in range(size):
            b = put(data(rank, n, "float32", salt + root))
            check(f"bcast root {root} {n}", team.bcast(b, n * 4, root), lambda: get(b, n, "float32"),
                  data(root, n, "float32", salt + root))
            ins = [data(r, n, "float32", salt + 7) for r in range(size)]
            s = put(ins[rank])
            r = dbuf(n * 4) if rank == root else 0
            served = team.reduce(s, r, n, "float32", "max", root)
            if rank == root:
                check(f"reduce root {root} {n}", served, lambda: get(r, n, "float32"),
                      np.maximum.reduce(np.stack(ins)))
            else:
                checks.append({"op": f"reduce root {root} {n}", "ok": bool(served), "served": bool(served)})
    # The same buffers again and again: nothing is mapped anew (a call like the last one takes its
    # mappings as they were, without asking the mapping cache).
    x = put(data(rank, 4096, "float32", 99))
    y = dbuf(4096 * 4)
    team.allreduce(x, y, 4096, "float32", "sum")
    before = team.mapping_stats()
    for _ in range(5):
        team.allreduce(x, y, 4096, "float32", "sum")
    after = team.mapping_stats()
    checks.append({"op": "repeated calls map nothing new", "served": True,
                   "ok": after["misses"] == before["misses"]})
    # A training step's calls, each on its own buffers (FSDP: a gather and a reduce-scatter per
    # shard unit), cycled: past the first step, every call finds its Program in the team's cache.
    step = 40
    xs, ys = put(data(rank, 256 * step, "float32", 98)), dbuf(256 * 4 * step)
    for _ in range(2):
        team.phase_times(True)
        for i in range(step):
            team.allreduce(xs + i * 1024, ys + i * 1024, 256, "float32", "sum")
    times = team.phase_times(True)
    checks.append({"op": "a step's calls on their own buffers reuse their Programs", "served": True,
                   "ok": times["calls"] == step and times["built"] == 0, "times": times})
    # Calls one after the other with nothing read in between: each sees the one before's result
    # (stream-ordered: the GPUs order them, and a call's flags cannot be met by another's).
    for dtype in ("float32", "int64"):
        for n in (3, 5000):
            ins = [data(r, n, dtype, 50) for r in range(size)]
            s = put(ins[rank])
            t = dbuf(n * np.dtype(NP[dtype]).itemsize)
            for _ in range(3):
                team.allreduce(s, s, n, dtype, "sum")
                team.allreduce(s, t, n, dtype, "max")
                team.bcast(t, n * np.dtype(NP[dtype]).itemsize, size - 1)
            want = np.add.reduce(np.stack(ins).astype(NP[dtype]), axis=0) * size * size
            check(f"pipelined allreduce {dtype} {n}", True, lambda: get(s, n, dtype), want)
    times = team.phase_times()
    checks.append({"op": "calls stream-ordered as asked", "served": True,
                   "ok": (times["ordered"] == times["calls"] > 0) if ordered else times["ordered"] == 0, "times": times})
    # Stream-ordered allreduce, reduce-scatter, allgather and alltoall calls go through the team's staging
    # slots (no exchange) unless the test turned staging off.
    staged = ordered and "staged_max=0" not in os.environ.get("GPUSTRIPE_TEST", "")
    checks.append({"op": "stream-ordered calls staged", "served": True,
                   "ok": (times["staged"] > 0) == staged and times["staged"] < times["calls"], "times": times})
    # A host buffer on one rank: a staged call copies it through the slot; else every rank is told
    # to run it another way, nothing done.
    salt += 1
    host = np.ones(16, np.float32)
    s = put(host) if rank != 0 else host.ctypes.data
    r = dbuf(64)
    served = team.allreduce(s, r, 16, "float32", "sum")
    if staged:
        check("host buffer staged", served, lambda: get(r, 16, "float32"), np.full(16, size, np.float32))
    else:
        checks.append({"op": "host buffer declined", "ok": not served, "served": bool(served)})
    # An alltoall the same way (its own block through the temporary buffer where staged).
    sends = [data(q, 16 * size, "int64", salt) for q in range(size)]
    s = put(sends[rank]) if rank != 0 else sends[0].ctypes.data
    r = dbuf(16 * 8 * size)
    served = team.alltoall(s, r, 16 * 8)
    if staged:
        want = np.concatenate([sends[j][rank * 16:(rank + 1) * 16] for j in range(size)])
        check("host buffer alltoall staged", served, lambda: get(r, 16 * size, "int64"), want)
    else:
        checks.append({"op": "host buffer alltoall declined", "ok": not served, "served": bool(served)})
    for p in held:
        ctx.free_device(p)
    print("NODETEAM " + json.dumps({"rank": rank, "checks": checks}), flush=True)


if __name__ == "__main__":
    main()
