"""gpustripe config: every GPUSTRIPE_* variable with its type, default and current value."""
import json


def register(sub):
    p = sub.add_parser("config", help="print every GPUSTRIPE_* variable and its current value")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args):
    from .. import settings

    rows = settings()
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
