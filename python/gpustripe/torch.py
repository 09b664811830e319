"""torch.distributed backend ``gpustripe``: DDP, FSDP and plain collectives on gpustripe.

``import gpustripe.torch`` registers the backend; then, under torchrun (one process per GPU)::

    torch.distributed.init_process_group("cuda:gpustripe,cpu:gloo")   # or backend="gpustripe"

The ranks meet through the process group's store (gpustripe.team); CUDA tensors of ranks
that all sit on this node go through gpustripe's cross-process collectives (the MPI
interposer's schedules: src/mpi/coll_team.hpp), CPU tensors through gloo. Whatever is not
served natively falls through to NCCL inside the backend, with one line per reason and run
on rank 0: ranks on other nodes, types or operators the reduction kernels lack (int8,
uint8, bool, AVG of integers, PREMUL_SUM, bitwise ops), uneven all_to_all_single splits,
non-contiguous tensors, send/recv, CUDA graph capture, and the operations this backend does
not define (gather, scatter, alltoall of lists: the NCCL backend registered for CUDA serves
them through c10d's dispatch).

Stream ordering: a native collective first waits for the tensor's current stream, then runs
on gpustripe's own streams and returns once every rank's part is done, so work queued later
on any stream sees its result; ``async_op=True`` returns a completed work whose ``wait()``
has nothing left to order. Buffers are exported and mapped once per allocation (PyTorch's
caching allocator hands back the same segments; expandable segments included).

The backend is a Python ``torch.distributed.ProcessGroup`` (as torch's own test backends):
c10d hands it every collective of the group, and it dispatches by device and support.
"""
from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    ReduceOptions,
    ReduceScatterOptions,
    _create_work_from_future,
)
from torch.futures import Future

from .team import node_team

BACKEND = "gpustripe"

_DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int32: "int32",
    torch.int64: "int64",
}
_R = dist.ReduceOp.RedOpType if hasattr(dist.ReduceOp, "RedOpType") else dist.ReduceOp
_OPS = {_R.SUM: "sum", _R.PRODUCT: "prod", _R.MIN: "min", _R.MAX: "max", _R.AVG: "sum"}

_said: set[str] = set()


def _redop(opts) -> tuple:
    """(op type, gpustripe op name or None) of an options object's reduceOp."""
    op = opts.reduceOp
    t = getattr(op, "op", op)
    return t, _OPS.get(t)


def _done(result) -> dist.Work:
    fut = Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


class ProcessGroupGpustripe(dist.ProcessGroup):
    """The ``gpustripe`` backend of one process group (see the module's doc)."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        self._rank, self._size, self._store = rank, size, store
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size, timeout)
        self._nccl = None
        if dist.is_nccl_available() and torch.cuda.is_available():
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = timeout
            self._nccl = dist.ProcessGroupNCCL(dist.PrefixStore("nccl/", store), rank, size, opts)
        # Operations not defined here reach these through c10d's dispatch by device.
        for dev, kind, be in (("cpu", "GLOO", self._gloo), ("cuda", "NCCL", self._nccl)):
            if be is not None:
                self._register_backend(torch.device(dev), getattr(dist.ProcessGroup.BackendType, kind), be)
        # Served natively only when every rank sits on this node.
        me = f"{socket.gethostname()}/{_boot_id()}".encode()
        store.set(f"gpustripe/host/{rank}", me)
        self._local = all(store.get(f"gpustripe/host/{r}") == me for r in range(size)) and size > 1
        self._team_obj = None
        self.native_calls = 0  # collectives served by gpustripe (tests, benchmarks)
        if not self._local:
            self._say("ranks on other nodes (or one rank): every CUDA collective goes to NCCL")

    # -- c10d's questions ---------------------------------------------------------------
    def getBackendName(self) -> str:
        return BACKEND

    def name(self) -> str:
        return BACKEND

    def __repr__(self) -> str:
        return f"ProcessGroupGpustripe(rank {self._rank} of {self._size}, native={self._local})"

    # -- the team and the fallbacks -----------------------------------------------------
    def _team(self):
        # Made at the first CUDA collective, on every rank at the same call.
        if self._team_obj is None:
            self._team_obj = node_team(self._store, self._rank, self._size, prefix="gpustripe/team")
        return self._team_obj

    def _say(self, reason: str) -> None:
        if reason not in _said:
            _said.add(reason)
            if self._rank == 0:
                print(f"gpustripe.torch: {reason}", file=sys.stderr, flush=True)

    def _native_ok(self, tensors, what: str) -> bool:
        """Whether these CUDA tensors may go the native way (the same answer on every rank)."""
        if not self._local:
            return False
        if torch.cuda.is_current_stream_capturing():
            self._say(f"{what} during CUDA graph capture goes to NCCL")
            return False
        for t in tensors:
            if not t.is_contiguous():
                self._say(f"{what} of a non-contiguous tensor goes to NCCL")
                return False
        return True

    def _nccl_or_fail(self, what: str):
        if self._nccl is None:
            raise RuntimeError(f"gpustripe backend: {what} needs NCCL, which this torch does not have")
        return self._nccl

    def _served(self, result) -> dist.Work:
        self.native_calls += 1
        return _done(result)

    @staticmethod
    def _wait_for_producers(t: torch.Tensor) -> None:
        torch.cuda.current_stream(t.device).synchronize()

    def _dtype(self, t: torch.Tensor, what: str):
        dt = _DTYPES.get(t.dtype)
        if dt is None:
            self._say(f"{what} of {t.dtype} goes to NCCL (no gpustripe reduction kernel for it)")
        return dt

    def _reduction(self, opts, t: torch.Tensor, what: str):
        """(dtype name, op name, average) for the native path, or None."""
        dt = self._dtype(t, what)
        op_type, op = _redop(opts)
        if dt is None:
            return None
        if op is None:
            self._say(f"{what} with {op_type} goes to NCCL")
            return None
        avg = op_type == _R.AVG
        if avg and not t.is_floating_point():
            return None  # NCCL's answer (an error) for an average of integers
        return dt, op, avg

    # -- collectives --------------------------------------------------------------------
    def allreduce(self, tensors, opts=AllreduceOptions()):
        if not tensors[0].is_cuda:
            return self._gloo.allreduce(tensors, opts)
        fallback = []
        if self._native_ok(tensors, "all_reduce"):
            for t in tensors:
                red = self._reduction(opts, t, "all_reduce")
                if red is None:
                    fallback.append(t)
                    continue
                dt, op, avg = red
                self._wait_for_producers(t)
                p = t.data_ptr()
                if not self._team().allreduce(p, p, t.numel(), dt, op):
                    fallback.append(t)
                elif avg:
                    t.div_(self._size)
        else:
            fallback = list(tensors)
        if fallback:
            return self._nccl_or_fail("all_reduce").allreduce(fallback, opts)
        return self._served(list(tensors))

    def allreduce_coalesced(self, tensors, opts=AllreduceCoalescedOptions()):
        if not tensors[0].is_cuda:
            return self._gloo.allreduce_coalesced(tensors, opts)
        ar = AllreduceOptions()
        ar.reduceOp = opts.reduceOp
        for t in tensors:
            self.allreduce([t], ar).wait()
        return _done(list(tensors))

    def broadcast(self, tensors, opts=BroadcastOptions()):
        if not tensors[0].is_cuda:
            return self._gloo.broadcast(tensors, opts)
        if not self._native_ok(tensors, "broadcast"):
            return self._nccl_or_fail("broadcast").broadcast(tensors, opts)
        for i, t in enumerate(tensors):
            self._wait_for_producers(t)
            if not self._team().bcast(t.data_ptr(), t.numel() * t.element_size(), opts.rootRank):
                return self._nccl_or_fail("broadcast").broadcast(tensors[i:], opts)
        return self._served(list(tensors))

    def reduce(self, tensors, opts=ReduceOptions()):
        t = tensors[0]
        if not t.is_cuda:
            return self._gloo.reduce(tensors, opts)
        red = self._reduction(opts, t, "reduce") if len(tensors) == 1 and self._native_ok(tensors, "reduce") else None
        if red is not None:
            dt, op, avg = red
            self._wait_for_producers(t)
            root = opts.rootRank
            p = t.data_ptr()
            if self._team().reduce(p, p if self._rank == root else 0, t.numel(), dt, op, root):
                if avg and self._rank == root:
                    t.div_(self._size)
                return self._served(list(tensors))
        return self._nccl_or_fail("reduce").reduce(tensors, opts)

    def _allgather_base(self, output, input, opts=AllgatherOptions()):
        if not input.is_cuda:
            return self._gloo._allgather_base(output, input, opts)
        if output.numel() != input.numel() * self._size or output.dtype != input.dtype:
            raise ValueError(f"all_gather_into_tensor: output of {output.numel()} {output.dtype} for {self._size} "
                             f"inputs of {input.numel()} {input.dtype}")
        if self._native_ok([output, input], "all_gather_into_tensor"):
            self._wait_for_producers(input)
            if self._team().allgather(input.data_ptr(), output.data_ptr(), input.numel() * input.element_size()):
                return self._served([output])
        return self._nccl_or_fail("all_gather_into_tensor")._allgather_base(output, input, opts)

    all_gather_single = _allgather_base  # newer torch's name for it

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=AllgatherOptions()):
        for o, i in zip(outputs, inputs, strict=True):
            self._allgather_base(o, i, opts).wait()
        return _done(list(outputs))

    def allgather(self, output_lists, inputs, opts=AllgatherOptions()):
        if not inputs[0].is_cuda:
            return self._gloo.allgather(output_lists, inputs, opts)
        if len(inputs) == 1 and self._native_ok(inputs, "all_gather"):
            x = inputs[0]
            flat = torch.empty(self._size * x.numel(), dtype=x.dtype, device=x.device)
            self._wait_for_producers(x)
            if self._team().allgather(x.data_ptr(), flat.data_ptr(), x.numel() * x.element_size()):
                for o, piece in zip(output_lists[0], flat.view(self._size, -1), strict=True):
                    o.copy_(piece.view_as(o))
                return self._served(output_lists)
        return self._nccl_or_fail("all_gather").allgather(output_lists, inputs, opts)

    def _reduce_scatter_base(self, output, input, opts=ReduceScatterOptions()):
        if not input.is_cuda:
            return self._gloo._reduce_scatter_base(output, input, opts)
        if input.numel() != output.numel() * self._size:
            raise ValueError(f"reduce_scatter_tensor: input of {input.numel()} for {self._size} outputs of "
                             f"{output.numel()}")
        red = self._reduction(opts, input, "reduce_scatter_tensor") if self._native_ok(
            [output, input], "reduce_scatter_tensor") else None
        if red is not None and output.dtype == input.dtype:
            dt, op, avg = red
            self._wait_for_producers(input)
            if self._team().reduce_scatter(input.data_ptr(), output.data_ptr(), output.numel(), dt, op):
                if avg:
                    output.div_(self._size)
                return self._served([output])
        return self._nccl_or_fail("reduce_scatter_tensor")._reduce_scatter_base(output, input, opts)

    reduce_scatter_single = _reduce_scatter_base  # newer torch's name for it

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=ReduceScatterOptions()):
        for o, i in zip(outputs, inputs, strict=True):
            self._reduce_scatter_base(o, i, opts).wait()
        return _done(list(outputs))

    def reduce_scatter(self, outputs, input_lists, opts=ReduceScatterOptions()):
        if not outputs[0].is_cuda:
            return self._gloo.reduce_scatter(outputs, input_lists, opts)
        if len(outputs) == 1:
            flat = torch.cat([x.reshape(-1) for x in input_lists[0]])
            out = outputs[0]
            if out.is_contiguous():
                return self._reduce_scatter_base(out, flat, opts)
        return self._nccl_or_fail("reduce_scatter").reduce_scatter(outputs, input_lists, opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=AllToAllOptions()):
        if not input.is_cuda:
            return self._gloo.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)
        n = self._size
        rows = input.size(0) if input.dim() else 0
        even = rows % n == 0 and all(
            not s or all(v == rows // n for v in s) for s in (output_split_sizes, input_split_sizes))
        if not even:
            self._say("all_to_all_single with uneven splits goes to NCCL")
        elif output.numel() == input.numel() and self._native_ok([output, input], "all_to_all_single"):
            self._wait_for_producers(input)
            block = input.numel() * input.element_size() // n
            if self._team().alltoall(input.data_ptr(), output.data_ptr(), block):
                return self._served([output])
        return self._nccl_or_fail("all_to_all_single").alltoall_base(
            output, input, output_split_sizes, input_split_sizes, opts)

    all_to_all_single = alltoall_base  # newer torch's name for it

    def send(self, tensors, dst: int, tag: int = 0):
        if not tensors[0].is_cuda:
            return self._gloo.send(tensors, dst, tag)
        self._say("send/recv go to NCCL")
        return self._nccl_or_fail("send").send(tensors, dst, tag)

    def recv(self, tensors, src: int, tag: int = 0):
        if not tensors[0].is_cuda:
            return self._gloo.recv(tensors, src, tag)
        self._say("send/recv go to NCCL")
        return self._nccl_or_fail("recv").recv(tensors, src, tag)

    def recv_anysource(self, tensors, tag: int = 0):
        if not tensors[0].is_cuda:
            return self._gloo.recv_anysource(tensors, tag)
        return self._nccl_or_fail("recv").recv_anysource(tensors, tag)

    def barrier(self, opts=BarrierOptions()):
        # NCCL's barrier also waits for this rank's GPU work: so does this one.
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        self._gloo.barrier(BarrierOptions()).wait()  # opts may name a CUDA device: not gloo's
        return _done([])


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _create(store, rank: int, size: int, timeout: timedelta) -> ProcessGroupGpustripe:
    return ProcessGroupGpustripe(store, rank, size, timeout)


if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create, devices=["cuda"])

__all__ = ["BACKEND", "ProcessGroupGpustripe"]
