"""torch.distributed backend ``gpustripe``: DDP, FSDP and plain collectives on gpustripe.

``import gpustripe.torch`` registers the backend; then, under torchrun (one process per GPU)::

    torch.distributed.init_process_group("cuda:gpustripe,cpu:gloo")   # or backend="gpustripe"

The ranks meet through the process group's store (gpustripe.team); CUDA tensors of ranks
that all sit on this node go through gpustripe's cross-process collectives (the MPI
interposer's schedules: src/mpi/coll_team.hpp), CPU tensors through gloo. Whatever is not
served natively falls through to NCCL inside the backend, with one line per reason and run
on rank 0: ranks on other nodes, types or operators the reduction kernels lack (int8,
uint8, bool, AVG of integers, PREMUL_SUM, bitwise ops), all_to_all_single splits that do not
cut the tensors, non-contiguous tensors, send/recv, CUDA graph capture, and the operations
this backend does not define (gather, scatter, alltoall of lists: the NCCL backend registered
for CUDA serves them through c10d's dispatch).

Stream ordering: a native collective is enqueued behind the tensor's current stream and
ahead of its later work, from C++ with the GIL released and no host wait for the GPUs (the
team's stream-ordered calls: src/mpi/coll_ordered.cpp); an asynchronous one is handed to the
team's worker thread, which meets the other ranks and enqueues it in call order, so the caller
(DDP's autograd thread) does not wait for the slower rank (src/mpi/node_team.hpp). Such a call
cannot go to NCCL once queued: one the ranks' meeting declines fails (raised at the next call or
wait). The work's ``wait()`` orders the caller's
current stream after it, as NCCL's does, and its future (made where torch asks for one) is
CUDA-aware, returned at once and completed off the caller's thread once the worker has enqueued
the call (_Completer). The call's end is marked in C++, its tensors held until that mark has
passed. A blocking call (``async_op=False``) has the caller's stream join its end instead and
returns no work.
Buffers are exported and mapped once per allocation (PyTorch's caching allocator hands
back the same segments; expandable segments included).

Where NCCL is faster: at the first call of each kind (an op, the memory's side, the element
type, sizes within a power of two: ``_kind``) every rank times batches of back-to-back calls of
both on zeroed buffers of that call's sizes, as the benchmarks time them (an asynchronous call
the team can stage through its slots in both its native forms, staged and met; a blocking one
staged), and every rank then
takes the one whose slowest rank was faster (``_Calibration``); what was chosen and why is in
``trace()``. The batches run after the ranks met, so a kind given to gpustripe is reviewed after
its first real calls: where the time they held their callers beyond what NCCL's calls hold
theirs (a blocking call above the staged sizes waits on the caller's thread for the slowest rank
to make it; a queued one's caller waits for the worker's meeting later), unless the GPUs were still busy with earlier work, with their pace outweighs
NCCL's pace, it goes to NCCL from then on. A kind decided for NCCL is then handed to it as it
came, after one lookup, and its work returned: such a call costs what it costs on a plain NCCL
group.

The backend is a Python ``torch.distributed.ProcessGroup`` (as torch's own test backends):
c10d hands it every collective of the group, and it dispatches by device and support.
"""
from __future__ import annotations

import collections
import math
import operator
import socket
import statistics
import sys
import threading
import time
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

from ._torch_calibration import _Calibration, _exposed, _max_over_ranks
from ._torch_call_end import _CudaMem, _EmulatedMem
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
# Keyed by the reduction type's value: an int's hash and comparison, where a pybind enum's cost a
# host-bound call's caller a few microseconds (bench/probes/torch_call_phases.py).
_OPS = {int(_R.SUM): "sum", int(_R.PRODUCT): "prod", int(_R.MIN): "min", int(_R.MAX): "max", int(_R.AVG): "sum"}
_AVG = int(_R.AVG)
# An options object's reduction type (older torch: its reduceOp is the type itself) and the
# type's value, read in C, no Python frame per call.
_type_of = operator.attrgetter("reduceOp.op" if hasattr(dist.ReduceOp, "RedOpType") else "reduceOp")
_value = operator.attrgetter("value") if hasattr(_R.SUM, "value") else int
# torch.cuda.is_current_stream_capturing without its Python layer (per call, as _OPS).
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing

_said: set[str] = set()
_emulate_cpu = False


def _test_always_native(pg, on: bool = True) -> None:
    """Tests and benchmarks only: the group `pg` serves every call it can natively, without
    the calibration against NCCL (to check, or time, the native path itself)."""
    pg._calibrate = not on


def _test_verdict(pg, native) -> None:
    """Tests only: every kind of call of the group `pg` is decided at its first call, without
    timing: gpustripe (True) or the other backend (False); None: measured (the default). Also
    on the emulated test mode, where the other backend is gloo: so the decided path, and the
    direct hand-over of a call decided for the other backend, run without GPUs."""
    pg._verdict = native


def _test_calibrate_emulated(pg, on: bool = True) -> None:
    """Tests only: on the emulated test mode, the group `pg` calibrates its kinds of call against
    the other backend there (gloo) instead of serving them all natively: a side whose calls are
    slower back to back loses."""
    pg._measure_emulated = on


def _test_queue(pg, on: bool = True) -> None:
    """Tests and benchmarks only: off, the group `pg` makes its asynchronous native calls on the
    caller's thread (the ranks' meeting and the enqueue there, as blocking ones), not through the
    team's worker: the caller's host time of both ways, side by side."""
    pg._queue = on


def _test_emulate_cpu(on: bool = True) -> None:
    """Test only: CPU tensors take the native path (staged through the emulated backend's
    device memory, which is what the team can map without GPUs) instead of gloo, so the
    backend's logic runs on a machine without GPUs. Call before init_process_group."""
    global _emulate_cpu
    _emulate_cpu = on


def _redop(opts) -> tuple:
    """(op type, its value, gpustripe op name or None) of an options object's reduceOp."""
    t = _type_of(opts)
    v = _value(t)
    return t, v, _OPS.get(v)


def _done_future(result):
    # torch._C.Future, not torch.futures.Future: the same future without its Python layer.
    fut = torch._C.Future([])
    fut.set_result(result)
    return fut


def _done(result) -> dist.Work:
    return _create_work_from_future(_done_future(result))


def _blocking(opts) -> bool:
    """Whether the caller asked for no work (async_op=False: torch's wrapper would wait for it at
    once); options of torch without the field are taken as asynchronous."""
    return not getattr(opts, "asyncOp", True)


def _kind(op: str, t: torch.Tensor, nbytes: int) -> tuple:
    """A kind of call, what the calibration decides for: the op, the memory's side (CUDA or
    not), the element type, and the size class (`nbytes`, the op's largest buffer, within a
    power of two)."""
    return op, t.is_cuda, t.dtype, nbytes.bit_length()


def _v_layout(t: torch.Tensor, splits, n: int):
    """(byte offsets, byte sizes, bytes per row) of the `n` blocks of dim 0 of the contiguous
    tensor `t` that `splits` (rows per rank; empty: equal) cut; None where they do not cut it."""
    rows = t.size(0) if t.dim() else 0
    splits = list(splits) if splits else ([rows // n] * n if rows % n == 0 else None)
    if splits is None or len(splits) != n or min(splits, default=0) < 0 or sum(splits) != rows:
        return None
    row = math.prod(t.shape[1:]) * t.element_size() if t.dim() else 0
    at, off = [], 0
    for k in splits:
        at.append(off)
        off += k * row
    return at, [k * row for k in splits], row


def _recent(calls) -> dict:
    """The recent calls' fields of trace()'s `host_us`: `calls` holds (backend call, team call,
    before the team call, after it) us."""
    if not calls:
        return {}
    return {"recent_calls": len(calls), "recent_us": statistics.median(c[0] for c in calls),
            "recent_mean_us": statistics.fmean(c[0] for c in calls), "recent_max_us": max(c[0] for c in calls),
            "recent_team_us": statistics.median(c[1] for c in calls),
            "recent_team_mean_us": statistics.fmean(c[1] for c in calls),
            "recent_team_max_us": max(c[1] for c in calls),
            "recent_before_mean_us": statistics.fmean(c[2] for c in calls),
            "recent_after_mean_us": statistics.fmean(c[3] for c in calls)}


class ProcessGroupGpustripe(dist.ProcessGroup):
    """The ``gpustripe`` backend of one process group (see the module's doc)."""

    RECENT_CALLS = 64  # the calls of an op that trace()'s recent fields cover (a few batches of a benchmark)

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
                # What c10d asks the group's default backend (its name, for torch's flight
                # recorder among others) is the one for CUDA where there is one, else gloo's.
                self._set_default_backend(getattr(dist.ProcessGroup.BackendType, kind))
        # Served natively only when every rank sits on this node.
        me = f"{socket.gethostname()}/{_boot_id()}".encode()
        store.set(f"gpustripe/host/{rank}", me)
        self._local = all(store.get(f"gpustripe/host/{r}") == me for r in range(size)) and size > 1
        self._team_obj = None
        self._emulated = _emulate_cpu
        self._mem = None
        self._lock = threading.Lock()  # one native call at a time (every rank runs them in call order)
        self._unjoined: set = set()     # devices whose caller's stream has not joined the latest native call
        self._calibrations: dict = {}   # kind of call (_kind) -> _Calibration
        self._idle_streams: dict = {}   # device index -> a stream for the review's events (_idle_stream)
        # Kinds of call the calibration gave to the other backend -> that backend: such a call is
        # handed to it as it came, after one lookup (its per-call cost is the other backend's).
        self._delegated: dict = {}
        self._calibrate = True           # off: native wherever it can (_test_always_native)
        self._verdict = None             # tests: every kind decided so without timing (_test_verdict)
        self._measure_emulated = False   # tests: calibrated against gloo (_test_calibrate_emulated)
        self._forced = None              # the calibration's calls: native (True) or not (False)
        self._forced_form = None         # and, native, of which form ("gpustripe" or "met": _Calibration)
        # Asynchronous native calls through the team's worker (off: on the caller's thread, _test_queue).
        # Not with torch's cudaMallocAsync allocator: its pool memory cannot be shared past a call,
        # every rank's team declines it, and only a call made on the caller's thread can then go
        # to NCCL (a queued one would fail).
        self._queue = not (torch.cuda.is_available()
                           and getattr(torch.cuda, "get_allocator_backend", lambda: "native")() == "cudaMallocAsync")
        # op -> [calls, and us summed: the backend's native call, the team's C++ call in it, its end;
        # the last RECENT_CALLS calls' (call, team call)]
        self._host_us: dict = {}
        self.native_calls = 0  # collectives served by gpustripe (tests, benchmarks)
        self._calibration_events = 0  # kinds timed and reviewed calls counted (calibration_events)
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

    def trace(self, reset: bool = False) -> dict:
        """Where the native calls' time goes: `host_us` (per op: calls, mean host time of the
        backend's call, us; of it `team_us` in the team's C++ call and `end_us` after it: the
        end on the team's stream, the work; and over the op's last RECENT_CALLS calls alone
        `recent_us`, `recent_mean_us` and `recent_max_us`, the median, the mean and the longest
        backend call (a mean far above the median: a few long calls), `recent_team_us`,
        `recent_team_mean_us` and `recent_team_max_us`, the same of the team call, and
        `recent_before_mean_us` and `recent_after_mean_us`, the backend's mean time before and
        after the team call (the group's lock, the review, the end): the means hold the
        calibration's and the review's calls, which the calls of a decided kind do not make),
        `team` (the team's phases per call: NodeTeam.phase_times) and `choices` (per op and size
        class: gpustripe or NCCL, the calibration's best batches, us per call back to back, the
        slowest rank's, and `paces`: this rank's pace of each timed batch of each side, in order,
        which tells a side's slow first batches from a steady gap; `issue_us`: each side's host
        time per call in the batches; `held_us`: the reviewed calls' exposed host time, once
        reviewed, and `held_calls`: this rank's each; for a kind the team can stage, `met`: its
        met form's best batch, `form`: the native form taken, and `met_held_us`: the met form's
        review where it handed the kind to the staged form)."""
        out = {"host_us": {k: {"calls": v[0], "us": v[1] / v[0], "team_us": v[2] / v[0], "end_us": v[3] / v[0],
                               **_recent(v[4])}
                           for k, v in self._host_us.items() if v[0]},
               "team": self._team_obj.phase_times(reset) if self._team_obj is not None else {},
               "choices": {f"{op} {str(dt).replace('torch.', '')} <{1 << b}B":
                           {"use": "gpustripe" if c.native else "nccl", **c.us,
                            **({"form": c.form} if "met" in c.sides else {}),
                            **({"met_held_us": c.met_reviewed} if c.met_reviewed is not None else {}),
                            "paces": {m: list(c.pace[m]) for m in c.sides},
                            **({"issue_us": dict(c.issue_us)} if c.issue_us else {}),
                            **({"held_us": c.reviewed, "held_calls": list(c.held_calls)}
                               if c.reviewed is not None else {})}
                           for (op, _, dt, b), c in self._calibrations.items() if c.native is not None}}
        if reset:
            self._host_us = {}
        return out

    def calibration_events(self) -> int:
        """How many times so far a kind of call was timed (its batches) or one of its calls counted
        for its review: while this grows, calls may run on the side a review then leaves (a
        training's first steps pay that once; a kind called too rarely to be reviewed stays
        under review without costing anything)."""
        return self._calibration_events

    def shutdown(self) -> None:
        """Ends the native side: waits for the calls in flight and closes the team (its streams,
        mappings and shared memory). A later native collective sets a new team up."""
        if self._mem is not None:
            self._mem.close()
        self._mem = None
        self._team_obj = None

    # -- the native path ------------------------------------------------------------------
    def _team(self):
        # Made at the first native collective, on every rank at the same call.
        if self._team_obj is None:
            self._team_obj = node_team(self._store, self._rank, self._size, prefix="gpustripe/team")
            self._mem = (_EmulatedMem(self._team_obj, self._rank, self._lock) if self._emulated
                         else _CudaMem(self._team_obj, self._lock))
        return self._team_obj

    def _say(self, reason: str) -> None:
        if reason not in _said:
            _said.add(reason)
            if self._rank == 0:
                print(f"gpustripe.torch: {reason}", file=sys.stderr, flush=True)

    def _native_side(self, t: torch.Tensor) -> bool:
        """Whether t is memory of the native path's kind (CUDA; CPU in the emulated test mode)."""
        return t.is_cuda or (self._emulated and t.device.type == "cpu")

    def _native_ok(self, tensors, what: str, empty: bool = False) -> bool:
        """Whether these tensors may go the native way (the same answer on every rank). `empty`:
        tensors without elements may (an uneven all_to_all_single's rank with nothing to send
        or receive: the other ranks' calls are not empty, and every rank must take one way)."""
        if not self._local:
            return False
        if tensors[0].is_cuda and _capturing():
            self._say(f"{what} during CUDA graph capture goes to NCCL")
            return False
        for t in tensors:
            if not t.is_contiguous():
                self._say(f"{what} of a non-contiguous tensor goes to NCCL")
                return False
            if not t.numel() and not empty:
                return False  # nothing to move; the team declines empty buffers
        return True

    def _other(self, t: torch.Tensor, what: str):
        """NCCL for CUDA tensors, gloo for CPU ones (what the native path does not serve)."""
        if not t.is_cuda:
            return self._gloo
        if self._nccl is None:
            raise RuntimeError(f"gpustripe backend: {what} needs NCCL, which this torch does not have")
        if self._unjoined:
            self._join(t)
        return self._nccl

    def _join(self, t: torch.Tensor) -> None:
        """NCCL runs a group's collectives in call order on its stream: so a call to it starts after
        the native calls before it (the caller's stream joins the team's), whose results it may read."""
        i = t.get_device()
        if i in self._unjoined:
            self._unjoined.discard(i)
            if self._mem is not None:  # none: the team ended, after every call it ran
                self._mem.wait(t.device)  # in C++, an event of the team's: no torch event or Stream object

    def _delegated_to(self, kind: tuple, t: torch.Tensor):
        """The backend the calibration gave this kind of call to; None: the call takes the full path
        (native, or not decided yet, or not served natively for another reason found there). The
        calibration's calls of the other side are handed over the same way (_forced): timed as
        such a kind's calls come once decided."""
        be = self._delegated.get(kind)
        if be is None and self._forced is False:
            be = self._nccl if t.is_cuda else self._gloo
        if be is not None and self._unjoined:
            self._join(t)
        return be

    def _native_way(self, kind: tuple, tensors, redo, stage_bytes: int = 0, blocking: bool = False) -> bool:
        """Whether this call goes the native way: where the calibration gave its kind to the
        other backend, no (the kind is then handed over directly from its next call on). A kind's
        first call decides it (_Calibration), every rank at the same call; not where there is
        nothing to choose (no NCCL, the emulated test mode) or the call is one of the
        calibration's own (_forced). `stage_bytes`: the call's part for one peer where the team
        can stage it (its slots take up to stage_limit()): on CUDA the calibration times its met
        form too, unless the kind's first call is `blocking`. A blocking met call meets the other
        hosts on the caller's thread, so each such call holds its caller until the slowest rank
        makes it: the ranks' hosts run in step, each call paying the larger of their delays, where
        a staged call (and NCCL's) returns once enqueued. The batches, timed after the ranks met,
        cannot see that, and a met form's review that then sent the kind staged left its staged
        calls slower than a kind staged from its first call ("What is open" in docs/torch.md)."""
        if self._forced is not None:
            return self._forced
        t = tensors[0]
        if not self._calibrate or (self._verdict is None and not self._measure_emulated
                                   and (self._emulated or self._nccl is None)):
            return True
        cal = self._calibrations.get(kind)
        if cal is None:
            met = False  # the forms differ in the GPUs' time: none to choose on the emulated node
            if self._verdict is None and stage_bytes and t.is_cuda and not blocking:
                with self._lock:
                    met = stage_bytes <= self._team().stage_limit()
            cal = self._calibrations[kind] = _Calibration(met=met)
            cal.native = self._verdict
            if cal.native is None:
                self._measure(cal, tensors, redo)
        if cal.native is False:
            self._delegated[kind] = self._nccl if t.is_cuda else self._gloo
        return cal.native

    def _idle_stream(self, dev: torch.device):
        """A stream of `dev` nothing else runs on: an event on it marks when the host got there."""
        s = self._idle_streams.get(dev.index)
        if s is None:
            s = self._idle_streams[dev.index] = torch.cuda.Stream(dev)
        return s

    def _review(self, kind: tuple, cal: _Calibration, host_us: float, exposed=None, meeting=None,
                queued_behind=None) -> None:
        """A real native call of `kind`, whose calibration `cal` is under review, that held its
        caller `host_us` (`exposed`, `meeting`, `queued_behind`: as _Calibration.held's): at the
        kind's review (_Calibration.review, collective), handed to NCCL from the next call on where
        the time its calls held their callers beyond NCCL's, with their pace, outweighs NCCL's
        pace (a met form to the staged one first, where that was no slower than NCCL)."""
        self._calibration_events += 1
        if not cal.held(host_us, exposed, meeting, queued_behind):
            return
        form = cal.form
        if cal.review(self._gloo):
            if cal.form != form:
                self._say(f"{kind[0]} of {str(kind[2]).replace('torch.', '')} up to {1 << kind[3]} B goes staged: "
                          f"its met calls held their callers {cal.met_reviewed:.0f} us each (the staged "
                          f"calls {cal.issue_us.get('gpustripe', 0):.0f}, NCCL's {cal.issue_us.get('nccl', 0):.0f}) "
                          f"and take {cal.us['met']:.0f} us, "
                          f"staged {cal.us['gpustripe']:.0f}, NCCL's {cal.us['nccl']:.0f}")
        else:
            self._delegated[kind] = self._nccl if kind[1] else self._gloo
            self._say(f"{kind[0]} of {str(kind[2]).replace('torch.', '')} up to {1 << kind[3]} B goes to NCCL: "
                      f"its calls held their callers {cal.reviewed:.0f} us each "
                      f"(NCCL's {cal.issue_us.get('nccl', 0):.0f}) "
                      f"and take {cal.us[cal.form]:.0f} us, NCCL's {cal.us['nccl']:.0f}")

    def _measure(self, cal: _Calibration, tensors, redo) -> None:
        """Decides `cal` from batches of calls of each side (_Calibration.measure) made by
        `redo(buffers)` (the op again, on other buffers of the same sizes) on zeroed buffers like
        `tensors`: the caller's tensors keep their values, and repeated reductions of zeros stay
        finite."""
        self._calibration_events += 1
        scratch = [torch.zeros_like(t) for t in tensors]
        dev = tensors[0].device

        def issue(side: str):
            self._forced = side != "nccl"
            self._forced_form = side if self._forced else None
            try:
                return redo(scratch)
            finally:
                self._forced = self._forced_form = None

        def sync(work) -> None:
            if work is not None:
                work.wait()  # the other backend's CPU work completes on its own thread
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)  # the native calls end on the team's stream, NCCL's on its own

        cal.measure(issue, sync, lambda: self._gloo.barrier(BarrierOptions()).wait(),
                    agree=lambda paces: _max_over_ranks(self._gloo, paces))
        cal.decide(self._gloo)

    def _run(self, what: str, kind: tuple, tensors, native, fallback, after=None, result=None,
             keep=(), redo=None, blocking=False, stage_bytes=0):
        """A collective on the native path: `native(team, ptrs, stream, queued, joined, staged)`
        (ptrs: of `tensors`; stream: the caller's; queued: handed to the team's worker, True or
        raises; joined: run on the caller's stream itself, for a blocking call; staged: False where
        the kind's form is the met one, `stage_bytes` its part for one peer where it has both:
        _Calibration) enqueues it and
        returns whether every rank took it; then `after()`
        (divisions, copies) is enqueued on the team's stream. `tensors` (and `keep`, what after()
        writes) are held until the team's stream is past the call; the work's value is `result`
        (default: `tensors`). Declined, or where NCCL is faster for this kind of call
        (_Calibration: `kind` is the op's _kind), `fallback()` runs it on the other backend.
        `redo(buffers)`: the same call on other buffers like `tensors` (the calibration's).
        `blocking` (the caller does not want a work: async_op=False): the caller's stream joins the
        call's end instead, and the call returns None, which torch's wrappers take as a call that
        synchronised itself: no future, no event, no stream switch, no tensors held (the caller's
        stream, where their blocks are reused, is past the call)."""
        t0 = tensors[0]
        dev = t0.device
        result = tensors if result is None else result
        if not self._native_way(kind, tensors, redo, stage_bytes, blocking):
            return fallback()  # None: a blocking call NCCL ran on the caller's stream
        # The kind's calibration (none for the calibration's own calls, whose form is _forced_form).
        cal = self._calibrations.get(kind) if self._forced is None else None
        staged = (self._forced_form if self._forced else getattr(cal, "form", "gpustripe")) != "met"
        t_host = time.perf_counter()
        # A kind under review (_review): on CUDA, how long before the call returned the caller's
        # stream ran out of earlier work (an event before the call on it, one on an idle stream
        # after the call, timed against each other by the GPU).
        review = cal if cal is not None and cal.under_review() else None
        before, t_review = None, t_host
        if review is not None and t0.is_cuda:
            before = torch.cuda.Event(enable_timing=True)
            before.record(torch.cuda.current_stream(dev))
            # The review times the call from here: NCCL's calls it is weighed against were timed
            # without an event of their own (issue_us), so this one's is not the call's.
            t_review = time.perf_counter()
        # One native call at a time, its end marked (done()) before the next one starts: the
        # held tensors and the stream context of the team's stream are the group's, not a thread's.
        with self._lock:
            team = self._team()
            ptrs, stream = self._mem.ptrs(tensors), self._mem.stream(t0)
            t_call = time.perf_counter()
            # An asynchronous call goes to the team's worker, which meets the other ranks and
            # enqueues it (a call it cannot take then fails: it cannot go another way once the
            # caller went on); a blocking one runs here, after the queued ones, and may be declined.
            queued = not blocking and self._queue
            # A reviewed call's job, where the worker takes it (a staged call it does not: the
            # caller's thread enqueues that one): its meeting counts in the review.
            posted = team.queue_posted() if review is not None and queued else None
            # A blocking one runs on the caller's stream itself (joined): its later work follows.
            if t0.is_cuda and torch._C._cuda_getDevice() != dev.index:
                # The default stream's handle names the current device's: make it the tensor's.
                with torch.cuda.device(dev):
                    served = native(team, ptrs, stream, queued, blocking, staged)
            else:
                served = native(team, ptrs, stream, queued, blocking, staged)
            t_end = time.perf_counter()
            # A reviewed call's number among the team's stream-ordered calls: whether it was enqueued
            # while the team's call before it still ran on the GPUs is asked at the review.
            ordered = team.ordered_calls() if review is not None and served else 0
            job = None
            if posted is not None:
                last = team.queue_posted()
                job = last if last > posted else None  # none: the call was staged on this thread
            if served:
                self._mem.finish(tensors)
                self.native_calls += 1
                if t0.is_cuda:
                    self._unjoined.add(dev.index)
                if blocking:
                    self._mem.release()
                    if after is not None:
                        after()  # on the caller's stream, past the call's end
                    work = None
                else:
                    # its end: on the team's stream, where the call ends
                    work = self._mem.done(tensors, result, dev, after, keep)
        if not served:
            self._say(f"{what}: a rank's buffer cannot be shared (gpustripe declined): such calls go to NCCL")
            work = fallback()
        elif review is not None:
            # the whole call, as issue_us times NCCL's; a queued one's meeting asked at the review
            self._review(kind, review, (time.perf_counter() - t_review) * 1e6,
                         _exposed(before, self._idle_stream(dev)) if before is not None else None,
                         (lambda: team.queue_latency_us(job)) if job else None,
                         (lambda: team.enqueued_behind(ordered)) if ordered else None)
        t_done = time.perf_counter()
        h = self._host_us.get(what)
        if h is None:
            h = self._host_us[what] = [0, 0.0, 0.0, 0.0, collections.deque(maxlen=self.RECENT_CALLS)]
        h[0] += 1
        h[1] += (t_done - t_host) * 1e6
        h[2] += (t_end - t_call) * 1e6
        h[3] += (t_done - t_end) * 1e6
        h[4].append(((t_done - t_host) * 1e6, (t_end - t_call) * 1e6, (t_call - t_host) * 1e6, (t_done - t_end) * 1e6))
        return work

    def _dtype(self, t: torch.Tensor, what: str):
        dt = _DTYPES.get(t.dtype)
        if dt is None:
            self._say(f"{what} of {t.dtype} goes to NCCL (no gpustripe reduction kernel for it)")
        return dt

    def _reduction(self, opts, t: torch.Tensor, what: str):
        """(dtype name, op name, average) for the native path, or None."""
        dt = self._dtype(t, what)
        op_type, value, op = _redop(opts)
        if dt is None:
            return None
        if op is None:
            self._say(f"{what} with {op_type} goes to NCCL")
            return None
        avg = value == _AVG
        if avg and not t.is_floating_point():
            return None  # NCCL's answer (an error) for an average of integers
        return dt, op, avg

    # -- collectives --------------------------------------------------------------------
    # Each op first names its kind of call (_kind) and, where the calibration gave that kind to
    # the other backend, hands the call to it as it came: no checks, events, stream joins or
    # bookkeeping of ours (the checks would send it there too).
    def allreduce(self, tensors, opts=AllreduceOptions()):
        t = tensors[0]
        kind = _kind("all_reduce", t, t.nbytes)
        be = self._delegated_to(kind, t)
        if be is not None:
            return be.allreduce(tensors, opts)
        red = None
        if len(tensors) == 1 and self._native_side(t) and self._native_ok(tensors, "all_reduce"):
            red = self._reduction(opts, t, "all_reduce")
        if red is None:
            return self._other(t, "all_reduce").allreduce(tensors, opts)
        dt, op, avg = red
        return self._run("all_reduce", kind, [t],
                         lambda team, p, st, q, j, s: team.allreduce(p[0], p[0], t.numel(), dt, op, stream=st,
                                                                     queued=q, joined=j, staged=s),
                         lambda: self._other(t, "all_reduce").allreduce([t], opts),
                         after=(lambda: t.div_(self._size)) if avg else None,
                         redo=lambda b: self.allreduce(b, opts),
                         blocking=_blocking(opts), stage_bytes=t.nbytes)

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
        kind = _kind("broadcast", t, t.nbytes)
        be = self._delegated_to(kind, t)
        if be is not None:
            return be.broadcast(tensors, opts)
        if len(tensors) != 1 or not self._native_side(t) or not self._native_ok(tensors, "broadcast"):
            return self._other(t, "broadcast").broadcast(tensors, opts)
        root = opts.rootRank
        return self._run("broadcast", kind, [t],
                         lambda team, p, st, q, j, s: team.bcast(p[0], t.numel() * t.element_size(), root, stream=st, queued=q, joined=j),
                         lambda: self._other(t, "broadcast").broadcast([t], opts),
                         redo=lambda b: self.broadcast(b, opts),
                         blocking=_blocking(opts))

    def reduce(self, tensors, opts=ReduceOptions()):
        t = tensors[0]
        kind = _kind("reduce", t, t.nbytes)
        be = self._delegated_to(kind, t)
        if be is not None:
            return be.reduce(tensors, opts)
        red = None
        if len(tensors) == 1 and self._native_side(t) and self._native_ok(tensors, "reduce"):
            red = self._reduction(opts, t, "reduce")
        if red is None:
            return self._other(t, "reduce").reduce(tensors, opts)
        dt, op, avg = red
        root = opts.rootRank
        is_root = self._rank == root
        return self._run("reduce", kind, [t],
                         lambda team, p, st, q, j, s: team.reduce(p[0], p[0] if is_root else 0, t.numel(), dt, op, root,
                                                         stream=st, queued=q, joined=j),
                         lambda: self._other(t, "reduce").reduce([t], opts),
                         after=(lambda: t.div_(self._size)) if avg and is_root else None,
                         redo=lambda b: self.reduce(b, opts),
                         blocking=_blocking(opts))

    def _allgather_base(self, output, input, opts=AllgatherOptions()):
        if output.numel() != input.numel() * self._size or output.dtype != input.dtype:
            raise ValueError(f"all_gather_into_tensor: output of {output.numel()} {output.dtype} for {self._size} "
                             f"inputs of {input.numel()} {input.dtype}")
        kind = _kind("all_gather_into_tensor", input, output.nbytes)
        be = self._delegated_to(kind, input)
        if be is not None:
            return be._allgather_base(output, input, opts)
        if not self._native_side(input) or not self._native_ok([output, input], "all_gather_into_tensor"):
            return self._other(input, "all_gather_into_tensor")._allgather_base(output, input, opts)
        block = input.numel() * input.element_size()
        # input first: the emulated test mode copies results back in this order, the output last
        return self._run("all_gather_into_tensor", kind, [input, output],
                         lambda team, p, st, q, j, s: team.allgather(p[0], p[1], block, stream=st, queued=q, joined=j,
                                                                     staged=s),
                         lambda: self._other(input, "all_gather_into_tensor")._allgather_base(
                             output, input, opts),
                         result=[output], redo=lambda b: self._allgather_base(b[1], b[0], opts),
                         blocking=_blocking(opts), stage_bytes=block)

    all_gather_single = _allgather_base  # newer torch's name for it

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=AllgatherOptions()):
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        for w in works[:-1]:
            w.wait()
        return works[-1]

    def allgather(self, output_lists, inputs, opts=AllgatherOptions()):
        x = inputs[0]
        kind = _kind("all_gather", x, x.nbytes * self._size)
        be = self._delegated_to(kind, x)
        if be is not None:
            return be.allgather(output_lists, inputs, opts)
        if len(inputs) != 1 or not self._native_side(x) or not self._native_ok(inputs, "all_gather"):
            return self._other(x, "all_gather").allgather(output_lists, inputs, opts)
        flat = torch.empty(self._size * x.numel(), dtype=x.dtype, device=x.device)
        outs = output_lists[0]

        def scatter_flat():
            for o, piece in zip(outs, flat.view(self._size, -1)):
                o.copy_(piece.view_as(o))

        block = x.numel() * x.element_size()
        return self._run("all_gather", kind, [x, flat],
                         lambda team, p, st, q, j, s: team.allgather(p[0], p[1], block, stream=st, queued=q, joined=j,
                                                                     staged=s),
                         lambda: self._other(x, "all_gather").allgather(output_lists, inputs, opts),
                         after=scatter_flat, result=output_lists, keep=list(outs),
                         redo=lambda b: self.allgather([[torch.empty_like(o) for o in outs]], b[:1], opts),
                         blocking=_blocking(opts), stage_bytes=block)

    def _reduce_scatter_base(self, output, input, opts=ReduceScatterOptions()):
        if input.numel() != output.numel() * self._size:
            raise ValueError(f"reduce_scatter_tensor: input of {input.numel()} for {self._size} outputs of "
                             f"{output.numel()}")
        kind = _kind("reduce_scatter_tensor", input, input.nbytes)
        be = self._delegated_to(kind, input)
        if be is not None:
            return be._reduce_scatter_base(output, input, opts)
        red = None
        if self._native_side(input) and output.dtype == input.dtype and self._native_ok(
                [output, input], "reduce_scatter_tensor"):
            red = self._reduction(opts, input, "reduce_scatter_tensor")
        if red is None:
            return self._other(input, "reduce_scatter_tensor")._reduce_scatter_base(output, input, opts)
        dt, op, avg = red
        return self._run("reduce_scatter_tensor", kind, [input, output],
                         lambda team, p, st, q, j, s: team.reduce_scatter(p[0], p[1], output.numel(), dt, op, stream=st, queued=q,
                                                                         joined=j, staged=s),
                         lambda: self._other(input, "reduce_scatter_tensor")._reduce_scatter_base(
                             output, input, opts),
                         after=(lambda: output.div_(self._size)) if avg else None, result=[output],
                         redo=lambda b: self._reduce_scatter_base(b[1], b[0], opts),
                         blocking=_blocking(opts), stage_bytes=output.nbytes)

    reduce_scatter_single = _reduce_scatter_base  # newer torch's name for it

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=ReduceScatterOptions()):
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        for w in works[:-1]:
            w.wait()
        return works[-1]

    def reduce_scatter(self, outputs, input_lists, opts=ReduceScatterOptions()):
        out = outputs[0]
        # the kind of the reduce_scatter_tensor it becomes (its flat input)
        be = self._delegated_to(_kind("reduce_scatter_tensor", out, out.nbytes * self._size), out)
        if be is not None:
            return be.reduce_scatter(outputs, input_lists, opts)
        if len(outputs) != 1 or not self._native_side(out) or not out.is_contiguous():
            return self._other(out, "reduce_scatter").reduce_scatter(outputs, input_lists, opts)
        flat = torch.cat([x.reshape(-1) for x in input_lists[0]])
        return self._reduce_scatter_base(out, flat, opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=AllToAllOptions()):
        n = self._size
        # Splits given: the uneven form, whatever they are (each rank sees its own splits only,
        # and every rank must take the same way, as NCCL's alltoall and alltoallv differ too).
        if output_split_sizes or input_split_sizes:
            return self._alltoall_uneven(output, input, output_split_sizes, input_split_sizes, opts)
        kind = _kind("all_to_all_single", input, input.nbytes)
        be = self._delegated_to(kind, input)
        if be is not None:
            return be.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)
        if (output.numel() != input.numel() or not input.dim() or input.size(0) % n or not self._native_side(input)
                or not self._native_ok([output, input], "all_to_all_single")):
            return self._other(input, "all_to_all_single").alltoall_base(
                output, input, output_split_sizes, input_split_sizes, opts)
        block = input.numel() * input.element_size() // n
        return self._run("all_to_all_single", kind, [input, output],
                         lambda team, p, st, q, j, s: team.alltoall(p[0], p[1], block, stream=st, queued=q, joined=j,
                                                                    staged=s),
                         lambda: self._other(input, "all_to_all_single").alltoall_base(
                             output, input, output_split_sizes, input_split_sizes, opts),
                         result=[output],
                         redo=lambda b: self.alltoall_base(b[1], b[0], output_split_sizes, input_split_sizes, opts),
                         blocking=_blocking(opts), stage_bytes=block)

    def _alltoall_uneven(self, output, input, output_split_sizes, input_split_sizes, opts):
        """all_to_all_single with splits of dim 0 that differ (a mixture of experts' tokens): each
        rank's copy engines pull the blocks it receives from the senders' buffers, the senders'
        offsets and sizes carried by the ranks' meeting (NodeTeam.alltoallv: the met form, no
        staged one). Every rank must take the same way while its sizes are its own: so the kind of
        call is one for every size (`all_to_all_single_v`, of the element type), the checks are of
        what every rank's call has alike (the group, a capture, contiguity), and a rank with
        nothing to send or receive takes part all the same. Splits that do not cut the tensors,
        rows of other sizes on the two sides, or a sender and receiver that do not agree on a
        block go to NCCL, whose answer (an error) is the caller's: a blocking call declined at the
        meeting on every rank, a queued one failing its work."""
        other = lambda: self._other(input, "all_to_all_single").alltoall_base(  # noqa: E731
            output, input, output_split_sizes, input_split_sizes, opts)
        kind = _kind("all_to_all_single_v", input, 0)
        be = self._delegated_to(kind, input)
        if be is not None:
            return be.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)
        layout = _v_layout(input, input_split_sizes, self._size), _v_layout(output, output_split_sizes, self._size)
        if (None in layout or layout[0][2] != layout[1][2] or output.dtype != input.dtype
                or not self._native_side(input) or not self._native_ok([output, input], "all_to_all_single",
                                                                        empty=True)):
            return other()
        (send_at, send_len, _), (recv_at, recv_len, _) = layout
        return self._run("all_to_all_single", kind, [input, output],
                         lambda team, p, st, q, j, s: team.alltoallv(p[0], p[1], send_at, send_len, recv_at, recv_len,
                                                                     stream=st, queued=q, joined=j,
                                                                     device=self._mem.index(input)),
                         other, result=[output],
                         redo=lambda b: self.alltoall_base(b[1], b[0], output_split_sizes, input_split_sizes, opts),
                         blocking=_blocking(opts))

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
