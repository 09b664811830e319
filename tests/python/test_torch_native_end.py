"""The end of a native call on CUDA tensors (gpustripe.torch._CudaMem.done), on a machine without
GPUs: torch's CUDA entry points it uses are replaced by stand-ins that record what they were
asked. What a call costs on the host there is checked by what it does: it creates no event once
the calls before it are past (the tensors' hold reuses theirs), builds no Stream object (the
team's stream is made current by its ids), makes the team's stream current for after() and the
future, and gives the caller back its stream and device, also when after() raises. Needs torch
(CPU is enough); skipped without it."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (CI runs without it)")
gt = pytest.importorskip("gpustripe.torch")

TEAM_STREAM = (77, 1, 1)    # the team's stream on device 1: (id, device index, device type)
CALLER_STREAM = (5, 1, 1)   # the caller's current stream on device 1


class Cuda:
    """Stand-ins for the CUDA entry points of _CudaMem.done, recording the calls."""

    def __init__(self, device: int):
        self.device = device
        self.current = {1: CALLER_STREAM}  # device index -> current stream's ids
        self.events = 0                    # events created
        self.streams = 0                   # Stream objects built (current_stream)
        self.marks = []                    # (stream ids current at the mark, where it was recorded)
        cuda = self

        class Event:
            def __init__(self, *a, **k):
                cuda.events += 1
                self.passed = False

            def record(self, stream=None):
                self.passed = False
                cuda.marks.append(("event", stream.ids))

            def query(self):
                return self.passed

            def synchronize(self):
                self.passed = True

        class Stream:
            def __init__(self, raw, device=None):
                self.stream_id, self.device_index, self.device_type = TEAM_STREAM
                self.ids = TEAM_STREAM

        class Future:
            def __init__(self, devices):
                self.devices = devices

            def set_result(self, result):
                # a CUDA-aware future marks the current stream of its device
                cuda.marks.append(("future", cuda.current[devices_index(self.devices)]))
                self.result = result

        def devices_index(devices):
            (d,) = devices
            return d.index

        self.Event, self.Stream, self.Future = Event, Stream, Future

    def current_stream(self, *a, **k):
        self.streams += 1
        raise AssertionError("a Stream object built for a native call's end")

    def get_device(self):
        return self.device

    def set_device(self, d):
        self.device = d

    def get_current_stream(self, index):
        return self.current[index]

    def set_stream(self, stream_id, device_index, device_type):
        self.current[device_index] = (stream_id, device_index, device_type)
        self.device = device_index


class Team:
    def calls_stream(self, index):
        return 0x1234


@pytest.fixture
def cuda(monkeypatch):
    c = Cuda(device=1)
    monkeypatch.setattr(torch.cuda, "Event", c.Event)
    monkeypatch.setattr(torch.cuda, "ExternalStream", c.Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", c.current_stream)
    monkeypatch.setattr(torch.cuda, "StreamContext", lambda *a, **k: pytest.fail("a stream context per call"))
    monkeypatch.setattr(torch._C, "Future", c.Future)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", c.get_device, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_setDevice", c.set_device, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentStream", c.get_current_stream, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_setStream", c.set_stream, raising=False)
    monkeypatch.setattr(gt, "_create_work_from_future", lambda fut: fut)
    return c


def test_calls_past_reuse_their_events_and_build_no_streams(cuda):
    mem = gt._CudaMem(Team())
    dev = torch.device("cuda", 1)
    ran = []
    for i in range(50):
        t = torch.ones(4)
        fut = mem.done([t], [t], dev, after=lambda: ran.append(cuda.current[1]))
        assert fut.result == [t]
        for mark, _, _ in mem._held:  # the team's stream got past every call so far
            mark.passed = True
    assert cuda.events == 1, "an event created per call: the marks of calls already past are reused"
    assert cuda.streams == 0
    # after() and the future's mark ran with the team's stream current, the mark recorded on it
    assert ran == [TEAM_STREAM] * 50
    assert cuda.marks == [("event", TEAM_STREAM), ("future", TEAM_STREAM)] * 50
    assert cuda.current[1] == CALLER_STREAM and cuda.device == 1


def test_held_until_past(cuda):
    mem = gt._CudaMem(Team())
    dev = torch.device("cuda", 1)
    for _ in range(3):
        mem.done([torch.ones(2)], None, dev, None)
    assert len(mem._held) == 3 and cuda.events == 3  # none past: each call holds its own
    mem._held[0][0].passed = True
    mem.done([torch.ones(2)], None, dev, None)
    assert len(mem._held) == 3 and cuda.events == 3  # the first one's event and tensors let go, reused
    mem.close()
    assert not mem._held


def test_caller_stream_and_device_restored(cuda):
    mem = gt._CudaMem(Team())
    cuda.device = 0  # the call's tensors on device 1, the current device 0
    cuda.current[0] = (9, 0, 1)

    def fails():
        assert cuda.device == 1 and cuda.current[1] == TEAM_STREAM
        raise RuntimeError("after() failed")

    with pytest.raises(RuntimeError, match="after"):
        mem.done([torch.ones(2)], None, torch.device("cuda", 1), fails)
    assert cuda.device == 0 and cuda.current == {0: (9, 0, 1), 1: CALLER_STREAM}
    mem.done([torch.ones(2)], None, torch.device("cuda", 1), None)
    assert cuda.device == 0 and cuda.current == {0: (9, 0, 1), 1: CALLER_STREAM}
