#!/usr/bin/env python3
"""Host time of the torch backend's native calls on a machine without GPUs (CPU torch, the
emulated test mode: gpustripe.torch._test_emulate_cpu), two processes.

  --team stub      the team replaced by a stand-in that takes every call at once, and the
                   staging of the emulated mode left out: what is timed is torch.distributed's
                   wrapper and the backend's own Python (the kind, the checks, _run, the work)
  --team emulated  the real team on the emulated devices (threads and memcpy): its phases
                   (NodeTeam.phase_times) beside the call's time; the emulated streams' cost
                   is not a GPU's

Per op: the whole call (CPU time of the calling thread, the least of --batches batches: the
machine may be shared) and the backend's _run (trace()'s host_us, a mean).

  PYTHONPATH=<build>/python-dev python3 bench/probes/torch_host_time.py [--team stub] [--calls 20000]
"""
from __future__ import annotations

import argparse
import os
import socket
import time


class _StubTeam:
    """Takes every collective at once (returns True: served)."""

    def __getattr__(self, name):
        return lambda *a, **k: True

    @staticmethod
    def phase_times(reset=False):
        return {}


class _StubMem:
    """The emulated mode's memory without its staging: the tensors' own addresses."""

    @staticmethod
    def stream(t):
        return 1

    @staticmethod
    def ptrs(ts):
        return [t.data_ptr() for t in ts]

    @staticmethod
    def index(t):
        return 0

    @staticmethod
    def finish(ts):
        pass

    @staticmethod
    def release():
        pass

    @staticmethod
    def close():
        pass

    @staticmethod
    def done(tensors, result, dev, after, keep=()):
        import gpustripe.torch as gt

        if after is not None:
            after()
        return gt._done(result)


def _worker(rank, world, port, args):
    import torch
    import torch.distributed as dist

    import gpustripe.torch as gt

    gt._test_emulate_cpu()
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("cuda:gpustripe,cpu:gloo", rank=rank, world_size=world)
    pg = dist.group.WORLD
    if args.team == "stub":
        pg._team_obj, pg._mem = _StubTeam(), _StubMem()
    n = args.elements
    x, y, z = torch.ones(n), torch.empty(n * world), torch.empty(n * world)
    ops = {"all_reduce": lambda: dist.all_reduce(x),
           "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(y, x),
           "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(x, y),
           "all_to_all_single": lambda: dist.all_to_all_single(z, y),
           "broadcast": lambda: dist.broadcast(x, 0)}
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
    p.add_argument("--elements", type=int, default=1024, help="float32 elements per rank (default 1024)")
    args = p.parse_args()
    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"torch backend, native calls, {args.team} team, 2 processes, {args.elements} float32 per rank: "
          "whole call (CPU time, least of the batches), the backend's _run (mean)")
    mp.spawn(_worker, args=(2, port, args), nprocs=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
