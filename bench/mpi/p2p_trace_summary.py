#!/usr/bin/env python3
"""Where a p2p message's time goes: reads the p2p phase traces
(GPUSTRIPE_P2P_TRACE=<dir>, src/p2p/trace.hpp) of one run and prints, per message
size, the median microseconds of each phase, joined across the sender's and the
receiver's files by (sender, send_id):

  mpi_in     MPI_Isend entered -> p2p isend (the interposer's own cost; '-' natively)
  post       p2p isend -> its Rts is in the ring
  to_match   Rts in the ring -> the receiver matched it (its polling, its irecv)
  map        matched -> the sender's buffer is mapped (mapping cache)
  enqueue    mapped -> the copy is enqueued (planning, engine, graph replay), in two parts:
  copyfn     mapped -> the copy function returned (board, plan, the engine's enqueue)
  event      that -> its completion event recorded (the mover's stream and event)
  copy       enqueued -> the receiver saw the copy complete (the GPU, event polling)
  to_done    copy seen complete -> the sender read Done
  s_ret      Done read -> the sender's wait saw its request complete
  mpi_out    that -> MPI_Wait/Waitall returned on the sender ('-' natively)
  total      MPI_Isend (or p2p isend) entered -> the sender's wait returned
  concurrent share of the copies planned with other ranks' copies in flight
  direct     share of the copies put on the direct path alone by the plan made with the
             traffic the other way in flight
  lean       share of the copies below the size where the lone plan splits: one plain copy,
             no board, no plan, no pointer queries
  queued     share of the copies run as a window's (detached, alternating areas; the
             first of a window included) or split beside the traffic the other way, and
             the median host share they took (%)
  gap        median microseconds between one copy seen complete and the next of that size
             on the same receiver: the time per message of a window, where copies queue

Small device messages through eager slots (src/p2p/eager_slots.hpp) get a table of their own:

  copy_in    slot taken -> the copy into it enqueued (with its event)
  post       that -> the record is in the ring (the copy seen complete by a progress pass)
  to_read    record in the ring -> the receiver read it (its polling, its irecv)
  copy_out   read -> the copy out of the slot enqueued (with its event)
  r_done     that -> the receiver's request seen complete (the copy, the event query)
  s_done     record in the ring -> the sender's request seen complete
  total      slot taken -> the receiver's request seen complete

With --window W (the run's window), each window of W consecutive messages of one size is
also timed on the receiver and the median printed:
  start      the sender's first MPI_Isend (or isend) -> the first copy enqueued
  enq1       the first copy's enqueue (mapped -> enqueued)
  first      the first copy enqueued -> seen complete
  per_msg    the first copy enqueued -> the last seen complete, over W
  end        the last copy seen complete -> the sender's last wait returned
  window     the sender's first MPI_Isend -> its last wait returned
  next       the sender's last wait returned -> the next window's first MPI_Isend (the
             receiver's acknowledgement of osu_bw's loop, through the interposer)

Where the mover's and the interposer's own stamps are in the files, the host steps around a
message get a table of their own (median us; meant for window 1, one copy in flight at a time):
  enq_call   a one-copy batch's enqueue call on the receiver (c_batch -> c_batched)
  to_seen    that enqueue returned -> the copy seen complete (c_batched -> c_seen)
  queries    completion queries per copy until it was seen (c_busy stamps, and the one that saw it)
  locate     a rendezvous send: MPI_Isend/MPI_Send entered -> its buffer located
  announce   that -> its Rts in the ring
  e_locate   an eager send (no Rts: the benchmark's acknowledgements): entered -> located
  e_post     that -> posted (the interposer's request made, or the send over)
  e_ret      that -> the call returned

With --timeline BYTES, every stamp of both ranks around the messages of that size, as the median
microseconds from the sender's MPI_Isend (or isend) of each message until the next one's: one
line per (rank, stamp, occurrence within the message's span), in time order. The records each
endpoint posts and reads are x_out/x_in with their kind (1 eager, 2 Rts, 5 Fin, 6 SyncAck,
7 Done); m_wait is an MPI wait or Waitall entered. Meant for window 1 and latency, where a span
is one message and what answers it.

  python3 bench/mpi/p2p_trace_summary.py DIR [--label NAME] [--window W] [--timeline BYTES]
"""
from __future__ import annotations

import argparse
import bisect
import glob
import os
import statistics
from collections import defaultdict

# Stamps of a copy's plan whose recv_id field is the host share it took (millionths).
SHARED = ("p_window", "p_window_first", "p_twoway", "p_twoway_window")
PHASES = ("mpi_in", "post", "to_match", "map", "enqueue", "copyfn", "event", "copy", "to_done", "s_ret", "mpi_out",
          "total")


def read(dirname: str):
    """{(sender, send_id): {phase: ns}} and each file's events in order."""
    msgs = defaultdict(dict)
    files = []
    shares = []
    for path in sorted(glob.glob(os.path.join(dirname, "p2p-trace-*.txt"))):
        events = []
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) != 7:
                    continue
                ns, rank, phase, sender, send_id, recv_id, nbytes = p
                events.append((int(ns), int(rank), phase, int(sender), int(send_id), int(nbytes)))
                if phase in SHARED:  # recv_id: the host share in millionths
                    shares.append(int(recv_id) / 1e4)
        files.append(events)
        for ns, rank, phase, sender, send_id, nbytes in events:
            if sender >= 0:
                m = msgs[(sender, send_id)]
                m.setdefault(phase, ns)
                if phase in ("s_post", "r_match", "e_take"):
                    m.setdefault("bytes", nbytes)
    # Concurrent plans (p_concurrent, unkeyed) belong to the copy mapped just before.
    for events in files:
        last = None
        for ns, rank, phase, sender, send_id, nbytes in events:
            if phase == "r_mapped":
                last = (sender, send_id)
            elif phase == "p_concurrent" and last is not None:
                msgs[last]["conc"] = 1
                last = None
            elif phase == "p_direct" and last is not None:
                msgs[last]["direct"] = 1
                last = None
            elif phase == "p_lean" and last is not None:
                msgs[last]["lean"] = 1
            elif phase in SHARED and last is not None:
                msgs[last]["queued"] = shares.pop(0) if shares else 0.0
                last = None
    for events in files:
        last = None
        for ns, rank, phase, sender, send_id, nbytes in events:
            if phase == "r_mapped":
                last = (sender, send_id)
            elif phase == "c_enq" and last is not None:
                msgs[last]["c_enq"] = ns
                last = None
    # The interposer's unkeyed stamps: the MPI_Isend entered just before a p2p isend,
    # and the first MPI wait return after the sender saw the request complete.
    for events in files:
        last_isend = None
        waiting = []
        for ns, rank, phase, sender, send_id, nbytes in events:
            if phase == "m_isend":
                last_isend = ns
            elif phase == "s_post":
                m = msgs[(sender, send_id)]
                if last_isend is not None:
                    m["m_isend"] = last_isend
                last_isend = None
            elif phase == "s_ret":
                waiting.append((sender, send_id))
            elif phase == "m_ret":
                for key in waiting:
                    msgs[key]["m_ret"] = ns
                waiting = []
    # Time per message where copies queue: consecutive completions of one size on a receiver.
    for events in files:
        prev = {}
        for ns, rank, phase, sender, send_id, nbytes in events:
            if phase == "r_copied":
                if nbytes in prev:
                    msgs[(sender, send_id)]["gap"] = (ns - prev[nbytes]) / 1e3
                prev[nbytes] = ns
    return msgs, files


def windows(msgs: dict, files: list, window: int) -> dict:
    """Median microseconds of each window phase, per size (see --window)."""
    # The sender's MPI_Isend stamps (unkeyed) and wait returns, in time order.
    isends = sorted(ns for events in files for ns, rank, phase, *_ in events if phase == "m_isend")
    out = defaultdict(lambda: defaultdict(list))
    by_size = defaultdict(list)
    for key in sorted(msgs, key=lambda k: msgs[k].get("s_post", 0)):
        m = msgs[key]
        if all(p in m for p in ("bytes", "s_post", "r_mapped", "r_started", "r_copied", "s_ret")):
            by_size[m["bytes"]].append(m)
    for size, ms in by_size.items():
        prev_end = None
        for w in range(len(ms) // window):
            group = ms[w * window:(w + 1) * window]
            first = min(group, key=lambda m: m["r_started"])
            # The window starts at the MPI_Isend just before its first p2p isend (natively: that isend).
            t0 = group[0]["s_post"]
            i = bisect.bisect_right(isends, t0)
            if i > 0 and t0 - isends[i - 1] < 1e6:
                t0 = isends[i - 1]
            last = max(m["r_copied"] for m in group)
            end = max(m.get("m_ret", m["s_ret"]) for m in group)
            o = out[size]
            o["start"].append((first["r_started"] - t0) / 1e3)
            o["enq1"].append((first["r_started"] - first["r_mapped"]) / 1e3)
            o["first"].append((first["r_copied"] - first["r_started"]) / 1e3)
            o["per_msg"].append((last - first["r_started"]) / 1e3 / window)
            o["end"].append((end - last) / 1e3)
            o["window"].append((end - t0) / 1e3)
            if prev_end is not None and t0 > prev_end:
                o["next"].append((t0 - prev_end) / 1e3)
            prev_end = end
    return out


def phases(m: dict) -> dict:
    def d(a, b):
        return (m[b] - m[a]) / 1e3 if a in m and b in m else None

    start = "m_isend" if "m_isend" in m else "s_post"
    end = "m_ret" if "m_ret" in m else "s_ret"
    return {
        "mpi_in": d("m_isend", "s_post"),
        "post": d("s_post", "s_rts"),
        "to_match": d("s_rts", "r_match"),
        "map": d("r_match", "r_mapped"),
        "enqueue": d("r_mapped", "r_started"),
        "copyfn": d("r_mapped", "c_enq"),
        "event": d("c_enq", "r_started"),
        "copy": d("r_started", "r_copied"),
        "to_done": d("r_copied", "s_done"),
        "s_ret": d("s_done", "s_ret"),
        "mpi_out": d("s_ret", "m_ret"),
        "total": d(start, end),
        "conc": m.get("conc", 0),
        "queued": m.get("queued"),
        "direct": m.get("direct", 0),
        "lean": m.get("lean", 0),
        "gap": m.get("gap"),
    }


EAGER = (("copy_in", "e_take", "e_slot"), ("post", "e_slot", "e_posted"), ("to_read", "e_posted", "e_read"),
         ("copy_out", "e_read", "e_started"), ("r_done", "e_started", "e_r_ret"), ("s_done", "e_posted", "e_s_ret"),
         ("total", "e_take", "e_r_ret"))


def eager_table(msgs: dict) -> None:
    by_size = defaultdict(list)
    for m in msgs.values():
        if "e_take" in m:
            by_size[m["bytes"]].append(m)
    if not by_size:
        return
    print("# eager slots: median us per phase")
    print(f"{'bytes':>11} {'n':>4} " + " ".join(f"{p:>9}" for p, _, _ in EAGER))
    for size in sorted(by_size):
        cells = []
        for _, a, b in EAGER:
            v = [(m[b] - m[a]) / 1e3 for m in by_size[size] if a in m and b in m]
            cells.append(f"{statistics.median(v):9.2f}" if v else f"{'-':>9}")
        print(f"{size:>11} {len(by_size[size]):>4} " + " ".join(cells))


def host_steps(files: list) -> dict:
    """Lists of microseconds of each host step (the host-steps table), over every file."""
    out = defaultdict(list)
    for events in files:
        batch = batched = None
        busy = 0
        send = None  # the interposer's send in progress: its stamps so far
        for ns, rank, phase, sender, send_id, nbytes in events:
            if phase == "c_batch":
                batch = ns if nbytes == 1 else None
            elif phase == "c_batched" and batch is not None:
                out["enq_call"].append((ns - batch) / 1e3)
                batch, batched, busy = None, ns, 0
            elif phase == "c_busy" and batched is not None:
                busy += 1
            elif phase == "c_seen" and batched is not None:
                out["to_seen"].append((ns - batched) / 1e3)
                out["queries"].append(busy + 1)
                batched = None
            elif phase in ("m_isend", "m_irecv"):
                send = {"m_isend": ns} if phase == "m_isend" else None
            elif send is not None and phase in ("m_located", "s_rts", "m_posted", "m_ret"):
                send.setdefault(phase, ns)
                if phase == "m_posted" and "s_rts" in send:
                    out["locate"].append((send["m_located"] - send["m_isend"]) / 1e3)
                    out["announce"].append((send["s_rts"] - send["m_located"]) / 1e3)
                    send = None
                elif phase == "m_ret" and "m_posted" in send and "m_located" in send:
                    out["e_locate"].append((send["m_located"] - send["m_isend"]) / 1e3)
                    out["e_post"].append((send["m_posted"] - send["m_located"]) / 1e3)
                    out["e_ret"].append((ns - send["m_posted"]) / 1e3)
                    send = None
    return out


def timeline(msgs: dict, files: list, size: int) -> None:
    """The --timeline table: median offsets of every stamp in the spans of `size`'s messages."""
    starts = sorted(m.get("m_isend", m["s_post"]) for m in msgs.values()
                    if m.get("bytes") == size and "s_post" in m and "r_copied" in m)
    if len(starts) < 2:
        print(f"# timeline: fewer than two messages of {size} bytes")
        return
    offsets = defaultdict(list)
    for events in files:
        times = [e[0] for e in events]
        for a, b in zip(starts, starts[1:]):
            seen = defaultdict(int)
            for i in range(bisect.bisect_left(times, a), bisect.bisect_left(times, b)):
                ns, rank, phase, sender, send_id, nbytes = events[i]
                name = f"r{rank} {phase}"
                if phase in ("x_in", "x_out"):
                    name += f" k{send_id}"
                seen[name] += 1
                offsets[f"{name} #{seen[name]}"].append((ns - a) / 1e3)
    spans = len(starts) - 1
    print(f"# timeline of {size}-byte messages: median us from the sender's MPI_Isend ({spans} spans;"
          " stamps in at least half of them)")
    rows = [(statistics.median(v), k, len(v)) for k, v in offsets.items() if len(v) * 2 >= spans]
    for med, k, n in sorted(rows):
        print(f"{med:9.2f}  {k:<28} {n:>5}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--label", default="")
    ap.add_argument("--window", type=int, default=0, help="time each window of this many messages")
    ap.add_argument("--timeline", type=int, default=0, metavar="BYTES",
                    help="every stamp around the messages of this size, from the sender's MPI_Isend")
    a = ap.parse_args()
    msgs, files = read(a.dir)
    by_size = defaultdict(list)
    for m in msgs.values():
        if "bytes" in m and "s_post" in m and "r_copied" in m:
            by_size[m["bytes"]].append(phases(m))
    print(f"# {a.label or a.dir}: median us per phase ({len(msgs)} messages)")
    print(f"{'bytes':>11} {'n':>4} " + " ".join(f"{p:>9}" for p in PHASES) + "  concurrent direct lean queued host% gap")
    for size in sorted(by_size):
        rows = by_size[size]
        cells = []
        for p in PHASES:
            v = [r[p] for r in rows if r[p] is not None]
            cells.append(f"{statistics.median(v):9.2f}" if v else f"{'-':>9}")
        conc = sum(r["conc"] for r in rows) / len(rows)
        q = [r["queued"] for r in rows if r["queued"] is not None]
        gaps = [r["gap"] for r in rows if r["gap"] is not None]
        share = f"{statistics.median(q):5.2f}" if q else f"{'-':>5}"
        gap = f"{statistics.median(gaps):9.2f}" if gaps else f"{'-':>9}"
        direct = sum(r["direct"] for r in rows) / len(rows)
        lean = sum(r["lean"] for r in rows) / len(rows)
        print(f"{size:>11} {len(rows):>4} " + " ".join(cells)
              + f"  {conc:10.2f} {direct:6.2f} {lean:4.2f} {len(q) / len(rows):6.2f} {share} {gap}")
    eager_table(msgs)
    steps = host_steps(files)
    if steps:
        cols = ("enq_call", "to_seen", "queries", "locate", "announce", "e_locate", "e_post", "e_ret")
        print("# host steps: median us (queries: a count)")
        print(" ".join(f"{c:>9}" for c in cols))
        print(" ".join(f"{statistics.median(steps[c]):9.2f}" if steps[c] else f"{'-':>9}" for c in cols))
    if a.window > 0:
        cols = ("start", "enq1", "first", "per_msg", "end", "window", "next")
        print(f"# windows of {a.window}: median us (warm-up windows included)")
        print(f"{'bytes':>11} {'n':>4} " + " ".join(f"{c:>9}" for c in cols))
        for size, o in sorted(windows(msgs, files, a.window).items()):
            print(f"{size:>11} {len(o['start']):>4} "
                  + " ".join(f"{statistics.median(o[c]):9.2f}" if o[c] else f"{'-':>9}" for c in cols))


    if a.timeline:
        timeline(msgs, files, a.timeline)


if __name__ == "__main__":
    main()
