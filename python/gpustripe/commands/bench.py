"""gpustripe bench <name>: the benchmarks in gpustripe/benchmarks/, one module each.

A benchmark module defines NAME, HELP, ``add_arguments(parser)`` and ``run(args) -> int``;
modules whose name starts with "_" are helpers. New benchmarks (collectives, MPI) add a
module there and need no change here."""
import importlib
import pkgutil

from .. import benchmarks


def discover():
    found = []
    for info in sorted(pkgutil.iter_modules(benchmarks.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{benchmarks.__name__}.{info.name}")
        if all(hasattr(module, a) for a in ("NAME", "add_arguments", "run")):
            found.append(module)
    return found


def register(sub):
    p = sub.add_parser("bench", help="benchmark gpustripe against the plain paths and NCCL")
    which = p.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    for module in discover():
        bp = which.add_parser(module.NAME, help=getattr(module, "HELP", None),
                              description=getattr(module, "HELP", None))
        module.add_arguments(bp)
        bp.set_defaults(func=module.run)
    p.set_defaults(func=lambda args: p.print_help() or 2)
