"""The end of the torch backend's native calls (gpustripe.torch): an asynchronous call's tensors
held until the GPUs are past it, its work, and its future, completed off the caller's thread once
the team's worker has enqueued the call; for CUDA tensors and for the emulated test mode's CPU
tensors staged through the emulated devices (docs/torch.md, "Stream semantics" and "The team's
worker")."""
from __future__ import annotations

import collections
import threading

import torch
import torch.distributed as dist

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
