#!/usr/bin/env python3
"""Writes the two-GPU copy probes' output as results files (bench/results/<date>-<probe>-<device>.json
and a plot beside it):

  ce_vs_sm      copy engines against SM copy kernels, one way and both ways at once, and two
                one-way copies back to back (ce_vs_sm.cu): rows op p2p (one way) or bibw (both
                ways; gbps per direction), method = the probe's mode
  ce_contexts   a peer copy beside a host-to-GPU copy on the same GPU, from one process or two
                (ce_contexts.cu): rows op p2p, method "<flow> (<mode>)"

  python3 bench/probes/two_gpu_copies.py ce_vs_sm --binary ./ce_vs_sm [--args "5 32,128,512"] [--out bench/results]
  ./ce_vs_sm 5 32,128,512 > out.jsonl; python3 bench/probes/two_gpu_copies.py ce_vs_sm --from out.jsonl \\
      --args "5 32,128,512" --device "NVIDIA H100 80GB HBM3" --gpus 2
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess

from gpustripe import results  # the installed package, or PYTHONPATH=<build>/python-dev

TWO_WAY = ("ce_two", "ce2_two", "sm_two", "mix_two", "serial_two")


def rows_of(probe: str, lines: list[str]) -> list[dict]:
    rows = []
    run, last = 1, ""  # ce_contexts: its runs one after the other (each starts with its "apart" flows)
    for line in lines:
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "check" in r:
            if r["check"] != "ok":
                raise SystemExit(f"{probe}: the probe's data check failed")
            continue
        if probe == "ce_vs_sm":
            rows.append({"op": "bibw" if r["mode"] in TWO_WAY else "p2p", "method": r["mode"], "bytes": r["mb"] << 20,
                         "gbps": r["gbps"], "us": r["us"]})
        else:
            if r["mode"] == "apart" and last and last != "apart":
                run += 1
            last = r["mode"]
            copy = (256 if r["flow"] == "direct" else 32) << 20
            rows.append({"op": "p2p", "method": f"{r['flow']} ({r['mode']}, run {run})", "flow": r["flow"],
                         "mode": r["mode"], "run": run, "bytes": copy, "gbps": r["gbps"], "us": r["ms"] * 1000.0})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("probe", choices=("ce_vs_sm", "ce_contexts"))
    ap.add_argument("--binary", help="the built probe (nvcc -O2 -arch=sm_90 -o <probe> <probe>.cu)")
    ap.add_argument("--args", default="", help="the probe's arguments (ce_vs_sm: reps sizes_mb; ce_contexts: ms)")
    ap.add_argument("--from", dest="src", help="the probe's saved output instead of running it")
    ap.add_argument("--device", help="with --from: the device label the probe ran on")
    ap.add_argument("--ran", help="with --from: the command line that wrote it (default ./PROBE ARGS)")
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    if bool(a.binary) == bool(a.src):
        raise SystemExit("two_gpu_copies.py: --binary or --from, one of them")
    if a.src:
        if not a.device:
            raise SystemExit("two_gpu_copies.py: --from needs --device")
        with open(a.src) as f:
            text = f.read()
        device, gpus = a.device, a.gpus
        ran = a.ran or f"./{a.probe} {a.args}".strip()
        cmd = f"({ran}) > out.jsonl; python3 bench/probes/two_gpu_copies.py {a.probe} --from out.jsonl"
    else:
        from gpustripe.copy import default_context

        text = subprocess.run([a.binary, *shlex.split(a.args)], check=True, capture_output=True, text=True).stdout
        ctx = default_context()
        device, gpus = ctx.device_label, ctx.device_count
        cmd = f"python3 bench/probes/two_gpu_copies.py {a.probe} --binary {a.probe} --args {shlex.quote(a.args)}"
    print(text, end="")
    path = results.write(a.probe.replace("_", "-"), device, gpus, rows_of(a.probe, text.splitlines()), a.out,
                         command=cmd)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
