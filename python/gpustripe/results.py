"""The results format every benchmark shares, and its plots.

A run writes ``bench/results/<date>-<what>-<device>.json``::

    {"schema": 1, "device": "...", "gpus": N, "command": "...", "date": "...",
     "version": "0.1.0", "commit": "...", "rows": [...]}

Each row has at least ``op``, ``method``, ``bytes`` (as nccl-tests reports size), ``gbps``
(algbw) and ``us`` (median time); collectives add ``busbw_gbps``; model rows add
``predicted_gbps`` and ``paths``. A PNG of the same run is written beside it.
Results are never edited by hand: rerun the command recorded in the file.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from typing import Iterable

REQUIRED = ("op", "method", "bytes", "gbps", "us")
OPS = {"p2p", "bibw", "latency", "alltoall", "allgather", "reduce_scatter", "allreduce", "bcast", "reduce", "model",
       "halo", "put", "get", "put_latency", "get_latency", "accumulate", "fetch_and_op"}
# Ops read in microseconds per call (lower is better); the others in GB/s.
LATENCY_OPS = {"latency", "put_latency", "get_latency", "fetch_and_op", "accumulate"}


def check_row(row: dict) -> None:
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise ValueError(f"result row lacks {missing}: {row}")
    # Per-type rows of a reduction (allreduce_float64, ...) are that reduction's rows.
    if row["op"] not in OPS and row["op"].split("_")[0] not in OPS:
        raise ValueError(f"result row has unknown op {row['op']!r}")
    if row["op"].split("_")[0] in {"alltoall", "allgather", "reduce", "allreduce", "bcast"} and "busbw_gbps" not in row:
        raise ValueError(f"collective row lacks busbw_gbps: {row}")
    if row["op"] == "model" and not {"predicted_gbps", "paths"} <= row.keys():
        raise ValueError(f"model row lacks predicted_gbps/paths: {row}")


def _git(folder: str, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    out = r.stdout.strip()
    return out if r.returncode == 0 and out else None


def _git_commit(folder: str) -> str | None:
    """`git describe` of gpustripe's checkout holding `folder` ("-dirty" with uncommitted
    changes), or None: not in a checkout, or in one of another project (a virtualenv inside
    some other repository)."""
    top = _git(folder, "rev-parse", "--show-toplevel")
    if not top or not os.path.isfile(os.path.join(top, "python", "gpustripe", "results.py")):
        return None
    return _git(folder, "describe", "--always", "--dirty", "--abbrev=12")


def provenance() -> dict:
    """What made a result: the package version and the commit of its source. The commit is the
    checkout's when the package runs from one (a dev build), else the one recorded when the
    library was built (an installed wheel), else "unknown"."""
    from . import _core

    version = ".".join(str(v) for v in _core.VERSION)
    commit = _git_commit(os.path.dirname(os.path.abspath(__file__))) or getattr(_core, "BUILD_COMMIT", "") or "unknown"
    return {"version": version, "commit": commit}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "unknown"


def write(what: str, device: str, gpus: int, rows: Iterable[dict], out_dir: str = "bench/results",
          command: str | None = None, extra: dict | None = None, plot: bool = True) -> str:
    """Validates and writes one run; returns the JSON path. `plot` draws the PNG beside it."""
    rows = list(rows)
    for r in rows:
        check_row(r)
    now = _dt.datetime.now(_dt.timezone.utc)
    doc = {
        "schema": 1,
        "device": device,
        "gpus": gpus,
        "command": command or " ".join(shlex.quote(a) for a in ["gpustripe", *sys.argv[1:]]),
        "date": now.isoformat(timespec="seconds"),
        **provenance(),
        "rows": rows,
    }
    if extra:
        doc.update(extra)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{now:%Y-%m-%d}-{_slug(what)}-{_slug(device)}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    if plot:
        plot_file(path)
    return path


def load(path: str) -> dict:
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") != 1:
        raise ValueError(f"{path}: not a schema-1 result file")
    for r in doc["rows"]:
        check_row(r)
    return doc


def human_bytes(n: float) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{int(n)}"


def plot_file(path: str, png: str | None = None) -> str:
    """One panel per op: bandwidth (busbw for collectives) against size, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = load(path)
    by_op: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in doc["rows"]:
        # Latency is read in microseconds (lower is better); bandwidths in GB/s.
        y = r["us"] if r["op"] in LATENCY_OPS else r.get("busbw_gbps", r["gbps"])
        by_op[r["op"]][r["method"]].append((r["bytes"], y))
        if r["op"] == "model":
            by_op[r["op"]][r["method"] + " (predicted)"].append((r["bytes"], r["predicted_gbps"]))
    ops = sorted(by_op)
    fig, axes = plt.subplots(1, len(ops), figsize=(6 * len(ops), 4.2), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for method, pts in sorted(by_op[op].items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3,
                    ls="--" if "predicted" in method else "-", label=method)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes")
        ax.set_ylabel("us per call" if op in LATENCY_OPS else
                      "bus GB/s" if op not in {"p2p", "bibw", "model", "put", "get"} else "GB/s")
        ax.set_title(op)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ticks = sorted({p[0] for m in by_op[op].values() for p in m})
        if ticks:
            step = max(1, len(ticks) // 8)
            ax.set_xticks(ticks[::step], [human_bytes(t) for t in ticks[::step]], fontsize=7)
    fig.suptitle(f"{doc['device']} ({doc['gpus']} GPUs) {doc['date'][:10]}\n{doc['command']}", fontsize=8)
    fig.tight_layout()
    png = png or os.path.splitext(path)[0] + ".png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def ratio_table(rows: list[dict], op: str, ours: str = "gpustripe", value: str = "gbps",
                base: str | None = None) -> str:
    """Side-by-side table of one op: a line per size, GB/s per method, then ours/method ratios,
    and with `base` every method's ratio to that one too (method/base: in time for `us`)."""
    by_size: dict[int, dict[str, float]] = defaultdict(dict)
    for r in rows:
        if r["op"] == op:
            by_size[r["bytes"]][r["method"]] = r.get(value, r["gbps"])
    methods = sorted({m for d in by_size.values() for m in d}, key=lambda m: (m != ours, m))
    others = [m for m in methods if m != ours]
    vs_base = [m for m in methods if m != base] if base in methods else []
    lines = [f"{op}: {value} per method, and {ours}/method" + (f", and method/{base}" if vs_base else "")]
    lines.append(f"{'size':>8} " + " ".join(f"{m[:20]:>20}" for m in methods) + "   "
                 + " ".join(f"{('/' + m)[:20]:>20}" for m in others)
                 + ("   " + " ".join(f"{(m + '/')[:20]:>20}" for m in vs_base) if vs_base else ""))
    for size in sorted(by_size):
        d = by_size[size]
        cells = " ".join(f"{d[m]:20.2f}" if m in d else f"{'-':>20}" for m in methods)
        ratios = " ".join(f"{d[ours] / d[m]:20.3f}" if ours in d and d.get(m) else f"{'-':>20}" for m in others)
        if vs_base:
            ratios += "   " + " ".join(f"{d[m] / d[base]:20.3f}" if m in d and d.get(base) else f"{'-':>20}"
                                       for m in vs_base)
        lines.append(f"{human_bytes(size):>8} {cells}   {ratios}")
    return "\n".join(lines)


def add_ratios(rows: list[dict], base: str, keys: tuple = ("op", "window", "ranks", "bytes")) -> None:
    """Adds to each row `vs_<base>`: its value over the `base` method's row of the same `keys`
    (gbps, or us for latency: a time ratio, lower is better). Rows without such a row get none."""
    ref = {tuple(r.get(k) for k in keys): r for r in rows if r["method"] == base}
    for r in rows:
        b = ref.get(tuple(r.get(k) for k in keys))
        value = "us" if r["op"] == "latency" else "gbps"
        if b is not None and b.get(value):
            r[f"vs_{base}"] = round(r[value] / b[value], 4)


def in_turns(launches: list, rounds: int) -> list[tuple[int, object]]:
    """(round, launch) for `rounds` rounds of the same launches, every other round in reverse order:
    a launch's place in a round (what ran just before it, how long the machine has been busy) then
    weighs on every launch alike."""
    return [(k, x) for k in range(rounds) for x in (launches if k % 2 == 0 else launches[::-1])]


def median_rounds(rounds: list[list[dict]], keys: tuple, value: str) -> list[dict]:
    """One row per `keys` out of several rounds of the same launches: the round whose `value` is the
    median (the upper middle of an even count), with every round's beside it (rounds_<value>), in
    round order. Machines drift between launches; a single round's row is one draw of that drift.
    Rounds with no rows (a run stopped before them) are left out."""
    rounds = [rows for rows in rounds if rows]
    if len(rounds) <= 1:
        return rounds[0] if rounds else []
    by_key: dict[tuple, list[dict]] = {}
    for rows in rounds:
        for r in rows:
            by_key.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    out = []
    for same in by_key.values():
        ranked = sorted(same, key=lambda r: r.get(value, 0.0))
        out.append(dict(ranked[len(ranked) // 2], **{f"rounds_{value}": [r.get(value, 0.0) for r in same]}))
    return out

