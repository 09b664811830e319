#!/usr/bin/env python3
"""Where an interposed collective's time goes: reads the phase traces
(GPUSTRIPE_P2P_TRACE=<dir>, src/p2p/trace.hpp) of one run and prints, per form (blocking,
nonblocking) and size, the median microseconds of each phase of a call on every rank
(src/mpi/coll_team.cpp stamps them, keyed by rank and call number):

  lookup    the interposer got the call -> the team got it (communicator, datatype and op
            checks, the pointer queries)
  prepare   -> its message posted in the entry exchange (shape, scratch, the buffers' handles)
  exchange  -> every rank's message seen (the entry barrier: the other ranks' lateness)
  program   -> the mappings and the Program ready (cached: lookups only)
  enqueue   -> this rank's part enqueued on its streams, its done word's write included
  launch    of enqueue, the part's driver calls (from the first one's start: a kernel's launch);
            the rest of enqueue is the runner's own bookkeeping ("-" where the rank has no op)
  gpu       -> every rank's done word seen (the launch's latency, the kernels, the end's flag)
  ret       -> the call returned to the program (nonblocking: its wait or test saw it complete)
  call      the interposer got the call -> it returned
  between   returned -> the next call reached the interposer (the program's own time)
  period    one call's coll_in -> the next one's, on this rank: the time per call
  skew      per call, the latest rank's post minus the earliest's

With --by-rank, each rank's row besides (the medians of its own calls) and `last`, the share of
the calls whose exchange this rank reached last: where the ranks keep a skew, the phase where the
late rank loses its time.

  python3 bench/mpi/coll_trace_summary.py DIR [--label NAME] [--by-rank]
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
from collections import defaultdict

PHASES = ["coll_in", "coll_pre", "coll_post", "coll_all", "coll_prog", "coll_enq", "coll_done", "coll_ret"]
# The spans between phases (name, from, to); launch is inside enqueue, stamped where the rank launched.
SPANS = [(name, a, b) for name, a, b in zip(["lookup", "prepare", "exchange", "program", "enqueue", "gpu", "ret"],
                                           PHASES, PHASES[1:])]
SPANS.insert(5, ("launch", "coll_launch", "coll_enq"))
COLUMNS = [name for name, _, _ in SPANS] + ["call", "between", "period", "skew"]
ALL = -1  # the rank of a row over every rank's calls


def read(path: str):
    """This process's collective events {(rank, call, form): {phase: ns, "bytes": size}}."""
    calls: dict = defaultdict(dict)
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 7 or not parts[2].startswith("coll_"):
                continue
            ns, _, phase, sender, call, form, nbytes = parts
            key = (int(sender), int(call), int(form))
            calls[key][phase] = int(ns)
            calls[key]["bytes"] = int(nbytes)
    return calls


def rows(paths: list[str], by_rank: bool = False):
    """(form, bytes, rank) -> column -> values: rank ALL over every rank's calls, and with
    by_rank each rank's own (its "last": 1 for each call whose exchange it reached last, else 0)."""
    out: dict = defaultdict(lambda: defaultdict(list))
    posts: dict = defaultdict(list)  # (call, form) -> every rank's (coll_post, rank)
    sizes: dict = {}
    for path in paths:
        done = []
        for (rank, call, form), ev in sorted(read(path).items(), key=lambda kv: kv[1].get("coll_pre", 0)):
            if not all(p in ev for p in PHASES[1:]):
                continue
            start = ev.get("coll_in", ev["coll_pre"])
            keys = [(form, ev["bytes"], ALL)] + ([(form, ev["bytes"], rank)] if by_rank else [])
            for key in keys:
                col = out[key]
                for name, a, b in SPANS:
                    if a in ev and b in ev:
                        col[name].append((ev[b] - ev[a]) / 1e3)
                col["call"].append((ev["coll_ret"] - start) / 1e3)
            posts[(call, form)].append((ev["coll_post"], rank))
            sizes[(call, form)] = (form, ev["bytes"])
            done.append((start, ev["coll_ret"], keys))
        for (s0, b0, k0), (s1, _, k1) in zip(done, done[1:]):
            if k0 == k1:
                for key in k0:
                    out[key]["between"].append((s1 - b0) / 1e3)
                    out[key]["period"].append((s1 - s0) / 1e3)
    for ck, ps in posts.items():
        if len(ps) > 1:
            form, nbytes = sizes[ck]
            out[(form, nbytes, ALL)]["skew"].append((max(ps)[0] - min(ps)[0]) / 1e3)
            if by_rank:
                late = max(ps)[1]
                for _, rank in ps:
                    out[(form, nbytes, rank)]["last"].append(1.0 if rank == late else 0.0)
    return out


def size_text(b: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--label", default="")
    ap.add_argument("--by-rank", action="store_true", help="each rank's medians too, and how often it came last")
    a = ap.parse_args()
    paths = sorted(glob.glob(os.path.join(a.dir, "p2p-trace-*.txt")))
    if not paths:
        raise SystemExit(f"no p2p-trace-*.txt in {a.dir}")
    table = rows(paths, a.by_rank)
    if not table:
        raise SystemExit(f"no collective phases in the traces of {a.dir}")
    columns = COLUMNS + (["last"] if a.by_rank else [])
    head = f"{'form':<12}{'bytes':>7}{'rank':>5}{'calls':>7}" + "".join(f"{c:>10}" for c in columns)
    if a.label:
        print(a.label)
    print("median us per phase of a call, every rank (rank *)"
          + ("; each rank's own, and the share of calls whose exchange it reached last" if a.by_rank else ""))
    print(head)
    for (form, nbytes, rank), col in sorted(table.items()):
        n = len(col["call"])

        def cell(c: str) -> str:
            if not col[c]:
                return f"{'-':>10}"
            v = statistics.fmean(col[c]) if c == "last" else statistics.median(col[c])
            return f"{v:>10.2f}"

        who = "*" if rank == ALL else str(rank)
        print(f"{('nonblocking' if form else 'blocking'):<12}{size_text(nbytes):>7}{who:>5}{n:>7}"
              + "".join(cell(c) for c in columns))


if __name__ == "__main__":
    main()
