#!/usr/bin/env python3
"""What a DDP step asks of the torch backend on the host, on a machine without GPUs: 2 processes,
CPU torch, gpustripe's emulated test mode (gpustripe.torch._test_emulate_cpu) against gloo.

A small model with module buffers (BatchNorm: float32 running statistics, an int64 counter, which
DDP broadcasts from rank 0 at every forward; `--norm layer`: none, as GPT-2's) and several
gradient buckets trains under DDP on a gpustripe group and on a gloo group of the same ranks. Per step, after warm-up, and per backend:
the step's forward and backward host time (least of the steps: the machine may be shared), and
for gpustripe what the step costs besides its collectives' own work:

  calls         the group's methods called per step, by op and element type (DDP's reducer and
                its buffer broadcasts)
  store         accesses of the process group's store per step (the team meets through it only
                at its setup)
  team          the team's calls per step, queued to its worker, start events and end events
                created per step (both pooled: none once warm)
  futures       futures handed to the completer thread per step (each wakes a Python thread)
  threads       Python threads alive

  PYTHONPATH=<build>/python-dev python3 bench/probes/ddp_host_cpu.py [--steps 30] [--buckets 4]

Prints one line per backend and `DDPHOST {json}` (rank 0).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import ddp_profile  # noqa: E402  (its count of the calls reaching the gpustripe group)


class _CountingStore:
    """The process group's store, counting its accesses by method."""

    def __init__(self, store):
        self._store, self.calls = store, collections.Counter()

    def __getattr__(self, name):
        f = getattr(self._store, name)

        def call(*a, **k):
            self.calls[name] += 1
            return f(*a, **k)
        return call


def _model(torch, width: int, blocks: int, norm: str):
    layers = []
    for _ in range(blocks):
        # BatchNorm keeps buffers, which DDP broadcasts at every forward; LayerNorm none (GPT-2's)
        n = torch.nn.BatchNorm1d(width) if norm == "batch" else torch.nn.LayerNorm(width)
        layers += [torch.nn.Linear(width, width), n, torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))


def _worker(rank, world, port, args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import gpustripe.torch as gt
    from gpustripe import _torch_call_end as ends

    torch.set_num_threads(1)
    gt._test_emulate_cpu()
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("cuda:gpustripe,cpu:gloo", rank=rank, world_size=world)
    pg = dist.group.WORLD
    store = pg._store = _CountingStore(pg._store)
    ddp_profile._count_calls()
    calls = ddp_profile._CALLS
    futures = [0]
    add = ends._Completer.add

    def counted_add(self, *a, **k):
        futures[0] += 1
        return add(self, *a, **k)
    ends._Completer.add = counted_add
    # host time of the backend's pieces, summed per step: the work's wait, get_future, the completer's
    # completion of a future (a Python thread holding the GIL)
    spent = collections.Counter()

    def timed(owner, name, key):
        f = getattr(owner, name)

        def call(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[key] += (time.perf_counter() - t) * 1e6
        setattr(owner, name, staticmethod(call) if isinstance(owner.__dict__.get(name), staticmethod) else call)
    timed(ends._Work, "wait", "work_wait_us")
    timed(ends._Work, "get_future", "get_future_us")
    timed(ends._EmulatedMem, "complete", "completer_us")
    timed(ends._EmulatedMem, "finish", "emulated_staging_us")
    # the end of the backward pass: from the last native call's return (on the autograd thread) to
    # backward()'s, where DDP's reducer waits for every bucket's future
    last_run = [0.0]
    run = pg._run

    def stamped(*a, **k):
        try:
            return run(*a, **k)
        finally:
            last_run[0] = time.perf_counter()
    pg._run = stamped

    width = args.width
    params = (width * width + width) * args.blocks
    bucket_mb = max(params * 4 / args.buckets / 2**20, 0.01)
    groups = {"gloo": dist.new_group(backend="gloo"), "gpustripe": pg}
    out = {}
    for name, group in groups.items():
        torch.manual_seed(0)
        model = DDP(_model(torch, width, args.blocks, args.norm), process_group=group, bucket_cap_mb=bucket_mb)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        fwd, bwd = [], []
        before = None
        for step in range(args.steps):
            if step == args.warmup:
                dist.barrier()
                calls.clear()
                store.calls.clear()
                futures[0] = 0
                spent.clear()
                pg.trace(reset=True)
                team = pg._team_obj
                before = (team.queue_stats(), team.marks_stats(), team.phase_times(False)["calls"]) if team else None
            x = torch.randn(args.batch, width, generator=torch.Generator().manual_seed(step * world + rank))
            opt.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            loss = model(x).square().mean()
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            if step >= args.warmup:
                fwd.append((t1 - t0) * 1e6)
                bwd.append((t2 - t1) * 1e6)
                if name == "gpustripe":
                    spent["backward_end_wait_us"] += (t2 - last_run[0]) * 1e6
        n = args.steps - args.warmup
        row = {"forward_us": min(fwd), "backward_us": min(bwd)}
        if name == "gpustripe":
            team = pg._team_obj
            q, m, c = team.queue_stats(), team.marks_stats(), team.phase_times(False)["calls"]
            q0, m0, c0 = before
            row.update({
                "calls_per_step": {f"{op} {dt}": v / n for (op, dt), v in sorted(calls.items())},
                "store_per_step": {k: v / n for k, v in store.calls.items()},
                "team_calls_per_step": (c - c0) / n,
                "queued_per_step": (q["queued"] - q0["queued"]) / n,
                "start_events_created_per_step": (q["events_created"] - q0["events_created"]) / n,
                "end_events_created_per_step": (m["events_created"] - m0["events_created"]) / n,
                "futures_per_step": futures[0] / n,
                "us_per_step": {**{k: v / n for k, v in spent.items()},
                                **{f"_run {op}": h["us"] * h["calls"] / n for op, h in pg.trace()["host_us"].items()}},
                "team_phases_us_per_call": {k: v for k, v in pg.trace()["team"].items() if k not in ("calls", "ordered")},
                "python_threads": [t.name for t in threading.enumerate()],
            })
        out[name] = row
        del model, opt
        dist.barrier()
    if rank == 0:
        for name, row in out.items():
            print(f"{name:>10}: forward {row['forward_us']:8.0f} us  backward {row['backward_us']:8.0f} us", flush=True)
        print("DDPHOST " + json.dumps(out), flush=True)
    pg.shutdown()
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5, help="steps not counted (the kinds' first calls, the mappings)")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--blocks", type=int, default=4, help="Linear+BatchNorm blocks")
    p.add_argument("--buckets", type=int, default=4, help="gradient buckets, about")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--norm", choices=("batch", "layer"), default="batch",
                   help="batch: module buffers (broadcast by DDP at every forward); layer: none, as GPT-2")
    args = p.parse_args()
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(2, port, args), nprocs=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
