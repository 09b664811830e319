"""Plots of the model: predicted bandwidth and speedup over the direct path by size and
path set (gpustripe simulate), predicted against measured (gpustripe model-check)."""
from __future__ import annotations

from .results import human_bytes


def _axes_sizes(ax, sizes):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes")
    step = max(1, len(sizes) // 8)
    ax.set_xticks(sizes[::step], [human_bytes(s) for s in sizes[::step]], fontsize=7)
    ax.grid(alpha=0.3)


def plot_simulation(series: dict, title: str, png: str) -> str:
    """series: {path set: [(bytes, predicted_gbps), ...]} with a 'direct' entry."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bw, sp) = plt.subplots(1, 2, figsize=(12, 4.4))
    direct = dict(series["direct"])
    sizes = sorted(direct)
    for name, pts in series.items():
        pts = sorted(pts)
        bw.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=name)
        sp.plot([p[0] for p in pts], [p[1] / direct[p[0]] for p in pts], marker="o", ms=3, label=name)
    _axes_sizes(bw, sizes)
    _axes_sizes(sp, sizes)
    bw.set_ylabel("predicted GB/s")
    bw.set_title("predicted bandwidth")
    sp.set_ylabel("x direct")
    sp.set_title("predicted speedup over the direct path")
    sp.axhline(1.0, color="k", lw=0.6)
    bw.legend(fontsize=7)
    sp.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def plot_model_check(rows: list[dict], title: str, png: str) -> str:
    """Measured (solid) and predicted (dashed) GB/s per path set, and the error per point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bw, err) = plt.subplots(1, 2, figsize=(12, 4.4))
    by_set: dict[str, list] = {}
    for r in rows:
        by_set.setdefault(r["method"], []).append(r)
    sizes = sorted({r["bytes"] for r in rows})
    for i, (name, rs) in enumerate(sorted(by_set.items())):
        rs.sort(key=lambda r: r["bytes"])
        x = [r["bytes"] for r in rs]
        color = f"C{i}"
        bw.plot(x, [r["gbps"] for r in rs], marker="o", ms=3, color=color, label=f"{name} measured")
        bw.plot(x, [r["predicted_gbps"] for r in rs], ls="--", color=color, label=f"{name} predicted")
        err.plot(x, [100.0 * r["error"] for r in rs], marker="o", ms=3, color=color, label=name)
    _axes_sizes(bw, sizes)
    _axes_sizes(err, sizes)
    bw.set_ylabel("GB/s")
    bw.set_title("measured vs predicted")
    err.set_ylabel("(predicted - measured) / measured, %")
    err.set_title("model error")
    for y in (-10, -5, 5, 10):
        err.axhline(y, color="k", lw=0.4, ls=":")
    bw.legend(fontsize=6)
    err.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
