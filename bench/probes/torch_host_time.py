#!/usr/bin/env python3
"""Host time of the torch backend's native calls on a machine without GPUs (CPU torch, the
emulated test mode: gpustripe.torch._test_emulate_cpu), two processes.

  --team stub      the team replaced by a stand-in that takes every call at once (and whose
                   GPUs are past every call), and the staging of the emulated mode left out:
                   what is timed is torch.distributed's wrapper and the backend's own Python
                   (the kind, the checks, _run, the call's end and its work)
  --team emulated  the real team on the emulated devices (threads and memcpy): its phases
                   (NodeTeam.phase_times) beside the call's time; the emulated streams' cost
                   is not a GPU's

  --resident       (with --team emulated) the tensors live in the emulated devices' memory (CPU
                   tensors over it), so no call stages its data or waits for it: the call's host
                   time as on GPUs, where the caller's thread only hands an asynchronous call to
                   the team's worker
  --compare-queue  (with --async-op) each op timed twice, through the team's worker (the
                   backend's way) and on the caller's thread (gpustripe.torch._test_queue off);
                   each batch's works waited for once, at its end: the issuing thread's time
  --lag-us L       rank 1 spins L us before each call: ranks whose threads drift apart, as DDP's
                   autograd threads do (a call made on the caller's thread waits for the later one)

Per op: the whole call (CPU time of the calling thread, the least of --batches batches: the
machine may be shared) and the backend's _run (trace()'s host_us, a mean). --async-op: each call
asks for a work (async_op=True, what DDP and FSDP issue) and waits for it, so the asynchronous
end (the tensors' hold, the work, its wait()) is timed too; without it, blocking calls.

  PYTHONPATH=<build>/python-dev python3 bench/probes/torch_host_time.py [--team stub] [--calls 20000]
"""
from __future__ import annotations

import argparse
import os
import socket
import time


class _StubTeam:
    """Takes every collective at once (returns True: served); its GPUs are past every call (each
    mark reports the one before it passed)."""

    def __init__(self):
        self.marks = 0

    def __getattr__(self, name):
        return lambda *a, **k: True

    def mark(self, index):
        self.marks += 1
        return 1 if self.marks > 1 else 0

    @staticmethod
    def marks_passed():
        return 0

    @staticmethod
    def phase_times(reset=False):
        return {}


def _resident_class():
    """The emulated mode's memory without its staging: the tensors' own addresses are the team's."""
    from gpustripe import _torch_call_end as ends

    class ResidentMem(ends._EmulatedMem):
        @staticmethod
        def ptrs(ts):
            return [t.data_ptr() for t in ts]

        @staticmethod
        def finish(ts):
            pass

    return ResidentMem


def _stub_mem(team, lock):
    """Resident memory whose end is the backend's own (no emulated stream of the team's)."""
    from gpustripe import _torch_call_end as ends

    class StubMem(_resident_class()):
        def __init__(self):
            ends._End.__init__(self, team, lock)
            self.dev, self._stream = 0, 1

    return StubMem()


def _resident_mem(team, rank, lock):
    """The emulated mode's memory without staging: the tensors are the emulated devices' memory."""
    return _resident_class()(team, rank, lock)


def _resident(ctx, dev, n, torch, keep):
    """A float32 CPU tensor of n elements over the emulated device `dev`'s memory."""
    import ctypes

    p = ctx.alloc_device(dev, n * 4)
    keep.append(p)
    return torch.frombuffer((ctypes.c_char * (n * 4)).from_address(p), dtype=torch.float32).fill_(1.0)


def _spin(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def _worker(rank, world, port, args):
    import torch
    import torch.distributed as dist

    import gpustripe.torch as gt

    gt._test_emulate_cpu()
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("cuda:gpustripe,cpu:gloo", rank=rank, world_size=world)
    pg = dist.group.WORLD
    if args.team == "stub":
        pg._team_obj = _StubTeam()
        pg._mem = _stub_mem(pg._team_obj, pg._lock)
    n = args.elements
    keep = []
    if args.resident:
        team = pg._team()
        pg._mem = _resident_mem(team, rank, pg._lock)
        x, y, z = (_resident(team.context, rank, m, torch, keep) for m in (n, n * world, n * world))
    else:
        x, y, z = torch.ones(n), torch.empty(n * world), torch.empty(n * world)
    a = args.async_op
    calls = {"all_reduce": lambda: dist.all_reduce(x, async_op=a),
             "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(y, x, async_op=a),
             "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(x, y, async_op=a),
             "all_to_all_single": lambda: dist.all_to_all_single(z, y, async_op=a),
             "broadcast": lambda: dist.broadcast(x, 0, async_op=a)}
    lag = args.lag_us if rank == 1 else 0.0
    if args.compare_queue:
        ops = {k: c for k, c in calls.items()}
    else:
        ops = {k: (lambda c=c: c().wait()) if a else c for k, c in calls.items()}
    per = max(args.calls // args.batches, 1)
    ways = (True, False) if args.compare_queue else (True,)
    for name, f in ops.items():
        row = []
        for queued in ways:
            gt._test_queue(pg, queued)
            for _ in range(20):
                w = f()
            if w is not None and hasattr(w, "wait"):
                w.wait()
            dist.barrier()
            pg.trace(reset=True)
            best = float("inf")
            for _ in range(args.batches):
                t0 = time.thread_time() if not args.compare_queue else time.perf_counter()
                for _ in range(per):
                    if lag:
                        _spin(lag)
                    w = f()
                t1 = time.thread_time() if not args.compare_queue else time.perf_counter()
                if args.compare_queue:
                    w.wait()  # the batch's calls, in order: its last one's work covers them
                    pg._mem.team.settle()
                best = min(best, (t1 - t0) / per * 1e6 - lag)
                dist.barrier()
            tr = pg.trace(reset=True)
            team = tr["team"]
            phases = ", ".join(f"{k} {team[k]:.1f}" for k in ("prepare", "exchange", "map", "enqueue", "drain")
                               if k in team)
            row.append((best, tr["host_us"][name]["us"], phases))
        if rank == 0:
            if args.compare_queue:
                (qb, qr, qp), (cb, cr, cp) = row
                print(f"{name:>24} worker {qb:8.2f} us  caller's thread {cb:8.2f} us  ratio {cb / qb:6.2f}x"
                      f"  (_run {qr:.2f} / {cr:.2f} us; team phases of the latter: {cp})", flush=True)
            else:
                best, run_us, phases = row[0]
                print(f"{name:>24} {best:9.2f} us  _run {run_us:8.2f} us"
                      + (f"  team: {phases}" if phases else ""), flush=True)
        dist.barrier()
    pg.shutdown()
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--team", choices=("stub", "emulated"), default="stub")
    p.add_argument("--calls", type=int, default=20000, help="timed calls per op (default 20000)")
    p.add_argument("--batches", type=int, default=5, help="batches the calls are split into (the least counts)")
    p.add_argument("--async-op", action="store_true",
                   help="calls with async_op=True, each work waited for (default: blocking calls)")
    p.add_argument("--elements", type=int, default=1024, help="float32 elements per rank (default 1024)")
    p.add_argument("--resident", action="store_true",
                   help="(--team emulated) tensors in the emulated devices' memory: no staging, no wait per call")
    p.add_argument("--compare-queue", action="store_true",
                   help="(--async-op) each op through the team's worker and on the caller's thread, wall time of "
                        "the issuing thread, one wait per batch")
    p.add_argument("--lag-us", type=float, default=0.0, help="rank 1 spins this long before each call (default 0)")
    args = p.parse_args()
    if args.compare_queue and not args.async_op:
        p.error("--compare-queue compares asynchronous calls: add --async-op")
    if args.resident and args.team != "emulated":
        p.error("--resident is a way of the emulated team: add --team emulated")
    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    what = ("asynchronous calls, one wait per batch, issuing thread's wall time per call (least of the batches)"
            if args.compare_queue else
            f"{'asynchronous calls (each work waited for)' if args.async_op else 'blocking calls'}: whole call (CPU "
            "time, least of the batches)")
    print(f"torch backend, native {what}, the backend's _run (mean); {args.team} team"
          f"{' (resident tensors)' if args.resident else ''}, 2 processes, {args.elements} float32 per rank"
          f"{f', rank 1 {args.lag_us:g} us late per call' if args.lag_us else ''}")
    mp.spawn(_worker, args=(2, port, args), nprocs=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
