"""bench/mpi/coll_trace_summary.py on a hand-written phase trace (two ranks' files, the format
src/p2p/trace.cpp writes, the phases src/mpi/coll_team.cpp stamps): each phase's median per form
and size, the time between calls, the ranks' skew at the exchange; p2p phases in the same files
are not taken for a collective's."""
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "mpi", "coll_trace_summary.py")
MB = 1 << 20
PHASES = ["coll_in", "coll_pre", "coll_post", "coll_all", "coll_prog", "coll_enq", "coll_done", "coll_ret"]


def _write(tmp_path):
    # Three blocking calls of 1 MB (call numbers 1-3) and two nonblocking (4-5) on ranks 0 and 1,
    # 30 us apart. Phase offsets in us from the call's start: rank 1 posts 2 us after rank 0.
    offsets = {0: [0, 1, 2, 5, 6, 9, 20, 21], 1: [0, 1, 4, 5, 6, 9, 20, 21]}
    for rank in (0, 1):
        lines = []
        for call in range(1, 6):
            form = 0 if call <= 3 else 1
            t0 = 1000 + 30 * call
            for phase, us in zip(PHASES, offsets[rank]):
                lines.append(f"{int((t0 + us) * 1000)} {rank} {phase} {rank} {call} {form} {MB}")
            if rank == 1:  # rank 1's part launches 1 us into its enqueue (rank 0 has no op: no stamp)
                lines.append(f"{int((t0 + 7) * 1000)} {rank} coll_launch {rank} {call} {form} {MB}")
            # a p2p copy's enqueue in the same file, keyed like nothing of the collectives
            lines.append(f"{int((t0 + 7) * 1000)} {rank} c_enq -1 {call} {form} 0")
        (tmp_path / f"p2p-trace-{100 + rank}.txt").write_text("\n".join(lines) + "\n")


def test_phases_per_form_and_size(tmp_path):
    _write(tmp_path)
    out = subprocess.run([sys.executable, SCRIPT, str(tmp_path)], capture_output=True, text=True, check=True).stdout
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.startswith(("blocking", "nonblocking"))}
    assert set(rows) == {"blocking", "nonblocking"}, out
    head = next(ln.split() for ln in out.splitlines() if ln.startswith("form"))
    b = dict(zip(head, rows["blocking"]))
    assert b["bytes"] == "1M" and b["calls"] == "6"  # 3 calls on each of the 2 ranks
    # medians over both ranks: rank 0's exchange is 3 us (it posted first), rank 1's 1 us
    want = {"lookup": 1, "prepare": 2, "exchange": 2, "program": 1, "enqueue": 3, "launch": 2, "gpu": 11, "ret": 1,
            "call": 21, "between": 9, "period": 30, "skew": 2}
    for col, v in want.items():
        assert abs(float(b[col]) - v) < 1e-6, (col, b[col], out)
    nb = dict(zip(head, rows["nonblocking"]))
    assert nb["calls"] == "4" and float(nb["period"]) == 30


def test_no_collective_phases_is_an_error(tmp_path):
    (tmp_path / "p2p-trace-1.txt").write_text("1000 0 c_enq -1 1 0 0\n")
    r = subprocess.run([sys.executable, SCRIPT, str(tmp_path)], capture_output=True, text=True)
    assert r.returncode != 0 and "no collective phases" in r.stderr


def test_by_rank_names_the_late_rank_and_its_phase(tmp_path):
    _write(tmp_path)
    out = subprocess.run([sys.executable, SCRIPT, str(tmp_path), "--by-rank"], capture_output=True, text=True,
                         check=True).stdout
    head = next(ln.split() for ln in out.splitlines() if ln.startswith("form"))
    rows = [dict(zip(head, ln.split())) for ln in out.splitlines() if ln.startswith("blocking")]
    by = {r["rank"]: r for r in rows}
    assert set(by) == {"*", "0", "1"}, out
    assert by["0"]["calls"] == "3" and by["1"]["calls"] == "3" and by["*"]["calls"] == "6"
    # rank 1 posts 2 us after rank 0 in every call: its prepare is the longer, rank 0 waits in the exchange
    assert float(by["1"]["last"]) == 1 and float(by["0"]["last"]) == 0, out
    assert float(by["1"]["prepare"]) == 3 and float(by["0"]["prepare"]) == 1, out
    assert float(by["0"]["exchange"]) == 3 and float(by["1"]["exchange"]) == 1, out
    assert float(by["*"]["skew"]) == 2, out
    assert by["0"]["launch"] == "-" and float(by["1"]["launch"]) == 2, out
