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

Stream ordering: a native collective is enqueued behind the tensor's current stream and
ahead of its later work, from C++ with the GIL released and no host wait for the GPUs (the
team's stream-ordered calls: src/mpi/coll_ordered.cpp); an asynchronous one is handed to the
team's worker thread, which meets the other ranks and enqueues it in call order, so the caller
(DDP's autograd thread) does not wait for the slower rank (src/mpi/node_team.hpp). Such a call
cannot go to NCCL once queued: one the ranks' meeting declines fails (raised at the next call or
wait). The work's ``wait()`` orders the caller's
current stream after it, as NCCL's does, and its future (made where torch asks for one) is
CUDA-aware, returned at once and completed off the caller's thread once the worker has enqueued
the call (_Completer). The call's end is marked in C++, its tensors held until that mark has passed. A blocking call
(``async_op=False``) has the caller's stream join its end instead and returns no work.
Buffers are exported and mapped once per allocation (PyTorch's caching allocator hands
back the same segments; expandable segments included).

Where NCCL is faster: at the first call of each kind (an op, the memory's side, the element
type, sizes within a power of two: ``_kind``) every rank times batches of back-to-back calls of
both on zeroed buffers of that call's sizes, as the benchmarks time them, and every rank then
takes the one whose slowest rank was faster (``_Calibration``); what was chosen and why is in
``trace()``. The batches run after the ranks met, so a kind given to gpustripe is reviewed after
its first real calls: where the time they held their callers beyond what NCCL's calls hold
theirs (a blocking call above the staged sizes waits on the caller's thread for the slowest rank
to make it), unless the GPUs were still busy with earlier work, with their pace outweighs
NCCL's pace, it goes to NCCL from then on. A kind decided for NCCL is then handed to it as it
came, after one lookup, and its work returned: such a call costs what it costs on a plain NCCL
group.

The backend is a Python ``torch.distributed.ProcessGroup`` (as torch's own test backends):
c10d hands it every collective of the group, and it dispatches by device and support.
"""
from __future__ import annotations

import collections
import math
import socket
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


if hasattr(dist.ReduceOp, "RedOpType"):
    def _redop(opts) -> tuple:
        """(op type, gpustripe op name or None) of an options object's reduceOp."""
        t = opts.reduceOp.op
        return t, _OPS.get(t)
else:  # older torch: the reduceOp is the type itself
    def _redop(opts) -> tuple:
        t = opts.reduceOp
        return t, _OPS.get(t)


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


def _middle(values) -> float:
    """The median of `values`, the upper of the middle two for an even count (no mean of two
    batches, one of which may be a disturbed one)."""
    return sorted(values)[len(values) // 2]


def _max_over_ranks(gloo, values) -> list:
    """Each of `values` as the largest any rank of `gloo`'s group has (collective)."""
    worst = torch.tensor(values, dtype=torch.float64)
    opts = AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.MAX
    gloo.allreduce([worst], opts).wait()
    return worst.tolist()


class _Calibration:
    """Which of gpustripe and NCCL serves one kind of call (an op, sizes within a power of two),
    measured as a training job's calls of that kind run once decided: back to back, one side at a
    time. At the kind's first call every rank times batches of calls of each side on buffers of
    the call's sizes of their own (zeros: the caller's tensors are not touched), as nccl-tests
    and `gpustripe bench torch` do, each side's calls taking the path they take once decided
    (the other backend's handed to it directly): the first calls of each batch untimed (a
    kind's setup: the first call maps the peers' buffers and builds its Program, NCCL sets its
    channels up; the switch from the other side), then the ranks meet, and the timed calls run from the host's
    clock to the end of the last one on the GPUs. Their time per call is the pace of whichever
    is slower, the host issuing them or the GPUs running them, with nothing of the measurement
    inside it (no events per call, no stream joins). Batches of the two sides alternate, the
    median of each side's taken, and every rank takes the one whose slowest rank was faster
    (the medians, through gloo). The batches also time how long each side's calls hold the
    caller (issue()'s own time): the review's measure of what NCCL's real calls would hold."""

    WARMUP = 2   # calls at the start of each batch, not timed
    CALLS = 4    # timed calls of a side's first batch, and the fewest of any
    MAX_CALLS = 64
    # A side's later batches last at least this long at its pace so far: the end of a batch (the
    # sync, the ranks leaving the meeting apart) weighs on a short call's pace (1 MB calls of
    # 25-60 us: four of them were timed at up to 1.7x their pace back to back).
    MIN_BATCH_US = 1000.0
    ROUNDS = 5   # batches of each side: the median holds against two disturbed ones
    SIDES = ("gpustripe", "nccl")

    # Real calls of a kind given to gpustripe whose host time is then reviewed (review()).
    REVIEW_CALLS = 8

    def __init__(self, min_batch_us: float | None = None):
        self.min_batch_us = self.MIN_BATCH_US if min_batch_us is None else min_batch_us
        self.native = None  # the answer, once decided
        self.us = {}        # the medians the answer came from (the slowest rank's), us per call
        self.pace = {m: [] for m in self.SIDES}  # us per call of each timed batch
        self.issue = {m: [] for m in self.SIDES}  # us each timed call of a batch held the caller (mean)
        self.issue_us = {}  # their medians (the slowest rank's), once decided
        self.held_us = []   # (host time, meeting) of each real native call so far, until the review (held())
        self.reviewed = None  # the review's median host time (the slowest rank's), once made

    def measure(self, issue, sync, meet, clock=time.perf_counter, agree=None) -> None:
        """Times the batches: `issue(side)` makes one call of that side and returns its work (or
        None); `sync(work)` returns once every call made so far is done on this rank (its GPUs
        included); `meet()` returns once every rank got there; `agree(paces)` returns the ranks'
        largest of each (None: one rank). Every rank makes the same number of calls (collectives):
        a side's next batch is sized from the slowest rank's pace of its last one."""
        calls = dict.fromkeys(self.SIDES, self.CALLS)
        for _ in range(self.ROUNDS):
            last = {}
            for side in self.SIDES:
                work = None
                for _ in range(self.WARMUP):
                    work = issue(side)
                sync(work)
                meet()
                t0 = clock()
                held = 0.0
                for _ in range(calls[side]):
                    t = clock()
                    work = issue(side)
                    held += clock() - t
                sync(work)
                last[side] = (clock() - t0) / calls[side] * 1e6
                self.pace[side].append(last[side])
                self.issue[side].append(held / calls[side] * 1e6)
            paces = [last[side] for side in self.SIDES]
            for side, pace in zip(self.SIDES, agree(paces) if agree else paces):
                calls[side] = self.calls_for(pace)

    def calls_for(self, pace_us: float) -> int:
        """Timed calls of a batch lasting at least min_batch_us at `pace_us` per call."""
        if pace_us <= 0:
            return self.MAX_CALLS
        return max(self.CALLS, min(self.MAX_CALLS, math.ceil(self.min_batch_us / pace_us)))

    def decide(self, gloo) -> bool:
        """Collective over the group (every rank decides at the same call)."""
        med = [_middle(v[m]) for v in (self.pace, self.issue) for m in self.SIDES]
        worst = _max_over_ranks(gloo, med)
        n = len(self.SIDES)
        self.us, self.issue_us = dict(zip(self.SIDES, worst[:n])), dict(zip(self.SIDES, worst[n:]))
        self.native = self.us["gpustripe"] <= self.us["nccl"]
        return self.native

    def under_review(self) -> bool:
        """Whether the kind's real calls are being counted for its review (held())."""
        return self.reviewed is None and bool(self.native) and bool(self.us)

    def held(self, host_us: float, hidden: bool = False, meeting=None) -> bool:
        """Counts a real native call of the kind, which held its caller `host_us`; `hidden`: the
        caller's stream had not reached the call when it returned (the GPUs were still running
        what the host issued before it: the host's time cost the step nothing), counted as 0.
        `meeting`: for a call handed to the team's worker, a function giving how long the worker
        then took to meet the other ranks and enqueue it (negative while it has not): asked at the
        review and counted as held too, since the caller's next call to NCCL, its wait() and its
        future (DDP's reducer waits for every bucket's at the backward's end) wait for it, where
        NCCL's call returns enqueued. True at the call whose review is due (every rank at the
        same call: the ranks make the same calls)."""
        if not self.under_review():
            return False
        self.held_us.append((0.0, None) if hidden else (host_us, meeting))
        return len(self.held_us) == self.REVIEW_CALLS

    def _held_whole(self) -> list:
        """Each counted call's host time and, where known by now, its meeting's."""
        whole = []
        for host_us, meeting in self.held_us:
            met = meeting() if meeting is not None else -1.0
            whole.append(host_us + max(0.0, met))
        return whole

    def review(self, gloo) -> bool:
        """Collective. The batches time calls after the ranks met, so they do not see how long a
        real call waits for the other ranks' hosts: a call too large for the staged slots meets
        them on the caller's thread, a blocking one (FSDP's) holds its caller until the slowest
        rank makes the same call, and one handed to the team's worker is enqueued only once the
        worker met them (held(): meeting), while NCCL's call returns enqueued. A call's host
        time beyond what NCCL's calls hold theirs (issue_us) is time its caller does not spend
        issuing the step's other work, and a met call's GPUs start only after the meeting, unless
        the GPUs were still busy with earlier work when it returned (held(): hidden): where that
        time (the real calls' held time, the slowest rank's median) and the native call's pace
        outweigh NCCL's pace, the kind goes to NCCL from the next call on. Returns the answer."""
        self.reviewed = _max_over_ranks(gloo, [_middle(self._held_whole())])[0]
        self.held_us = []
        extra = max(0.0, self.reviewed - self.issue_us.get("nccl", 0.0))
        if self.us["gpustripe"] + extra > self.us["nccl"]:
            self.native = False
        return self.native


def _unwrap(fut):
    """A completed future's value, raised where it is the call's error (_Completer): the future
    chained on it then fails in C++ too, where DDP's reducer waits for it."""
    v = fut.value()
    if isinstance(v, Exception):
        raise v
    return v


class _Completer:
    """Completes the futures of a team's asynchronous native calls off the caller's thread. DDP's
    reducer asks for a bucket's future right after its all_reduce, from the autograd thread; the
    future's end must be ordered after the call on the host (the team's worker enqueues the call
    first: no GPU stream waits for a value a host thread writes later, node_team.hpp), which on
    that thread would wait for the ranks' meeting the worker takes off it. So the future is
    returned at once and completed here, in call order, once the worker has run the call's job
    (NodeTeam.wait_queued: the GIL released, no other lock), with its end on the team's stream
    (`complete`). A call that failed (declined at the meeting, a peer gone, a timeout) fails its
    future. One daemon thread per team, started at its first future; close() stops it after every
    future given out is completed or failed."""

    def __init__(self, team, complete):
        self._team, self._complete = team, complete
        self._cv = threading.Condition()
        self._pending: collections.deque = collections.deque()  # (job, index, future, result), oldest first
        self._stop = False
        self._thread = None

    def add(self, job: int, index: int, fut, result) -> None:
        """Completes `fut` with `result` once the worker has run job number `job` (of device `index`)."""
        with self._cv:
            if self._stop:
                raise RuntimeError("gpustripe backend: a future asked for after the group's native side closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gpustripe-futures", daemon=True)
                self._thread.start()
            self._pending.append((job, index, fut, result))
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not self._stop:
                    self._cv.wait()
                if not self._pending:
                    return
                job, index, fut, result = self._pending[0]
            try:
                self._complete(index, self._team.wait_queued(job, index), fut, result)
            except Exception as e:  # noqa: BLE001 -- the call's error is its future's
                if not fut.done():
                    fut.set_result(e)
            with self._cv:
                self._pending.popleft()

    def close(self) -> None:
        """Returns once every future added is completed or failed (the team's jobs are bounded by
        GPUSTRIPE_TIMEOUT), and the thread has ended."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
            t = self._thread
        if t is not None:
            t.join()


class _Work(dist.Work):
    """An asynchronous native call's work. wait() orders the waiting device's current stream after
    the call, as NCCL's does: the stream joins the team's (NodeTeam.join: an event of the team's,
    reused), no host wait. The future is made only where torch asks for one (get_future: DDP's
    reducer chains its bucket's end on it): CUDA-aware, marked on the team's stream, completed
    off the caller's thread once the worker has enqueued the call (job: its number in the team's
    queue; _Completer). Made from C++ callers too (c10d keeps the Python object alive beside the
    work it hands on)."""

    def __init__(self, mem, dev, result, ticket: int, job: int):
        super().__init__()
        self._mem, self._dev, self._result, self._fut, self._ticket = mem, dev, result, None, ticket
        self._job = job

    def wait(self, timeout=None) -> bool:
        self._mem.wait(self._dev)
        return True

    def get_future(self):
        if self._fut is None:
            self._fut = self._mem.future(self._dev, self._result, self._job)
        return self._fut

    def result(self):
        return self._result

    def is_completed(self) -> bool:
        """Whether the GPUs are past the call (asked from Python; no host wait)."""
        return self._mem.past(self._ticket)


class _End:
    """The end of the native calls of one team: an asynchronous call's tensors are held until the
    GPUs are past it (its end marked in C++ on the team's stream: NodeTeam.mark, events reused once
    passed, and the held calls past let go of at the next mark, oldest first), and its work
    (_Work). Not record_stream: the caching allocator would then record events on the team's
    stream whenever such a block is freed, also after the team (and its streams) closed, at the
    process's exit (a CUDA error and an abort in the allocator). Subclasses say how the team's
    stream is made the current one (for what finishes a call, and a future) and which stream a
    wait() joins, and how a future is made and completed there."""

    def __init__(self, team, lock):
        self.team, self.lock = team, lock
        self._completer = None  # made at the first future asked for
        self._held: collections.deque = collections.deque()  # (tensors, keep) per call in flight, oldest first
        self._marked = 0  # calls marked so far: a call's ticket is its number among them
        self.closed = False

    def done(self, tensors, result, dev, after, keep=()) -> dist.Work:
        """The end of an asynchronous call enqueued on the team's stream of `dev`: `after()` (what
        finishes it: divisions, copies) there too, the tensors (and `keep`, what after() writes)
        held until the team's stream is past both. Called under the group's lock."""
        index = self.index_of(dev)
        job = self.team.queue_posted()  # the call's job (only this thread posts, under the lock)
        try:
            if after is not None:
                self.on_team_stream(index, after)
        finally:
            # The caller may free these tensors before the collective ends: held until the mark
            # made now has passed (also when after() raised: the collective itself was enqueued).
            for _ in range(self.team.mark(index)):
                self._held.popleft()
            self._held.append((tensors, keep))
            self._marked += 1
        return _Work(self, dev, result, self._marked - 1, job)

    def past(self, ticket: int) -> bool:
        """Whether the GPUs are past the call of this ticket (done()'s)."""
        with self.lock:
            if not self.closed:
                self.release()
            return self.closed or ticket < self._marked - len(self._held)

    def release(self) -> None:
        """Lets go of the tensors of the calls the team's streams are past."""
        if not self._held:
            return  # nothing to ask the team (blocking calls only)
        for _ in range(self.team.marks_passed()):
            self._held.popleft()

    def close(self) -> None:
        """Waits for every call to end and lets go of their tensors (before the team closes)."""
        with self.lock:
            try:
                self.team.settle()
            finally:
                if self._completer is not None:
                    self._completer.close()  # its futures completed (or failed) while the team is up
                # The works of past calls keep this object: not the team, which ends with the group's.
                self._held.clear()
                self.closed, self.team = True, None

    def wait(self, dev) -> None:
        with self.lock:
            if not self.closed:  # closed: every call has ended
                self.join(self.index_of(dev))

    def future(self, dev, result, job: int):
        """The future of the call of queue job `job`: returned at once, completed by the completer
        (the team closed: every call ended, completed now)."""
        with self.lock:
            if self.closed:  # every call has ended: a future holding the result, on the current stream
                fut = self.pending(dev)
                fut.set_result(result)
                return fut
            if self._completer is None:
                self._completer = _Completer(self.team, self.complete)
            base = self.pending(dev)
            # The chained future is the one handed out: where the call failed, it fails in C++.
            fut = base.then(_unwrap)
            self._completer.add(job, self.index_of(dev), base, result)
            return fut


class _CudaMem(_End):
    """CUDA tensors: their own memory. A call starts after the caller's current stream's work
    and ends on the team's stream of the device (calls_stream), where what finishes it (after())
    runs too; the caller's stream goes on, and the work's wait() joins it, as NCCL's does."""

    def __init__(self, team, lock):
        super().__init__(team, lock)
        self._ends: dict = {}  # device index -> (the team's stream there, its (id, device, type))

    def _end(self, index: int, raw: int | None = None):
        # Asked of the team at each use: it returns once the team's worker has enqueued the calls
        # queued so far, which what the caller enqueues there next must follow (a host-side order:
        # no stream of the team's waits on the GPU for a call not enqueued yet). `raw`: the stream
        # as wait_queued() returned it, once the worker has enqueued the call at hand.
        if raw is None:
            raw = self.team.calls_stream(index)
        e = self._ends.get(index)
        if e is None:
            s = torch.cuda.ExternalStream(raw, device=torch.device("cuda", index))
            e = self._ends[index] = (s, (s.stream_id, s.device_index, s.device_type))
        return e

    @staticmethod
    def stream(t: torch.Tensor) -> int:
        return _CudaMem.raw_stream(t.get_device())

    @staticmethod
    def raw_stream(index: int) -> int:
        # The raw handle, no Stream object. torch's default stream is handle 0, the legacy
        # default stream; to the team 0 means no stream at all: name it as the CUDA runtime's
        # constant for it (cudaStreamLegacy).
        return torch._C._cuda_getCurrentRawStream(index) or 1

    @staticmethod
    def ptrs(ts) -> list:
        return [t.data_ptr() for t in ts]

    @staticmethod
    def index(t: torch.Tensor) -> int:
        """The team's device of t."""
        return t.device.index

    @staticmethod
    def index_of(dev: torch.device) -> int:
        return dev.index

    @staticmethod
    def finish(ts) -> None:
        pass

    def on_team_stream(self, index: int, fn, raw: int | None = None):
        """fn() with the team's stream of device `index` the current one (its kernels enqueued
        there), set by its ids as torch.cuda.StreamContext sets it, without building Stream and
        device objects; the caller's stream and device given back, also when fn raises. `raw`:
        as _end's."""
        here = torch._C._cuda_getDevice()
        prev = torch._C._cuda_getCurrentStream(index)
        torch._C._cuda_setStream(*self._end(index, raw)[1])  # also makes `index` the current device
        try:
            return fn()
        finally:
            torch._C._cuda_setStream(*prev)
            if here != index:
                torch._C._cuda_setDevice(here)

    def join(self, index: int) -> None:
        # The current stream's handle names the current device's default stream where it is the
        # legacy one: the join runs with `index` current.
        if torch._C._cuda_getDevice() == index:
            self.team.join(index, self.raw_stream(index))
        else:
            with torch.cuda.device(index):
                self.team.join(index, self.raw_stream(index))

    @staticmethod
    def pending(dev):
        """A CUDA-aware future of `dev`, completed later (complete())."""
        return torch._C.Future([dev])

    def complete(self, index: int, raw: int, fut, result) -> None:
        """Completes `fut` with `result`, its events on the team's stream (`raw`, of device `index`),
        from the completer's thread (the current stream is a thread's own)."""
        self.on_team_stream(index, lambda: fut.set_result(result), raw)


class _EmulatedMem(_End):
    """Test only (_test_emulate_cpu): CPU tensors staged through the emulated devices' memory,
    the call ordered on a stream of the team's own and settled before the results are
    read back. Its end is the CUDA one's (the mark in C++ and the tensors held, the work) with the
    team's emulated stream for the caller's."""

    def __init__(self, team, dev: int, lock):
        super().__init__(team, lock)
        self.ctx, self.dev, self.staged = team.context, dev, {}
        self._stream = team.stream(dev)

    def stream(self, t: torch.Tensor) -> int:
        return self._stream

    def index(self, t: torch.Tensor) -> int:
        return self.dev

    def index_of(self, dev) -> int:
        return self.dev

    def ptrs(self, ts) -> list:
        out = []
        for i, t in enumerate(ts):
            n = max(t.numel() * t.element_size(), 1)
            key = (i, n)
            if key not in self.staged:
                self.staged[key] = self.ctx.alloc_device(self.dev, n)
            p = self.staged[key]
            if t.numel():
                self.ctx.upload(p, self.dev, t.contiguous().view(torch.uint8).numpy().tobytes())
            out.append(p)
        return out

    def finish(self, ts) -> None:
        self.team.settle()
        for i, t in enumerate(ts):
            n = t.numel() * t.element_size()
            if n:
                got = bytearray(self.ctx.download(self.staged[(i, max(n, 1))], self.dev, n))
                t.view(torch.uint8).view(-1).copy_(torch.frombuffer(got, dtype=torch.uint8))

    @staticmethod
    def on_team_stream(index: int, fn):
        return fn()  # the results are read back already (finish): CPU work follows them

    def join(self, index: int) -> None:
        self.team.join(index, self._stream)

    @staticmethod
    def pending(dev):
        return torch._C.Future([])

    @staticmethod
    def complete(index: int, raw: int, fut, result) -> None:
        fut.set_result(result)  # the results are read back already (finish)


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
        # Kinds of call the calibration gave to the other backend -> that backend: such a call is
        # handed to it as it came, after one lookup (its per-call cost is the other backend's).
        self._delegated: dict = {}
        self._calibrate = True           # off: native wherever it can (_test_always_native)
        self._verdict = None             # tests: every kind decided so without timing (_test_verdict)
        self._measure_emulated = False   # tests: calibrated against gloo (_test_calibrate_emulated)
        self._forced = None              # the calibration's calls: native (True) or not (False)
        # Asynchronous native calls through the team's worker (off: on the caller's thread, _test_queue).
        # Not with torch's cudaMallocAsync allocator: its pool memory cannot be shared past a call,
        # every rank's team declines it, and only a call made on the caller's thread can then go
        # to NCCL (a queued one would fail).
        self._queue = not (torch.cuda.is_available()
                           and getattr(torch.cuda, "get_allocator_backend", lambda: "native")() == "cudaMallocAsync")
        # op -> [calls, and us summed: the backend's native call, the team's C++ call in it, its end]
        self._host_us: dict = {}
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

    def trace(self, reset: bool = False) -> dict:
        """Where the native calls' time goes: `host_us` (per op: calls, mean host time of the
        backend's call, us; of it `team_us` in the team's C++ call and `end_us` after it: the
        end on the team's stream, the work), `team` (the team's phases per call:
        NodeTeam.phase_times) and `choices` (per op and size class: gpustripe or NCCL, the
        calibration's medians, us per call back to back, the slowest rank's, and `paces`: this
        rank's pace of each timed batch of each side, in order, which tells a side's slow first
        batches from a steady gap; `issue_us`: each side's host time per call in the batches;
        `held_us`: the reviewed calls' host time, once reviewed)."""
        out = {"host_us": {k: {"calls": v[0], "us": v[1] / v[0], "team_us": v[2] / v[0], "end_us": v[3] / v[0]}
                           for k, v in self._host_us.items() if v[0]},
               "team": self._team_obj.phase_times(reset) if self._team_obj is not None else {},
               "choices": {f"{op} {str(dt).replace('torch.', '')} <{1 << b}B":
                           {"use": "gpustripe" if c.native else "nccl", **c.us,
                            "paces": {m: list(c.pace[m]) for m in c.SIDES},
                            **({"issue_us": dict(c.issue_us)} if c.issue_us else {}),
                            **({"held_us": c.reviewed} if c.reviewed is not None else {})}
                           for (op, _, dt, b), c in self._calibrations.items() if c.native is not None}}
        if reset:
            self._host_us = {}
        return out

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
            if not t.numel():
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

    def _native_way(self, kind: tuple, tensors, redo) -> bool:
        """Whether this call goes the native way: where the calibration gave its kind to the
        other backend, no (the kind is then handed over directly from its next call on). A kind's
        first call decides it (_Calibration), every rank at the same call; not where there is
        nothing to choose (no NCCL, the emulated test mode) or the call is one of the
        calibration's own (_forced)."""
        if self._forced is not None:
            return self._forced
        t = tensors[0]
        if not self._calibrate or (self._verdict is None and not self._measure_emulated
                                   and (self._emulated or self._nccl is None)):
            return True
        cal = self._calibrations.get(kind)
        if cal is None:
            cal = self._calibrations[kind] = _Calibration()
            cal.native = self._verdict
            if cal.native is None:
                self._measure(cal, tensors, redo)
        if cal.native is False:
            self._delegated[kind] = self._nccl if t.is_cuda else self._gloo
        return cal.native

    def _review(self, kind: tuple, cal: _Calibration, host_us: float, hidden: bool, meeting=None) -> None:
        """A real native call of `kind`, whose calibration `cal` is under review, that held its
        caller `host_us` (`hidden`, `meeting`: as _Calibration.held's): at the kind's review
        (_Calibration.review, collective), handed to NCCL from the next call on where the time its
        calls held their callers beyond NCCL's, with their pace, outweighs NCCL's pace."""
        if not cal.held(host_us, hidden, meeting):
            return
        if not cal.review(self._gloo):
            self._delegated[kind] = self._nccl if kind[1] else self._gloo
            self._say(f"{kind[0]} of {str(kind[2]).replace('torch.', '')} up to {1 << kind[3]} B goes to NCCL: "
                      f"its calls held their callers {cal.reviewed:.0f} us each "
                      f"(NCCL's {cal.issue_us.get('nccl', 0):.0f}) "
                      f"and take {cal.us['gpustripe']:.0f} us, NCCL's {cal.us['nccl']:.0f}")

    def _measure(self, cal: _Calibration, tensors, redo) -> None:
        """Decides `cal` from batches of calls of each side (_Calibration.measure) made by
        `redo(buffers)` (the op again, on other buffers of the same sizes) on zeroed buffers like
        `tensors`: the caller's tensors keep their values, and repeated reductions of zeros stay
        finite."""
        scratch = [torch.zeros_like(t) for t in tensors]
        dev = tensors[0].device

        def issue(side: str):
            self._forced = side == "gpustripe"
            try:
                return redo(scratch)
            finally:
                self._forced = None

        def sync(work) -> None:
            if work is not None:
                work.wait()  # the other backend's CPU work completes on its own thread
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)  # the native calls end on the team's stream, NCCL's on its own

        cal.measure(issue, sync, lambda: self._gloo.barrier(BarrierOptions()).wait(),
                    agree=lambda paces: _max_over_ranks(self._gloo, paces))
        cal.decide(self._gloo)

    def _run(self, what: str, kind: tuple, tensors, native, fallback, after=None, result=None,
             keep=(), redo=None, blocking=False):
        """A collective on the native path: `native(team, ptrs, stream, queued, joined)` (ptrs: of
        `tensors`; stream: the caller's; queued: handed to the team's worker, True or raises; joined:
        run on the caller's stream itself, for a blocking call) enqueues it and
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
        if not self._native_way(kind, tensors, redo):
            return fallback()  # None: a blocking call NCCL ran on the caller's stream
        t_host = time.perf_counter()
        # A kind under review (_review; not the calibration's own calls): on CUDA, whether the
        # caller's stream is still behind the call when it returns, which hides the host's time
        # (an event before the call, asked after it).
        review = self._calibrations.get(kind) if self._forced is None else None
        if review is not None and not review.under_review():
            review = None
        behind = None
        if review is not None and t0.is_cuda:
            behind = torch.cuda.Event()
            behind.record(torch.cuda.current_stream(dev))
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
                    served = native(team, ptrs, stream, queued, blocking)
            else:
                served = native(team, ptrs, stream, queued, blocking)
            t_end = time.perf_counter()
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
            self._review(kind, review, (time.perf_counter() - t_host) * 1e6,
                         behind is not None and not behind.query(),
                         (lambda: team.queue_latency_us(job)) if job else None)
        t_done = time.perf_counter()
        h = self._host_us.get(what)
        if h is None:
            h = self._host_us[what] = [0, 0.0, 0.0, 0.0]
        h[0] += 1
        h[1] += (t_done - t_host) * 1e6
        h[2] += (t_end - t_call) * 1e6
        h[3] += (t_done - t_end) * 1e6
        return work

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
                         lambda team, p, st, q, j: team.allreduce(p[0], p[0], t.numel(), dt, op, stream=st, queued=q, joined=j),
                         lambda: self._other(t, "all_reduce").allreduce([t], opts),
                         after=(lambda: t.div_(self._size)) if avg else None,
                         redo=lambda b: self.allreduce(b, opts),
                         blocking=_blocking(opts))

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
                         lambda team, p, st, q, j: team.bcast(p[0], t.numel() * t.element_size(), root, stream=st, queued=q, joined=j),
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
                         lambda team, p, st, q, j: team.reduce(p[0], p[0] if is_root else 0, t.numel(), dt, op, root,
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
                         lambda team, p, st, q, j: team.allgather(p[0], p[1], block, stream=st, queued=q, joined=j),
                         lambda: self._other(input, "all_gather_into_tensor")._allgather_base(
                             output, input, opts),
                         result=[output], redo=lambda b: self._allgather_base(b[1], b[0], opts),
                         blocking=_blocking(opts))

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
                         lambda team, p, st, q, j: team.allgather(p[0], p[1], block, stream=st, queued=q, joined=j),
                         lambda: self._other(x, "all_gather").allgather(output_lists, inputs, opts),
                         after=scatter_flat, result=output_lists, keep=list(outs),
                         redo=lambda b: self.allgather([[torch.empty_like(o) for o in outs]], b[:1], opts),
                         blocking=_blocking(opts))

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
                         lambda team, p, st, q, j: team.reduce_scatter(p[0], p[1], output.numel(), dt, op, stream=st, queued=q, joined=j),
                         lambda: self._other(input, "reduce_scatter_tensor")._reduce_scatter_base(
                             output, input, opts),
                         after=(lambda: output.div_(self._size)) if avg else None, result=[output],
                         redo=lambda b: self._reduce_scatter_base(b[1], b[0], opts),
                         blocking=_blocking(opts))

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
        kind = _kind("all_to_all_single", input, input.nbytes)
        be = self._delegated_to(kind, input)
        if be is not None:
            return be.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)
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
        return self._run("all_to_all_single", kind, [input, output],
                         lambda team, p, st, q, j: team.alltoall(p[0], p[1], block, stream=st, queued=q, joined=j),
                         lambda: self._other(input, "all_to_all_single").alltoall_base(
                             output, input, output_split_sizes, input_split_sizes, opts),
                         result=[output],
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
