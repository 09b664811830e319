"""How long a DDP bucket's all_reduce holds the autograd thread inside a training step, against
how long the same call holds its caller back to back outside one (what the torch backend's
calibration batches time, `issue_us`, and its review weighs a kind's real calls against).

Why: the backend's review hands a kind to NCCL where its real calls, timed inside the step, held
their callers longer than NCCL's calls held theirs in the batches (docs/torch.md, "What is
open"); in DDP the buckets' staged calls held theirs 78-118 us against NCCL's 46-81 in the
batches. Whether NCCL's own calls hold the autograd thread as long inside the step was not
measured. This probe times them there: DDP with a communication hook (as the backend's calls
are, the reducer calls into Python for each bucket) whose all_reduce is timed on the host, then
the same all_reduce of the largest bucket's size back to back, as the batches make them.

One process per GPU, `--backend nccl` needs no gpustripe build:

    torchrun --nproc-per-node 2 bench/probes/ddp_call_hold.py [--backend nccl|gpustripe] [--model resnet50]

Prints one line `DDPHOLD {json}` per rank: the step's calls' host us (median, mean, 90th
percentile, count), the step time with the hook and without it (DDP's own C++ path), and the
back-to-back calls' mean host us per call (as `issue_us`).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from train_ddp import batch, build, loss_of  # noqa: E402


def steps_ms(model, opt, args, rank, dev, steps: int) -> float:
    """Median ms per training step (forward, backward, optimizer, the GPU's end)."""
    times = []
    for step in range(steps):
        x, y = batch(args.model, args, step, rank, dev)
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss_of(args.model, model, x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="nccl", choices=["nccl", "gpustripe"])
    p.add_argument("--model", default="resnet50", choices=["resnet50", "gpt2"])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=0, help="per GPU (default: gpt2 1, resnet50 32)")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    args = p.parse_args()
    args.batch = args.batch or (32 if args.model == "resnet50" else 1)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    if args.backend == "gpustripe":
        import gpustripe.torch  # noqa: F401 -- registers the backend

        dist.init_process_group("cuda:gpustripe,cpu:gloo")
    else:
        dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {"rank": rank, "backend": args.backend, "model": args.model}

    model = DDP(build(args.model, args).to(dev), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    out["step_ms_plain"] = steps_ms(model, opt, args, rank, dev, args.steps)

    held, sizes = [], []

    def hook(_state, bucket):
        buf = bucket.buffer().div_(world)
        t = time.perf_counter()
        work = dist.all_reduce(buf, async_op=True)
        held.append((time.perf_counter() - t) * 1e6)
        sizes.append(buf.nbytes)
        return work.get_future().then(lambda f: f.value()[0])

    model = DDP(build(args.model, args).to(dev), device_ids=[local])
    model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    steps_ms(model, opt, args, rank, dev, 5)  # DDP's buckets rebuilt after the first step; a kind's calibration
    held.clear()
    sizes.clear()
    out["step_ms_hook"] = steps_ms(model, opt, args, rank, dev, args.steps)
    ordered = sorted(held)
    out["in_step"] = {"calls": len(held), "median_us": statistics.median(held), "mean_us": statistics.fmean(held),
                      "p90_us": ordered[int(0.9 * (len(ordered) - 1))], "bucket_mb": sorted({s >> 20 for s in sizes})}

    # Back to back, as the calibration's batches: the largest bucket's size, 4 untimed, 32 timed.
    x = torch.zeros(max(sizes) // 4, device=dev)
    each = []
    for i in range(36):
        t = time.perf_counter()
        work = dist.all_reduce(x, async_op=True)
        if i >= 4:
            each.append((time.perf_counter() - t) * 1e6)
    work.wait()
    torch.cuda.synchronize()
    out["back_to_back"] = {"calls": len(each), "mean_us": statistics.fmean(each), "median_us": statistics.median(each)}
    print("DDPHOLD " + json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
