"""What a Python process group costs a DDP step by itself: the same training on NCCL's own group,
on a second NCCL group (the run's spread), on a Python ``ProcessGroup`` that defines no collective (torch's look-up of a
Python method, then c10d's dispatch to its NCCL backend), on a minimal one whose all_reduce and
broadcast hand every call straight to an NCCL backend (the floor of any backend written in Python:
torch's dispatch from DDP's reducer, on the autograd thread, into Python and back), and on the
gpustripe group with every kind of call decided for NCCL (its Python layer on top of that floor).
`--wrap fsdp` trains under FSDP instead (its all_gathers and reduce_scatters forwarded alike).

Why: a launch-bound GPT-2 DDP step through a gpustripe group whose every call went to NCCL ran
slower than on NCCL's group, its backward's host time longer. If the minimal forwarder loses as
much, the cost is the Python backend itself (a backend in C++ removes it); if only the gpustripe
group loses, it is the backend's own Python.

The copies' steps take turns (which goes first rotating), as examples/train_ddp.py's; one process
per GPU:

    torchrun --nproc-per-node 2 bench/probes/ddp_python_group.py [--layers 12 --seq 128 --batch 1] [--wrap fsdp]

Prints `DDPGROUP {json}` on rank 0: per copy the median step (ms), the host's median time per part
of the step (forward, backward, optimizer, the wait for the GPUs), and each copy's step against
NCCL's, paired per step.
"""
import argparse
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions, ReduceScatterOptions

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import train_ddp  # noqa: E402  (its models, batches and Trainer)
import gpustripe.torch  # noqa: E402  (registers the backend)


class Passthrough(dist.ProcessGroup):
    """A Python process group that defines no collective: every call reaches its NCCL backend
    through c10d's dispatch by device, after torch looked for a Python method of that name."""

    def __init__(self, store, rank: int, size: int, timeout):
        super().__init__(rank, size)
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        self._nccl = dist.ProcessGroupNCCL(dist.PrefixStore("fwd/", store), rank, size, opts)
        self._register_backend(torch.device("cuda"), dist.ProcessGroup.BackendType.NCCL, self._nccl)
        self._set_default_backend(dist.ProcessGroup.BackendType.NCCL)

    def getBackendName(self) -> str:
        return "forwarder"


class Forwarder(Passthrough):
    """All_reduce and broadcast (what DDP's steps call), all_gather_into_tensor and
    reduce_scatter_tensor (FSDP's) handed to NCCL through Python."""

    def allreduce(self, tensors, opts=dist.AllreduceOptions()):
        return self._nccl.allreduce(tensors, opts)

    def broadcast(self, tensors, opts=dist.BroadcastOptions()):
        return self._nccl.broadcast(tensors, opts)

    def _allgather_base(self, output, input, opts=AllgatherOptions()):
        return self._nccl._allgather_base(output, input, opts)

    def _reduce_scatter_base(self, output, input, opts=ReduceScatterOptions()):
        return self._nccl._reduce_scatter_base(output, input, opts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--bucket-mb", type=int, default=25)
    p.add_argument("--wrap", default="ddp", choices=["ddp", "fsdp"])
    a = p.parse_args()
    args = argparse.Namespace(model="gpt2", precision="fp32", optimizer="fused", **vars(a))

    dist.Backend.register_backend("forwarder", Forwarder, devices=["cuda"])
    dist.Backend.register_backend("passthrough", Passthrough, devices=["cuda"])
    rank, dev = train_ddp.start(args)
    gpustripe.torch._test_verdict(dist.group.WORLD, False)  # every kind of call handed to NCCL
    args.warm_steps = min(5, args.steps // 2)
    groups = [("nccl", args.nccl_group), ("nccl_again", dist.new_group(backend="nccl")),
              ("forwarder", dist.new_group(backend="forwarder")),
              ("passthrough", dist.new_group(backend="passthrough")), ("gpustripe_to_nccl", dist.group.WORLD)]
    runs = {name: train_ddp.Trainer(group, args, rank, dev) for name, group in groups}
    order = list(runs.values())
    for step in range(args.steps):
        k = step % len(order)
        for t in order[k:] + order[:k]:
            t.step(step)
    w = args.warm_steps

    def paired(name: str) -> float:
        return statistics.median(x / y for x, y in zip(runs["nccl"].times[w:], runs[name].times[w:]))
    out = {name: {"step_ms": round(1e3 * statistics.median(t.times[w:]), 3),
                  "speedup_paired": round(paired(name), 4),
                  "host_ms": {part: round(1e3 * statistics.median(v[w:]), 3) for part, v in t.parts.items()}}
           for name, t in runs.items()}
    ranks = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, out, group=args.nccl_group)
    if rank == 0:
        print("DDPGROUP " + json.dumps({"wrap": a.wrap, "layers": a.layers, "embd": a.embd, "seq": a.seq, "batch": a.batch,
                                         "steps": a.steps, "ranks": ranks}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
