#!/usr/bin/env python3
"""Runs the pair-bound probe (pair_bound.cu) and writes its rows as a results file
(bench/results/<date>-pair-bound-<device>.json) with a bar plot beside it: what one pair's
direct and host paths carry alone and with a second pair running, and the per-pair ceiling
(direct + min(d2h, h2d)) that bounds the 4-rank `gpustripe bench mpi`.

  python3 bench/probes/pair_bound.py --binary ./pair_bound [--reps 7] [--ms 20] [--out bench/results]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess

from gpustripe import results  # the installed package, or PYTHONPATH=<build>/python-dev
from gpustripe.copy import default_context


def rows_of(lines: list[str]) -> list[dict]:
    rows = []
    for line in lines:
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        method = f"{r['flow']}, {r['pairs']} pair{'s' if r['pairs'] > 1 else ''} ({r['mode']})"
        if r["flow"] == "pair_bound":
            rows.append({"op": "p2p", "method": method, "pair": r["pair"], "pairs": r["pairs"], "mode": r["mode"],
                         "flow": r["flow"], "bytes": 0, "gbps": r["gbps"], "us": 0.0})
        else:
            rows.append({"op": "p2p", "method": method, "pair": r["pair"], "pairs": r["pairs"], "mode": r["mode"],
                         "flow": r["flow"], "bytes": r["bytes"], "copies": r["copies"], "gbps": r["gbps"],
                         "us": r["us"]})
    return rows


def plot(path: str, doc: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    flows = ("direct", "d2h", "h2d", "pair_bound")
    groups = [(r["pairs"], r["mode"], r["pair"]) for r in doc["rows"] if r["flow"] == "pair_bound"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.2
    for j, flow in enumerate(flows):
        vals = []
        for g in groups:
            v = [r["gbps"] for r in doc["rows"] if (r["pairs"], r["mode"], r["pair"]) == g and r["flow"] == flow]
            vals.append(v[0] if v else 0.0)
        bars = ax.bar([i + (j - 1.5) * width for i in range(len(groups))], vals, width, label=flow)
        ax.bar_label(bars, fmt="%.0f", fontsize=6)
    ax.set_xticks(range(len(groups)), [f"{p} pair{'s' if p > 1 else ''}\n{m}\n{pr}" for p, m, pr in groups], fontsize=7)
    ax.set_ylabel("GB/s")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{doc['device']} ({doc['gpus']} GPUs) {doc['date'][:10]}: one pair's paths alone and beside a second "
                 f"pair\n{doc['command']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.splitext(path)[0] + ".png", dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True, help="the built probe (nvcc -O2 -arch=sm_90 pair_bound.cu)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--ms", type=float, default=20.0, help="milliseconds of work each flow queues per run")
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    out = subprocess.run([a.binary, str(a.reps), str(a.ms)], check=True, capture_output=True, text=True).stdout
    print(out, end="")
    rows = rows_of(out.splitlines())
    ctx = default_context()
    device, gpus = ctx.device_label, ctx.device_count
    cmd = f"python3 bench/probes/pair_bound.py --binary pair_bound --reps {a.reps} --ms {a.ms:g}"
    path = results.write("pair-bound", device, gpus, rows, a.out, command=cmd, plot=False)
    plot(path, results.load(path))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
