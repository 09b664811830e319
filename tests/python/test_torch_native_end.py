"""The end of an asynchronous native call on CUDA tensors (gpustripe._torch_call_end._CudaMem.done and its
work), on a machine without GPUs: torch's CUDA entry points it may use are replaced by stand-ins
that record what they were asked, and the team by one that records its calls. What a call costs
on the host there is checked by what it does: no CUDA event created and no stream or device
switched per call (its end is marked by the team in C++, events reused there), the tensors held
until the team says the GPUs are past the call, a wait() that joins the waiting device's current
stream to the team's in one call, a future made only when asked (CUDA-aware, marked on the team's
stream), what finishes a call run on the team's stream before the mark, and the caller's stream
and device given back, also when that raises. A future is returned before the team's worker has
enqueued its call and completed off the caller's thread once it has, in call order; a call's
error fails its future; closing completes or fails every future given out. Needs torch (CPU is
enough); skipped without it."""
import threading

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (CI runs without it)")
gt = pytest.importorskip("gpustripe._torch_call_end")
group = pytest.importorskip("gpustripe.torch")  # the group's module: its works made from futures

TEAM_STREAM = (77, 1, 1)    # the team's stream on device 1: (id, device index, device type)
CALLER_STREAM = (5, 1, 1)   # the caller's current stream on device 1
CALLER_RAW = 0x5005         # its raw handle


class Cuda:
    """Stand-ins for torch's CUDA entry points, recording the calls into `log`."""

    def __init__(self, device: int, log: list):
        self.device = device
        self.current = {1: CALLER_STREAM}  # device index -> current stream's ids
        self.events = 0                    # torch.cuda.Event objects created
        self.switches = 0                  # current stream or device set
        self.log = log
        cuda = self

        class Event:
            def __init__(self, *a, **k):
                cuda.events += 1

        class Stream:
            def __init__(self, raw, device=None):
                self.stream_id, self.device_index, self.device_type = TEAM_STREAM

        class Future:
            def __init__(self, devices=None):
                if devices is not None:
                    (d,) = devices
                    self.index = d.index
                self.ready, self.callbacks, self.error = threading.Event(), [], None

            def set_result(self, result):
                # a CUDA-aware future creates an event and records it on its device's current stream
                cuda.events += 1
                cuda.log.append(("future", cuda.current[self.index]))
                self._finish(result, None)

            def _finish(self, result, error):
                self.result, self.error = result, error
                self.ready.set()
                for cb in self.callbacks:
                    cb()

            def done(self):
                return self.ready.is_set()

            def value(self):
                return self.result

            def wait(self):
                assert self.ready.wait(30), "a future never completed"
                if self.error is not None:
                    raise self.error
                return self.result

            def then(self, fn):
                child = Future()

                def run():  # as torch's: what fn raises is the child's error
                    try:
                        child._finish(fn(self), None)
                    except Exception as e:  # noqa: BLE001
                        child._finish(None, e)

                self.callbacks.append(run)
                return child

        self.Event, self.Stream, self.Future = Event, Stream, Future

    def current_stream(self, *a, **k):
        raise AssertionError("a Stream object built for a native call's end")

    def get_device(self):
        return self.device

    def set_device(self, d):
        self.switches += 1
        self.device = d

    def get_current_stream(self, index):
        return self.current[index]

    def get_current_raw_stream(self, index):
        return CALLER_RAW if self.current[index] == CALLER_STREAM else self.current[index][0]

    def set_stream(self, stream_id, device_index, device_type):
        self.switches += 1
        self.current[device_index] = (stream_id, device_index, device_type)
        self.device = device_index
        self.log.append(("stream", self.current[device_index]))


class Team:
    """The team's end-of-call entry points (NodeTeam.mark, marks_passed, join, settle): marks are
    passed when the test says so (`past`: how many of the oldest)."""

    def __init__(self, log: list):
        self.log, self.marks, self.past, self.reported = log, 0, 0, 0
        # the worker's queue: jobs posted, jobs it has run (enqueue()), the error of a failed one
        self.posted, self.ran, self.error = 0, 0, None
        self.cv = threading.Condition()

    def queue_posted(self):
        return self.posted

    def enqueue(self, upto: int) -> None:
        """The worker has run the jobs up to `upto`."""
        with self.cv:
            self.ran = upto
            self.cv.notify_all()

    def fail(self, error: Exception) -> None:
        """A job of the worker failed."""
        with self.cv:
            self.error = error
            self.cv.notify_all()

    def wait_queued(self, job, index):
        with self.cv:
            assert self.cv.wait_for(lambda: self.ran >= job or self.error, 30), "the worker never ran the job"
            if self.error is not None:
                raise self.error
        return 0x1234

    def calls_stream(self, index):
        return 0x1234

    def _newly_passed(self, limit):
        n = min(self.past, limit) - self.reported
        self.reported += n
        return n

    def mark(self, index):
        self.log.append(("mark", index))
        n = self._newly_passed(self.marks)  # earlier marks only
        self.marks += 1
        return n

    def marks_passed(self):
        return self._newly_passed(self.marks)

    def join(self, index, stream):
        self.log.append(("join", index, stream))

    def settle(self):
        self.log.append(("settle",))
        if self.error is not None:
            raise self.error
        self.enqueue(self.posted)
        self.past = self.marks


@pytest.fixture
def log():
    return []


@pytest.fixture
def cuda(monkeypatch, log):
    c = Cuda(device=1, log=log)
    monkeypatch.setattr(torch.cuda, "Event", c.Event)
    monkeypatch.setattr(torch.cuda, "ExternalStream", c.Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", c.current_stream)
    monkeypatch.setattr(torch.cuda, "StreamContext", lambda *a, **k: pytest.fail("a stream context per call"))
    monkeypatch.setattr(torch._C, "Future", c.Future)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", c.get_device, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_setDevice", c.set_device, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentStream", c.get_current_stream, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", c.get_current_raw_stream, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_setStream", c.set_stream, raising=False)
    monkeypatch.setattr(group, "_create_work_from_future", lambda fut: pytest.fail("a future made per call"))
    return c


def mem_of(log):
    import threading

    return gt._CudaMem(Team(log), threading.Lock())


DEV = torch.device("cuda", 1)


def test_an_asynchronous_end_creates_no_event_and_switches_no_stream(cuda, log):
    mem = mem_of(log)
    for i in range(50):
        t = torch.ones(4)
        work = mem.done([t], [t], DEV, after=None)
        assert isinstance(work, torch.distributed.Work)
        mem.team.past = mem.team.marks  # the GPUs got past every call so far
    assert cuda.events == 0, "a CUDA event created for a native call's end"
    assert cuda.switches == 0, "the current stream or device switched for a native call's end"
    assert log == [("mark", 1)] * 50  # one call to the team per call: its end marked there
    assert len(mem._held) == 1  # the calls past were let go of, the last one is held
    # wait() joins the waiting device's current stream to the team's: one call, no event, no switch
    work.wait()
    assert log[-1] == ("join", 1, CALLER_RAW) and cuda.events == 0 and cuda.switches == 0


def test_tensors_held_until_the_team_says_the_gpus_are_past(cuda, log):
    mem = mem_of(log)
    ts = [torch.ones(2) for _ in range(4)]
    works = [mem.done([t], None, DEV, None) for t in ts[:3]]
    assert [h[0][0] for h in mem._held] == ts[:3]  # none past: each call holds its tensors
    assert not any(w.is_completed() for w in works)
    mem.team.past = 2
    works.append(mem.done([ts[3]], None, DEV, None))
    assert [h[0][0] for h in mem._held] == ts[2:]  # the two oldest let go of, oldest first
    assert [w.is_completed() for w in works] == [True, True, False, False]
    mem.team.past = 3
    mem.release()  # what a blocking call does: asks the team, no mark
    assert [h[0][0] for h in mem._held] == ts[3:]
    mem.close()
    assert not mem._held and log[-1] == ("settle",)
    assert all(w.is_completed() for w in works)
    n = len(log)
    mem.wait(DEV)  # closed: every call ended, nothing to join
    assert len(log) == n


def test_a_future_only_when_asked_marked_on_the_teams_stream(cuda, log):
    mem = mem_of(log)
    t = torch.ones(3)
    work = mem.done([t], [t], DEV, None)
    assert cuda.events == 0 and cuda.switches == 0
    fut = work.get_future()
    assert fut.wait() == [t] and work.get_future() is fut  # made once
    assert log == [("mark", 1), ("stream", TEAM_STREAM), ("future", TEAM_STREAM), ("stream", CALLER_STREAM)]
    assert cuda.current[1] == CALLER_STREAM and cuda.device == 1
    mem.close()


def queued_calls(mem, n):
    """n asynchronous calls, each handed to the team's worker (a job of its queue), and their tensors."""
    ts, works = [], []
    for i in range(n):
        mem.team.posted += 1  # the call's job, posted before its end is made (done())
        ts.append(torch.full((2,), float(i)))
        works.append(mem.done([ts[-1]], [ts[-1]], DEV, None))
    return ts, works


def test_a_future_returned_before_the_worker_enqueued_its_call_completed_after_in_order(cuda, log):
    mem = mem_of(log)
    ts, works = queued_calls(mem, 2)
    futs = [w.get_future() for w in works]  # the ranks have not met: the worker ran neither call
    assert not any(f.done() for f in futs)
    assert not any(e[0] in ("future", "stream") for e in log)  # nothing enqueued on the team's stream yet
    mem.team.enqueue(1)
    assert futs[0].wait() == [ts[0]]
    # its end on the team's stream (the completer's thread), the previous stream given back
    assert log[-3:] == [("stream", TEAM_STREAM), ("future", TEAM_STREAM), ("stream", CALLER_STREAM)]
    assert not futs[1].done()  # its call is not enqueued yet: the completer waits for it
    mem.team.enqueue(2)
    assert futs[1].wait() == [ts[1]]
    mem.close()
    assert not mem._completer._thread.is_alive()


def test_a_failed_call_fails_its_future(cuda, log):
    mem = mem_of(log)
    _, (work,) = queued_calls(mem, 1)
    fut = work.get_future()
    mem.team.fail(RuntimeError("allreduce: another rank's side declined this queued call"))
    with pytest.raises(RuntimeError, match="declined"):
        fut.wait()
    assert ("stream", TEAM_STREAM) not in log  # nothing enqueued on the team's stream for a call not made
    with pytest.raises(RuntimeError, match="declined"):
        mem.close()  # the team's settle raises it too; the completer still ends
    assert not mem._completer._thread.is_alive()


@pytest.mark.parametrize("worker_failed", [False, True])
def test_close_completes_or_fails_every_pending_future(cuda, log, worker_failed):
    mem = mem_of(log)
    ts, works = queued_calls(mem, 3)
    futs = [w.get_future() for w in works]
    assert not any(f.done() for f in futs)
    if worker_failed:
        mem.team.fail(RuntimeError("the team's worker ran no queued collective for 5 s"))
        with pytest.raises(RuntimeError, match="worker"):
            mem.close()
    else:
        mem.close()  # the team settles: the worker has run every job
    assert all(f.done() for f in futs) and not mem._completer._thread.is_alive()
    for t, f in zip(ts, futs):
        if worker_failed:
            with pytest.raises(RuntimeError, match="worker"):
                f.wait()
        else:
            assert f.wait() == [t]
    assert works[0].get_future() is futs[0]


def test_the_completer_with_torch_futures_chained_then_exact_and_errors_raised():
    """torch's own futures (CPU): the value a chained then() sees, and a failed call's error."""

    class Queue:
        def __init__(self):
            self.ran, self.cv = 0, threading.Condition()

        def wait_queued(self, job, index):
            with self.cv:
                assert self.cv.wait_for(lambda: self.ran >= job, 30)
            if job == 2:
                raise RuntimeError("a peer left: the team's worker failed")
            return 0

    q = Queue()
    c = gt._Completer(q, lambda index, raw, fut, result: fut.set_result(result))
    futs = []
    for job in (1, 2):
        base = torch._C.Future([])
        futs.append(base.then(gt._unwrap).then(lambda f: f.value()[0] * 2 + 1))
        c.add(job, 0, base, [torch.arange(4.0)])
    assert not any(f.done() for f in futs)
    with q.cv:
        q.ran = 2
        q.cv.notify_all()
    assert torch.equal(futs[0].wait(), torch.tensor([1.0, 3.0, 5.0, 7.0]))
    with pytest.raises(RuntimeError, match="peer left"):
        futs[1].wait()
    c.close()
    assert not c._thread.is_alive()


def test_what_finishes_a_call_runs_on_the_teams_stream_before_its_mark(cuda, log):
    mem = mem_of(log)
    cuda.device = 0  # the call's tensors on device 1, the current device 0
    cuda.current[0] = (9, 0, 1)
    ran = []
    mem.done([torch.ones(2)], None, DEV, lambda: ran.append(cuda.current[1]))
    assert ran == [TEAM_STREAM]
    assert log == [("stream", TEAM_STREAM), ("stream", CALLER_STREAM), ("mark", 1)]
    assert cuda.device == 0 and cuda.current == {0: (9, 0, 1), 1: CALLER_STREAM}

    def fails():
        assert cuda.device == 1 and cuda.current[1] == TEAM_STREAM
        raise RuntimeError("after() failed")

    held = torch.ones(2)
    with pytest.raises(RuntimeError, match="after"):
        mem.done([held], None, DEV, fails)
    assert cuda.device == 0 and cuda.current == {0: (9, 0, 1), 1: CALLER_STREAM}
    # the collective itself was enqueued: its tensors are held until its mark passes
    assert log[-1] == ("mark", 1) and mem._held[-1][0] == [held]


def test_a_call_handed_to_nccl_after_native_ones_joins_in_cpp(cuda, log):
    """NCCL's call starts after the native calls before it: the caller's stream joins the team's
    once (one C++ call, the team's event), no torch event or Stream object."""

    class Group:
        _join = group.ProcessGroupGpustripe._join

    class T:  # a CUDA tensor of device 1 as _join sees it
        device = DEV

        @staticmethod
        def get_device():
            return 1

    g = Group()
    g._unjoined, g._mem = {1}, mem_of(log)
    g._join(T())
    g._join(T())  # joined already: nothing more until the next native call
    assert log == [("join", 1, CALLER_RAW)] and cuda.events == 0 and cuda.switches == 0
