"""gpustripe topo: the node's GPUs and links (detected, or from a topology file), as
text, as schema-1 JSON, or as a picture."""
import os
import sys


def register(sub):
    p = sub.add_parser("topo", help="show the node's GPUs and links (or a topology file's) and draw them")
    p.add_argument("--topology", metavar="NAME|FILE",
                   help="a shipped topology (h200x4, h200x8, beluga-v100x4, narval-a100x4, mist-ac922) or a JSON file; "
                        "default: GPUSTRIPE_TOPOLOGY, else the detected node, else h200x4 emulated")
    p.add_argument("--json", action="store_true", help="print the topology as schema-1 JSON (docs/topology-schema.md)")
    p.add_argument("--draw", metavar="FILE", help="also draw it to FILE (.png or .svg)")
    p.set_defaults(func=run)


def choose(name=None):
    """(topology, note): the topology to show and a line saying why, or None."""
    from .. import DEFAULT_TOPOLOGY, load_topology, node_topology

    if name:
        return load_topology(name), None
    topo, emulated = node_topology()
    if not emulated:
        return topo, None
    if os.environ.get("GPUSTRIPE_TOPOLOGY"):
        return topo, f"GPUSTRIPE_TOPOLOGY={os.environ['GPUSTRIPE_TOPOLOGY']}: showing that node (emulated)"
    return topo, (f"no GPU visible: showing the default emulated node {DEFAULT_TOPOLOGY} "
                  f"(set GPUSTRIPE_TOPOLOGY)")


def run(args):
    if args.draw and not args.draw.lower().endswith((".png", ".svg")):
        print("gpustripe topo: error: --draw needs a .png or .svg file name", file=sys.stderr)
        return 2
    folder = os.path.dirname(os.path.abspath(args.draw)) if args.draw else None
    if folder and not os.path.isdir(folder):
        print(f"gpustripe topo: error: --draw {args.draw}: the folder {folder} does not exist", file=sys.stderr)
        return 2
    topo, note = choose(args.topology)
    if args.json:
        if note:
            print(note, file=sys.stderr)  # stdout stays pure JSON
        sys.stdout.write(topo.to_json())
    else:
        if note:
            print(note)
            print()
        print(topo.summary(), end="")
    if args.draw:
        from ..topo_draw import draw

        draw(topo, args.draw)
        print(f"drew {args.draw}", file=sys.stderr if args.json else sys.stdout)
    return 0
