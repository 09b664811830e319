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


def _stub_mem(gt, team, lock):
    """The emulated mode's memory without its staging (the tensors' own addresses), its end the
    backend's own."""

    class StubMem(gt._EmulatedMem):
        def __init__(self):
            gt._End.__init__(self, team, lock)
            self.dev, self._stream = 0, 1

        @staticmethod
        def ptrs(ts):
            return [t.data_ptr() for t in ts]

        @staticmethod
        def finish(ts):
            pass

    return StubMem()


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
        pg._mem = _stub_mem(gt, pg._team_obj, pg._lock)
    n = args.elements
    x, y, z = torch.ones(n), torch.empty(n * world), torch.empty(n * world)
    a = args.async_op
    calls = {"all_reduce": lambda: dist.all_reduce(x, async_op=a),
             "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(y, x, async_op=a),
             "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(x, y, async_op=a),
             "all_to_all_single": lambda: dist.all_to_all_single(z, y, async_op=a),
             "broadcast": lambda: dist.broadcast(x, 0, async_op=a)}
    ops = {k: (lambda c=c: c().wait()) if a else c for k, c in calls.items()}
    per = max(args.calls // args.batches, 1)
    for name, f in ops.items():
        for _ in range(20):
            f()
        dist.barrier()
        pg.trace(reset=True)
        best = float("inf")
        for _ in range(args.batches):
            t0 = time.thread_time()
            for _ in range(per):
                f()
            best = min(best, (time.thread_time() - t0) / per * 1e6)
        tr = pg.trace(reset=True)
        if rank == 0:
            team = tr["team"]
            phases = ", ".join(f"{k} {team[k]:.1f}" for k in ("prepare", "exchange", "map", "enqueue", "drain")
                               if k in team)
            print(f"{name:>24} {best:9.2f} us  _run {tr['host_us'][name]['us']:8.2f} us"
                  + (f"  team: {phases}" if phases else ""), flush=True)
        dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--team", choices=("stub", "emulated"), default="stub")
    p.add_argument("--calls", type=int, default=20000, help="timed calls per op (default 20000)")
    p.add_argument("--batches", type=int, default=5, help="batches the calls are split into (the least counts)")
    p.add_argument("--async-op", action="store_true",
                   help="calls with async_op=True, each work waited for (default: blocking calls)")
    p.add_argument("--elements", type=int, default=1024, help="float32 elements per rank (default 1024)")
    args = p.parse_args()
    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"torch backend, native {'asynchronous calls (each work waited for)' if args.async_op else 'blocking calls'}, "
          f"{args.team} team, 2 processes, {args.elements} float32 per rank: "
          "whole call (CPU time, least of the batches), the backend's _run (mean)")
    mp.spawn(_worker, args=(2, port, args), nprocs=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
