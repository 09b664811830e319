"""What one collective call costs its caller through each group, on the GPUs: NCCL's own group,
a gpustripe group whose every kind of call is handed to NCCL (the calls a trained model's
review gave away: the backend's Python layer and torch's dispatch to a Python backend, then
NCCL's call), and the gpustripe group as it decides (calibrated per kind of call).

Why: a launch-bound training step through a gpustripe group whose every call went to NCCL ran
slower than the same step on NCCL's group (examples/train_ddp.py with FSDP): if the hand-over
costs the caller more than the few microseconds of its Python, it shows here per call.

For each op, size and form (async_op False as FSDP's reduce-scatter, True as DDP's and FSDP's
all-gathers), `--calls` calls back to back: the caller's host time per call (median over calls)
and the whole batch's time per call to the GPUs' end; groups take turns going first, `--trials`
rounds, medians printed side by side. One process per GPU:

    torchrun --nproc-per-node 2 bench/probes/torch_call_cost.py [--sizes 1M,32M] [--calls 100]
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

import gpustripe.torch  # noqa: F401  (registers the backend)
from gpustripe.benchmarks._p2p_common import parse_sizes


def _call(op: str, group, bufs, async_op: bool):
    out, inp = bufs
    if op == "all_gather_into_tensor":
        return dist.all_gather_into_tensor(out, inp, group=group, async_op=async_op)
    if op == "reduce_scatter_tensor":
        return dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG, group=group, async_op=async_op)
    return dist.all_reduce(inp, group=group, async_op=async_op)


def _buffers(op: str, nbytes: int, world: int, dev) -> tuple:
    n = nbytes // 4
    if op == "all_gather_into_tensor":
        return torch.empty(n * world, device=dev), torch.ones(n, device=dev)
    if op == "reduce_scatter_tensor":
        return torch.empty(n, device=dev), torch.ones(n * world, device=dev)
    return None, torch.ones(n, device=dev)


def _batch(op, group, bufs, async_op, calls) -> tuple:
    """(median host us per call, us per call to the GPUs' end) of `calls` calls back to back."""
    host = []
    torch.cuda.synchronize()
    dist.barrier(group=group)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        a = time.perf_counter()
        w = _call(op, group, bufs, async_op)
        host.append(time.perf_counter() - a)
        if w is not None:
            w.wait()
    torch.cuda.synchronize()
    total = time.perf_counter() - t0
    return 1e6 * statistics.median(host), 1e6 * total / calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1M,32M")
    p.add_argument("--ops", default="all_gather_into_tensor,reduce_scatter_tensor,all_reduce")
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--trials", type=int, default=5)
    args = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("cuda:gpustripe,cpu:gloo")
    world = dist.get_world_size()
    groups = {"nccl": dist.new_group(backend="nccl"),
              "handed_to_nccl": dist.new_group(backend="cuda:gpustripe,cpu:gloo"),
              "gpustripe": dist.group.WORLD}
    gpustripe.torch._test_verdict(groups["handed_to_nccl"], False)
    rows = []
    for op in args.ops.split(","):
        for size in parse_sizes(args.sizes):
            bufs = _buffers(op, size, world, dev)
            for async_op in (False, True):
                got = {g: [] for g in groups}
                for name, g in groups.items():  # warm-up: NCCL's setup, the calibration's choice
                    _batch(op, g, bufs, async_op, 10)
                names = list(groups)
                for trial in range(args.trials):
                    for name in (names if trial % 2 == 0 else names[::-1]):
                        got[name].append(_batch(op, groups[name], bufs, async_op, args.calls))
                row = {"op": op, "bytes": size, "async_op": async_op}
                for name, v in got.items():
                    row[name] = {"host_us": round(statistics.median(h for h, _ in v), 2),
                                 "call_us": round(statistics.median(c for _, c in v), 2)}
                rows.append(row)
                if dist.get_rank() == 0:
                    print(f"{op:24s} {size:>10d} async={int(async_op)}  " + "  ".join(
                        f"{n}: host {row[n]['host_us']:7.1f} call {row[n]['call_us']:8.1f}" for n in groups), flush=True)
    if dist.get_rank() == 0:
        print("CALLCOST " + json.dumps({"calls": args.calls, "trials": args.trials, "rows": rows}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
