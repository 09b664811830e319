"""Where a DDP step's time goes, per backend: the step with its gradient exchange, the same
step without it (DDP's no_sync: the compute alone), and with one bucket (every gradient
exchanged after the backward pass, no overlap), then a torch.profiler view of a few steps
(the GPU's busy time per stream, the host time of the collective calls). In the second
repetition, `detail` and `no_sync_detail`: the host's time per part of the step (forward,
backward, optimizer: where a launch-bound step's time goes), and for gpustripe what a warm step
asks of the group: the calls per step by op and element type (DDP's buckets, and its module
buffers' broadcasts at every forward where the model has buffers), the native calls' host time
and the team's phases per call (trace()) over those steps, and the wait at the backward's end
(`backward_end_wait_us`: from the last native call's return to backward()'s, where DDP's
reducer waits for every bucket's future: the hosts' meeting for the last bucket).
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


def steps(model, opt, args, rank, dev, n, sync=True, detail=None, native=False):
    """The median step ms past the first two steps. `detail` (a dict) gets the host's time per part
    of the step (ms, medians: from the host's clock, no synchronize between the parts), and with
    `native` (the gpustripe group's model) what the steps asked of the group: calls per step, the
    native calls' host time, the team's phases per call, and the time from the last native call's
    return (DDP's reducer, on the autograd thread) to backward()'s (the reducer waits there for
    every bucket's future)."""
    times, parts, end_wait = [], {"forward": [], "backward": [], "optimizer": []}, []
    pg = dist.group.WORLD
    last = [0.0]
    if native:
        run = pg._run

        def stamped(*a, **k):
            try:
                return run(*a, **k)
            finally:
                last[0] = time.perf_counter()
        pg._run = stamped
    for step in range(n):
        if step == 2 and native:
            _CALLS.clear()
            pg.trace(reset=True)
        x, y = train_ddp.batch(args.model, args, step, rank, dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if sync:
            loss = train_ddp.loss_of(args.model, model, x, y)
            t1 = time.perf_counter()
            loss.backward()
        else:
            with model.no_sync():
                loss = train_ddp.loss_of(args.model, model, x, y)
                t1 = time.perf_counter()
                loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t0))
        for k, (a, b) in {"forward": (t0, t1), "backward": (t1, t2), "optimizer": (t2, t3)}.items():
            parts[k].append(1e3 * (b - a))
        if sync and native and step >= 2:
            end_wait.append(1e6 * (t2 - last[0]))
    if native:
        del pg._run  # the class's own again
    if detail is not None:
        detail["host_ms"] = {k: round(statistics.median(v[2:]), 3) for k, v in parts.items()}
        if native:  # past the first two steps
            tr = pg.trace()
            detail.update({"calls_per_step": {f"{op} {dt}": round(v / (n - 2), 2)
                                              for (op, dt), v in sorted(_CALLS.items())},
                           "host_us": tr["host_us"], "team": tr["team"]})
            if end_wait:
                detail["backward_end_wait_us"] = round(statistics.median(end_wait), 1)
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
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--out", default="")
    p.add_argument("--always-native", action="store_true",
                   help="the gpustripe group serves every call natively (no calibration against NCCL): what its "
                        "native calls cost the step")
    args = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("cuda:gpustripe,cpu:gloo")
    rank = dist.get_rank()
    groups = {"nccl": dist.new_group(backend="nccl"), "gpustripe": dist.group.WORLD}
    if args.always_native:
        gpustripe.torch._test_always_native(groups["gpustripe"])
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
                native = name == "gpustripe"
                detail = {} if rep == 1 else None
                r.setdefault("step_ms", []).append(
                    round(steps(model, opt, args, rank, dev, args.steps, detail=detail, native=native), 2))
                if detail is not None:
                    r["detail"] = detail
                if bucket == 25:
                    detail = {} if rep == 1 else None
                    r.setdefault("no_sync_ms", []).append(
                        round(steps(model, opt, args, rank, dev, args.steps, sync=False, detail=detail, native=native), 2))
                    if detail is not None:
                        r["no_sync_detail"] = detail
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
