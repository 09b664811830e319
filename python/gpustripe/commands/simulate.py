"""gpustripe simulate: the model's predicted bandwidth of one pair over sizes and path
sets, and the speedup over the direct path, from a topology file (no GPU needed).

What the papers reported on their nodes (measured, for comparison only: nothing in the
model is fitted to them):
  ExHET'24 (multi-path P2P in UCX): UCX put bandwidth up to 2.85x on Beluga (4x V100,
    2 NVLinks per pair) and 2.75x on Narval (4x A100, 4 NVLinks per pair) with 2 GPU
    paths + the host path over the direct copy.
  ExaMPI'25 (multi-path performance model): up to 2.9x point-to-point, model error <6%.
  4x H200, NVSwitch (bench/results/2026-11-21-p2p-nvidia-h200.json): GPU staging does not pay;
    direct + host 1.05x (64 MB) to 1.12x (1 GB).
"""
import os

PAPERS = {
    "beluga": "ExHET'24 measured up to 2.85x (UCX put, 2 GPU paths + host); ExaMPI'25 up to 2.9x p2p",
    "narval": "ExHET'24 measured up to 2.75x (UCX put, 2 GPU paths + host)",
    "h200": "bench/results/2026-11-21-p2p-nvidia-h200.json measured direct + host 1.05x (64 MB) to 1.12x (1 GB); "
            "GPU staging slower than direct",
}


def register(sub):
    p = sub.add_parser("simulate", help="predicted bandwidth by size and path set (PNG), from a topology",
                       description=__doc__, formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("--topology", help="shipped topology name or .json path (default: this node)")
    p.add_argument("--profile", help="calibration profile (default: the usual order, else nominal)")
    p.add_argument("--src", type=int, default=0)
    p.add_argument("--dst", type=int, default=1)
    p.add_argument("--min-size", default="64K")
    p.add_argument("--max-size", default="1G")
    p.add_argument("--out", default=".", help="directory of the PNG (default: current)")
    p.add_argument("--no-plot", action="store_true")
    p.set_defaults(func=run)


def path_sets(routes):
    """The path sets the issue names, by the route names of this pair."""
    gpus = [r for r in routes if r.startswith("gpu")]
    hosts = [r for r in routes if r.startswith("host")][:1]
    sets = {"direct": ["direct"]}
    if hosts:
        sets["direct+host"] = ["direct", *hosts]
    if gpus:
        sets["direct+gpu staged"] = ["direct", *gpus]
    if hosts and gpus:
        sets["all paths"] = ["direct", *gpus, *hosts]
    return sets


def sizes_between(lo: int, hi: int):
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def run(args):
    from .. import Model, parse_size
    from ..model_plots import plot_simulation
    from ..results import human_bytes

    model = Model(topology=args.topology, profile=args.profile)
    sizes = sizes_between(parse_size(args.min_size), parse_size(args.max_size))
    sets = path_sets(model.routes(args.src, args.dst))
    series = {name: [] for name in sets}
    series["model's choice"] = []
    print(f"node: {model.topology_name}; parameters: {model.source}")
    print(f"transfer {args.src}->{args.dst}: predicted GB/s per path set (x direct)")
    print(f"{'size':>6} " + " ".join(f"{n:>22}" for n in series) + "   model's plan")
    best = 0.0
    for size in sizes:
        cells = []
        direct = model.plan_paths(args.src, args.dst, size, ["direct"]).predicted_gbps
        for name, paths in sets.items():
            g = model.plan_paths(args.src, args.dst, size, paths).predicted_gbps
            series[name].append((size, g))
            cells.append(f"{g:13.1f} ({g / direct:5.2f}x)")
        chosen = model.plan(args.src, args.dst, size)
        series["model's choice"].append((size, chosen.predicted_gbps))
        best = max(best, chosen.predicted_gbps / direct)
        cells.append(f"{chosen.predicted_gbps:13.1f} ({chosen.predicted_gbps / direct:5.2f}x)")
        print(f"{human_bytes(size):>6} " + " ".join(f"{c:>22}" for c in cells) + f"   {chosen.describe()}")
    print(f"\nours: up to {best:.2f}x over the direct path predicted on {model.topology_name}")
    key = next((k for k in PAPERS if k in model.topology_name.lower()), None)
    if key:
        print(f"reported: {PAPERS[key]}")
    if not args.no_plot:
        os.makedirs(args.out, exist_ok=True)
        slug = "".join(c if c.isalnum() else "-" for c in (args.topology or model.topology_name)).strip("-").lower()
        png = os.path.join(args.out, f"simulate-{os.path.basename(slug)}-{args.src}-{args.dst}.png")
        plot_simulation(series, f"{model.topology_name}: {args.src}->{args.dst}, predicted ({model.source})", png)
        print(f"plot: {png}")
    return 0
