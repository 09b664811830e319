"""Which all_reduce calls a DDP training makes on the gpustripe group, step by step, and which of
them the backend hands to NCCL (its calibration and review), with the training's own comparison
(examples/train_ddp.py, whose arguments this takes) beside it.

Why: a launch-bound GPT-2 DDP step through the gpustripe group ran slower than on NCCL's while
every kind of call its steps make had been handed to NCCL: the list shows what the steps call
and from which step on each kind goes to NCCL. `GPUSTRIPE_PROBE_NCCL_FROM=BYTES` hands every
all_reduce kind of at least that size to NCCL from its first call (no calibration): an A/B of one
kind's native calls against none.

    torchrun --nproc-per-node 2 bench/probes/ddp_calls.py --model gpt2 --batch 1 --seq 128 --steps 50 [--noise]

Prints `CALLS step N: [(MB, handed to NCCL), ...]` on rank 0 for the first and last steps, then
the training's `TRAIN {json}`.
"""
import atexit
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import train_ddp  # noqa: E402
import gpustripe.torch as gt  # noqa: E402

calls = collections.defaultdict(list)  # step -> [(MB, handed to NCCL)] of the gpustripe group's real calls
now = {"step": -1}
nccl_from = int(os.environ.get("GPUSTRIPE_PROBE_NCCL_FROM", "0"))

_step = train_ddp.Trainer.step


def step(self, s):
    now["step"] = s
    return _step(self, s)


_allreduce = gt.ProcessGroupGpustripe.allreduce


def allreduce(self, tensors, opts=gt.AllreduceOptions()):
    t = tensors[0]
    if self._forced is None:  # not one of the calibration's own calls
        calls[now["step"]].append((round(t.nbytes / 2**20, 2), gt._kind("all_reduce", t, t.nbytes) in self._delegated))
    return _allreduce(self, tensors, opts)


_native_way = gt.ProcessGroupGpustripe._native_way


def native_way(self, kind, tensors, redo, stage_bytes=0):
    if nccl_from and self._forced is None and kind[0] == "all_reduce" and tensors[0].nbytes >= nccl_from:
        self._delegated[kind] = self._nccl
        return False
    return _native_way(self, kind, tensors, redo, stage_bytes)


def report():
    if int(os.environ.get("RANK", "0")) == 0:
        last = max(calls, default=0)
        for s in sorted(calls):
            if s < 6 or s > last - 3:
                print(f"CALLS step {s}: {calls[s]}", flush=True)


gt.ProcessGroupGpustripe.allreduce = allreduce
gt.ProcessGroupGpustripe._native_way = native_way
atexit.register(report)
sys.argv[0] = "train_ddp.py"
train_ddp.main()
