"""The torch backend's calibration (gpustripe.torch._Calibration): which of gpustripe and NCCL a
kind of call goes to, from timings given here (events whose GPU interval and calls whose host
time are known), and the other ranks' through a stand-in for gloo's maximum. Needs torch (CPU
is enough); skipped without it (CI installs none: docs/torch.md)."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (CI runs without it)")
gt = pytest.importorskip("gpustripe.torch")


class Event:
    """A timing event that fired at `ms` on the GPU's clock."""

    def __init__(self, ms: float):
        self.ms = ms

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end) -> float:
        return end.ms - self.ms


class Work:
    def wait(self) -> bool:
        return True


class Gloo:
    """The group's maximum over ranks with one other rank, whose values are `peer`."""

    def __init__(self, peer=None):
        self.peer = peer

    def allreduce(self, tensors, opts):
        assert opts.reduceOp == torch.distributed.ReduceOp.MAX
        if self.peer is not None:
            torch.maximum(tensors[0], torch.tensor(self.peer, dtype=tensors[0].dtype), out=tensors[0])
        return Work()


def calibrate(costs, gloo=None) -> gt._Calibration:
    """Runs a calibration whose calls take `costs[way]`: (GPU us, host us) per call, or a list of
    them, one per call of that way in order. Each call starts once the one before it ended."""
    cal = gt._Calibration()
    seen = {"gpustripe": 0, "nccl": 0}
    clock = 0.0
    while cal.calibrating():
        way = cal.method()
        c = costs[way]
        gpu_us, host_us = c[seen[way]] if isinstance(c, list) else c
        seen[way] += 1
        cal.record(way, Event(clock), Event(clock + gpu_us / 1e3), host_us)
        clock += gpu_us / 1e3 + 0.01
    cal.decide(gloo or Gloo())
    return cal


def native_calls() -> int:
    return gt._Calibration.ORDER.count("gpustripe")


def test_a_call_whose_host_is_slower_than_its_gpus_costs_its_host_time():
    # Native: 40 us on the GPUs but 90 us on the host; NCCL: 58 us on the GPUs, 15 on the host.
    # Back to back the native calls come every 90 us: NCCL is the faster one.
    cal = calibrate({"gpustripe": (40.0, 90.0), "nccl": (58.0, 15.0)})
    assert cal.native is False
    assert cal.us["gpustripe"] == pytest.approx(90.0)
    assert cal.us["nccl"] == pytest.approx(58.0)
    assert cal.us["gpustripe_host"] == pytest.approx(90.0)
    assert cal.us["nccl_host"] == pytest.approx(15.0)


def test_a_call_whose_gpus_are_slower_than_its_host_costs_its_gpu_time():
    cal = calibrate({"gpustripe": (110.0, 80.0), "nccl": (160.0, 15.0)})
    assert cal.native is True
    assert cal.us["gpustripe"] == pytest.approx(110.0)
    assert cal.us["nccl"] == pytest.approx(160.0)


def test_the_first_call_of_each_is_left_out_and_the_median_taken():
    n = native_calls()
    # native: a cold first call (mapping) and one slow outlier at the end; NCCL steady
    native = [(5000.0, 5000.0)] + [(50.0, 20.0)] * (n - 2) + [(900.0, 20.0)]
    cal = calibrate({"gpustripe": native, "nccl": [(9000.0, 30.0)] + [(70.0, 30.0)] * (n - 1)})
    assert cal.native is True
    assert cal.us["gpustripe"] == pytest.approx(50.0)
    assert cal.us["nccl"] == pytest.approx(70.0)


def test_a_side_slow_in_its_first_calls_but_faster_in_steady_state_wins():
    # Native's first three calls cost 300 us on the host (the first of a kind maps, the next
    # ones still pay for the setup), then 40 us a call; NCCL a steady 60 us. Back to back,
    # native is the faster one: its slow start must not decide.
    n = native_calls()
    native = [(40.0, 300.0)] * 3 + [(40.0, 25.0)] * (n - 3)
    cal = calibrate({"gpustripe": native, "nccl": (60.0, 15.0)})
    assert cal.native is True
    assert cal.us["gpustripe"] == pytest.approx(40.0)
    assert cal.us["nccl"] == pytest.approx(60.0)


def test_the_first_calls_after_the_other_backend_are_left_out():
    # Every native call right after an NCCL one absorbs the switch (the ranks' skew, the
    # streams' join): slow. Native back to back is faster.
    cal = gt._Calibration()
    clock, prev = 0.0, None
    while cal.calibrating():
        way = cal.method()
        after_switch = prev is not None and prev != way
        gpu_us, host_us = (40.0, 250.0 if after_switch else 25.0) if way == "gpustripe" else (60.0, 15.0)
        cal.record(way, Event(clock), Event(clock + gpu_us / 1e3), host_us)
        clock += gpu_us / 1e3 + 0.01
        prev = way
    cal.decide(Gloo())
    assert cal.native is True
    assert cal.us["gpustripe"] == pytest.approx(40.0)


def test_a_call_started_before_the_previous_one_ended_costs_from_that_end():
    # Native calls of an asynchronous caller: each starts on the caller's stream 5 us after the
    # one before (nothing waits for it there) but runs on the team's stream after it, 100 us
    # each: their pace is 100 us, though start to end grows by 95 us a call. NCCL's calls run
    # on the caller's stream, one after the other, 150 us each.
    cal = gt._Calibration()
    clock, native_end = 0.0, 0.0
    while cal.calibrating():
        way = cal.method()
        if way == "gpustripe":
            native_end = max(native_end, clock) + 0.1
            cal.record(way, Event(clock), Event(native_end), 10.0)
            clock += 0.005
        else:
            clock = max(clock, native_end)  # the caller's stream joins the team's first
            cal.record(way, Event(clock), Event(clock + 0.15), 10.0)
            clock += 0.15
    cal.decide(Gloo())
    assert cal.native is True
    assert cal.us["gpustripe"] == pytest.approx(100.0)
    assert cal.us["nccl"] == pytest.approx(150.0)


def test_the_slowest_rank_decides_alike_for_every_rank():
    # this rank finds native faster; the other rank's host is slow on native calls
    cal = calibrate({"gpustripe": (40.0, 20.0), "nccl": (58.0, 15.0)}, Gloo(peer=[120.0, 120.0, 60.0, 15.0]))
    assert cal.native is False
    assert cal.us["gpustripe"] == pytest.approx(120.0)
    assert cal.us["nccl"] == pytest.approx(60.0)
