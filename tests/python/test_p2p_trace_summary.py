"""bench/mpi/p2p_trace_summary.py on a hand-written phase trace (two processes' files, the
format src/p2p/trace.cpp writes): phases joined across the sender's and the receiver's files,
host shares of window copies, and the per-window timing of --window (to the next window's start)."""
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "mpi", "p2p_trace_summary.py")
N = 268435456


def _write(tmp_path):
    # Two windows of 2 messages (send ids 1-2, 3-4) from rank 0 to rank 1. Times in us.
    sender, receiver = [], []

    def s(us, phase, sid=0, rid=0, nbytes=N, who=0):
        sender.append(f"{int(us * 1000)} 0 {phase} {who} {sid} {rid} {nbytes}")

    def r(us, phase, sid=0, rid=0, nbytes=N, who=0):
        receiver.append(f"{int(us * 1000)} 1 {phase} {who} {sid} {rid} {nbytes}")

    for w, t0 in enumerate((1000, 5000)):
        a, b = 2 * w + 1, 2 * w + 2
        s(t0, "m_isend", who=-1, nbytes=0)
        s(t0 + 1, "s_post", a)
        s(t0 + 2, "s_rts", a)
        s(t0 + 3, "m_isend", who=-1, nbytes=0)
        s(t0 + 4, "s_post", b)
        s(t0 + 5, "s_rts", b)
        r(t0 + 6, "r_match", a, 10 + a)
        r(t0 + 7, "r_mapped", a, 10 + a)
        r(t0 + 7.5, "p_window_first", -1, 110000, who=-1)
        r(t0 + 39, "c_enq", who=-1)
        r(t0 + 40, "r_started", a, 10 + a)
        r(t0 + 41, "r_match", b, 10 + b)
        r(t0 + 42, "r_mapped", b, 10 + b)
        r(t0 + 42.5, "p_window", -1, 115000, who=-1)
        r(t0 + 68, "c_enq", who=-1)
        r(t0 + 70, "r_started", b, 10 + b)
        r(t0 + 640, "r_copied", a, 10 + a)
        r(t0 + 1240, "r_copied", b, 10 + b)
        s(t0 + 1242, "s_done", a)
        s(t0 + 1242.5, "s_done", b)
        s(t0 + 1243, "s_ret", a)
        s(t0 + 1243, "s_ret", b)
        s(t0 + 1244, "m_ret", who=-1, nbytes=0)
    (tmp_path / "p2p-trace-100.txt").write_text("\n".join(sender) + "\n")
    (tmp_path / "p2p-trace-101.txt").write_text("\n".join(receiver) + "\n")


def _run(tmp_path, *args):
    out = subprocess.run([sys.executable, SCRIPT, str(tmp_path), *args], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def _row(lines, header_word):
    """The numbers of the data row under the header line that contains `header_word`."""
    i = next(k for k, l in enumerate(lines) if header_word in l and l.split()[0] == "bytes")
    return [float(x) for x in lines[i + 1].split()]


def test_phases_and_window_shares(tmp_path):
    _write(tmp_path)
    lines = _run(tmp_path)
    row = _row(lines, "enqueue")
    assert row[0] == N and row[1] == 4
    # mpi_in post to_match map enqueue copyfn event copy to_done s_ret mpi_out total, medians of 4
    # messages.
    mpi_in, enqueue, copyfn, event, copy = row[2], row[6], row[7], row[8], row[9]
    assert abs(mpi_in - 1) < 0.01
    assert abs(enqueue - 30.5) < 0.01  # 33 and 28 us, twice each
    assert abs(copyfn - 29) < 0.01     # mapped -> copy function returned: 32 and 26 us
    assert abs(event - 1.5) < 0.01     # -> event recorded: 1 and 2 us
    assert abs(copy - 885) < 0.01      # 600 and 1170 us, twice each
    # concurrent, direct, lean, queued (window copies, the first one included), host share %, gap.
    conc, direct, lean, queued, share = row[14:19]
    assert (conc, direct, lean, queued) == (0, 0, 0, 1)
    assert abs(share - 11.25) < 0.01


def test_window_timing(tmp_path):
    _write(tmp_path)
    lines = _run(tmp_path, "--window", "2")
    row = _row(lines, "per_msg")
    assert row[0] == N and row[1] == 2
    start, enq1, first, per_msg, end, window, nxt = row[2:]
    assert abs(start - 40) < 0.01      # MPI_Isend -> first copy enqueued
    assert abs(enq1 - 33) < 0.01
    assert abs(first - 600) < 0.01
    assert abs(per_msg - 600) < 0.01   # (1240 - 40) / 2
    assert abs(end - 4) < 0.01         # last copy seen complete -> MPI wait returned
    assert abs(window - 1244) < 0.01
    assert abs(nxt - 2756) < 0.01      # the first window's wait returned -> the second's MPI_Isend


def test_host_steps_of_window_one(tmp_path):
    # Rank 0 sends a device message (rendezvous), rank 1 pulls it in a one-copy batch and
    # acknowledges with a one-byte eager send; twice. Times in us.
    sender, receiver = [], []

    def s(us, phase, sid=0, nbytes=8, who=-1):
        sender.append(f"{int(us * 1000)} 0 {phase} {who} {sid} 0 {nbytes}")

    def r(us, phase, sid=0, nbytes=0, who=-1):
        receiver.append(f"{int(us * 1000)} 1 {phase} {who} {sid} 0 {nbytes}")

    for k, t0 in enumerate((100, 200)):
        sid = k + 1
        s(t0, "m_isend")
        s(t0 + 0.25, "m_located")
        s(t0 + 0.5, "s_post", sid, who=0)
        s(t0 + 0.75 + k, "s_rts", sid, who=0)  # announced 0.5 and 1.5 us after located
        s(t0 + 2, "m_posted")
        r(t0 + 3, "m_irecv")
        r(t0 + 4, "c_batch", nbytes=1)
        r(t0 + 6, "c_batched", nbytes=1)  # a 2 us enqueue call
        for q in range(3 + k):  # 3 and 4 queries found it running
            r(t0 + 7 + q, "c_busy")
        r(t0 + 11, "c_seen")  # 5 us after the enqueue returned
        r(t0 + 12, "m_ret")
        r(t0 + 13, "m_isend")  # the acknowledgement
        r(t0 + 13.5, "m_located")
        r(t0 + 14, "m_posted")
        r(t0 + 14.25, "m_ret")
    (tmp_path / "p2p-trace-100.txt").write_text("\n".join(sender) + "\n")
    (tmp_path / "p2p-trace-101.txt").write_text("\n".join(receiver) + "\n")
    lines = _run(tmp_path)
    i = next(k for k, l in enumerate(lines) if l.startswith("# host steps"))
    assert lines[i + 1].split() == ["enq_call", "to_seen", "queries", "locate", "announce", "e_locate", "e_post",
                                    "e_ret"]
    enq, seen, queries, locate, announce, e_locate, e_post, e_ret = (float(x) for x in lines[i + 2].split())
    assert (enq, seen, queries) == (2, 5, 4.5)
    assert (locate, announce) == (0.25, 1)
    assert (e_locate, e_post, e_ret) == (0.5, 0.5, 0.25)
