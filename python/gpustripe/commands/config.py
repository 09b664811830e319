"""gpustripe config: every GPUSTRIPE_* variable with its type, default and current value.

`--markdown` prints the reference page docs/settings.md from the same registry (defaults, not
the current values), so the page cannot drift from the code: tests/python/test_settings_doc.py
compares the two.
"""
import ctypes
import json
import os

DOC_HEAD = """# Settings

Every `GPUSTRIPE_*` environment variable, as the libraries declare it (name, type, default, what
it does). `gpustripe config` prints the same list with the values in effect; a `GPUSTRIPE_*`
name that no library declares is reported once per process as a warning. Settings are read
through `src/common/config.hpp`; docs/architecture.md says why they are declared where they are
used.

This page is generated: `gpustripe config --markdown --interposer <build>/src/mpi/libgpustripe_mpi.so
> docs/settings.md` (the interposer declares its `GPUSTRIPE_MPI*` settings where it is loaded).

| name | type | default | what it does |
| --- | --- | --- | --- |
"""


def register(sub):
    p = sub.add_parser("config", help="print every GPUSTRIPE_* variable and its current value")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--markdown", action="store_true",
                   help="the reference table of docs/settings.md (types and defaults, not current values)")
    p.add_argument("--interposer", metavar="PATH",
                   help="also list the settings of the MPI interposer (libgpustripe_mpi.so at PATH), which "
                        "it declares only where it is loaded")
    p.set_defaults(func=run)


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows):
    lines = [DOC_HEAD.rstrip("\n")]
    for s in rows:
        kind = s["type"] + (" (" + ", ".join(s["choices"]) + ")" if s["choices"] else "")
        default = f"`{s['default']}`" if s["default"] else "(empty)"
        lines.append(f"| `{s['name']}` | {cell(kind)} | {cell(default)} | {cell(s['description'])} |")
    return "\n".join(lines) + "\n"


def run(args):
    from .. import settings

    if args.interposer:
        if not os.path.isfile(args.interposer):
            raise SystemExit(f"gpustripe config: --interposer: no file {args.interposer}")
        # Global, so that its settings register with the libgpustripe.so already loaded.
        ctypes.CDLL(os.path.abspath(args.interposer), mode=ctypes.RTLD_GLOBAL)
    rows = settings()
    if args.markdown:
        print(markdown(rows), end="")
        return 0
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for s in rows:
        mark = "*" if s["set"] else " "
        kind = s["type"] + ("(" + "|".join(s["choices"]) + ")" if s["choices"] else "")
        print(f"{mark} {s['name']}={s['value']}")
        print(f"#   {s['description']} [{kind}, default: {s['default'] or '(empty)'}]")
    print("(* = set in the environment)")
    return 0
