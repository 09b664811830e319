"""The backend's plumbing with CPU tensors (gloo inside the backend), 2 processes through
torch.multiprocessing: init_process_group("cuda:gpustripe,cpu:gloo") gives a gpustripe group,
collectives called through torch.distributed reach it, DDP trains through it. Prints
`TORCHCPU {json}` per rank. Run by test_torch_backend.py where torch is installed."""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank: int, world: int, port: int) -> None:
    import gpustripe.torch as gt

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("cuda:gpustripe,cpu:gloo", rank=rank, world_size=world)
    checks = {}
    pg = dist.group.WORLD
    checks["group is gpustripe"] = isinstance(pg, gt.ProcessGroupGpustripe) and "gpustripe" in dist.get_backend()
    x = torch.full((4,), float(rank + 1))
    dist.all_reduce(x)
    checks["all_reduce"] = torch.equal(x, torch.full((4,), float(world * (world + 1) // 2)))
    out = torch.empty(2 * world)
    dist.all_gather_into_tensor(out, torch.full((2,), float(rank)))
    checks["all_gather_into_tensor"] = torch.equal(out, torch.arange(world).repeat_interleave(2).float())
    b = torch.full((3,), float(rank))
    dist.broadcast(b, src=1)
    checks["broadcast"] = torch.equal(b, torch.full((3,), 1.0))
    w = dist.all_reduce(torch.ones(2), async_op=True)
    checks["async work"] = w.wait() is not False
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 8) + rank).sum().backward()
        opt.step()
    ws = [torch.empty_like(model.module.weight) for _ in range(world)]
    dist.all_gather(ws, model.module.weight.detach())
    checks["ddp weights equal on every rank"] = all(torch.equal(ws[0], v) for v in ws)
    dist.barrier()
    print("TORCHCPU " + json.dumps({"rank": rank, "checks": checks}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(sys.argv[1]) if len(sys.argv) > 1 else 29811), nprocs=2)
