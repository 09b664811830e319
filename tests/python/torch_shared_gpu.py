"""Two ranks sharing GPU 0 under torchrun (as where a job runs more ranks than the node has GPUs),
backend gpustripe serving every call natively (no calibration: NCCL refuses two ranks of one GPU):
uneven all_to_all_single (rows of 3, some blocks empty), blocking and asynchronous, and an
all_reduce and an all_gather, each against values every rank computes itself.

    torchrun --nproc-per-node 2 tests/python/torch_shared_gpu.py

Prints `TORCHSHARED {json}` per rank. Run by test_torch_backend.py on a machine with a GPU."""
import json
import os

import torch
import torch.distributed as dist

import gpustripe.torch

rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(0)
dev = torch.device("cuda", 0)
dist.init_process_group("cuda:gpustripe,cpu:gloo")
pg = dist.group.WORLD
gpustripe.torch._test_always_native(pg)
checks = []


def check(name: str, got: torch.Tensor, want: torch.Tensor, calls_before: int) -> None:
    torch.cuda.synchronize()
    checks.append({"check": name, "ok": bool(torch.equal(got, want)), "native": pg.native_calls == calls_before + 1})


def rows(i: int, j: int) -> int:  # rows rank i sends rank j
    return (i + 2 * j) % 3 * (j + 1)


def block(i: int, j: int) -> torch.Tensor:
    return (torch.arange(rows(i, j) * 3, dtype=torch.float32, device=dev) + 1000 * i + 100 * j).reshape(-1, 3)


ins = [rows(rank, j) for j in range(n)]
outs = [rows(i, rank) for i in range(n)]
z = torch.cat([block(rank, j) for j in range(n)])
want = torch.cat([block(i, rank) for i in range(n)])
for async_op in (False, True):
    for rep in range(3):
        before = pg.native_calls
        a = torch.full_like(want, -7.0)
        w = dist.all_to_all_single(a, z, outs, ins, async_op=async_op)
        if async_op:
            w.wait()
        check(f"all_to_all_single uneven splits{' async' if async_op else ''} {rep}", a, want, before)
count = 1 << 20
x = torch.arange(count, dtype=torch.float32, device=dev) + rank
before = pg.native_calls
a = x.clone()
dist.all_reduce(a)
check("all_reduce", a, sum(torch.arange(count, dtype=torch.float32, device=dev) + r for r in range(n)), before)
before = pg.native_calls
y = torch.empty(n * count, device=dev)
dist.all_gather_into_tensor(y, x)
check("all_gather_into_tensor", y, torch.cat([torch.arange(count, dtype=torch.float32, device=dev) + r
                                              for r in range(n)]), before)
print("TORCHSHARED " + json.dumps({"rank": rank, "checks": len(checks),
                                   "failed": [c for c in checks if not (c["ok"] and c["native"])]}), flush=True)
dist.destroy_process_group()
