"""Draws a node's topology (``gpustripe topo --draw``): GPUs in a row grouped by CPU
socket, the sockets below them, an NVSwitch bar above when there is one, and every
link labelled with its nominal bandwidth per direction (and link count / PCIe gen).

Uses matplotlib's object API (no pyplot), so it never opens a window and works headless.
"""
from __future__ import annotations

# One colour per kind of link, shared by the lines and the legend.
COLORS = {
    "nvlink": "#2e8b57",
    "pcie": "#1f5fbf",
    "cpu_nvlink": "#0f9b9b",
    "socket": "#777777",
    "switch": "#7a3db8",
}
GPU_W, GPU_H = 2.0, 1.05
SOCKET_H = 1.0
SLOT = 2.6        # horizontal distance between GPU centres
SOCKET_GAP = 0.9  # extra space between the GPU groups of two sockets
GPU_Y = 0.0       # centre line of the GPU row
SOCKET_Y = -3.6   # centre line of the socket row


def _gb(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 or x >= 100 else f"{x:.1f}"


def _gpu_positions(topo):
    """x of every GPU: the GPUs of one socket side by side, sockets left to right."""
    xs, x = {}, 0.0
    for s in sorted({g.socket for g in topo.gpus}):
        for g in sorted((g for g in topo.gpus if g.socket == s), key=lambda g: g.index):
            xs[g.index] = x
            x += SLOT
        x += SOCKET_GAP
    return xs


def _box(ax, x, y, w, h, text, face, edge, size=8, weight="normal"):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.04,rounding_size=0.12",
                                facecolor=face, edgecolor=edge, linewidth=1.4, zorder=3))
    ax.text(x, y, text, ha="center", va="center", fontsize=size, weight=weight, zorder=4)


def _label(ax, x, y, text, color, size=7):
    ax.text(x, y, text, ha="center", va="center", fontsize=size, color=color, zorder=6,
            bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.9))


def _memory(nbytes: int) -> str:
    # Datasheets give HBM in binary units for older parts (16/32/40 GiB) and decimal for
    # H200 (141 GB): show whichever the number is a whole multiple of.
    if nbytes % (1 << 30) == 0:
        return f"{nbytes >> 30} GiB"
    return f"{nbytes / 1e9:.0f} GB"


def _host_label(g) -> str:
    if g.host_link == "nvlink":
        return f"{g.host_nvlinks}x NVLink\n{_gb(g.host_gbps)} GB/s"
    pcie = f"PCIe Gen{g.pcie_gen} x{g.pcie_width}" if g.pcie_gen else "PCIe"
    return f"{pcie}\n{_gb(g.host_gbps)} GB/s" if g.host_gbps > 0 else pcie


def draw(topo, path: str, title: str | None = None) -> str:
    """Writes a picture of ``topo`` to ``path`` (.png or .svg); returns the path."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch

    xs = _gpu_positions(topo)
    span = max(xs.values()) if xs else 0.0
    # Mesh links arc above the GPU row; the longest arc sets the headroom.
    rad = -0.55
    longest = max((abs(xs[l.a] - xs[l.b]) for l in topo.gpu_links), default=0.0)
    arc_top = GPU_H / 2 + 0.5 * abs(rad) * longest
    switch_y = GPU_Y + GPU_H / 2 + 2.2
    top = max(switch_y + 0.6 if topo.has_nvswitch() else 0.0, GPU_Y + arc_top + 0.6, GPU_Y + GPU_H / 2 + 0.6)
    bottom = SOCKET_Y - SOCKET_H / 2 - 0.9
    left, right = -GPU_W / 2 - 0.6, span + GPU_W / 2 + 0.6

    width_in = max(7.0, (right - left) * 0.95)
    height_in = (top - bottom) * 0.95 + 1.2
    fig = Figure(figsize=(width_in, height_in), dpi=130)
    ax = fig.add_axes([0.01, 0.01, 0.98, 0.86])
    ax.set_xlim(left, right)
    ax.set_ylim(bottom, top)
    ax.set_aspect("equal")  # arc3 curves are computed in display space: keep it square
    ax.axis("off")

    # Sockets, centred under their GPUs.
    sock_x = {}
    for s in topo.sockets:
        mine = [xs[g.index] for g in topo.gpus if g.socket == s.id]
        sock_x[s.id] = sum(mine) / len(mine) if mine else 0.0
    for s in topo.sockets:
        w = max(GPU_W, (max((xs[g.index] for g in topo.gpus if g.socket == s.id), default=0)
                        - min((xs[g.index] for g in topo.gpus if g.socket == s.id), default=0)) + GPU_W * 0.6)
        mem = f"memory {_gb(s.memory_gbps)} GB/s" if s.memory_gbps > 0 else "memory GB/s unknown"
        cpu = s.cpu if len(s.cpu) <= 44 else s.cpu[:41] + "..."
        _box(ax, sock_x[s.id], SOCKET_Y, w, SOCKET_H, f"socket {s.id} (NUMA {s.numa_node})\n{cpu}\n{mem}",
             "#eeeeee", "#555555", size=7.5)

    # Socket links: straight lines between socket boxes, below the host links' labels.
    for l in topo.socket_links:
        xa, xb = sorted((sock_x[l.a], sock_x[l.b]))
        y = SOCKET_Y
        ax.plot([xa, xb], [y, y], color=COLORS["socket"], linewidth=3, zorder=1)
        bw = f"{_gb(l.gbps)} GB/s" if l.gbps > 0 else "GB/s unknown"
        _label(ax, (xa + xb) / 2, y, f"{l.kind}\n{bw}", COLORS["socket"], size=7.5)

    # Host links: GPU bottom to its socket's top; the label near the GPU end.
    for g in topo.gpus:
        x0, y0 = xs[g.index], GPU_Y - GPU_H / 2
        # Spread the ends over the socket's top edge rather than one point.
        x1, y1 = sock_x[g.socket] + 0.45 * (x0 - sock_x[g.socket]), SOCKET_Y + SOCKET_H / 2
        color = COLORS["cpu_nvlink"] if g.host_link == "nvlink" else COLORS["pcie"]
        ax.plot([x0, x1], [y0, y1], color=color, linewidth=1.8, zorder=2)
        t = 0.38
        _label(ax, x0 + (x1 - x0) * t, y0 + (y1 - y0) * t, _host_label(g), color)

    # NVSwitch: a bar above the GPUs, one line per GPU labelled with its links.
    if topo.has_nvswitch():
        _box(ax, span / 2, switch_y, span + GPU_W, 0.7, "NVSwitch fabric", "#f1e8fb", COLORS["switch"], size=9,
             weight="bold")
        for g in topo.gpus:
            if not g.nvswitch:
                continue
            x = xs[g.index]
            ax.plot([x, x], [GPU_Y + GPU_H / 2, switch_y - 0.35], color=COLORS["nvlink"], linewidth=2.5, zorder=2)
            _label(ax, x, (GPU_Y + GPU_H / 2 + switch_y - 0.35) / 2,
                   f"{g.nvlinks} x {_gb(g.nvlink_gbps)}\n= {_gb(g.nvlinks * g.nvlink_gbps)} GB/s", COLORS["nvlink"])

    # Mesh bundles: arcs over the GPU row from box tops, higher for GPUs further apart.
    for l in topo.gpu_links:
        a, b = sorted((l.a, l.b), key=lambda i: xs[i])
        # Longer arcs leave a box nearer its outer edge, so the ends do not pile up.
        rank = max(0, round(abs(xs[b] - xs[a]) / SLOT) - 1)
        off = min(0.12 + 0.25 * rank, GPU_W / 2 - 0.1)
        p0 = (xs[a] + off, GPU_Y + GPU_H / 2)
        p1 = (xs[b] - off, GPU_Y + GPU_H / 2)
        ax.add_patch(FancyArrowPatch(p0, p1, arrowstyle="-", connectionstyle=f"arc3,rad={rad}",
                                     color=COLORS["nvlink"], linewidth=1.2 + 0.5 * l.count, zorder=2))
        dx = p1[0] - p0[0]
        # Midpoint of matplotlib's arc3 quadratic Bezier: the chord's middle moved by rad*dx/2.
        mx, my = (p0[0] + p1[0]) / 2, p0[1] - 0.5 * rad * dx
        _label(ax, mx, my, f"{l.count} x {_gb(l.gbps_per_link)} = {_gb(l.gbps)} GB/s", COLORS["nvlink"])

    # GPUs last, on top of the lines' ends.
    for g in topo.gpus:
        cc = "{}.{}".format(*g.compute_capability)
        _box(ax, xs[g.index], GPU_Y, GPU_W, GPU_H,
             f"GPU {g.index}\n{g.name}\n{g.sm_count} SMs, {_memory(g.memory_bytes)}, cc {cc}", "#e8f4ea", "#2e6b3f",
             size=7)

    fig.suptitle(title or topo.name, fontsize=11, weight="bold", y=0.985)
    import os

    origin = os.path.basename(topo.origin) if topo.origin.endswith(".json") else topo.origin
    sub = f"{topo.gpu_count} GPUs, nominal GB/s per direction. Source: {origin}"
    fig.text(0.5, 0.925, sub if len(sub) < 140 else sub[:137] + "...", ha="center", fontsize=7.5, color="#444444")
    legend = []
    if topo.gpu_links or topo.has_nvswitch():
        legend.append(Line2D([0], [0], color=COLORS["nvlink"], lw=2.5, label="NVLink (GPU-GPU)"))
    if any(g.host_link == "pcie" for g in topo.gpus):
        legend.append(Line2D([0], [0], color=COLORS["pcie"], lw=2, label="PCIe (GPU-host)"))
    if any(g.host_link == "nvlink" for g in topo.gpus):
        legend.append(Line2D([0], [0], color=COLORS["cpu_nvlink"], lw=2, label="NVLink (GPU-CPU)"))
    if topo.socket_links:
        legend.append(Line2D([0], [0], color=COLORS["socket"], lw=3, label="socket link"))
    ax.legend(handles=legend, loc="lower right", fontsize=7, frameon=False,
              bbox_to_anchor=(1.0, 0.0), ncol=1)
    fig.savefig(path)
    return path


def draw_all_shipped(out_dir: str) -> list[str]:
    """Pictures of every shipped topology file (docs/topologies/<name>.png)."""
    import os

    from . import load_topology, shipped_topologies

    os.makedirs(out_dir, exist_ok=True)
    return [draw(load_topology(n), os.path.join(out_dir, f"{n}.png")) for n in shipped_topologies()]


if __name__ == "__main__":  # python -m gpustripe.topo_draw OUT_DIR
    import sys

    for p in draw_all_shipped(sys.argv[1] if len(sys.argv) > 1 else "docs/topologies"):
        print(p)
