"""Where a DDP step's time goes, per backend: the step with its gradient exchange, the same
step without it (DDP's no_sync: the compute alone), and with one bucket (every gradient
exchanged after the backward pass, no overlap), then a torch.profiler view of a few steps
(the GPU's busy time per stream, the host time of the collective calls), and what a warm step
asks of the gpustripe group (`calls`, `no_sync_calls`): the calls per step by op and element
type (DDP's buckets, and its module buffers' broadcasts at every forward where the model has
buffers), the native calls' host time and the team's phases per call (trace()) over those steps.
The backends take turns going first (nccl in the first repetition, gpustripe in the second): a
difference that follows the order is the machine's. One process per GPU:

    torchrun --nproc-per-node 2 bench/probes/ddp_profile.py --out DIR

Prints `DDPPROF {json}` on rank 0 and writes rank 0's Chrome traces to DIR.
"""
import argparse
import collections
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import train_ddp  # noqa: E402  (the models, batches and losses of the training example)
import gpustripe.torch  # noqa: E402,F401  (registers the backend)


_CALLS = collections.Counter()  # (op, dtype) -> calls that reached the gpustripe group's methods


def _count_calls() -> None:
    """Counts every call of the gpustripe group's collective methods by op and element type:
    what a step asks of the backend (DDP's buckets; its buffers' broadcasts at each forward)."""
    cls = gpustripe.torch.ProcessGroupGpustripe
    for op in ("allreduce", "broadcast", "allgather", "_allgather_base", "_reduce_scatter_base", "alltoall_base",
               "reduce", "barrier"):
        f = getattr(cls, op)

        def counted(self, *a, _f=f, _op=op, **k):
            ts = a[0] if a else None
            t = ts[0] if isinstance(ts, list) and ts and hasattr(ts[0], "dtype") else None
            _CALLS[(_op, str(t.dtype).replace("torch.", "") if t is not None else "")] += 1
            return _f(self, *a, **k)
        setattr(cls, op, counted)


def steps(model, opt, args, rank, dev, n, sync=True, calls=None):
    times = []
    for step in range(n):
        if step == 2 and calls is not None:
            _CALLS.clear()
            dist.group.WORLD.trace(reset=True)
        x, y = train_ddp.batch(args.model, args, step, rank, dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if sync:
            loss = train_ddp.loss_of(args.model, model, x, y)
            loss.backward()
        else:
            with model.no_sync():
                loss = train_ddp.loss_of(args.model, model, x, y)
                loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t0))
    if calls is not None:  # past the first two steps: calls per step, the native calls' host us and team phases
        tr = dist.group.WORLD.trace()
        calls.update({"per_step": {f"{op} {dt}": round(v / (n - 2), 2) for (op, dt), v in sorted(_CALLS.items())},
                      "host_us": tr["host_us"], "team": tr["team"]})
    return statistics.median(times[2:])


def profile(model, opt, args, rank, dev, path):
    from torch.profiler import ProfilerActivity, profile as prof_

    with prof_(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        steps(model, opt, args, rank, dev, 3)
    if rank == 0 and path:
        p.export_chrome_trace(path)
    busy = {}
    cpu_ops = {}
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            busy[e.name] = busy.get(e.name, 0.0) + e.device_time_total
        elif any(k in e.name for k in ("allreduce", "all_reduce", "broadcast", "nccl", "c10d")):
            c = cpu_ops.setdefault(e.name, [0, 0.0])
            c[0] += 1
            c[1] += e.cpu_time_total
    top = sorted(busy.items(), key=lambda kv: -kv[1])[:12]
    return {"gpu_us_top": [(k[:60], round(v, 1)) for k, v in top],
            "gpu_us_total": round(sum(busy.values()), 1),
            "cpu_ops": {k[:60]: (v[0], round(v[1] / max(v[0], 1), 1)) for k, v in cpu_ops.items()}}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--out", default="")
    args = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("cuda:gpustripe,cpu:gloo")
    rank = dist.get_rank()
    groups = {"nccl": dist.new_group(backend="nccl"), "gpustripe": dist.group.WORLD}
    _count_calls()
    from torch.nn.parallel import DistributedDataParallel as DDP

    out = {}
    for rep in range(2):
        for name, group in (groups.items() if rep == 0 else reversed(groups.items())):
            for bucket in (25, 1000):
                model = DDP(train_ddp.build(args.model, args).to(dev), device_ids=[local], process_group=group,
                            bucket_cap_mb=bucket)
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
                r = out.setdefault(f"{name} bucket {bucket}", {})
                counts = {} if name == "gpustripe" and rep == 1 else None
                r.setdefault("step_ms", []).append(round(steps(model, opt, args, rank, dev, args.steps, calls=counts), 2))
                if counts is not None:
                    r["calls"] = counts
                if bucket == 25:
                    counts = {} if name == "gpustripe" and rep == 1 else None
                    r.setdefault("no_sync_ms", []).append(
                        round(steps(model, opt, args, rank, dev, args.steps, sync=False, calls=counts), 2))
                    if counts is not None:
                        r["no_sync_calls"] = counts
                    if rep == 1:
                        path = os.path.join(args.out, f"ddp-{name}.json") if args.out else ""
                        r["profile"] = profile(model, opt, args, rank, dev, path)
                del model, opt
                torch.cuda.synchronize()
                if rank == 0:
                    print(name, bucket, r.get("step_ms"), r.get("no_sync_ms"), flush=True)
    if rank == 0:
        print("DDPPROF " + json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
