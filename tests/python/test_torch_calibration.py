"""The torch backend's calibration (gpustripe._torch_calibration._Calibration): which of gpustripe and NCCL a
kind of call goes to, from batches of back-to-back calls of each side timed on a clock given
here (sides whose calls cost a known time on the host and on the GPUs), and the other ranks'
medians through a stand-in for gloo's maximum. Needs torch (CPU is enough); skipped without it
(CI installs none: docs/torch.md)."""
import random

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (CI runs without it)")
gt = pytest.importorskip("gpustripe._torch_calibration")

C = gt._Calibration


class Work:
    def wait(self) -> bool:
        return True


class Gloo:
    """The group's maximum over ranks with one other rank, whose values are `peer` (the first of
    them where this rank gives more: the paces, then the issue times of decide()), or those of
    `rounds` (one list per call, in order)."""

    def __init__(self, peer=None, rounds=None):
        self.peer, self.rounds = peer, list(rounds or [])

    def allreduce(self, tensors, opts):
        assert opts.reduceOp == torch.distributed.ReduceOp.MAX
        peer = self.rounds.pop(0) if self.rounds else self.peer
        if peer is not None:
            t = tensors[0][:len(peer)]
            torch.maximum(t, torch.tensor(peer, dtype=t.dtype), out=t)
        return Work()


class Node:
    """One rank's host and GPUs on a clock (us): a call of a side costs the host `host` us to
    issue, then runs `gpu` us on the GPUs once they are free and it has been issued (the GPUs
    run one call after the other; the host goes on issuing). Costs are (gpu, host) per side, or
    a function of the call's number on that side giving them. The ranks' meeting costs `meet`
    us on the host, and seeing the calls done (a device synchronize) `sync` us."""

    def __init__(self, costs, meet=0.0, sync=0.0):
        self.costs, self.meet_us, self.sync_us = costs, meet, sync
        self.now = self.gpu_free = 0.0
        self.calls = dict.fromkeys(costs, 0)
        self.sides = []  # every call's side, in order

    def issue(self, side):
        c = self.costs[side]
        gpu, host = c(self.calls[side]) if callable(c) else c
        self.calls[side] += 1
        self.sides.append(side)
        self.now += host
        self.gpu_free = max(self.gpu_free, self.now) + gpu
        return Work()

    def sync(self, work):
        self.now = max(self.now, self.gpu_free) + self.sync_us

    def meet(self):
        self.now += self.meet_us

    def clock(self) -> float:
        return self.now / 1e6


def calibrate(costs, gloo=None, meet=0.0, sync=0.0, min_batch_us=0.0, agree=None):
    """min_batch_us 0 (the tests of what a batch measures): every batch has C.CALLS timed calls.
    Costs of a side "met": the kind has a met form beside its staged one ("gpustripe")."""
    node = Node(costs, meet, sync)
    cal = C(min_batch_us=min_batch_us, met="met" in costs)
    cal.measure(node.issue, node.sync, node.meet, clock=node.clock, agree=agree)
    cal.decide(gloo or Gloo())
    return cal, node


def batch_pace(gpu, host) -> float:
    """us per call of a timed batch of calls costing (gpu, host), started on idle GPUs."""
    return (C.CALLS * host + gpu) / C.CALLS if host >= gpu else (host + C.CALLS * gpu) / C.CALLS


def test_a_side_whose_host_is_slower_than_its_gpus_is_paced_by_its_host():
    # Native: 40 us on the GPUs but 90 us on the host; NCCL: 58 us on the GPUs, 15 on the host.
    # Back to back the native calls come every 90 us: NCCL is the faster one.
    cal, _ = calibrate({"gpustripe": (40.0, 90.0), "nccl": (58.0, 15.0)})
    assert cal.native is False
    assert cal.us["gpustripe"] == pytest.approx(batch_pace(40.0, 90.0))
    assert cal.us["nccl"] == pytest.approx(batch_pace(58.0, 15.0))


def test_the_batches_time_how_long_each_sides_calls_hold_the_caller():
    cal, _ = calibrate({"gpustripe": (40.0, 90.0), "nccl": (58.0, 15.0)})
    assert cal.issue_us["gpustripe"] == pytest.approx(90.0)
    assert cal.issue_us["nccl"] == pytest.approx(15.0)
    # the slowest rank's, as the paces
    cal, _ = calibrate({"gpustripe": (40.0, 20.0), "nccl": (58.0, 15.0)}, Gloo(peer=[0.0, 0.0, 35.0, 25.0]))
    assert cal.issue_us == pytest.approx({"gpustripe": 35.0, "nccl": 25.0})


def test_a_side_whose_gpus_are_slower_than_its_host_is_paced_by_its_gpus():
    cal, _ = calibrate({"gpustripe": (110.0, 80.0), "nccl": (160.0, 15.0)})
    assert cal.native is True
    assert cal.us["gpustripe"] == pytest.approx(batch_pace(110.0, 80.0))
    assert cal.us["nccl"] == pytest.approx(batch_pace(160.0, 15.0))


def test_the_sides_alternate_in_batches_of_back_to_back_calls():
    _, node = calibrate({"gpustripe": (10.0, 10.0), "nccl": (10.0, 10.0)})
    run = C.WARMUP + C.CALLS
    assert node.sides == (["gpustripe"] * run + ["nccl"] * run) * C.ROUNDS


def test_the_meeting_and_the_first_calls_of_every_batch_are_not_timed():
    # Native's first calls of a batch (a kind's setup; the switch from the other side) cost 5 ms
    # on the host, and the ranks take 3 ms to meet: back to back native is faster.
    run = C.WARMUP + C.CALLS
    native = lambda k: (40.0, 5000.0 if k % run < C.WARMUP else 25.0)  # noqa: E731
    cal, _ = calibrate({"gpustripe": native, "nccl": (60.0, 15.0)}, meet=3000.0)
    assert cal.native is True
    assert cal.us["gpustripe"] == pytest.approx(batch_pace(40.0, 25.0))
    assert cal.us["nccl"] == pytest.approx(batch_pace(60.0, 15.0))


def test_the_best_batch_decides():
    # one native batch slowed (another process on the host): its best batch still wins
    run = C.WARMUP + C.CALLS
    native = lambda k: (40.0, 900.0 if k // run == 1 else 25.0)  # noqa: E731
    cal, _ = calibrate({"gpustripe": native, "nccl": (60.0, 15.0)})
    assert cal.native is True
    assert cal.us["gpustripe"] == pytest.approx(batch_pace(40.0, 25.0))
    # the first three rounds slowed (a host still warming up, its clocks rising): the two steady
    # batches decide, where a median would have taken a slowed one and handed the kind to NCCL
    native = lambda k: (40.0, 900.0 if k // run < 3 else 25.0)  # noqa: E731
    cal, _ = calibrate({"gpustripe": native, "nccl": (60.0, 15.0)})
    assert cal.native is True
    assert cal.us["gpustripe"] == pytest.approx(batch_pace(40.0, 25.0))
    # and NCCL's alike
    nccl = lambda k: (40.0, 900.0 if k // run < 3 else 15.0)  # noqa: E731
    cal, _ = calibrate({"gpustripe": (60.0, 25.0), "nccl": nccl})
    assert cal.native is False
    assert cal.us["nccl"] == pytest.approx(batch_pace(40.0, 15.0))


def test_the_slowest_rank_decides_alike_for_every_rank():
    # this rank finds native faster; the other rank's native calls are slower than NCCL's
    cal, _ = calibrate({"gpustripe": (40.0, 20.0), "nccl": (58.0, 15.0)}, Gloo(peer=[120.0, 70.0]))
    assert cal.native is False
    assert cal.us["gpustripe"] == pytest.approx(120.0)
    assert cal.us["nccl"] == pytest.approx(70.0)


def test_short_calls_are_timed_in_longer_batches():
    # 1 MB-like calls, 25 us on the GPUs and 8 on the host, and a synchronize that costs 60 us
    # at the end of every batch: in four calls that end doubles native's pace and, with NCCL's
    # calls 35 us, hands the kind to NCCL; batches of a millisecond keep the end small.
    costs = {"gpustripe": (25.0, 8.0), "nccl": (35.0, 8.0)}
    short, _ = calibrate(costs, sync=60.0)
    assert short.native is False or short.us["gpustripe"] > 1.5 * 25.0
    cal, node = calibrate(costs, sync=60.0, min_batch_us=C.MIN_BATCH_US)
    assert cal.native is True
    assert cal.us["gpustripe"] < 1.2 * 25.0 + 1e-9
    # the first batch of a side has C.CALLS timed calls, the later ones enough for a millisecond
    first = C.WARMUP + C.CALLS
    assert node.sides[:first] == ["gpustripe"] * first
    later = node.sides.count("gpustripe") - first
    assert later >= (C.ROUNDS - 1) * (C.WARMUP + C.MIN_BATCH_US / (25.0 + 60.0 / C.CALLS))
    assert later <= (C.ROUNDS - 1) * (C.WARMUP + C.MAX_CALLS)


def test_calls_per_batch_stay_within_bounds():
    cal = C()
    assert cal.calls_for(1e9) == C.CALLS
    assert cal.calls_for(0.001) == C.MAX_CALLS
    assert cal.calls_for(0.0) == C.MAX_CALLS
    assert cal.calls_for(C.MIN_BATCH_US / 10) == 10


def test_every_rank_sizes_its_batches_from_the_slowest_ranks_pace():
    # This rank's calls come every ~25 us; another rank's every 200 us (agree: the ranks' largest
    # paces). The batches after the first are sized for the slower rank (5 timed calls, a
    # millisecond at 200 us), as every rank must make the same calls: collectives.
    costs = {"gpustripe": (25.0, 8.0), "nccl": (25.0, 8.0)}
    seen = []

    def agree(paces):
        seen.append(list(paces))
        return [max(p, 200.0) for p in paces]

    _, node = calibrate(costs, min_batch_us=C.MIN_BATCH_US, agree=agree)
    assert len(seen) == C.ROUNDS
    want = C.CALLS + (C.ROUNDS - 1) * 5
    assert node.sides.count("gpustripe") == C.ROUNDS * C.WARMUP + want
    assert node.sides.count("nccl") == C.ROUNDS * C.WARMUP + want


# The calls at which held() asks for the review: the early one, then the full count's.
DUE = [C.EARLY_CALLS, C.REVIEW_CALLS - 1]


def reviewed(held, gloo=None, nccl=70.0, native=40.0, nccl_issue=10.0):
    """A kind decided for gpustripe (its batches `native` us a call, NCCL's `nccl`, NCCL's calls
    holding their caller `nccl_issue` us) whose real calls held their callers `held` us each: (the
    calibration, the call at which held() asked for the review, the review's answer or None where
    none was asked for)."""
    cal = C()
    cal.native, cal.us = True, {"gpustripe": native, "nccl": nccl}
    cal.issue_us = {"gpustripe": 20.0, "nccl": nccl_issue}
    due = [i for i, h in enumerate(held) if cal.held(h)]
    answer = cal.review(gloo or Gloo()) if due else None
    return cal, due, answer


def test_a_kind_whose_calls_held_their_callers_longer_than_nccls_calls_goes_to_nccl():
    # FSDP's blocking calls above the staged sizes: most wait milliseconds for the other host
    held = [3000.0, 40.0, 12000.0, 2500.0, 60.0, 9000.0, 2800.0, 4000.0] * (C.REVIEW_CALLS // 8)
    cal, due, answer = reviewed(held)
    assert due == DUE  # early, then at the last call of the review's count
    assert answer is False and cal.native is False
    assert cal.reviewed == pytest.approx(3000.0)  # the median, not the worst call


def test_a_kind_whose_calls_return_at_their_pace_stays_with_gpustripe():
    held = [30.0] * C.REVIEW_CALLS
    cal, due, answer = reviewed(held)
    assert answer is True and cal.native is True
    assert cal.reviewed == pytest.approx(30.0)
    # reviewed once: later calls ask for nothing
    assert not any(cal.held(1e6) for _ in range(2 * C.REVIEW_CALLS))
    assert cal.native is True


def test_host_time_beyond_nccls_weighs_against_what_the_gpus_gain():
    # DDP's 25 MB buckets: 4% faster on the GPUs, but each call holds the caller 64 us longer
    # than NCCL's: the step's host pays more than its GPUs gain
    cal, _, answer = reviewed([94.0] * C.REVIEW_CALLS, native=130.0, nccl=138.0, nccl_issue=30.0)
    assert answer is False
    # a large bucket, 13% faster: the same extra host time is paid for
    cal, _, answer = reviewed([94.0] * C.REVIEW_CALLS, native=813.0, nccl=936.0, nccl_issue=30.0)
    assert answer is True
    # no longer than NCCL's calls: the faster GPUs decide
    cal, _, answer = reviewed([25.0] * C.REVIEW_CALLS, native=137.0, nccl=138.0, nccl_issue=30.0)
    assert answer is True


def test_host_time_the_gpus_were_still_busy_through_costs_nothing():
    # the same calls, returning while the caller's stream still had earlier work (a step whose
    # GPUs run behind its host): the host's time hid behind the GPUs' and the faster pace stays
    def review(exposed):
        cal = C()
        cal.native, cal.us = True, {"gpustripe": 130.0, "nccl": 138.0}
        cal.issue_us = {"gpustripe": 20.0, "nccl": 30.0}
        due = [i for i, e in enumerate(exposed) if cal.held(3000.0, e)]
        assert due == DUE
        return cal, cal.review(Gloo())

    cal, answer = review([None if i % 4 == 0 else -500.0 for i in range(C.REVIEW_CALLS)])
    assert answer is True
    assert cal.reviewed == pytest.approx(0.0)  # the median: six of eight hidden
    # most not hidden: they count
    cal, answer = review([-500.0 if i % 4 == 0 else None for i in range(C.REVIEW_CALLS)])
    assert answer is False and cal.reviewed == pytest.approx(3000.0)
    # the stream ran dry 20 us before each call returned: only those 20 us count (the GPUs'
    # answer, asked at the review)
    cal, answer = review([(lambda: 20.0)] * C.REVIEW_CALLS)
    assert answer is True and cal.reviewed == pytest.approx(20.0)
    assert cal.held_calls == [pytest.approx(20.0)] * C.REVIEW_CALLS


def test_a_reviewed_calls_exposed_time_is_asked_without_waiting_for_the_gpus():
    """_exposed: where the caller's stream has reached the call by the review, the GPU's timing of
    the two events; where it has not, no wait for it: at least the time since the call was still
    queued ahead of it, counted as that much work left (negative)."""

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.reached, self.waited = True, 0

        def record(self, stream):
            self.stream = stream

        def query(self):
            return self.reached

        def synchronize(self):
            self.waited += 1
            assert self.reached, "waited for an event the GPU has not reached"

        def elapsed_time(self, other):
            return 0.25  # ms

    t = [10.0]
    before = Event(True)
    us = gt._exposed(before, "idle", clock=lambda: t[0], event=Event)
    t[0] += 0.003
    assert us() == pytest.approx(250.0)  # reached: the GPU's own timing, in us
    behind = Event(True)
    behind.reached = False
    us = gt._exposed(behind, "idle", clock=lambda: t[0], event=Event)
    t[0] += 0.004
    assert us() == pytest.approx(-4000.0)
    assert behind.waited == 0


def test_a_queued_calls_meeting_counts_as_held_once_known():
    # DDP's buckets handed to the team's worker return to the caller at once (40 us), but the
    # worker meets the other rank and enqueues them milliseconds later (a launch-bound step whose
    # hosts run apart): the caller's next NCCL call and the backward's end wait for that
    def review(meetings, exposed=None):
        cal = C()
        cal.native, cal.us = True, {"gpustripe": 486.0, "nccl": 549.0}
        cal.issue_us = {"gpustripe": 40.0, "nccl": 61.0}
        due = [i for i, m in enumerate(meetings) if cal.held(40.0, exposed, (lambda m=m: m))]
        assert due == DUE
        return cal, cal.review(Gloo())

    cal, answer = review([2500.0] * C.REVIEW_CALLS)
    assert answer is False
    assert cal.reviewed == pytest.approx(2540.0)  # the call's own host time and its meeting
    # met and enqueued in 20 us: the faster pace pays for it
    cal, answer = review([20.0] * C.REVIEW_CALLS)
    assert answer is True and cal.reviewed == pytest.approx(60.0)
    # meetings not run by the review (negative) count nothing: only the known ones weigh
    cal, answer = review([-1.0] * (C.REVIEW_CALLS - 3) + [2500.0] * 3)
    assert answer is True and cal.reviewed == pytest.approx(40.0)
    # behind the GPUs' earlier work (a communication-bound step): hidden, the meeting too
    cal, answer = review([2500.0] * C.REVIEW_CALLS, exposed=-5000.0)
    assert answer is True and cal.reviewed == pytest.approx(0.0)
    # this rank came first and waited 2.5 ms in each meeting for the other, which met and
    # enqueued in 20 us: NCCL's kernel would have waited on the GPUs as long, the last rank's
    # 20 us count (the ranks' meetings go as their negatives: the largest is the smallest)
    cal = C()
    cal.native, cal.us = True, {"gpustripe": 486.0, "nccl": 549.0}
    cal.issue_us = {"gpustripe": 40.0, "nccl": 61.0}
    assert [cal.held(40.0, None, lambda: 2500.0) for _ in range(C.REVIEW_CALLS)][-1]
    assert cal.review(Gloo(rounds=[[-20.0] * C.REVIEW_CALLS, [60.0]])) is True
    assert cal.held_calls == [pytest.approx(60.0)] * C.REVIEW_CALLS
    # the stream's earlier work covered 2 ms of each meeting: its last 500 us count
    cal, answer = review([2500.0] * C.REVIEW_CALLS, exposed=-2000.0)
    assert answer is False and cal.reviewed == pytest.approx(500.0)


def test_a_kind_the_team_can_stage_takes_its_fastest_native_form():
    # a 64 MB reduce-scatter: staged 160 us on the GPUs, met 128 (its meeting on the host), NCCL 170
    cal, node = calibrate({"gpustripe": (160.0, 40.0), "met": (128.0, 60.0), "nccl": (170.0, 45.0)})
    assert cal.native is True and cal.form == "met"
    assert cal.us["met"] == pytest.approx(batch_pace(128.0, 60.0))
    run = C.WARMUP + C.CALLS
    assert node.sides == (["gpustripe"] * run + ["met"] * run + ["nccl"] * run) * C.ROUNDS
    # the met form slower on the GPUs: the staged one
    cal, _ = calibrate({"gpustripe": (120.0, 40.0), "met": (130.0, 60.0), "nccl": (170.0, 45.0)})
    assert cal.native is True and cal.form == "gpustripe"
    # both slower than NCCL: NCCL
    cal, _ = calibrate({"gpustripe": (180.0, 40.0), "met": (175.0, 60.0), "nccl": (170.0, 45.0)})
    assert cal.native is False


def met_kind(us: dict, issue_us: dict) -> C:
    """A kind decided for its met form from batches of these paces and holds (us per call)."""
    cal = C(met=True)
    cal.native, cal.form = True, "met"
    cal.us, cal.issue_us = dict(us), dict(issue_us)
    return cal


def review_held(cal: C, held: float):
    """The kind's review after REVIEW_CALLS real calls that each held their caller `held` us."""
    due = [i for i in range(C.REVIEW_CALLS) if cal.held(held)]
    assert due == DUE
    return cal.review(Gloo())


def test_a_met_form_whose_calls_hold_their_callers_goes_staged_and_is_reviewed_again():
    # a launch-bound step: the met calls' meetings expose 300 us each; the staged form meets no
    # host and was faster than NCCL too: it takes over, and its own calls are reviewed
    def kind(staged=160.0):
        return met_kind({"gpustripe": staged, "met": 128.0, "nccl": 170.0},
                        {"gpustripe": 40.0, "met": 60.0, "nccl": 45.0})

    cal = kind()
    assert review_held(cal, 300.0) is True
    assert cal.form == "gpustripe" and cal.native is True and cal.under_review()
    assert cal.met_reviewed == pytest.approx(300.0) and cal.reviewed is None
    # the staged calls hold their callers no longer than NCCL's: staged for good
    assert review_held(cal, 20.0) is True and cal.form == "gpustripe" and not cal.under_review()
    # held as long as staged too: NCCL
    cal = kind()
    review_held(cal, 300.0)
    assert review_held(cal, 300.0) is False and cal.native is False
    # a staged form slower than NCCL is no fallback
    cal = kind(staged=175.0)
    assert review_held(cal, 300.0) is False and cal.native is False and cal.met_reviewed is None
    # a met form whose calls hide behind the GPUs stays
    cal = kind()
    assert review_held(cal, 0.0) is True and cal.form == "met" and not cal.under_review()


def test_a_call_enqueued_behind_the_groups_call_before_it_counts_nothing():
    # back-to-back calls on an otherwise idle caller's stream (a benchmark's batch, an MoE layer's
    # exchanges): the caller's stream ran dry long before each returned, and the worker met the
    # other rank 300 us later, but the GPUs still ran the group's call before it when it was
    # enqueued: they waited for no host
    def review(behind):
        cal = C()
        cal.native, cal.us = True, {"gpustripe": 127.0, "nccl": 170.0}
        cal.issue_us = {"gpustripe": 40.0, "nccl": 45.0}
        due = [i for i, b in enumerate(behind) if cal.held(60.0, 60.0, (lambda: 300.0), (lambda b=b: b))]
        assert due == DUE
        return cal, cal.review(Gloo())

    cal, answer = review([1] * C.REVIEW_CALLS)
    assert answer is True and cal.held_calls == [0.0] * C.REVIEW_CALLS
    # enqueued onto idle GPUs (0), or not known (-1: not enqueued by the review): as before
    cal, answer = review([0] * C.REVIEW_CALLS)
    assert answer is False and cal.reviewed == pytest.approx(360.0)
    cal, answer = review([-1] * C.REVIEW_CALLS)
    assert answer is False and cal.reviewed == pytest.approx(360.0)
    # most behind: the median is hidden
    cal, answer = review([1, 0] + [1] * (C.REVIEW_CALLS - 2))
    assert answer is True and cal.reviewed == pytest.approx(0.0)


def test_the_slowest_rank_reviews_alike_for_every_rank():
    # this rank's calls return at once; the other rank's wait for this one's host
    cal, _, answer = reviewed([30.0] * C.REVIEW_CALLS, Gloo(peer=[900.0]))
    assert answer is False
    assert cal.reviewed == pytest.approx(900.0)


def test_only_kinds_measured_and_given_to_gpustripe_are_reviewed():
    fewer = [5000.0] * C.EARLY_CALLS
    assert reviewed(fewer)[1] == []  # not due yet
    to_nccl = C()
    to_nccl.native, to_nccl.us = False, {"gpustripe": 90.0, "nccl": 70.0}
    assert not any(to_nccl.held(5000.0) for _ in range(C.REVIEW_CALLS))
    decided = C()  # decided without timing (_test_verdict): nothing to compare with
    decided.native = True
    assert not any(decided.held(5000.0) for _ in range(C.REVIEW_CALLS))


def review_as_called(cal: C, held) -> list:
    """Counts calls that held their callers `held` us each, reviewing wherever held() asks (as
    the backend does): the answers of the reviews, with the call each was asked at."""
    return [(i, cal.review(Gloo())) for i, h in enumerate(held) if cal.held(h)]


def test_half_the_count_past_the_threshold_gives_the_verdict_early():
    # DDP's largest bucket, one call a step, each holding the step's host 300 us beyond NCCL's
    # calls for 60 us less on the GPUs: handed over at the early review, not 16 steps later
    cal = C()
    cal.native, cal.us, cal.issue_us = True, {"gpustripe": 523.0, "nccl": 579.0}, {"gpustripe": 80.0, "nccl": 82.0}
    # (the ninth call's own meeting has not run when it is counted: it holds nothing yet)
    held = [400.0, 2700.0, 350.0, 900.0, 380.0, 420.0, 360.0, 330.0, 0.0]
    assert review_as_called(cal, held) == [(C.EARLY_CALLS, False)]
    assert cal.native is False and cal.reviewed == pytest.approx(330.0)  # the least the median could be
    assert not cal.under_review() and len(cal.held_calls) == C.EARLY_CALLS  # the calls it weighed


def test_an_early_review_that_cannot_decide_lets_the_count_go_on():
    def kind():
        cal = C()
        cal.native, cal.us, cal.issue_us = True, {"gpustripe": 40.0, "nccl": 70.0}, {"gpustripe": 20.0, "nccl": 10.0}
        return cal

    # one call of the first half under the threshold (10 + 30 = 40 us held): the other half may
    # still hold the median under it
    cal = kind()
    first = [3000.0] * (C.EARLY_CALLS - 1) + [20.0, 3000.0]
    assert review_as_called(cal, first) == [(C.EARLY_CALLS, True)]
    assert cal.under_review() and cal.reviewed is None and len(cal.held_us) == C.EARLY_CALLS + 1
    # the full count decides on every call it counted
    assert review_as_called(cal, [3000.0] * (C.REVIEW_CALLS - C.EARLY_CALLS - 1)) == [
        (C.REVIEW_CALLS - C.EARLY_CALLS - 2, False)]
    assert cal.reviewed == pytest.approx(3000.0) and len(cal.held_calls) == C.REVIEW_CALLS
    # ... and keeps the kind where the second half held nothing
    cal = kind()
    assert review_as_called(cal, first[:-1] + [20.0]) == [(C.EARLY_CALLS, True)]
    assert review_as_called(cal, [20.0] * (C.REVIEW_CALLS - C.EARLY_CALLS - 1))[-1][1] is True
    assert cal.native is True and not cal.under_review()
    # an early review never keeps a kind for good: calls that return at their pace are counted on
    cal = kind()
    assert review_as_called(cal, [20.0] * (C.EARLY_CALLS + 1)) == [(C.EARLY_CALLS, True)]
    assert cal.under_review()
    # the latest call does not weigh in the early bound: its meeting may still be to run
    cal = kind()
    assert review_as_called(cal, [3000.0] * C.EARLY_CALLS + [0.0]) == [(C.EARLY_CALLS, False)]


def test_the_early_verdict_is_the_full_counts():
    # every early verdict is the one the whole count of the same calls would give, over kinds of
    # both forms and calls held from nothing to past every threshold
    rng = random.Random(7)
    early = 0
    for _ in range(400):
        us = {"gpustripe": rng.uniform(100, 200), "met": rng.uniform(80, 200), "nccl": rng.uniform(100, 200)}
        issue = {"gpustripe": rng.uniform(10, 60), "met": rng.uniform(10, 60), "nccl": rng.uniform(10, 60)}
        held = [rng.choice([0.0, rng.uniform(0, 150), rng.uniform(0, 3000)]) for _ in range(C.REVIEW_CALLS)]
        met = rng.random() < 0.5
        if not met:
            us.pop("met"), issue.pop("met")

        def kind():
            cal = met_kind(us, issue) if met else C()
            if not met:
                cal.native, cal.us, cal.issue_us = True, dict(us), dict(issue)
            return cal

        called = kind()
        at = None  # the call whose review changed the kind, if any
        for i, h in enumerate(held):
            if called.held(h):
                before = (called.native, called.form)
                called.review(Gloo())
                if (called.native, called.form) != before or i == C.REVIEW_CALLS - 1:
                    at = i
                    break
        whole = kind()
        for h in held:
            whole.held(h)
        whole.review(Gloo())
        assert (called.native, called.form) == (whole.native, whole.form)
        if at == C.EARLY_CALLS:
            early += 1
        else:
            assert at == C.REVIEW_CALLS - 1 and called.reviewed == whole.reviewed
    assert 50 < early < 350  # both cases were tried


def test_an_early_review_counts_nothing_for_calls_the_worker_has_not_enqueued_yet():
    # back-to-back asynchronous calls whose worker runs a few calls behind the caller: at the early
    # review the latest calls' enqueue is not known (-1); each turns out enqueued behind the call
    # before it (1), counting nothing, by the full review
    cal = C()
    cal.native, cal.us, cal.issue_us = True, {"gpustripe": 127.0, "nccl": 170.0}, {"gpustripe": 40.0, "nccl": 45.0}
    reviews = [0]

    def behind():
        return 1 if reviews[0] > 1 else -1  # known once the early review has passed

    due = []
    for i in range(C.REVIEW_CALLS):
        if cal.held(300.0, 300.0, None, behind):
            reviews[0] += 1
            due.append((i, cal.review(Gloo())))
    assert due == [(C.EARLY_CALLS, True), (C.REVIEW_CALLS - 1, True)]
    assert cal.native is True and cal.reviewed == pytest.approx(0.0)
    # the same calls known exposed (0: enqueued onto idle GPUs) give the verdict early
    cal2 = C()
    cal2.native, cal2.us, cal2.issue_us = True, dict(cal.us), dict(cal.issue_us)
    assert [(i, cal2.review(Gloo())) for i in range(C.REVIEW_CALLS)
            if cal2.held(300.0, 300.0, None, 0)] == [(C.EARLY_CALLS, False)]
