"""One member of a gpustripe.team.node_team whose stream-ordered calls are queued to the team's
worker (queued=True: what the PyTorch backend's asynchronous calls do). Run by
test_node_team_queue.py, one process per rank, with a scenario:

- `ahead`: rank 0 queues a chain of calls of every kind (each reading the one before) and
  reports that they all returned before rank 1 posted anything (rank 1 waits for rank 0's word in
  the store before its first call); a blocking call after them reads their result; both ranks
  check every buffer against numpy after settle(); then 20 calls, each joined before the next,
  make no new start event. Rank 0's thread waiting for its first call's job (wait_queued: what
  the torch backend's futures wait for) has not returned when rank 0 tells rank 1 to post (the
  wait holds no GIL: rank 0's main thread goes on), and returns the calls' stream once it has.
- `declined`: rank 1's buffer is host memory: its queued call raises at once; rank 0's queued call
  is posted, and its join() raises the meeting's answer, as does every later call.
- `peer_dies`: rank 1 leaves without posting; rank 0's queued call is posted, its join() raises
  within GPUSTRIPE_TIMEOUT.
- `staged_peer_dies` (staging on): both ranks make a staged call (the slots' setup), then rank 1
  leaves; rank 0's next staged call, or its settle() after it, raises within GPUSTRIPE_TIMEOUT,
  as does its call after that.
- `behind` (queued) and `behind_staged` (staged: on the caller's thread): after a settled call,
  three all_gathers back to back, rank 1's 0.3 s after rank 0's: whether each was enqueued while
  the team's call before it still ran (enqueued_behind), and its answer for call numbers not made;
  then the team's stage_limit() and one all_gather in its met form (staged=False).
- `staged_behind_queued` (staging on): after a staged call (the slots' setup), rank 0 queues a met
  all_gather (staged=False) and then a stageable one, and reports that both returned before rank 1
  posted either (rank 1 waits for rank 0's word): the staged call went behind the met one on the
  worker, not waiting on the caller's thread for its meeting; both exact, the second staged.
- `shutdown`: rank 0 queues calls and drops the team before rank 1 has posted; rank 1 then posts
  and checks its results (exact only if rank 0's worker ran them while its team closed).

Prints one line `QUEUE {json}`."""
import json
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from file_store import FileStore  # noqa: E402

from gpustripe.team import node_team  # noqa: E402

N = 257  # elements per rank's block


def main() -> None:
    store_dir, rank, size, scenario = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    store = FileStore(store_dir, timeout=30.0)
    team = node_team(store, rank, size)
    ctx, dev = team.context, rank
    stream = team.stream(dev)
    out = {"rank": rank, "scenario": scenario}

    def put(a: np.ndarray) -> int:
        p = ctx.alloc_device(dev, a.nbytes)
        ctx.upload(p, dev, a.tobytes())
        return p

    def get(p: int, n: int, dtype=np.float64) -> np.ndarray:
        return np.frombuffer(ctx.download(p, dev, n * np.dtype(dtype).itemsize), dtype=dtype)

    if scenario in ("ahead", "shutdown"):
        # A chain: each call reads what the one before wrote, so the results say the order too.
        mine = [np.arange(size * N, dtype=np.float64) * (r + 1) + r for r in range(size)]
        a = put(mine[rank])                                  # size*N float64
        g = put(np.zeros(size * size * N, np.float64))       # all_gather of a
        t = put(np.zeros(size * N, np.float64))              # all_to_all of a
        rs = put(np.zeros(N, np.float64))                    # reduce_scatter of a
        ints = put(np.full(N, rank + 2, np.int32))
        # uneven all_to_all of a: c(i, j) elements from the start of block j of rank i's a to rank j
        c = [[(i + j) % 3 * 5 + 1 for j in range(size)] for i in range(size)]
        tv = put(np.zeros(sum(c[i][rank] for i in range(size)), np.float64))
        v_send = ([j * N * 8 for j in range(size)], [c[rank][j] * 8 for j in range(size)])
        v_recv = ([sum(c[k][rank] for k in range(i)) * 8 for i in range(size)], [c[i][rank] * 8 for i in range(size)])
        if rank == 1:
            store.get("queue/posted/0")  # rank 0's calls all returned before this rank posts any
        q = dict(stream=stream, queued=True)
        calls = [
            team.allreduce(a, a, size * N, "float64", "sum", **q),            # a = sum
            team.allgather(a, g, size * N * 8, **q),                          # g = [a] * size
            team.bcast(a, size * N * 8, size - 1, **q),                      # a unchanged (same everywhere)
            team.allreduce(a, a, size * N, "float64", "max", **q),            # a unchanged
            team.alltoall(a, t, N * 8, **q),                                  # t = blocks of a
            team.alltoallv(a, tv, *v_send, *v_recv, **q),                     # tv = uneven blocks of a
            team.reduce_scatter(a, rs, N, "float64", "sum", **q),             # rs = size * a[rank block]
            team.allreduce(ints, ints, N, "int32", "prod", **q),              # ints = prod(r + 2)
            team.reduce(a, a if rank == 0 else 0, size * N, "float64", "sum", 0, **q),  # a at 0 = size * a
        ]
        out["returned"] = all(calls)
        out["done_when_posted"] = team.queue_stats()["done"]
        out["queued"] = team.queue_stats()["queued"]
        waited, waiter = {}, None
        if rank == 0 and scenario == "ahead":
            first = team.queue_posted() - len(calls) + 1  # the first call's job
            waiter = threading.Thread(target=lambda: waited.update(stream=team.wait_queued(first, dev)))
            waiter.start()
            out["first_waited_when_posted"] = "stream" in waited
        if rank == 0:
            store.set("queue/posted/0", b"1")
        if scenario == "shutdown" and rank == 0:
            del team, ctx  # closes the team with the calls queued: it runs them first
            out["closed"] = True
            print("QUEUE " + json.dumps(out), flush=True)
            return
        # A blocking call (not queued) after them: runs once they are enqueued, reads their result.
        b = put(np.zeros(N, np.float64))
        if scenario == "ahead":  # (rank 0 of `shutdown` is gone by now)
            team.allreduce(rs, b, N, "float64", "sum", stream=stream)
        team.settle()
        total = sum(mine)
        want_a = total * size if rank == 0 else total
        blocks = total.reshape(size, N)
        checks = {
            "a": np.allclose(get(a, size * N), want_a),
            "g": np.allclose(get(g, size * size * N), np.tile(total, size)),
            "t": np.allclose(get(t, size * N), np.tile(blocks[rank], size)),
            "tv": np.allclose(get(tv, sum(c[i][rank] for i in range(size))),
                              np.concatenate([blocks[rank][:c[i][rank]] for i in range(size)])),
            "rs": np.allclose(get(rs, N), size * blocks[rank]),
            "ints": bool((get(ints, N, np.int32) == np.prod([r + 2 for r in range(size)])).all()),
        }
        if scenario == "ahead":
            checks["blocking"] = np.allclose(get(b, N), size * blocks.sum(axis=0))
        if waiter is not None:
            waiter.join()
            checks["first waited: the calls' stream"] = waited.get("stream") == team.calls_stream(dev)
        out["checks"] = checks
        out["stats"] = team.queue_stats()
        if scenario == "ahead":
            # Calls each joined before the next: their start events come back to the pool.
            for _ in range(20):
                team.allreduce(rs, rs, N, "float64", "max", stream=stream, queued=True)
                team.join(dev, stream)
            out["events_later"] = team.queue_stats()["events_created"] - out["stats"]["events_created"]
    elif scenario == "declined":
        buf = put(np.ones(N, np.float32)) if rank == 0 else np.ones(N, np.float32)
        p = buf if rank == 0 else buf.ctypes.data
        try:
            team.allreduce(p, p, N, "float32", "sum", stream=stream, queued=True)
            out["posted"] = True
        except Exception as e:  # noqa: BLE001
            out["posted"], out["call_error"] = False, str(e)
        try:
            team.join(dev, stream)
            out["join"] = "returned"
        except Exception as e:  # noqa: BLE001
            out["join"] = str(e)
        try:
            team.allreduce(p, p, N, "float32", "sum", stream=stream, queued=True)
            out["later"] = "returned"
        except Exception as e:  # noqa: BLE001
            out["later"] = str(e)
    elif scenario == "peer_dies":
        if rank == 1:
            os._exit(0)  # gone without a call
        a = put(np.ones(N, np.float32))
        out["posted"] = team.allreduce(a, a, N, "float32", "sum", stream=stream, queued=True)
        t0 = time.monotonic()
        try:
            team.join(dev, stream)
            out["join"] = "returned"
        except Exception as e:  # noqa: BLE001
            out["join"] = str(e)
        out["join_s"] = time.monotonic() - t0
    elif scenario.startswith("behind"):
        n = 1 << 16
        a = put(np.full(n, rank + 1.0))
        g = put(np.zeros(size * n))
        queued = scenario == "behind"  # behind_staged: on the caller's thread, through the slots
        team.allgather(a, g, n * 8, stream=stream, queued=queued)  # its mappings, its Program
        team.settle()
        if rank == 1:
            time.sleep(0.3)
        calls = []
        for _ in range(3):
            team.allgather(a, g, n * 8, stream=stream, queued=queued)
            calls.append(team.ordered_calls())
        out["not_yet"] = team.enqueued_behind(calls[-1] + 1)
        team.settle()
        out["behind"] = [team.enqueued_behind(k) for k in calls]
        out["unknown"] = [team.enqueued_behind(0), team.enqueued_behind(calls[-1] + 1)]
        out["exact"] = bool(np.array_equal(get(g, size * n), np.repeat(np.arange(1.0, size + 1), n)))
        out["staged"] = team.phase_times()["staged"]
        # The same call in its met form (staged=False): it meets the other ranks, and is exact too.
        out["limit"] = team.stage_limit()
        h = put(np.zeros(size * n))
        team.allgather(a, h, n * 8, stream=stream, queued=queued, staged=False)
        team.settle()
        out["met_exact"] = bool(np.array_equal(get(h, size * n), np.repeat(np.arange(1.0, size + 1), n)))
        out["staged_after_met"] = team.phase_times()["staged"]
    elif scenario == "staged_behind_queued":
        n = 1 << 16
        a = put(np.full(n, rank + 1.0))
        g, h = put(np.zeros(size * n)), put(np.zeros(size * n))
        team.allgather(a, g, n * 8, stream=stream, queued=True)  # the slots' setup, on the caller's thread
        team.settle()
        staged, posted = team.phase_times()["staged"], team.queue_posted()
        if rank == 1:
            store.get("queue/posted/0")  # rank 0's two calls returned before this rank posts either
        team.allgather(a, h, n * 8, stream=stream, queued=True, staged=False)  # met: the worker meets rank 1
        team.allgather(a, g, n * 8, stream=stream, queued=True)                # stageable
        out["posted"] = team.queue_posted() - posted
        if rank == 0:
            store.set("queue/posted/0", b"1")
        team.settle()
        want = np.repeat(np.arange(1.0, size + 1), n)
        out["exact"] = bool(np.array_equal(get(g, size * n), want) and np.array_equal(get(h, size * n), want))
        out["staged"] = team.phase_times()["staged"] - staged
    elif scenario == "staged_peer_dies":
        a = put(np.full(N, rank + 1, np.float32))
        team.allreduce(a, a, N, "float32", "sum", stream=stream, queued=True)
        team.settle()
        out["first"] = float(get(a, N, np.float32)[0])
        out["staged"] = team.phase_times()["staged"]
        store.set("staged_first_done/%d" % rank, b"1")
        if rank == 1:
            store.get("staged_first_done/0")
            os._exit(0)  # gone after the slots' setup
        store.get("staged_first_done/1")
        time.sleep(0.5)
        # The call returns at once where its enqueue cannot block (CUDA) and the error comes at
        # settle(); the emulated reduction waits for its stream, so there the call itself fails.
        t0 = time.monotonic()
        try:
            team.allreduce(a, a, N, "float32", "sum", stream=stream, queued=True)
            team.settle()
            out["failed"] = "nowhere"
        except Exception as e:  # noqa: BLE001
            out["failed"] = str(e)
        out["failed_s"] = time.monotonic() - t0
        try:
            team.allreduce(a, a, N, "float32", "sum", stream=stream, queued=True)
            out["later"] = "returned"
        except Exception as e:  # noqa: BLE001
            out["later"] = str(e)
    print("QUEUE " + json.dumps(out), flush=True)
    if scenario in ("declined", "peer_dies", "staged_peer_dies"):
        os._exit(0)  # the team is broken: leave without closing it (its waits would time out again)


if __name__ == "__main__":
    main()
