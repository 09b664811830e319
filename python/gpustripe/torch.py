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

Stream ordering: a native collective runs on a worker thread of the group (one, so every
rank runs them in call order): it waits for an event recorded on the tensor's current stream
at the call, runs on gpustripe's own streams and completes the work once every rank's part
is done; ``wait()`` (and the work's future, which DDP uses) returns then, so anything queued
afterwards sees the result. The caller does not block: DDP's backward pass goes on while
its buckets are reduced. Buffers are exported and mapped once per allocation (PyTorch's
caching allocator hands back the same segments; expandable segments included).

The backend is a Python ``torch.distributed.ProcessGroup`` (as torch's own test backends):
c10d hands it every collective of the group, and it dispatches by device and support.
"""
from __future__ import annotations

import contextlib
import queue
import socket
import sys
import threading
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
_emulate_cpu = False


def _test_emulate_cpu(on: bool = True) -> None:
    """Test only: CPU tensors take the native path (staged through the emulated backend's
    device memory, which is what the team can map without GPUs) instead of gloo, so the
    backend's logic runs on a machine without GPUs. Call before init_process_group."""
    global _emulate_cpu
    _emulate_cpu = on


def _redop(opts) -> tuple:
    """(op type, gpustripe op name or None) of an options object's reduceOp."""
    op = opts.reduceOp
    t = getattr(op, "op", op)
    return t, _OPS.get(t)


def _done(result) -> dist.Work:
    fut = Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


class _Worker:
    """One thread running a group's native collectives in call order (every rank calls them in
    the same order, so every rank runs them in the same order)."""

    def __init__(self):
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = None
        self._pending = 0  # jobs submitted and not finished
        self._lock = threading.Lock()

    def idle(self) -> bool:
        with self._lock:
            return self._pending == 0

    def submit(self, job, result) -> Future:
        fut = Future()
        with self._lock:
            self._pending += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="gpustripe-collectives", daemon=True)
            self._thread.start()
        self._q.put((job, fut, result))
        return fut

    def drain(self) -> None:
        """Returns once every job submitted so far has finished."""
        if self._thread is not None:
            self.submit(lambda: None, None).wait()

    def _loop(self) -> None:
        while True:
            job, fut, result = self._q.get()
            try:
                job()
            except BaseException as e:  # noqa: BLE001  (handed to whoever waits for the work)
                error = e
            else:
                error = None
            with self._lock:
                self._pending -= 1
            if error is None:
                fut.set_result(result)
            else:
                fut.set_exception(error)


class _CudaMem:
    """CUDA tensors: their own memory, ordered after the caller's current stream."""

    @staticmethod
    def ready(t: torch.Tensor):
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(t.device))
        return ev.synchronize

    @staticmethod
    def ptrs(ts) -> list:
        return [t.data_ptr() for t in ts]

    @staticmethod
    def finish(ts) -> None:
        pass

    @staticmethod
    def sync(t: torch.Tensor) -> None:
        torch.cuda.current_stream(t.device).synchronize()


class _EmulatedMem:
    """Test only (_test_emulate_cpu): CPU tensors staged through the emulated devices' memory."""

    def __init__(self, team, dev: int):
        self.ctx, self.dev, self.held = team.context, dev, {}

    @staticmethod
    def ready(t: torch.Tensor):
        return lambda: None

    def ptrs(self, ts) -> list:
        out = []
        for i, t in enumerate(ts):
            n = max(t.numel() * t.element_size(), 1)
            key = (i, n)
            if key not in self.held:
                self.held[key] = self.ctx.alloc_device(self.dev, n)
            p = self.held[key]
            if t.numel():
                self.ctx.upload(p, self.dev, t.contiguous().view(torch.uint8).numpy().tobytes())
            out.append(p)
        return out

    def finish(self, ts) -> None:
        for i, t in enumerate(ts):
            n = t.numel() * t.element_size()
            if n:
                got = bytearray(self.ctx.download(self.held[(i, max(n, 1))], self.dev, n))
                t.view(torch.uint8).view(-1).copy_(torch.frombuffer(got, dtype=torch.uint8))

    @staticmethod
    def sync(t: torch.Tensor) -> None:
        pass


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
        self._emulated = _emulate_cpu
        self._mem = None
        self._worker = _Worker()
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

    def mapping_stats(self) -> dict:
        """The team's mappings of the other ranks' buffers (misses: mapped anew, hits: reused)."""
        return self._team_obj.mapping_stats() if self._team_obj is not None else {}

    # -- the native path ------------------------------------------------------------------
    def _team(self):
        # Made at the first native collective (on the worker thread), on every rank at the same call.
        if self._team_obj is None:
            self._team_obj = node_team(self._store, self._rank, self._size, prefix="gpustripe/team")
            self._mem = _EmulatedMem(self._team_obj, self._rank) if self._emulated else _CudaMem()
        return self._team_obj

    def _say(self, reason: str) -> None:
        if reason not in _said:
            _said.add(reason)
            if self._rank == 0:
                print(f"gpustripe.torch: {reason}", file=sys.stderr, flush=True)

    def _native_side(self, t: torch.Tensor) -> bool:
        """Whether t is memory of the native path's kind (CUDA; CPU in the emulated test mode)."""
        return t.is_cuda or (self._emulated and t.device.type == "cpu")

    def _native_ok(self, tensors, what: str) -> bool:
        """Whether these tensors may go the native way (the same answer on every rank)."""
        if not self._local:
            return False
        if tensors[0].is_cuda and torch.cuda.is_current_stream_capturing():
            self._say(f"{what} during CUDA graph capture goes to NCCL")
            return False
        for t in tensors:
            if not t.is_contiguous():
                self._say(f"{what} of a non-contiguous tensor goes to NCCL")
                return False
        return True

    def _other(self, t: torch.Tensor, what: str):
        """The backend serving what the native path does not (_other_backend), once the jobs
        still queued have run (a call's inputs may be a queued call's outputs)."""
        self._worker.drain()
        return self._other_backend(t, what)

    def _other_backend(self, t: torch.Tensor, what: str):
        """NCCL for CUDA tensors, gloo for CPU ones."""
        if not t.is_cuda:
            return self._gloo
        if self._nccl is None:
            raise RuntimeError(f"gpustripe backend: {what} needs NCCL, which this torch does not have")
        return self._nccl

    def _run(self, what: str, opts, tensors, native, fallback, after=None, result=None) -> dist.Work:
        """Queues a native collective: `native(team, ptrs)` (ptrs: of `tensors`) returns whether
        every rank took it; then `after()` (divisions, copies) runs; declined, `fallback()` runs
        the call on the other backend instead (on the worker thread: `fallback` must not drain it).
        The work completes once it is all done. A blocking call (async_op=False) with nothing
        queued runs here, without the hop to the worker thread."""
        t0 = tensors[0]
        ready = (_EmulatedMem if self._emulated else _CudaMem).ready(t0)
        dev = t0.device

        def job():
            ready()
            team = self._team()
            with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():
                if native(team, self._mem.ptrs(tensors)):
                    self._mem.finish(tensors)
                    self.native_calls += 1
                    if after is not None:
                        after()
                else:
                    self._say(f"{what}: a rank's buffer cannot be shared (gpustripe declined): such calls go to "
                              "NCCL")
                    fallback().wait()
                self._mem.sync(t0)

        result = list(tensors) if result is None else result
        if not getattr(opts, "asyncOp", True) and self._worker.idle():
            job()
            return _done(result)
        return _create_work_from_future(self._worker.submit(job, result))

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
        t = tensors[0]
        red = None
        if len(tensors) == 1 and self._native_side(t) and self._native_ok(tensors, "all_reduce"):
            red = self._reduction(opts, t, "all_reduce")
        if red is None:
            return self._other(t, "all_reduce").allreduce(tensors, opts)
        dt, op, avg = red
        return self._run("all_reduce", opts, [t], lambda team, p: team.allreduce(p[0], p[0], t.numel(), dt, op),
                         lambda: self._other_backend(t, "all_reduce").allreduce([t], opts),
                         after=(lambda: t.div_(self._size)) if avg else None)

    def allreduce_coalesced(self, tensors, opts=AllreduceCoalescedOptions()):
        if not self._native_side(tensors[0]):
            return self._other(tensors[0], "all_reduce_coalesced").allreduce_coalesced(tensors, opts)
        ar = AllreduceOptions()
        ar.reduceOp = opts.reduceOp
        works = [self.allreduce([t], ar) for t in tensors]
        for w in works[:-1]:
            w.wait()
        return works[-1]

    def broadcast(self, tensors, opts=BroadcastOptions()):
        t = tensors[0]
        if len(tensors) != 1 or not self._native_side(t) or not self._native_ok(tensors, "broadcast"):
            return self._other(t, "broadcast").broadcast(tensors, opts)
        root = opts.rootRank
        return self._run("broadcast", opts, [t], lambda team, p: team.bcast(p[0], t.numel() * t.element_size(), root),
                         lambda: self._other_backend(t, "broadcast").broadcast([t], opts))

    def reduce(self, tensors, opts=ReduceOptions()):
        t = tensors[0]
        red = None
        if len(tensors) == 1 and self._native_side(t) and self._native_ok(tensors, "reduce"):
            red = self._reduction(opts, t, "reduce")
        if red is None:
            return self._other(t, "reduce").reduce(tensors, opts)
        dt, op, avg = red
        root = opts.rootRank
        is_root = self._rank == root
        return self._run("reduce", opts, [t],
                         lambda team, p: team.reduce(p[0], p[0] if is_root else 0, t.numel(), dt, op, root),
                         lambda: self._other_backend(t, "reduce").reduce([t], opts),
                         after=(lambda: t.div_(self._size)) if avg and is_root else None)

    def _allgather_base(self, output, input, opts=AllgatherOptions()):
        if output.numel() != input.numel() * self._size or output.dtype != input.dtype:
            raise ValueError(f"all_gather_into_tensor: output of {output.numel()} {output.dtype} for {self._size} "
                             f"inputs of {input.numel()} {input.dtype}")
        if not self._native_side(input) or not self._native_ok([output, input], "all_gather_into_tensor"):
            return self._other(input, "all_gather_into_tensor")._allgather_base(output, input, opts)
        block = input.numel() * input.element_size()
        # input first: the emulated test mode copies results back in this order, the output last
        return self._run("all_gather_into_tensor", opts, [input, output],
                         lambda team, p: team.allgather(p[0], p[1], block),
                         lambda: self._other_backend(input, "all_gather_into_tensor")._allgather_base(
                             output, input, opts),
                         result=[output])

    all_gather_single = _allgather_base  # newer torch's name for it

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=AllgatherOptions()):
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        for w in works[:-1]:
            w.wait()
        return works[-1]

    def allgather(self, output_lists, inputs, opts=AllgatherOptions()):
        x = inputs[0]
        if len(inputs) != 1 or not self._native_side(x) or not self._native_ok(inputs, "all_gather"):
            return self._other(x, "all_gather").allgather(output_lists, inputs, opts)
        flat = torch.empty(self._size * x.numel(), dtype=x.dtype, device=x.device)
        outs = output_lists[0]

        def scatter_flat():
            for o, piece in zip(outs, flat.view(self._size, -1)):
                o.copy_(piece.view_as(o))

        block = x.numel() * x.element_size()
        return self._run("all_gather", opts, [x, flat], lambda team, p: team.allgather(p[0], p[1], block),
                         lambda: self._other_backend(x, "all_gather").allgather(output_lists, inputs, opts),
                         after=scatter_flat, result=output_lists)

    def _reduce_scatter_base(self, output, input, opts=ReduceScatterOptions()):
        if input.numel() != output.numel() * self._size:
            raise ValueError(f"reduce_scatter_tensor: input of {input.numel()} for {self._size} outputs of "
                             f"{output.numel()}")
        red = None
        if self._native_side(input) and output.dtype == input.dtype and self._native_ok(
                [output, input], "reduce_scatter_tensor"):
            red = self._reduction(opts, input, "reduce_scatter_tensor")
        if red is None:
            return self._other(input, "reduce_scatter_tensor")._reduce_scatter_base(output, input, opts)
        dt, op, avg = red
        return self._run("reduce_scatter_tensor", opts, [input, output],
                         lambda team, p: team.reduce_scatter(p[0], p[1], output.numel(), dt, op),
                         lambda: self._other_backend(input, "reduce_scatter_tensor")._reduce_scatter_base(
                             output, input, opts),
                         after=(lambda: output.div_(self._size)) if avg else None, result=[output])

    reduce_scatter_single = _reduce_scatter_base  # newer torch's name for it

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=ReduceScatterOptions()):
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        for w in works[:-1]:
            w.wait()
        return works[-1]

    def reduce_scatter(self, outputs, input_lists, opts=ReduceScatterOptions()):
        out = outputs[0]
        if len(outputs) != 1 or not self._native_side(out) or not out.is_contiguous():
            return self._other(out, "reduce_scatter").reduce_scatter(outputs, input_lists, opts)
        flat = torch.cat([x.reshape(-1) for x in input_lists[0]])
        return self._reduce_scatter_base(out, flat, opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=AllToAllOptions()):
        n = self._size
        rows = input.size(0) if input.dim() else 0
        even = rows % n == 0 and all(
            not s or all(v == rows // n for v in s) for s in (output_split_sizes, input_split_sizes))
        if not even:
            self._say("all_to_all_single with uneven splits goes to NCCL")
        if (not even or output.numel() != input.numel() or not self._native_side(input)
                or not self._native_ok([output, input], "all_to_all_single")):
            return self._other(input, "all_to_all_single").alltoall_base(
                output, input, output_split_sizes, input_split_sizes, opts)
        block = input.numel() * input.element_size() // n
        return self._run("all_to_all_single", opts, [input, output], lambda team, p: team.alltoall(p[0], p[1], block),
                         lambda: self._other_backend(input, "all_to_all_single").alltoall_base(
                             output, input, output_split_sizes, input_split_sizes, opts),
                         result=[output])

    all_to_all_single = alltoall_base  # newer torch's name for it

    def send(self, tensors, dst: int, tag: int = 0):
        if tensors[0].is_cuda:
            self._say("send/recv go to NCCL")
        return self._other(tensors[0], "send").send(tensors, dst, tag)

    def recv(self, tensors, src: int, tag: int = 0):
        if tensors[0].is_cuda:
            self._say("send/recv go to NCCL")
        return self._other(tensors[0], "recv").recv(tensors, src, tag)

    def recv_anysource(self, tensors, tag: int = 0):
        return self._other(tensors[0], "recv").recv_anysource(tensors, tag)

    def barrier(self, opts=BarrierOptions()):
        # NCCL's barrier also waits for this rank's GPU work: so does this one.
        self._worker.drain()
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
