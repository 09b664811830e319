"""Subcommands of the gpustripe command line, one module each."""
