#!/usr/bin/env python3
"""Fails on an #include that climbs the layers (docs/architecture.md).

Each layer uses only the ones below it. The order, lowest first:

    common < topology < backend < model < engine < core < ipc < p2p < coll < mpi < capi < bench < python

`src/core` (the Context: topology + backend + planner + engine) sits just above the engine
and below everything that takes a context (ipc, p2p, coll, ...), as the diagram of
docs/architecture.md draws it. `python/src` (the bindings) is the top: it binds every layer.

A backend's implementation (`backend/cuda/`, `backend/emulated/`) is private to the backend
layer: the layers above use `backend/backend.hpp` and the other headers directly in
`src/backend/`. Quoted includes name their layer folder (`"engine/lanes.hpp"`); a bare file
name is a file of the including file's own folder and is not checked.

Usage: check-layers.py [ROOT] (default: the repository holding this script). Prints each
climb and exits 1 if there is any; exits 0 otherwise.
"""
import os
import re
import sys

LAYERS = ["common", "topology", "backend", "model", "engine", "core", "ipc", "p2p", "coll", "mpi", "capi",
          "bench", "python"]
RANK = {name: i for i, name in enumerate(LAYERS)}
PRIVATE = ("backend/cuda/", "backend/emulated/")  # implementation folders private to their layer
SOURCE_EXT = (".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)

# Includes that climb today, each with why it is not fixed yet: (file, included) -> reason.
# Empty: every climb found has been fixed. An entry here is a debt, not a permission.
KNOWN = {}


def sources(root):
    for top, layer_of in (("src", None), (os.path.join("python", "src"), "python")):
        base = os.path.join(root, top)
        for d, _, files in os.walk(base):
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    path = os.path.join(d, f)
                    rel = os.path.relpath(path, root).replace(os.sep, "/")
                    layer = layer_of or os.path.relpath(path, base).split(os.sep)[0]
                    yield rel, layer


def climbs(root):
    found = []
    for rel, layer in sources(root):
        if layer not in RANK:
            found.append((rel, "", f"folder '{layer}' is in no layer: add it to LAYERS in scripts/check-layers.py"))
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            if "/" not in inc:
                continue  # its own folder's file
            target = inc.split("/")[0]
            if target not in RANK:
                continue  # not one of ours (a third-party or generated path)
            why = None
            if RANK[target] > RANK[layer]:
                why = f"{layer} includes {target}, a layer above it"
            elif inc.startswith(PRIVATE) and not rel.startswith("src/backend/"):
                why = f"{layer} includes a backend's implementation ({inc}); use the backend interface"
            if why and (rel, inc) not in KNOWN:
                found.append((rel, inc, why))
    return found


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = climbs(root)
    for rel, inc, why in bad:
        print(f'{rel}: #include "{inc}": {why}' if inc else f"{rel}: {why}")
    for (rel, inc), reason in KNOWN.items():
        print(f'known climb (not failing): {rel}: #include "{inc}": {reason}')
    if bad:
        print(f"check-layers: {len(bad)} include(s) climb the layers (order: {' < '.join(LAYERS)})")
        return 1
    print("check-layers: no include climbs the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
