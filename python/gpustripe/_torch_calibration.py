"""Which of gpustripe and NCCL serves each kind of call of the torch backend (gpustripe.torch):
batches of both timed at a kind's first call, and the review of a kind given to gpustripe after
its first real calls (docs/torch.md, "Where NCCL is faster: calibration" and "The review")."""
from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllreduceOptions


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


def _exposed(before, idle, clock=time.perf_counter, event=None):
    """How long before now the stream that recorded the timing event `before` had run out of the
    work before it (us, negative: how much it still had), as a function to ask at the review: an
    event recorded now on the `idle` stream, nothing queued ahead of it, timed against `before`
    by the GPU. The review does not wait for the GPUs: a `before` not reached yet when it is asked
    (a host running ahead of its GPUs, as a training loop's does) had at least the time since this
    call on its stream still to run, which is what it then counts (an upper bound of the call's
    exposed part: the review leans toward NCCL, never away from it). Waiting for it instead held
    the host until the GPUs had run everything queued, a millisecond and more in the middle of
    a kind's real calls. `event`: the timing events' type (torch.cuda.Event)."""
    now = (event or torch.cuda.Event)(enable_timing=True)
    now.record(idle)
    t_now = clock()

    def us() -> float:
        if not before.query():
            return -(clock() - t_now) * 1e6
        now.synchronize()  # nothing ahead of it on its stream: complete as soon as recorded
        return before.elapsed_time(now) * 1e3
    return us


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
    best batch of each side taken (whatever disturbs a batch, another process on the host, the
    GPUs' clocks still rising over the first rounds, only adds time), and every rank takes the
    one whose slowest rank was faster (the best batches, through gloo). The batches also time
    how long each side's calls hold the
    caller (issue()'s own time): the review's measure of what NCCL's real calls would hold.

    A kind whose calls the team can stage through its slots (no meeting of the hosts, but the
    slots' extra pass on the GPUs) and whose first call is asynchronous (a blocking one takes the
    staged form: ProcessGroupGpustripe._native_way) has a second native side, `met` (the same call
    meeting the other hosts and reading their buffers): the fastest native side is the kind's form, and
    where its review hands the met form over, the staged one takes its place while it was faster
    than NCCL (reviewed in turn)."""

    WARMUP = 2   # calls at the start of each batch, not timed
    CALLS = 4    # timed calls of a side's first batch, and the fewest of any
    MAX_CALLS = 64
    # A side's later batches last at least this long at its pace so far: the end of a batch (the
    # sync, the ranks leaving the meeting apart) weighs on a short call's pace (1 MB calls of
    # 25-60 us: four of them were timed at up to 1.7x their pace back to back).
    MIN_BATCH_US = 1000.0
    ROUNDS = 5   # batches of each side: the best of them holds against four disturbed ones
    SIDES = ("gpustripe", "nccl")
    # with a met form: "gpustripe" is the staged call, "met" the same call met
    SIDES_MET = ("gpustripe", "met", "nccl")

    # Real calls of a kind given to gpustripe whose host time is then reviewed (review()): enough
    # that the first calls after a synchronisation (a job's setup, a benchmark's first batches:
    # every one of them exposed) are not half of them.
    REVIEW_CALLS = 16
    # The review is asked once before its count is full, at the call after these: where half of
    # the count already held their callers beyond the verdict's threshold, the median of the
    # whole count is past it whatever the other half holds, and the verdict is given then (a kind
    # called once per step, DDP's largest bucket, would otherwise run 16 steps on the side the
    # review then leaves). Not at the last of them: its meeting, still to run on the worker, is
    # not known yet.
    EARLY_CALLS = REVIEW_CALLS - REVIEW_CALLS // 2

    def __init__(self, min_batch_us: float | None = None, met: bool = False):
        self.min_batch_us = self.MIN_BATCH_US if min_batch_us is None else min_batch_us
        self.sides = self.SIDES_MET if met else self.SIDES
        self.native = None  # the answer, once decided
        self.form = "gpustripe"  # the native side the kind takes ("met" where that was faster)
        self.us = {}        # the best batches' paces the answer came from (the slowest rank's), us per call
        self.pace = {m: [] for m in self.sides}  # us per call of each timed batch
        self.issue = {m: [] for m in self.sides}  # us each timed call of a batch held the caller (mean)
        self.issue_us = {}  # their medians (the slowest rank's), once decided
        # (host time, exposed, meeting, queued_behind) of each real native call until the review (held())
        self.held_us = []
        self.reviewed = None  # the review's median exposed time (the slowest rank's), once made
        self.held_calls = []  # this rank's reviewed calls' exposed time each, once reviewed
        self.met_reviewed = None  # `reviewed` of a met form handed over to the staged one

    def measure(self, issue, sync, meet, clock=time.perf_counter, agree=None) -> None:
        """Times the batches: `issue(side)` makes one call of that side and returns its work (or
        None); `sync(work)` returns once every call made so far is done on this rank (its GPUs
        included); `meet()` returns once every rank got there; `agree(paces)` returns the ranks'
        largest of each (None: one rank). Every rank makes the same number of calls (collectives):
        a side's next batch is sized from the slowest rank's pace of its last one."""
        calls = dict.fromkeys(self.sides, self.CALLS)
        for _ in range(self.ROUNDS):
            last = {}
            for side in self.sides:
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
            paces = [last[side] for side in self.sides]
            for side, pace in zip(self.sides, agree(paces) if agree else paces):
                calls[side] = self.calls_for(pace)

    def calls_for(self, pace_us: float) -> int:
        """Timed calls of a batch lasting at least min_batch_us at `pace_us` per call."""
        if pace_us <= 0:
            return self.MAX_CALLS
        return max(self.CALLS, min(self.MAX_CALLS, math.ceil(self.min_batch_us / pace_us)))

    def decide(self, gloo) -> bool:
        """Collective over the group (every rank decides at the same call): the fastest native
        side is the kind's form, native where it is no slower than NCCL."""
        best = [min(self.pace[m]) for m in self.sides] + [_middle(self.issue[m]) for m in self.sides]
        worst = _max_over_ranks(gloo, best)
        n = len(self.sides)
        self.us, self.issue_us = dict(zip(self.sides, worst[:n])), dict(zip(self.sides, worst[n:]))
        self.form = min((m for m in self.sides if m != "nccl"), key=lambda m: self.us[m])
        self.native = self.us[self.form] <= self.us["nccl"]
        return self.native

    def under_review(self) -> bool:
        """Whether the kind's real calls are being counted for its review (held())."""
        return self.reviewed is None and bool(self.native) and bool(self.us)

    def held(self, host_us: float, exposed=None, meeting=None, queued_behind=None) -> bool:
        """Counts a real native call of the kind, which held its caller `host_us`. `exposed`: how
        long before the call returned the caller's stream had run out of earlier work (us; a
        function asked at the review, or a number), negative where the stream still had that much
        left: the host's time behind the GPUs' earlier work cost the step nothing, only its
        exposed part counts (None: all of it, where there are no GPUs to ask). `meeting`: for a
        call handed to the team's worker, a function giving how long the worker then took to
        meet the other ranks and enqueue it (negative while it has not): asked at the review and
        counted too (the last rank's to meet), less what earlier work the stream still had when
        the call returned, since the caller's next call to NCCL, its wait() and its future (DDP's
        reducer waits for every bucket's at the backward's end) wait for it, where NCCL's call
        returns enqueued. `queued_behind`: a function (asked at the review) or a number, 1 where the
        call was enqueued while the group's native call before it still ran on some rank's GPU
        (NodeTeam.enqueued_behind): its host time and meeting then kept no GPU waiting (the GPUs
        run the group's calls one after the other), whatever the caller's stream had left, and it
        counts nothing; else (0, -1: not known, None) as above. True at the calls whose review is
        due, the early one (the call after EARLY_CALLS) and the full one (every rank at the same
        call: the ranks make the same calls)."""
        if not self.under_review():
            return False
        self.held_us.append((host_us, exposed, meeting, queued_behind))
        return len(self.held_us) in (self.EARLY_CALLS + 1, self.REVIEW_CALLS)

    def _held_whole(self, gloo, count: int | None = None, least: bool = False) -> list:
        """Each counted call's exposed time (of the first `count` counted, all by default): its
        host time's and, where known by now, its meeting's beyond the earlier work its stream still
        had (none for a call enqueued behind the group's call before it). Collective: a meeting counts as
        long as the rank that came last took to meet and enqueue (the ranks' smallest), since a
        rank waiting for a later one loses nothing to NCCL, whose kernel would wait for that rank
        on the GPUs as long."""
        held = self.held_us[:count]
        meetings = []
        for _, _, meeting, _ in held:
            m = meeting() if meeting is not None else 0.0
            meetings.append(m if m >= 0 else math.inf)  # not run yet here: the other ranks' counts
        meetings = [-m for m in _max_over_ranks(gloo, [-m for m in meetings])]
        out = []
        for (host_us, exposed, _, queued_behind), met in zip(held, meetings):
            behind = queued_behind() if callable(queued_behind) else queued_behind
            # `least`: the least each call can count once all is known: one whose enqueue is not
            # known yet (-1: still queued for the worker) may turn out behind, and count nothing.
            if behind == 1 or (least and behind == -1):
                out.append(0.0)
                continue
            e = host_us if exposed is None else (exposed() if callable(exposed) else exposed)
            met = met if math.isfinite(met) else 0.0
            out.append(min(host_us, max(0.0, e)) + max(0.0, met - max(0.0, -e)))
        return out

    def review(self, gloo) -> bool:
        """Collective. The batches time calls after the ranks met, so they do not see how long a
        real call waits for the other ranks' hosts: a call too large for the staged slots meets
        them on the caller's thread, a blocking one (FSDP's) holds its caller until the slowest
        rank makes the same call, and one handed to the team's worker is enqueued only once the
        worker met them (held(): meeting), while NCCL's call returns enqueued. A call's host
        time beyond what NCCL's calls hold theirs (issue_us) is time its caller does not spend
        issuing the step's other work, and a met call's GPUs start only after the meeting, but
        not its part the GPUs spent on earlier work meanwhile (held(): exposed): where that time
        (the real calls' exposed time, the slowest rank's median) and the native call's pace
        outweigh NCCL's pace, the kind goes to NCCL from the next call on; a met form goes to the
        staged one instead where that was no slower than NCCL, whose calls are then reviewed in
        turn (`met_reviewed`: the met form's review). Returns the answer (native or not).

        Asked early (fewer than REVIEW_CALLS calls counted), the review weighs the least value the
        whole count's median can take: the smallest of the first EARLY_CALLS calls, the latest
        call (its meeting may not have run), a call the worker has not enqueued yet (it may turn
        out enqueued behind the call before it) and the calls to come taken as holding nothing. It
        gives its verdict only where that already changes the kind, as the full count then would
        (every step above rises with the median); else the counting goes on."""
        if len(self.held_us) < self.REVIEW_CALLS:
            # The count's median (its upper middle: the ninth smallest of sixteen) is at least the
            # smallest of any eight of its calls.
            calls = self._held_whole(gloo, self.EARLY_CALLS, least=True)
            bound = _max_over_ranks(gloo, [min(calls)])[0]
            if self._verdict(bound) is None:
                return self.native
            self.reviewed = bound
        else:
            calls = self._held_whole(gloo)
            self.reviewed = _max_over_ranks(gloo, [_middle(calls)])[0]
        self.held_calls, self.held_us = calls, []
        verdict = self._verdict(self.reviewed)
        if verdict == "staged":
            self.met_reviewed = self.reviewed
            self.form, self.reviewed, self.held_calls = "gpustripe", None, []
        elif verdict == "nccl":
            self.native = False
        return self.native

    def _verdict(self, reviewed: float):
        """What a review whose calls held their callers `reviewed` us (the median) changes: "nccl",
        "staged" (a met form's kind goes to its staged form), or None (the kind stays)."""
        extra = max(0.0, reviewed - self.issue_us.get("nccl", 0.0))
        slower = self.us[self.form] + extra > self.us["nccl"]
        if slower and self.form == "met" and self.us["gpustripe"] <= self.us["nccl"]:
            return "staged"
        return "nccl" if slower else None
