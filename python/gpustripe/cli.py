"""The ``gpustripe`` command line. Each subcommand lives in gpustripe/commands/<name>.py
and defines ``register(subparsers)``, which adds its parser and sets ``func``."""
import argparse
import importlib
import os
import pkgutil
import sys

from . import commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpustripe",
        description="Multi-path GPU-to-GPU transfers: inspect the node, plan, calibrate, benchmark.",
    )
    from .results import provenance

    p = provenance()
    parser.add_argument("--version", action="version", version=f"gpustripe {p['version']} (commit {p['commit']})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv=None) -> int:
    from . import Error

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args) or 0
        sys.stdout.flush()
        return rc
    except Error as e:
        print(f"gpustripe {args.command}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`gpustripe config | head`): what it wanted, it has. Point
        # stdout at /dev/null so that the interpreter's last flush finds no pipe either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
