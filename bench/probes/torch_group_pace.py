"""Why a calibrated gpustripe group's native calls ran a few microseconds slower than an
always-native group's in `gpustripe bench torch` (host-bound 1-16 MB calls, the same form): the
same blocking calls, back to back, on the calibrated default group (`cuda:gpustripe,cpu:gloo`), on a
second calibrated group (`gpustripe`, as the benchmark makes its own),
on an always-native group, and on the default group again with its calibration switched off
(`_test_always_native`: the same team, the calibrated path's Python steps skipped), beside NCCL,
their batches taking turns. If the default group with its calibration off runs as the always-native
group does, the calibrated path's steps cost it; if it stays as slow, its team does.

    torchrun --nproc-per-node 2 bench/probes/torch_group_pace.py [--sizes 1M,16M] [--calls 200] [--trials 7]

Prints `GROUPPACE {json}` on rank 0: per op and size, each group's median us per call (the
slowest rank's) and what the calibrated groups chose.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

import gpustripe.torch as gt
from gpustripe.benchmarks._p2p_common import parse_sizes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1M,16M")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--trials", type=int, default=7)
    a = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("cuda:gpustripe,cpu:gloo")
    world = dist.get_world_size()
    nccl = dist.new_group(backend="nccl")
    groups = {"default": dist.group.WORLD, "second": dist.new_group(backend="gpustripe"),
              "native": dist.new_group(backend="gpustripe"), "nccl": nccl}
    gt._test_always_native(groups["native"])
    out = {}
    for size in parse_sizes(a.sizes):
        x = torch.ones(size // 4, device="cuda")
        y = torch.empty_like(x)
        part, out_part = x[: x.numel() // world], y[: x.numel() // world]
        ops = {"allreduce": lambda g: dist.all_reduce(x, group=g),
               "reduce_scatter": lambda g: dist.reduce_scatter_tensor(out_part, x, group=g),
               "allgather": lambda g: dist.all_gather_into_tensor(y, part, group=g)}
        for op, fn in ops.items():
            for g in groups.values():
                for _ in range(40):  # a kind's first call calibrates it; then its review's calls
                    fn(g)
            torch.cuda.synchronize()
            runs = dict(groups, default_uncalibrated=groups["default"])
            got = {m: [] for m in runs}
            for trial in range(a.trials):
                names = list(runs)
                names = names[trial % len(names):] + names[: trial % len(names)]
                for m in names:
                    gt._test_always_native(groups["default"], m == "default_uncalibrated")
                    dist.barrier(group=nccl)
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(a.calls):
                        fn(runs[m])
                    torch.cuda.synchronize()
                    got[m].append((time.perf_counter() - t0) / a.calls * 1e6)
            gt._test_always_native(groups["default"], False)
            med = torch.tensor([statistics.median(got[m]) for m in runs], dtype=torch.float64, device="cuda")
            dist.all_reduce(med, op=dist.ReduceOp.MAX, group=nccl)
            chose = {}
            for m in ("default", "second"):
                c = [v for k, v in groups[m].trace().get("choices", {}).items() if k.startswith(
                    {"allreduce": "all_reduce ", "reduce_scatter": "reduce_scatter_tensor ",
                     "allgather": "all_gather_into_tensor "}[op]) and k.endswith(f"<{1 << (x.nbytes).bit_length()}B")]
                chose[m] = (c[0]["use"], c[0].get("form")) if c else None
            out[f"{op} {size}"] = {"us": dict(zip(runs, [round(v, 1) for v in med.tolist()])), "chose": chose}
            if dist.get_rank() == 0:
                print(op, size, out[f"{op} {size}"], flush=True)
    if dist.get_rank() == 0:
        print("GROUPPACE " + json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
