"""Queued stream-ordered calls of the store-met team (queued=True: handed to the team's worker,
which meets the other ranks and enqueues them in call order): a caller's calls return before
the peer has posted and come out exact and in order, a blocking call after them reads their
results, their start events are reused, a call declined at the meeting and a peer that died reach the caller at join() and at
its next call, and a team closed with calls queued runs them first. Emulated node, no torch."""
import os

import pytest
from store_ranks import reports, run_ranks, skip_without

WORKER = os.path.join(os.path.dirname(__file__), "node_team_queue_worker.py")


def run(tmp_path, scenario: str, size: int = 2, timeout_s: str = "20", staged: bool = False,
        hooks: str = "") -> list[dict]:
    # Staging off but where asked: a staged call is queued only behind queued calls (it meets no
    # other rank's host; the team's first one sets the slots up with the others), and these are
    # the queue's semantics.
    # The GPUs' in-kernel barriers (a staged call's) give up on a dead peer after their own timeout.
    env = dict(os.environ, GPUSTRIPE_TIMEOUT=timeout_s, GPUSTRIPE_COLL_BARRIER_TIMEOUT=timeout_s, PYTHONUNBUFFERED="1")
    env["GPUSTRIPE_TEST"] = ",".join(h for h in (hooks, "" if staged else "coll.staged_max=0") if h)
    by_rank = {}
    for text in run_ranks(WORKER, str(tmp_path / "store"), size, [scenario], env, 90):
        got = reports(text, "QUEUE ")
        assert len(got) <= 1, text
        if got:
            by_rank[got[0]["rank"]] = got[0]
    return [by_rank.get(r) for r in range(size)]


@pytest.mark.parametrize("size", [2, 3])
def test_queued_calls_return_before_the_peer_posts_and_come_out_in_order(tmp_path, size):
    skip_without(size)
    reports = run(tmp_path, "ahead", size)
    for r in reports:
        assert r["returned"] and r["queued"] == 9, r
        assert all(r["checks"].values()), r
        assert r["stats"]["done"] == r["stats"]["queued"] == 9, r
        assert 1 <= r["stats"]["events_created"] <= 9 and r["events_later"] == 0, r  # reused, not one per call
    # Rank 1 posted nothing before rank 0's nine calls had all returned: none of them could have
    # met the others yet (the worker had run none).
    assert reports[0]["done_when_posted"] == 0, reports[0]
    assert reports[0]["first_waited_when_posted"] is False, reports[0]  # waited for rank 1's call


def test_a_call_declined_at_the_meeting_fails_its_join_and_later_calls(tmp_path):
    skip_without(2)
    r0, r1 = run(tmp_path, "declined")
    assert r0["posted"], r0                      # its side could take it: queued, returned at once
    assert "declined" in r0["join"], r0          # the meeting's answer, at the join
    assert "declined" in r0["later"], r0         # and at the next call
    assert not r1["posted"] and "cannot take" in r1["call_error"], r1  # raised at once here
    assert r1["join"] != "returned" and r1["later"] != "returned", r1


def test_a_peer_gone_before_a_queued_call_fails_the_join_within_the_timeout(tmp_path):
    skip_without(2)
    r0, r1 = run(tmp_path, "peer_dies", timeout_s="5")
    assert r1 is None  # left without a call
    assert r0["posted"] and r0["join"] != "returned", r0
    assert "rank" in r0["join"], r0


def test_a_peer_gone_after_the_slots_setup_fails_the_next_staged_call_within_the_timeout(tmp_path):
    # A staged call does not meet the other ranks, so the dead peer shows where this rank waits
    # for its GPUs (or, emulated, in the call's enqueue): an error naming the rank, not a hang.
    skip_without(2)
    r0, r1 = run(tmp_path, "staged_peer_dies", timeout_s="5", staged=True)
    assert r1 is None  # left after its first call
    assert r0["first"] == 3.0 and r0["staged"] == 1, r0  # 1 + 2, through the slots
    assert "rank 1" in r0["failed"] and r0["failed_s"] < 15.0, r0
    assert r0["later"] != "returned", r0


@pytest.mark.parametrize("staged", [False, True])
def test_a_call_enqueued_while_the_one_before_it_runs_says_so(tmp_path, staged):
    # What the torch backend's review asks of each call, queued or staged: known once it is
    # enqueued, and where the team's call before it was settled, the GPUs were idle. (Which later
    # calls came behind their predecessor depends on the emulated streams' pace:
    # CollSlice.ARunKnowsWhetherTheRunBeforeItStillRanWhenItWasEnqueued orders the runs for it.)
    skip_without(2)
    for r in run(tmp_path, "behind_staged" if staged else "behind", staged=staged):
        assert r["exact"], r
        assert r["staged"] == (4 if staged else 0), r
        assert r["unknown"] == [-1, -1] and r["not_yet"] == -1, r  # no call 0, nor one not made
        assert r["behind"][0] == 0 and set(r["behind"]) <= {0, 1}, r
        # staging on: a block of 512 KB fits the slots; a call asked for in its met form is not staged
        assert (r["limit"] >= (512 << 10)) if staged else r["limit"] == 0, r
        assert r["met_exact"] and r["staged_after_met"] == r["staged"], r


def test_a_staged_call_behind_a_queued_one_is_queued_too(tmp_path):
    # Enqueued on the caller's thread it would wait there for the met call's meeting with rank 1,
    # which posts only once rank 0's calls returned (the drain would time out).
    skip_without(2)
    r0, r1 = run(tmp_path, "staged_behind_queued", staged=True)
    assert r0["posted"] == 2 and r0["exact"] and r0["staged"] == 1, r0
    assert r1["exact"] and r1["staged"] == 1, r1


def test_a_team_closed_with_calls_queued_runs_them_first(tmp_path):
    skip_without(2)
    r0, r1 = run(tmp_path, "shutdown")
    assert r0["closed"] and r0["done_when_posted"] == 0, r0
    assert all(r1["checks"].values()), r1  # rank 0's worker met every call while its team closed
